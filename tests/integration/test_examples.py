"""The files the README's and the documentation's first-hour commands name are shipped under
``examples/`` and do what the pages say: the image folder of digits reads back as ``seq-digits``'s
own images, the plugin file is the code the plugins page shows and registers its method, the grid
file is the one the commands page shows and loads as a sweep, and the benchmark plugin trains as
the own-data page's command says."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
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


def test_the_benchmark_plugin_trains_as_the_own_data_page_says(tmp_path: Path) -> None:
    # docs/own-data.md's "A benchmark of your own": its train command as written, on the CPU at one
    # thread (about 10 s), with the data root and the runs in tmp_path. The plugin writes its CSV
    # file there first, then reads it back and trains its three tasks.
    section = (ROOT / "docs" / "own-data.md").read_text().split("## A benchmark of your own", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    (command,) = [line.split("#")[0].split() for line in block.splitlines() if " train " in line]
    assert command[:3] == ["uv", "run", "xder-run"], command
    assert "examples/my_benchmark.py" in command, command
    xder_run = str(Path(sys.executable).parent / "xder-run")
    data, runs = tmp_path / "data", tmp_path / "runs"
    flags = ["--device", "cpu", "--threads", "1", "--data-root", str(data), "--out", str(runs)]
    result = subprocess.run(
        [xder_run, *command[3:], *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (data / "my-patterns.csv").is_file()
    (run,) = runs.iterdir()
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["benchmark"] == "my-patterns"
    assert config["benchmark"] == {"tasks": 3}
    assert (config["train"]["epochs"], config["train"]["lr"]) == (10, 0.05)  # the plugin's protocol
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3]
    assert results["faa"] > 50, results["faa"]  # it learns: 84.67 on the page's CPU, chance 1/6


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
