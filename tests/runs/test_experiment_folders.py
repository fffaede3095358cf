"""An experiment's run folder left by an earlier invocation (xder_cli.runs.experiments.common):
reused when it holds the same run, wherever that run trained or whatever watched it (its
config.toml written before [benchmark] existed included); refused when a setting that defines the
run differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xder_cli.runs import rundir
from xder_cli.runs.errors import RunDirError
from xder_cli.runs.experiments.class_order import plan_class_order
from xder_cli.runs.experiments.common import _check_existing


def _left_behind(tmp_path: Path, change: dict[str, dict]) -> object:
    run, _ = plan_class_order("seq-digits", ["er"], [0], {"train.epochs": 1})
    stored = json.loads(json.dumps(run.config))
    for section, values in change.items():
        stored[section].update(values)
    rundir.write_config(tmp_path / "config.toml", stored)
    return run


@pytest.mark.parametrize(
    "placed",
    [
        {"device": "cuda:1"},  # trained on another machine's GPU
        {"data_root": "/mnt/other-disk/data"},  # its data moved
        {"data_device": "host"},
        {"threads": 2, "loggers": ["tensorboard"], "record_analyses": True},
    ],
)
def test_a_run_placed_or_watched_otherwise_is_the_same_run(tmp_path: Path, placed: dict) -> None:
    run = _left_behind(tmp_path, {"run": placed})
    _check_existing(run, tmp_path)  # no error: it resumes, and the table includes it


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train": {"epochs": 2}}, r"train\.epochs = 2, this experiment asks for 1"),
        ({"run": {"validation": 0.1}}, r"run\.validation = 0\.1"),
        ({"method": {"alpha": 0.9}}, None),  # ER has no alpha: any difference is refused
    ],
)
def test_a_run_defined_otherwise_is_refused(tmp_path: Path, change: dict, message: str | None) -> None:
    run = _left_behind(tmp_path, change)
    with pytest.raises(RunDirError, match=message or "was trained with"):
        _check_existing(run, tmp_path)


def test_a_run_logged_elsewhere_or_from_before_the_benchmark_section_is_reused(tmp_path: Path) -> None:
    run, _ = plan_class_order("seq-digits", ["er"], [0], {"train.epochs": 1})
    stored = json.loads(json.dumps(run.config))
    stored["run"]["loggers"] = ["wandb"]  # trackers observe a run; they do not configure it
    del stored["benchmark"]  # a config.toml written before [benchmark] existed (seq-digits: no options)
    rundir.write_config(tmp_path / "config.toml", stored)
    _check_existing(run, tmp_path)  # no error: the same configuration
    stored["train"]["epochs"] = 2
    rundir.write_config(tmp_path / "config.toml", stored)
    with pytest.raises(RunDirError, match=r"was trained with train\.epochs = 2"):
        _check_existing(run, tmp_path)


def test_a_run_from_before_run_scenario_is_the_benchmarks_own_scenario(tmp_path: Path) -> None:
    """A config.toml written before run.scenario existed ran the benchmark's own scenario: the
    default; one that asked for task-il is another run."""
    run, _ = plan_class_order("seq-digits", ["er"], [0], {"train.epochs": 1})
    stored = json.loads(json.dumps(run.config))
    del stored["run"]["scenario"]
    rundir.write_config(tmp_path / "config.toml", stored)
    _check_existing(run, tmp_path)
    stored["run"]["scenario"] = "task-il"
    rundir.write_config(tmp_path / "config.toml", stored)
    with pytest.raises(RunDirError, match=r"run\.scenario"):
        _check_existing(run, tmp_path)
