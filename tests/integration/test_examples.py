"""The files the README's and the documentation's first-hour commands name are shipped under
``examples/`` and do what the pages say: the image folder of digits reads back as ``seq-digits``'s
own images, the plugin file is the code the plugins page shows and registers its method, the grid
file is the one the commands page shows and loads as a sweep."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xder_cli.runs.sweep import load_spec
from xder_data import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_examples_path_the_pages_name_exists() -> None:
    named = {
        (page.name, match) for page in PAGES for match in re.findall(r"examples/[\w./-]*\w", page.read_text())
    }
    assert named, "no page names a file under examples/"
    missing = [(page, path) for page, path in sorted(named) if not (ROOT / path).exists()]
    assert not missing, missing


def _block(page: str, after: str, language: str) -> str:
    text = (ROOT / page).read_text()
    match = re.search(re.escape(after) + rf"[^\n]*\n\n```{language}\n(.*?)```", text, re.S)
    assert match, f"{page}: no {language} block after {after!r}"
    return match.group(1)


def test_the_plugin_file_is_the_plugins_page_code_and_registers_my_er() -> None:
    shown = _block("docs/plugins.md", "--plugin examples/my_er.py --method my_er`)", "python")
    shipped = (EXAMPLES / "my_er.py").read_text()
    assert shipped.endswith(shown), "examples/my_er.py differs from the code docs/plugins.md shows"
    code = (
        "from xder_cli.runs.plugins import load_plugins; from xder_methods import list_methods; "
        f"load_plugins([{str(EXAMPLES / 'my_er.py')!r}]); print('my_er' in list_methods())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_the_grid_file_is_the_commands_page_grid_and_loads() -> None:
    shown = _block("docs/commands.md", "A grid file", "toml")
    path = EXAMPLES / "derpp-digits-grid.toml"
    assert path.read_text() == shown
    spec = load_spec(path)
    assert (spec.method, spec.benchmark) == ("derpp", "seq-digits")


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits") / "my_images"
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "digits_as_images.py"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"1797 images in {out}/train and {out}/test"
    return out


def _by_class(x: np.ndarray, y: np.ndarray) -> dict[int, list[bytes]]:
    return {int(c): sorted(row.tobytes() for row in x[y == c]) for c in np.unique(y)}


def test_the_digits_folder_reads_back_as_seq_digits(digits_folder: Path) -> None:
    folder = load_benchmark("folder", digits_folder, tasks=5)
    digits = load_benchmark("seq-digits")
    assert folder.train_x.shape == (1442, 3, 8, 8)
    assert folder.test_x.shape == (355, 3, 8, 8)
    # Greyscale replicated into RGB: every channel is the digit.
    for split in ("train", "test"):
        x = getattr(folder, f"{split}_x").numpy()
        assert (x == x[:, :1]).all()
        ours = _by_class(x[:, 0], getattr(folder, f"{split}_y").numpy())
        theirs = _by_class(getattr(digits, f"{split}_x").numpy()[:, 0], getattr(digits, f"{split}_y").numpy())
        assert ours == theirs, split
