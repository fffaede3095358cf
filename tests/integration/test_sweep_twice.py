"""The same sweep started twice at once on one ``--out`` (two ``xder-run sweep`` processes, each
with its own local Ray instance): every trial is trained exactly once, by one of them, and a rerun
after both end finds every trial finished."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from xder_cli.main import main

XDER_RUN = str(Path(sys.executable).parent / "xder-run")
GRID = """\
method = "er"
benchmark = "seq-digits"
seeds = [0]
[set]
"train.epochs" = 1
"backbone.width" = 4
"run.device" = "cpu"
[grid]
"train.lr" = [0.05, 0.1, 0.2]
"""


def test_a_sweep_started_twice_trains_each_trial_once(tmp_path: Path, capsys) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "sweep"
    command = [XDER_RUN, "sweep", str(grid), "--out", str(out), "--max-concurrent", "1"]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    sweeps = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    printed = [sweep.communicate(timeout=600) for sweep in sweeps]
    for sweep, (stdout, stderr) in zip(sweeps, printed, strict=True):
        assert sweep.returncode == 0, stdout + stderr

    trials = sorted(p for p in (out / "trials").iterdir() if p.is_dir())
    assert len(trials) == 3
    for trial in trials:
        # Trained once, from the start, by one process: one start, no resume, every epoch once.
        events = [json.loads(line) for line in (trial / "events.jsonl").read_text().splitlines()]
        kinds = [e["event"] for e in events]
        assert (kinds.count("start"), kinds.count("resume"), kinds.count("end")) == (1, 0, 1), trial.name
        assert [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch"] == [
            (t, 0) for t in range(5)
        ]
        assert json.loads((trial / "results.json").read_text())["complete"] is True
        # By their own reports too: exactly one of the two trained it. The other found it finished
        # (no line, or "finished by another process") or held by the first ("running elsewhere").
        trained = [re.search(rf"\] {trial.name} finished val FAA [0-9.]+ \| ", out) for out, _ in printed]
        assert sum(match is not None for match in trained) == 1, printed

    capsys.readouterr()
    assert main(["sweep", str(grid), "--out", str(out)]) == 0  # the rerun, after both ended
    assert "3 trials (3 points x 1 seeds), 3 already finished" in capsys.readouterr().out
    summary = json.loads((out / "sweep.json").read_text())
    assert all(t["status"] == "finished" and t["skipped"] for t in summary["trials"])
    assert summary["best"] is not None


def test_a_killed_sweep_says_how_to_resume_it(tmp_path: Path) -> None:
    """``kill`` (SIGTERM) of a sweep's driver once its first trial trains: Ctrl-C's line, not
    Ray's stack dump, and exit status 130."""
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID.replace('"train.epochs" = 1', '"train.epochs" = 20'))
    out = tmp_path / "sweep"
    command = [XDER_RUN, "sweep", str(grid), "--out", str(out), "--max-concurrent", "1"]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 600  # a guard against a hang only
    while not list(out.glob("trials/*/events.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.5)
    sweep.send_signal(signal.SIGTERM)
    stdout, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 130, stdout + stderr
    assert "SIGTERM received" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        "interrupted: run the same command again; finished trials are kept and interrupted ones "
        "resume from their checkpoints"
    ), stderr
