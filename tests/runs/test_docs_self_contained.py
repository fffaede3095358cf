"""The repository cites only itself: no tracked text file points at a specification, design or
performance note kept outside it (what a reader needs of those lives in docs/). And the pages speak
to users: no page of docs/, nor the README, cites a commit or the way the work was organised (the
history of a measurement lives beside its results files, e.g. benchmarks/cpu/HISTORY.md)."""

from __future__ import annotations

import re
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


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A commit hash: 7 to 40 hex digits, at least one a digit and one a letter a-f, standing alone:
# not inside a longer word, a path, a file name (`resnet18-f37072fd.pth`, a checksum), a version
# or a hex colour (#1f2e3d). All-digit hashes show themselves by their backticks (`5602989`) or
# by the word commit before them.
COMMIT = re.compile(
    r"(?<![\w.#/-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-]|\.\w)"
    r"|`[0-9]{7,40}`"
    r"|\bcommits?\s+[0-9]{7,40}\b",
    re.IGNORECASE,
)
# How the work was organised: an issue, a lent or borrowed machine, its lease. A lock's lease that
# runs out (NFS, on the cluster page) is the filesystem's word, not ours.
PROCESS = re.compile(
    r"\b(?:the|this|that)\s+issue\b|\b(?:issues?|PR|pull\s+request)\s+#?\d+"
    r"|\blent\b|\bborrowed\b|\bleas(?:e|es|ed)\b(?!\s+runs\s+out)",
    re.IGNORECASE,
)


def process_notes(text: str) -> list[tuple[int, str]]:
    """(line, words) of every commit hash or process word in ``text``; words may span lines."""
    found = [(m.start(), m.group()) for pattern in (COMMIT, PROCESS) for m in pattern.finditer(text)]
    return sorted((text.count("\n", 0, start) + 1, " ".join(words.split())) for start, words in found)


def test_no_page_cites_a_commit_or_how_the_work_was_organised() -> None:
    assert len(PAGES) > 10, PAGES
    found = [
        f"{page.relative_to(ROOT)}:{line}: {words}"
        for page in PAGES
        for line, words in process_notes(page.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "say what the toolkit does, the command, the figure and the machine; a measurement's "
        "history goes beside its results files:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("trained at commit `77c86a6` (2026-11-26)", ["77c86a6"]),
        ("rerun (at `5602989`) once", ["`5602989`"]),
        ("at commit 5602989, then", ["commit 5602989"]),
        ("(commit 44f706b): median", ["44f706b"]),
        ("a hash at the end of a sentence: e567095.", ["e567095"]),
        ("the three runs the\n    issue names", ["the issue"]),
        ("The goals of issue 37 stand, as PR #12 says", ["PR #12", "issue 37"]),
        ("run on a lent machine", ["lent"]),
        ("for the second lease,", ["lease"]),
        ("`resnet18-f37072fd.pth`, 20261124-214107, 0.47313006, #1f2e3d, v1.2.3, deadbeef", []),
        ("until its lease runs out (NFSv4)", []),
        ("a sha in a path: runs/abc1234def/ and runs/20261123-...-my_er", []),
    ],
)
def test_the_rule_finds_hashes_and_process_words_and_nothing_else(text: str, expected: list[str]) -> None:
    assert sorted(words for _, words in process_notes(text)) == sorted(expected)
