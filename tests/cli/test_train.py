"""xder-run train in-process: the run directory, its files, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch

from xder_cli.main import main

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_train_writes_the_run_directory(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "er", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    assert run.name.endswith("-er-seq-digits-m200-s0")
    printed = capsys.readouterr().out
    assert "task 5/5" in printed
    assert "FAA" in printed
    assert "FF" in printed

    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["method"] == "er"
    assert config["train"]["epochs"] == 1
    assert config["backbone"] == {"name": "resnet18-cifar", "width": 4, "in_channels": 1}
    assert config["method"] == {"buffer_size": 200, "minibatch_size": 32}

    results = json.loads((run / "results.json").read_text())
    for key in (
        "accuracy_matrix",
        "task_il_accuracy_matrix",
        "faa",
        "ff",
        "task_il_faa",
        "wall_time_s",
    ):
        assert key in results
    assert results["complete"] is True
    assert [len(r) for r in results["accuracy_matrix"]] == [1, 2, 3, 4, 5]
    assert results["faa"] == pytest.approx(sum(results["accuracy_matrix"][-1]) / 5)

    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("epoch") == 5
    assert [e["event"] for e in events].count("task") == 5
    assert events[0]["event"] == "start"
    assert events[-1]["event"] == "end"

    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert checkpoint["position"] == {"task": 5, "epoch": 0}
    assert {p.name for p in (run / "plots").iterdir()} == {
        "accuracy.png",
        "accuracy_matrix.png",
        "task_il_matrix.png",
    }


def test_resume_of_a_complete_run_just_reports(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    before = (run / "results.json").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert (run / "results.json").read_text() == before


def test_validation_split_is_evaluated_too(tmp_path: Path) -> None:
    assert main(["train", "--method", "sgd", "--validation", "0.1", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    results = json.loads((run / "results.json").read_text())
    assert len(results["val_accuracy_matrix"]) == 5
    assert results["val_faa"] is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--method", "nope"], "unknown method 'nope'"),
        (["--benchmark", "seq-nope"], "unknown benchmark 'seq-nope'"),
        (["--set", "method.zeta=1"], "method.zeta is not a setting"),
        (["--set", "train.lr=fast"], "train.lr = 'fast' is not valid"),
        (["--set", "lr=1"], "section one of run, train, backbone, method"),
        (["--set", "method.alpha"], "section.key=value"),
        (["--buffer-size", "-5"], "--buffer-size must be >= 0"),
        (["--set", "method.buffer_size=-5"], "buffer size must be >= 0"),
        (["--class-order", "1,1,2"], "not a permutation"),
        (["--class-order", "upside-down"], "natural, reversed, random"),
        (["--device", "cuda:7"], "cuda"),
        (["--device", "tpu"], "device"),
        (["--preset", "fancy"], "unknown preset 'fancy'"),
        (["--epochs", "many"], "invalid int value"),
        (["--validation", "1.5"], "not in [0, 1)"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(argv, message, tmp_path: Path, capsys) -> None:
    code = main(["train", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("argv_maker", ["missing", "not_a_run", "with_flags"])
def test_resume_mistakes_exit_2(argv_maker, tmp_path: Path, capsys) -> None:
    if argv_maker == "missing":
        argv = ["--resume", str(tmp_path / "nothing")]
    elif argv_maker == "not_a_run":
        argv = ["--resume", str(tmp_path)]
    else:
        argv = ["--resume", str(tmp_path), "--epochs", "2"]
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "resume" in err


def test_joint_trained_once_has_no_forgetting(tmp_path: Path) -> None:
    assert main(["train", "--method", "joint", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    results = json.loads((run / "results.json").read_text())
    assert results["forgetting_defined"] is False
    assert results["ff"] is None
    assert results["bwt"] is None
    assert results["faa"] is not None


def test_divergence_in_the_first_epoch_says_no_checkpoint_exists(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY, "--set", "train.lr=1e30"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "became" in err
    assert "in task 0 epoch 0" in err
    assert "no checkpoint exists yet" in err
    assert "started again: lower the learning rate, e.g. --set train.lr=1e+29" in err
    assert "checkpoint.pt" not in err
    (run,) = run_dirs(tmp_path)
    assert not (run / "checkpoint.pt").exists()


def test_divergence_after_a_checkpoint_points_to_it(tmp_path: Path, capsys) -> None:
    # epoch 0 at lr 0.05, epoch 1 at 0.05 * 1e30: the loss diverges after the first checkpoint
    schedule = [
        "--set",
        "train.lr_schedule=multistep",
        "--set",
        "train.milestones=[1]",
        "--set",
        "train.lr_gamma=1e30",
    ]
    argv = ["train", "--method", "sgd", "--out", str(tmp_path), *TINY, "--epochs", "2", *schedule]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "in task 0 epoch 1" in err
    (run,) = run_dirs(tmp_path)
    assert f"last good state: {run / 'checkpoint.pt'}" in err
    assert "no checkpoint" not in err
    assert torch.load(run / "checkpoint.pt", weights_only=True)["position"] == {"task": 0, "epoch": 1}
