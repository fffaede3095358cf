"""The repository cites only itself: no tracked text file points at a specification, design or
performance note kept outside it (what a reader needs of those lives in docs/)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".md", ".py", ".sh", ".toml")
# Spelled in pieces, so that this file does not match itself in a search of the repository.
OUTSIDE = (
    "SPEC-" + "XDER",
    "DESIGN" + ".md",
    "PERFORMANCE" + ".md",
    "DATA-" + "FORMATS",
    "STYLE" + ".md",
    "../" + "shared",
)


def _tracked() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout (or no git): the tracked files are unknown")
    names = [name for name in listed.decode().split("\0") if name.endswith(SUFFIXES)]
    return [ROOT / name for name in names if (ROOT / name).resolve() != Path(__file__).resolve()]


def test_no_tracked_file_cites_a_file_outside_the_repository() -> None:
    files = _tracked()
    assert files, "git ls-files listed no .md, .py, .sh or .toml file"
    found = []
    for path in files:
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {word}" for word in OUTSIDE if word in line]
    assert not found, "cite the docs page instead:\n" + "\n".join(found)
