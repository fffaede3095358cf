"""The report as a library (xder_cli.runs.report.write_report): a path that is not a run, or holds
none, is one precise error, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from xder_cli.runs.errors import RunDirError
from xder_cli.runs.report import find_run_dirs, write_report


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "nothing", "no such directory"),
        (lambda root: root, "not a run directory and none in it"),
        (lambda root: (root / "file.txt").write_text("x") and root / "file.txt", "not a directory"),
    ],
)
def test_bad_paths_are_usage_errors(make, message, tmp_path: Path) -> None:
    path = make(tmp_path)
    with pytest.raises(RunDirError, match=message) as caught:
        write_report([path], tmp_path / "out")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_sweeps_or_an_experiments_folder_is_read_through_its_runs(tmp_path: Path) -> None:
    for folder, inner in (("sweep", "trials"), ("experiment", "runs")):
        run = tmp_path / folder / inner / "p0-s0"
        run.mkdir(parents=True)
        (run / "config.toml").write_text('[run]\nmethod = "er"\n')
        (tmp_path / folder / "sweep.json").write_text("{}")
        assert find_run_dirs([str(tmp_path / folder)]) == [run]
