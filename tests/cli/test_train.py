"""xder-run train in-process: the run directory, its files, one-line errors (exit 2), a resume
refused while another process holds the run, and a full disk that costs nothing but a resume."""

from __future__ import annotations

import errno
import json
import os
import socket
import tomllib
from pathlib import Path

import pytest
import torch

from xder_cli.main import main
from xder_cli.progress import TaskProgress
from xder_cli.runs import lifecycle as lifecycle_module
from xder_cli.runs import plugins as plugins_module
from xder_cli.runs import rundir

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_train_writes_the_run_directory(tmp_path: Path, capsys, saved_figures, readable) -> None:
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
    for name in ("accuracy.png", "accuracy_matrix.png", "task_il_matrix.png"):  # each names its run
        readable(saved_figures[name], run=run.name)


def snapshot(run: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file and folder of ``run``, itself included: its bytes (files) and its mtime."""
    return {
        str(path.relative_to(run)): (path.read_bytes() if path.is_file() else None, path.stat().st_mtime_ns)
        for path in [run, *sorted(run.rglob("*"))]
    }


def test_resume_of_a_complete_run_just_reports_and_changes_nothing(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    before = snapshot(run)
    assert {"results.json", "events.jsonl", "checkpoint.pt", "plots", "plots/accuracy.png"} <= set(before)
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    printed = capsys.readouterr().out
    assert f"{run} is already complete." in printed
    assert "FAA" in printed
    assert snapshot(run) == before  # not a byte, not an mtime


def interrupt_after_first_task(monkeypatch, argv: list[str]) -> None:
    """Run ``xder-run train argv`` and stop it (Ctrl-C) after its first task."""
    original = TaskProgress.on_task_end

    def interrupt(self, loop, record) -> None:
        original(self, loop, record)
        if record.task == 0:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(TaskProgress, "on_task_end", interrupt)
        assert main(["train", *argv]) == 130


def test_resume_is_refused_while_another_process_holds_the_run(tmp_path: Path, monkeypatch, capsys) -> None:
    interrupt_after_first_task(monkeypatch, ["--method", "sgd", "--out", str(tmp_path), *TINY])
    (run,) = run_dirs(tmp_path)
    with rundir.lock_run_dir(run, then="-"):  # another writer (flock: another open file)
        before = snapshot(run)
        capsys.readouterr()
        assert main(["train", "--resume", str(run)]) == 2
        assert snapshot(run) == before
    err = capsys.readouterr().err
    assert err == (
        f"xder-run train: error: {run} is in use by process {os.getpid()} on host {socket.gethostname()} "
        f"(since {json.loads(before['.lock'][0])['since']}): wait for that process to end (or stop it), then "
        f"run xder-run train --resume {run} again\n"
    )
    assert main(["train", "--resume", str(run)]) == 0  # once it is released
    assert json.loads((run / "results.json").read_text())["complete"] is True


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference")
    assert main(["train", "--method", "er", "--out", str(out), *TINY]) == 0
    (run,) = run_dirs(out)
    return json.loads((run / "results.json").read_text())


def fill_the_disk_at(monkeypatch, name: str, occurrence: int) -> dict[str, bytes]:
    """Make the ``occurrence``-th write of the run-directory file ``name`` fail as on a full disk:
    the real write runs and its fsync raises ENOSPC. Returns the run's checkpoint, results and
    events as they were just before that write (filled in when it happens)."""
    before: dict[str, bytes] = {}
    seen = 0
    atomic_write_bytes, append = rundir.atomic_write_bytes, rundir.EventLog.append

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def failing(path: Path, write) -> None:
        nonlocal seen
        seen += path.name == name
        if path.name != name or seen != occurrence:
            return write()
        run = path.parent.parent if path.parent.name == "plots" else path.parent
        before.update({f: (run / f).read_bytes() for f in ("checkpoint.pt", "results.json", "events.jsonl")})
        with monkeypatch.context() as patch:
            patch.setattr(rundir.os, "fsync", disk_full)
            write()

    monkeypatch.setattr(
        rundir,
        "atomic_write_bytes",
        lambda path, data: failing(Path(path), lambda: atomic_write_bytes(path, data)),
    )
    monkeypatch.setattr(
        rundir.EventLog, "append", lambda log, event: failing(log.path, lambda: append(log, event))
    )
    return before


@pytest.mark.parametrize(
    ("name", "occurrence", "where"),
    [
        ("checkpoint.pt", 3, "checkpoint.pt"),  # task 1's epoch
        ("results.json", 2, "results.json"),  # task 1's end
        ("events.jsonl", 7, "events.jsonl"),  # task 1's epoch (1: the truncation, 3: the threads)
        ("accuracy.png", 1, "plots/accuracy.png"),  # the run's end: results.json is not yet complete
    ],
)
def test_a_full_disk_ends_the_run_in_one_line_and_resume_continues(
    name: str, occurrence: int, where: str, uninterrupted: dict, tmp_path: Path, monkeypatch, capsys
) -> None:
    with monkeypatch.context() as patch:
        before = fill_the_disk_at(patch, name, occurrence)
        assert main(["train", "--method", "er", "--out", str(tmp_path), *TINY]) == 2
    (run,) = run_dirs(tmp_path)
    err = capsys.readouterr().err
    assert err == (
        f"xder-run train: error: cannot write {run / where}: [Errno {errno.ENOSPC}] "
        f"{os.strerror(errno.ENOSPC)}; free some space, then continue with xder-run train --resume {run}\n"
    )
    # The previous checkpoint, results and events are intact, and no temporary file is left.
    assert set(before) == {"checkpoint.pt", "results.json", "events.jsonl"}
    assert {f: (run / f).read_bytes() for f in before} == before
    assert json.loads(before["results.json"])["complete"] is False
    assert not [p for p in run.rglob("*.tmp")]

    assert main(["train", "--resume", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert {k: v for k, v in results.items() if k != "wall_time_s"} == {
        k: v for k, v in uninterrupted.items() if k != "wall_time_s"
    }
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch"] == [(t, 0) for t in range(5)]
    assert [e["event"] for e in events].count("end") == 1


def test_validation_split_is_evaluated_too(tmp_path: Path) -> None:
    assert main(["train", "--method", "sgd", "--validation", "0.1", "--out", str(tmp_path), *TINY]) == 0
    (run,) = run_dirs(tmp_path)
    results = json.loads((run / "results.json").read_text())
    val = results["val_accuracy_matrix"]
    assert [len(row) for row in val] == [1, 2, 3, 4, 5]
    # round(0.1 n_c) of each class's train rows: 14 + 15 validation items in each of tasks 0-2 and
    # 14 + 14 in tasks 3-4 (tests/data/test_digits.py), so every accuracy is a whole count of them.
    for row in val:
        for accuracy, n in zip(row, [29, 29, 29, 28, 28], strict=False):
            assert accuracy * n / 100 == pytest.approx(round(accuracy * n / 100), abs=1e-9), row
    assert results["val_faa"] == pytest.approx(sum(val[-1]) / 5)


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
        (["--set", "method.buffer_size=-5"], "--buffer-size must be >= 0, got -5 (e.g. 200)"),
        (["--class-order", "1,1,2"], "not a permutation"),
        (["--class-order", "upside-down"], "natural, reversed, random"),
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


@pytest.mark.parametrize(
    ("gpus", "device", "message"),
    [
        (0, "cuda", "run.device 'cuda': no CUDA device is available here; use --device cpu"),
        (0, "cuda:0", "run.device 'cuda:0': no CUDA device is available here; use --device cpu"),
        (2, "cuda:7", "run.device 'cuda:7': only 2 CUDA device(s)"),
        (2, "cuda:2", "run.device 'cuda:2': only 2 CUDA device(s)"),
    ],
)
def test_a_cuda_device_that_is_not_there_exits_2(
    gpus: int, device: str, message: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Whatever this machine has: torch is told it has ``gpus`` CUDA devices."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    code = main(["train", "--out", str(tmp_path), "--device", device])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"xder-run train: error: {message}\n"
    assert list(tmp_path.iterdir()) == []  # refused before a run folder was made


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
    assert results["faa"] == pytest.approx(sum(results["accuracy_matrix"][-1]) / 5)


def test_divergence_in_the_first_epoch_says_no_checkpoint_exists(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY, "--set", "train.lr=1e30"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "became" in err
    assert "in task 0 epoch 0" in err
    assert "no checkpoint exists yet" in err
    assert "started again: lower the learning rate, e.g. --set train.lr=1e+29" in err
    assert "checkpoint.pt" not in err
    assert run_dirs(tmp_path) == []  # nothing to resume: the failed start left no folder


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


# ---------------------------------------------------------------------------------------------
# A new user's first hour: no debris, no silent nonsense, messages that say what they mean


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--benchmark", "folder", "--data-root", "nowhere"], "nowhere: no such folder"),
        (["--class-order", "1,2"], "not a permutation of 0..9"),
        (["--benchmark", "seq-cifar10", "--data-root", "nowhere"], "CIFAR-10 folder not found"),
    ],
)
def test_a_failed_start_leaves_no_run_folder(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    """Errors found once the data are read (after the start line) remove the folder they made."""
    assert main(["train", "--out", str(tmp_path), *TINY, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("training ")  # the start line came before the data were read
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert run_dirs(tmp_path) == []


def test_an_interrupted_start_keeps_its_folder_and_resume_says_it_starts_over(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Ctrl-C before the first checkpoint: the folder stays (the user was told to resume it), and
    --resume says it starts from the beginning instead of pretending to resume."""

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(lifecycle_module, "_build", stop)
        assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY]) == 130
    (run,) = run_dirs(tmp_path)
    err = capsys.readouterr().err
    assert err == f"\ninterrupted: continue with xder-run train --resume {run}\n"
    assert not (run / "checkpoint.pt").exists()
    assert main(["train", "--resume", str(run)]) == 0
    printed = capsys.readouterr().out
    assert f"{run}: no checkpoint yet: starting from the beginning\ntraining sgd on seq-digits" in printed
    assert "resuming" not in printed


