"""xder-run bench on a tiny configuration: the JSON it writes, processes run together, one-line errors.
The measurement itself (exact counts, the protocol's settings) is tested in tests/runs/test_bench.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_methods import machine_cores


def test_bench_command_writes_json(tmp_path: Path, capsys) -> None:
    target = tmp_path / "bench.json"
    argv = ["bench", "--benchmark", "seq-digits", "--width", "4", "--batch-size", "8", "--buffer-size", "40"]
    argv += [
        "--steps",
        "1",
        "--warmup",
        "1",
        "--no-epoch",
        "--device",
        "cpu",
        "--methods",
        "er",
        "--json",
        str(target),
        "--set",
        "train.precision=bf16",
    ]
    assert main(argv) == 0
    assert "x floor" in capsys.readouterr().out
    payload = json.loads(target.read_text())
    assert payload["methods"][0]["method"] == "er"
    assert payload["methods"][0]["epoch_seconds"] is None
    assert payload["settings"]["precision"] == "bf16"
    assert payload["settings"]["train_settings"] == {"train.precision": "bf16"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--methods", "er,nope"], "unknown method 'nope'"),
        (["--benchmark", "seq-ntu60"], "bench shapes exist for"),
        (["--task", "9"], "--task must be in"),
        (["--set", "train.precision=fp16"], "train.precision"),
        (["--set", "train.nope=1"], "train.nope is not a setting"),
        (["--set", "run.seed=1"], "training and method settings only"),
        (["--set", "method.buffer_size=-5"], "--buffer-size must be >= 0, got -5"),
        (["--buffer-size", "-5"], "--buffer-size must be >= 0, got -5"),
        (["--precision", "bf16"], "unrecognized arguments: --precision"),  # one spelling: --set
    ],
)
def test_bench_mistakes_exit_2(argv, message, capsys) -> None:
    benchmark = [] if "--benchmark" in argv else ["--benchmark", "seq-digits"]
    code = main(["bench", "--device", "cpu", *benchmark, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_concurrent_bench_runs_processes_together(tmp_path: Path, capsys) -> None:
    target = tmp_path / "share.json"
    argv = ["bench", "--benchmark", "seq-digits", "--width", "4", "--batch-size", "8", "--buffer-size", "40"]
    argv += ["--steps", "2", "--warmup", "1", "--device", "cpu", "--methods", "er", "--concurrent", "2"]
    assert main([*argv, "--rounds", "1", "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "ratio = N at once / (N x alone), target <= 1.25" in out
    payload = json.loads(target.read_text())
    (row,) = payload["groups"]
    assert (row["method"], row["processes"]) == ("er", 2)
    (alone,) = row["rounds"]["1"]
    (together,) = row["rounds"]["2"]
    assert len(alone["seconds"]) == 1
    assert len(together["seconds"]) == 2
    assert row["alone_seconds"] == alone["seconds"][0]
    assert row["group_seconds"] == max(together["seconds"])
    # Alone, a process takes every core; of two at once, the later to join sees the other and
    # takes half of them.
    cores = machine_cores()
    assert alone["threads"] == [[cores]]
    assert any(max(1, cores // 2) in used for used in together["threads"])


def test_a_failing_concurrent_process_is_one_line_with_its_flags(capsys) -> None:
    """A process of the fair-share bench that the library refuses: its error, as the command
    line words it, in the one line."""
    argv = ["bench", "--benchmark", "seq-digits", "--device", "cpu", "--methods", "er", "--batch-size", "0"]
    assert main([*argv, "--steps", "1", "--warmup", "1", "--concurrent", "2", "--rounds", "1"]) == 2
    assert capsys.readouterr().err == (
        "xder-run bench: error: bench: a process for er failed: --batch-size must be >= 1, got 0\n"
    )


@pytest.mark.parametrize("groups", ["1", "x", "2,0", ""])
def test_concurrent_bench_mistakes_exit_2(groups: str, capsys) -> None:
    code = main(["bench", "--benchmark", "seq-digits", "--device", "cpu", "--concurrent", groups])
    err = capsys.readouterr().err
    assert code == 2
    assert "--concurrent: takes process counts of at least 2" in err
    assert len(err.strip().splitlines()) == 1
