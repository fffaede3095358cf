"""Training one run of a sweep or experiment (xder_cli.runs.scheduler): each trial's fair share of
a node's cores, a failure recorded instead of raised, and a retried attempt that waits for the
lock its lost attempt held."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from xder_cli.runs import rundir, scheduler
from xder_cli.runs.scheduler import ATTEMPTS, run_cpus, train_one
from xder_cli.runs.sweep import SweepSpec, plan_trials


@pytest.mark.parametrize(
    ("nodes", "max_concurrent", "cpus"),
    [([2], 1, 2), ([2], 2, 1), ([2], 3, 1), ([16], 4, 4), ([16, 8], 2, 4), ([16], None, 1), ([], 2, 1)],
)
def test_trial_cpus_are_the_fair_share_of_the_smallest_node(nodes, max_concurrent, cpus) -> None:
    assert run_cpus(nodes, max_concurrent) == cpus


def test_a_failing_trial_is_recorded_not_raised(tmp_path: Path) -> None:
    spec = SweepSpec(
        method="er",
        benchmark="seq-cifar100",
        seeds=(0,),
        grid={"train.lr": [0.1]},
        fixed={"run.data_root": str(tmp_path / "nowhere"), "run.device": "cpu"},
    )
    (trial,) = plan_trials(spec)
    outcome = train_one(str(tmp_path / trial.name), trial.config)
    assert outcome["status"] == "failed"
    assert outcome["error"].startswith("DataNotFoundError: ")
    assert "Traceback" in (tmp_path / trial.name / "log.txt").read_text()


def test_a_trial_whose_lock_cannot_be_taken_is_recorded_not_raised(tmp_path: Path) -> None:
    spec = SweepSpec(method="sgd", benchmark="seq-digits", seeds=(0,), grid={"train.lr": [0.1]})
    (trial,) = plan_trials(spec)
    run_dir = tmp_path / trial.name
    (run_dir / rundir.LOCK).mkdir(parents=True)  # a folder where the lock file goes: it cannot open
    outcome = train_one(str(run_dir), trial.config)
    assert outcome["status"] == "failed"
    assert outcome["error"].startswith(f"RunDirError: cannot open the lock file {run_dir / rundir.LOCK}")
    assert outcome["attempts"] == 0


def test_a_retry_waits_for_the_lock_its_lost_attempt_held(tmp_path: Path, monkeypatch) -> None:
    """Ray runs a task again after losing its worker or node; the lost attempt's lock may outlive
    it for a while (a dead node's lock on NFS): the retry, the same submission, waits for it and
    then trains; another submission (the sweep started twice) does not wait."""
    spec = SweepSpec(
        method="sgd",
        benchmark="seq-digits",
        seeds=(0,),
        grid={"train.lr": [0.1]},
        fixed={"train.epochs": 1, "train.tasks": 2, "backbone.width": 4, "run.device": "cpu"},
    )
    (trial,) = plan_trials(spec)
    run_dir = tmp_path / trial.name
    run_dir.mkdir()
    lost = {"submission": "lost", "node": {"id": "n1", "ip": None, "host": "h"}, "pid": 1, "resume": False}
    rundir.EventLog(run_dir / ATTEMPTS).append(lost)
    with rundir.lock_run_dir(run_dir, then="-"):  # the lost attempt's lock, still held
        # Another submission does not wait: it returns long before a wait of 30 s would end
        # (a margin no busy machine eats up); the retry waits the whole RETRY_LOCK_WAIT_S.
        monkeypatch.setattr(scheduler, "RETRY_LOCK_WAIT_S", 30.0)
        begin = time.monotonic()
        other = train_one(str(run_dir), trial.config, (), "another sweep")
        assert other["status"] == "running elsewhere"
        assert time.monotonic() - begin < 30.0
        monkeypatch.setattr(scheduler, "RETRY_LOCK_WAIT_S", 0.5)
        begin = time.monotonic()
        waited = train_one(str(run_dir), trial.config, (), "lost")  # gives up after RETRY_LOCK_WAIT_S
        assert waited["status"] == "running elsewhere"
        assert time.monotonic() - begin >= 0.5

    monkeypatch.setattr(scheduler, "RETRY_LOCK_WAIT_S", 60.0)
    with contextlib.ExitStack() as held:
        held.enter_context(rundir.lock_run_dir(run_dir, then="-"))
        threading.Timer(1.0, held.pop_all().close).start()  # the lock goes a second later
        outcome = train_one(str(run_dir), trial.config, (), "lost")
    assert outcome["status"] == "finished"
    assert outcome["attempts"] == 2
    assert outcome["node"] == {"id": None, "ip": None, "host": socket.gethostname()}  # not on Ray
    first, second = [json.loads(line) for line in (run_dir / ATTEMPTS).read_text().splitlines()]
    assert first == lost
    assert (second["submission"], second["pid"], second["resume"]) == ("lost", os.getpid(), False)