def test_ctrl_c_names_the_run_to_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    interrupt_after_first_task(monkeypatch, ["--method", "sgd", "--out", str(tmp_path), *TINY])
    (run,) = run_dirs(tmp_path)
    assert capsys.readouterr().err.endswith(f"interrupted: continue with xder-run train --resume {run}\n")
    assert main(["train", "--resume", str(run)]) == 0
    assert f"resuming sgd on seq-digits (buffer 0, seed 0, preset none, 1 epoch/task) -> {run}" in (
        capsys.readouterr().out
    )


def test_epochs_zero_is_refused(tmp_path: Path, capsys) -> None:
    for argv in (["--epochs", "0"], ["--set", "train.epochs=0"]):
        assert main(["train", "--out", str(tmp_path), *argv]) == 2
        assert capsys.readouterr().err == (
            "xder-run train: error: train: epochs must be >= 1 (with none, a task trains nothing)\n"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_buffer_larger_than_the_training_set_is_warned(tmp_path: Path, capsys) -> None:
    argv = ["--method", "er", "--buffer-size", "5000", "--set", "train.tasks=1", "--out", str(tmp_path)]
    assert main(["train", *argv, *TINY]) == 0
    err = capsys.readouterr().err
    assert "warning: buffer size 5000 exceeds the 1442 training examples" in err  # seq-digits: 1442 / 355


@pytest.mark.parametrize(
    ("argv", "err"),
    [
        (["--set", "train.tasks=abc"], "train.tasks = 'abc' is not valid: expected an integer, or unset"),
        (["--set", "method.buffer_size=1.5"], "method.buffer_size = 1.5 is not valid: expected an integer"),
        (["--set", "train.milestones=3"], "expected a list of numbers, e.g. [35, 45]"),
        (
            ["--benchmark", "seq-cifar10", "--data-root", "no-such-root"],
            "no-such-root/cifar-10-batches-py: CIFAR-10 folder not found: run "
            "`xder-run data download cifar10 --data-root no-such-root`",
        ),
        (
            ["--benchmark", "folder", "--data-root", "nowhere"],
            "(the data folder is --data-root, run.data_root; default: data)",
        ),
    ],
)
def test_messages_say_what_they_mean(argv: list[str], err: str, tmp_path: Path, capsys) -> None:
    assert main(["train", "--out", str(tmp_path), *TINY, *argv]) == 2
    assert err in capsys.readouterr().err


def test_a_plugin_is_recorded_and_loaded_again_on_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    plugin = tmp_path / "my_methods.py"
    plugin.write_text(
        "from xder_methods import register_method\n"
        "from xder_methods import ER, ReplayConfig\n"
        "register_method('er_resume_test', ReplayConfig)(type('ERResumeTest', (ER,), {}))\n"
    )
    monkeypatch.setattr(plugins_module, "_LOADED", [])  # this process's plugins: this test's only
    out = tmp_path / "runs"
    argv = [
        "--plugin",
        str(plugin),
        "--method",
        "er_resume_test",
        "--set",
        "train.tasks=2",
        "--out",
        str(out),
    ]
    interrupt_after_first_task(monkeypatch, [*argv, *TINY])
    (run,) = run_dirs(out)
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["plugins"] == [str(plugin)]
    capsys.readouterr()
    # The file moved: --resume says which plugin it needs.
    plugin.rename(tmp_path / "moved.py")
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run} was trained with --plugin {plugin}, which does not load now" in err
    assert len(err.strip().splitlines()) == 1


def test_resume_of_a_run_whose_method_nothing_registers_names_the_plugin_flag(tmp_path: Path, capsys) -> None:
    assert main(["train", "--method", "sgd", "--out", str(tmp_path), *TINY, "--set", "train.tasks=1"]) == 0
    (run,) = run_dirs(tmp_path)
    config = (run / "config.toml").read_text().replace('method = "sgd"', 'method = "from_a_plugin"')
    (run / "config.toml").write_text(config)
    (run / "results.json").unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"xder-run train: error: {run} trains method 'from_a_plugin', which nothing registers here: it comes "
        "from a plugin not recorded in its config.toml; pass --plugin MODULE_OR_FILE naming it\n"
    )
