"""xder-run experiment: the flatness, class-order and sensitivity protocols on seq-digits with tiny
settings; their numbers recomputed from the run directories; reruns that skip finished runs and
resume interrupted ones; a run another process holds left to it; one-line usage errors."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
import torch

from xder_cli import rundir
from xder_cli import train as train_module
from xder_cli.errors import UsageError
from xder_cli.experiment import REGULARISERS, pair_class_order, parse_param, plan_class_order, plot_flatness
from xder_cli.main import main

TINY = ["--set", "train.epochs=1", "--set", "backbone.width=4", "--set", "run.device=cpu"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def one_thread():
    """The runs are tiny: one intra-op thread is faster than several on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _events(run_dir: Path) -> list[str]:
    return [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _check_files(out: Path, plot: str) -> dict:
    assert (out / plot).read_bytes().startswith(PNG)
    summary = json.loads((out / "experiment.json").read_text())
    assert summary["files"] == ["experiment.json", "experiment.md", plot]
    assert (out / "experiment.md").read_text().startswith("# ")
    return summary


def test_pair_class_order_and_param_parsing() -> None:
    assert pair_class_order((2, 2, 2), 0) == [0, 1, 2, 3, 4, 5]
    assert pair_class_order((2, 2, 2), 1) == [2, 3, 4, 5, 0, 1]
    with pytest.raises(UsageError, match=r"k in 0\.\.1"):
        pair_class_order((2, 2, 2), 2)
    with pytest.raises(UsageError, match="hold 3 and 2 classes"):
        pair_class_order((2, 2, 3, 2), 2)
    assert parse_param("method.alpha=0.1, 0.3,1") == ("method.alpha", [0.1, 0.3, 1])
    assert parse_param("run.class_order=natural,reversed") == ("run.class_order", ["natural", "reversed"])
    assert parse_param("train.milestones=[[35, 45], [20]]") == ("train.milestones", [[35, 45], [20]])
    for bad, message in [
        ("method.alpha", "section.key=V1,V2"),
        ("alpha=0.1", "section.name"),
        ("model.alpha=0.1", "section.name"),
        ("method.alpha=0.1,,0.3", "comma-separated"),
        ("method.alpha=", "comma-separated"),
        ("method.alpha=0.1,0.1", "repeats"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_param(bad)


def test_flatness_radar_plot_from_three_pairs(tmp_path: Path) -> None:
    cells = {
        r: {"first_task_accuracy_mean": 50.0 + i, "first_task_accuracy_std": None}
        for i, r in enumerate(REGULARISERS)
    }
    rows = [{"pair": k, "cells": cells} for k in range(4)]
    rows[1] = {
        "pair": 1,
        "cells": {**cells, "lfr": {"first_task_accuracy_mean": None, "first_task_accuracy_std": None}},
    }
    plot_flatness({"rows": rows, "benchmark": "seq-digits"}, tmp_path / "radar.png")
    assert (tmp_path / "radar.png").read_bytes().startswith(PNG)


def test_flatness_pairs_regularisers_interrupt_and_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "flat"
    argv = ["experiment", "flatness", "--pairs", "1", "--seeds", "0", "--out", str(out), *TINY]
    original = train_module.Progress.on_task_end

    def crash(self, loop, record) -> None:  # the lfr run is killed after its first task
        original(self, loop, record)
        if loop.method.config.regulariser == "lfr" and record.task == 0:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(train_module.Progress, "on_task_end", crash)
        assert main(argv) == 130
    runs = out / "runs"
    assert _results(runs / "pair1-none-s0")["complete"] is True
    assert _results(runs / "pair1-lfr-s0")["complete"] is False
    assert not (runs / "pair1-llr-s0").exists()
    plastic_events = (runs / "pair1-none-s0" / "events.jsonl").read_bytes()
    capsys.readouterr()

    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "3 runs, 1 already finished; training 2 in this process" in printed
    assert "[2/3] pair1-lfr-s0 finished | first-task accuracy" in printed
    assert "[3/3] pair1-llr-s0 finished" in printed
    assert "| 1 (tasks 1→2) |" in printed
    summary = _check_files(out, "flatness.png")
    assert (runs / "pair1-none-s0" / "events.jsonl").read_bytes() == plastic_events  # skipped
    lfr_events = _events(runs / "pair1-lfr-s0")
    assert (lfr_events.count("start"), lfr_events.count("resume"), lfr_events.count("task")) == (1, 1, 2)
    assert _events(runs / "pair1-llr-s0").count("start") == 1

    (row,) = summary["rows"]
    assert row["pair"] == 1
    assert row["tasks"] == [1, 2]
    for regulariser in ("none", "lfr", "llr"):
        run_dir = runs / f"pair1-{regulariser}-s0"
        config = rundir.read_config(run_dir / "config.toml")
        assert config["run"]["method"] == "er_flat"
        assert config["run"]["class_order"] == [2, 3, 4, 5, 0, 1, 6, 7, 8, 9] == row["class_order"]
        assert config["train"]["tasks"] == 2
        assert config["method"]["regulariser"] == regulariser
        results = _results(run_dir)
        matrix = results["accuracy_matrix"]
        assert results["n_tasks"] == 2
        assert [len(r) for r in matrix] == [1, 2]
        assert len(results["task_il_accuracy_matrix"][-1]) == 2
        cell = row["cells"][regulariser]
        assert cell["first_task_accuracy_mean"] == pytest.approx(matrix[1][0])
        assert cell["forgetting_mean"] == pytest.approx(matrix[0][0] - matrix[1][0])
        assert cell["first_task_accuracy_std"] is None  # one seed
        assert (cell["seeds_finished"], cell["seeds"]) == (1, 1)
        assert summary["mean_over_pairs"][regulariser]["first_task_accuracy"] == pytest.approx(matrix[1][0])
    assert [r["status"] for r in summary["runs"]] == ["finished"] * 3

    # A third invocation trains nothing.
    assert main(argv) == 0
    assert "3 runs, 3 already finished; training 0" in capsys.readouterr().out
    assert (runs / "pair1-none-s0" / "events.jsonl").read_bytes() == plastic_events


def test_class_order_forward_and_backward(tmp_path: Path, capsys) -> None:
    out = tmp_path / "order"
    argv = ["experiment", "class-order", "--methods", "er", "--seeds", "0,1", "--out", str(out), *TINY]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count(" finished | FAA ") == 4
    assert "| er |" in printed
    summary = _check_files(out, "class_order.png")
    (row,) = summary["rows"]
    assert row["method"] == "er"
    faa: dict[str, list[float]] = {}
    for order in ("natural", "reversed"):
        results = [_results(out / "runs" / f"er-{order}-s{seed}") for seed in (0, 1)]
        assert all(r["complete"] and r["method"] == "er" for r in results)
        assert (
            rundir.read_config(out / "runs" / f"er-{order}-s0" / "config.toml")["run"]["class_order"] == order
        )
        cell = row["cells"][order]
        faa[order] = [r["faa"] for r in results]
        assert cell["faa_mean"] == pytest.approx(statistics.fmean(faa[order]))
        assert cell["faa_std"] == pytest.approx(statistics.stdev(faa[order]))
        assert cell["ff_mean"] == pytest.approx(statistics.fmean([r["ff"] for r in results]))
        assert cell["ff_std"] == pytest.approx(statistics.stdev([r["ff"] for r in results]))
    difference = statistics.fmean(faa["reversed"]) - statistics.fmean(faa["natural"])
    assert row["faa_reversed_minus_natural"] == pytest.approx(difference)
    assert f"{difference:+.2f}" in (out / "experiment.md").read_text()

    before = {p.name: (p / "events.jsonl").read_bytes() for p in (out / "runs").iterdir()}
    assert main(argv) == 0
    assert "4 runs, 4 already finished; training 0" in capsys.readouterr().out
    assert {p.name: (p / "events.jsonl").read_bytes() for p in (out / "runs").iterdir()} == before


def test_a_run_held_by_another_process_is_left_to_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "order"
    argv = ["experiment", "class-order", "--methods", "sgd", "--seeds", "0", "--out", str(out), *TINY]
    held = out / "runs" / "sgd-reversed-s0"
    held.mkdir(parents=True)
    with rundir.lock_run_dir(held, then="-"):  # the same experiment, started twice, trains it
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"[2/2] sgd-reversed-s0 running elsewhere (held by process {os.getpid()} on host " in printed
    assert "note: 1 run(s) are being trained by another process" in printed
    assert [p.name for p in held.iterdir()] == [".lock"]  # nothing written into it
    summary = json.loads((out / "experiment.json").read_text())
    statuses = {r["name"]: r["status"] for r in summary["runs"]}
    assert statuses == {"sgd-natural-s0": "finished", "sgd-reversed-s0": "running elsewhere"}
    assert summary["rows"][0]["cells"]["reversed"]["seeds_finished"] == 0
    assert (
        "- runs/sgd-reversed-s0: running elsewhere (held by process " in (out / "experiment.md").read_text()
    )

    assert main(argv) == 0  # once it is free, that run alone is trained
    assert "2 runs, 1 already finished; training 1 in this process" in capsys.readouterr().out
    summary = json.loads((out / "experiment.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["finished", "finished"]


def test_sensitivity_on_ray(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sens"
    argv = ["experiment", "sensitivity", "--method", "er", "--param", "train.lr=0.02,0.05", "--seeds", "0"]
    argv += ["--max-concurrent", "2", "--out", str(out), *TINY, "--set", "train.tasks=2"]  # Ray is the point
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "training 2 on Ray" in printed
    assert printed.count(" finished | test FAA ") == 2
    summary = _check_files(out, "sensitivity.png")
    assert summary["method"] == "er"
    assert summary["preset"] == "none"
    (param,) = summary["params"]
    assert param["key"] == "train.lr"
    assert param["base_value"] == 0.05  # seq-digits' protocol
    by_value = {}
    for run_dir in (out / "runs").iterdir():
        config = rundir.read_config(run_dir / "config.toml")
        assert config["run"]["validation"] == 0.0  # the test FAA is reported: nothing held out
        assert config["train"]["epochs"] == 1
        assert config["train"]["tasks"] == 2
        by_value[config["train"]["lr"]] = _results(run_dir)
    assert sorted(by_value) == [0.02, 0.05]
    for row in param["rows"]:
        results = by_value[row["value"]]
        assert row["faa_mean"] == pytest.approx(results["faa"])
        assert row["ff_mean"] == pytest.approx(results["ff"])
        assert row["is_base"] is (row["value"] == 0.05)
        assert (row["seeds_finished"], row["seeds"]) == (1, 1)
    table = (out / "experiment.md").read_text()
    assert "| train.lr | 0.05 (base) |" in table
    assert "test split is reported" in table

    assert main(argv) == 0  # everything finished: no Ray instance is even started
    assert "2 runs, 2 already finished; training 0" in capsys.readouterr().out


def test_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    bad = [
        ["experiment", "nope", "--out", out],
        ["experiment", "flatness", "--pairs", "7", "--out", out],
        ["experiment", "flatness", "--pairs", "one", "--out", out],
        ["experiment", "flatness", "--set", "train.tasks=3", "--out", out],
        ["experiment", "class-order", "--pairs", "1", "--out", out],
        ["experiment", "class-order", "--methods", "nope", "--out", out],
        ["experiment", "class-order", "--set", "method.nope=1", "--out", out],
        ["experiment", "class-order", "--set", "run.seed=3", "--out", out],
        ["experiment", "class-order", "--seeds", "a,b", "--out", out],
        ["experiment", "class-order", "--max-concurrent", "0", "--out", out],
        ["experiment", "sensitivity", "--out", out],
        ["experiment", "sensitivity", "--param", "method.alpha", "--out", out],
        ["experiment", "sensitivity", "--param", "method.nope=1,2", "--out", out],
        [
            "experiment",
            "sensitivity",
            "--param",
            "method.alpha=0.1",
            "--set",
            "method.alpha=0.2",
            "--out",
            out,
        ],
        ["experiment", "sensitivity", "--param", "train.lr=0.1", "--param", "train.lr=0.2", "--out", out],
    ]
    for argv in bad:
        assert main(argv) == 2, argv
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == len(bad)
    assert all(line.startswith("xder-run experiment: error: ") for line in errors)
    assert "invalid choice: 'nope'" in errors[0]
    assert "7 is not a pair of adjacent tasks" in errors[1]
    assert "the experiment sets it: 2, the pair" in errors[3]
    assert "unknown method 'nope'" in errors[5]
    assert "method.nope is not a setting" in errors[6]
    assert "use --seeds" in errors[7]
    assert "varied by --param" in errors[13]

    # A run directory left by an experiment with other settings is never reused.
    run, _ = plan_class_order(
        "seq-digits",
        ["er"],
        [0],
        [("train", "epochs", 2), ("backbone", "width", 4), ("run", "device", "cpu")],
    )
    run_dir = Path(out) / "runs" / run.name
    run_dir.mkdir(parents=True)
    rundir.write_config(run_dir / "config.toml", run.config)
    argv = ["experiment", "class-order", "--methods", "er", "--seeds", "0", "--out", out, *TINY]
    assert main(argv) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert "was trained with train.epochs = 2, this experiment asks for 1" in error
    assert not (run_dir / "results.json").exists()


def test_a_run_logged_elsewhere_or_from_before_the_benchmark_section_is_reused(tmp_path: Path) -> None:
    from xder_cli.experiment import _check_existing

    run, _ = plan_class_order("seq-digits", ["er"], [0], [("train", "epochs", 1)])
    stored = json.loads(json.dumps(run.config))
    stored["run"]["loggers"] = ["wandb"]  # trackers observe a run; they do not configure it
    del stored["benchmark"]  # a config.toml written before [benchmark] existed (seq-digits: no options)
    rundir.write_config(tmp_path / "config.toml", stored)
    _check_existing(run, tmp_path)  # no error: the same configuration
    stored["train"]["epochs"] = 2
    rundir.write_config(tmp_path / "config.toml", stored)
    with pytest.raises(UsageError, match=r"was trained with train\.epochs = 2"):
        _check_existing(run, tmp_path)
