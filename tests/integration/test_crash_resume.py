"""End to end through the installed ``xder-run``: kill a run mid-sequence, resume it twice at once
(one resumer trains, the other is refused), and get exactly the results of an uninterrupted run
with the same seed (on CPU)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

XDER_RUN = str(Path(sys.executable).parent / "xder-run")
SETTINGS = [
    "--epochs",
    "3",
    "--seed",
    "3",
    "--device",
    "cpu",
    "--set",
    "backbone.width=8",
    # One thread: the default, a fair share of the cores, changes with what else runs, and with it
    # the order of floating-point sums, so that a busy machine would fail the identity below.
    "--set",
    "run.threads=1",
]
# Time limits guard against a hang only: generous, so that a busy machine cannot fail the test.
PATIENCE = 1800


def xder_run(*args: str, timeout: float = PATIENCE) -> subprocess.CompletedProcess:
    return subprocess.run([XDER_RUN, *args], capture_output=True, text=True, timeout=timeout, check=False)


def only_run_dir(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def wait_for_epoch_event(events: Path, task: int, epoch: int, deadline: float) -> None:
    """Until the run has logged epoch ``epoch`` of task ``task`` (or later): an epoch's event comes
    before its checkpoint, so the checkpoint of the epoch before it is on disk by then."""
    while time.monotonic() < deadline:
        if events.exists():
            for line in events.read_text().splitlines():
                event = json.loads(line)
                if event["event"] == "epoch" and (event["task"], event["epoch"]) >= (task, epoch):
                    return
        time.sleep(0.02)
    raise AssertionError("the run did not reach the expected task in time")


def test_help_lists_the_train_command() -> None:
    result = xder_run("train", "--help")
    assert result.returncode == 0
    for flag in (
        "--method",
        "--benchmark",
        "--buffer-size",
        "--resume",
        "--set",
        "--preset",
        "--class-order",
    ):
        assert flag in result.stdout


# X-DER's state is the richest: buffer logits rewritten during a task, visit counters, extra draws.
# Every other method's resume is checked in-process against its uninterrupted run
# (tests/methods/test_methods.py); this test is about the process: SIGKILL, the lock, two resumers.
def test_killed_run_resumed_twice_at_once_is_trained_once_to_the_uninterrupted_result(
    tmp_path: Path,
) -> None:
    method = "xder"
    settings = ["--method", method, *SETTINGS]
    reference_out, crash_out = tmp_path / "reference", tmp_path / "crash"
    done = xder_run("train", *settings, "--out", str(reference_out))
    assert done.returncode == 0, done.stderr
    reference = json.loads((only_run_dir(reference_out) / "results.json").read_text())

    process = subprocess.Popen(
        [XDER_RUN, "train", *settings, "--out", str(crash_out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        crash_out.mkdir(exist_ok=True)
        deadline = time.monotonic() + PATIENCE
        while not any(crash_out.iterdir()):
            assert time.monotonic() < deadline
            assert process.poll() is None
            time.sleep(0.02)
        run = only_run_dir(crash_out)
        wait_for_epoch_event(run / "events.jsonl", task=1, epoch=1, deadline=deadline)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    partial = json.loads((run / "results.json").read_text())
    assert partial["complete"] is False
    assert 1 <= partial["tasks_done"] < 5
    # kill -9 left the holder's name in the lock file, but not the lock: the kernel released it.
    assert json.loads((run / ".lock").read_text())["pid"] == process.pid

    # Two terminals resume it at once: one trains, the other is refused and writes nothing.
    resumers = [
        subprocess.Popen(
            [XDER_RUN, "train", "--resume", str(run)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [resumer.communicate(timeout=PATIENCE) for resumer in resumers]
    codes = [resumer.returncode for resumer in resumers]
    assert sorted(codes) == [0, 2], outputs
    winner, loser = codes.index(0), codes.index(2)
    assert f"resuming {method} on seq-digits" in outputs[winner][0]
    assert outputs[loser][0] == ""
    assert re.fullmatch(
        rf"xder-run train: error: {re.escape(str(run))} is in use by process {resumers[winner].pid} on host "
        rf"{re.escape(socket.gethostname())} \(since [0-9T:-]+\): wait for that process to end \(or stop "
        rf"it\), then run xder-run train --resume {re.escape(str(run))} again\n",
        outputs[loser][1],
    ), outputs[loser][1]

    result = json.loads((run / "results.json").read_text())
    assert result["complete"] is True
    assert {k: v for k, v in result.items() if k != "wall_time_s"} == {
        k: v for k, v in reference.items() if k != "wall_time_s"
    }

    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    epochs = [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch"]
    assert epochs == [(t, e) for t in range(5) for e in range(3)]  # none lost, none twice
    kinds = [e["event"] for e in events]
    assert (kinds.count("start"), kinds.count("resume"), kinds.count("end")) == (1, 1, 1)
    # Killed in task 1's second epoch, after the checkpoint of its first: resumed in the middle of
    # task 1, after the buffer was filled at the end of task 0 and (X-DER) rewritten during task 1.
    resume = next(e for e in events if e["event"] == "resume")
    assert (resume["task"], resume["epoch"]) in {(1, 1), (1, 2)}
    assert kinds[-1] == "end"
