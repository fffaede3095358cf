"""A class-il benchmark run as task-il (``run.scenario``), and PNN, which runs only so."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from xder_cli.main import main

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu", "--set", "train.tasks=2"]


def test_pnn_trains_a_class_il_benchmark_run_as_task_il(tmp_path: Path, capsys) -> None:
    argv = ["train", "--benchmark", "seq-digits", "--method", "pnn", "--set", "run.scenario=task-il"]
    assert main([*argv, "--out", str(tmp_path), *TINY]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert tomllib.loads((run / "config.toml").read_text())["run"]["scenario"] == "task-il"
    results = json.loads((run / "results.json").read_text())
    assert results["scenario"] == "task-il"
    assert results["accuracy_matrix"] is None
    assert results["faa"] is None
    assert [len(row) for row in results["task_il_accuracy_matrix"]] == [2, 2]
    assert results["task_il_faa"] == pytest.approx(sum(results["task_il_accuracy_matrix"][-1]) / 2)
    assert "Task-IL FAA" in capsys.readouterr().out


def test_pnn_on_a_class_il_benchmark_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["train", "--benchmark", "seq-digits", "--method", "pnn", "--out", str(tmp_path), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "xder-run train: error: pnn cannot run a class-il benchmark: it needs the task at test time; "
        "run a class-il benchmark with run.scenario=task-il (it runs task-il)"
    )
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


@pytest.mark.parametrize(
    ("benchmark", "scenario", "message"),
    [
        ("perm-digits", "task-il", "benchmark 'perm-digits' is domain-il: it cannot run as task-il"),
        ("seq-digits", "general", "benchmark 'seq-digits' is class-il: it cannot run as general"),
        ("seq-digits", "task", "run.scenario = 'task' is not valid"),
    ],
)
def test_a_scenario_the_benchmark_cannot_run_in_is_one_line(
    benchmark, scenario, message, tmp_path, capsys
) -> None:
    argv = ["train", "--benchmark", benchmark, "--method", "sgd", "--set", f"run.scenario={scenario}"]
    assert main([*argv, "--out", str(tmp_path), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
    assert not tmp_path.exists() or [p for p in tmp_path.iterdir() if p.is_dir()] == []
