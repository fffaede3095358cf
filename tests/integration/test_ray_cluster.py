"""Scale-out on a real two-node Ray cluster on this machine (:class:`ray.cluster_utils.Cluster`: a
head node and a worker node, one CPU each, so that two trials at once take one node each).

* ``xder-run sweep --address`` and ``xder-run experiment table --address`` train on both nodes,
  and their records (sweep.json's trials, experiment.json's runs) name the node of each.
* The worker node is lost mid-trial (killed while its trial trains task 1, past its first
  checkpoints): Ray runs the trial again on a live node, it resumes from its last checkpoint, and
  every trial ends with exactly the accuracy matrices of the undisturbed sweep (on CPU); the retry
  is counted. A trial that fails by its own fault (a diverging learning rate) is not retried.
* The driver (the ``xder-run sweep`` process) is killed mid-sweep: the same command again finishes
  every trial, to the same results, none trained twice at once.

The cluster keeps its files (and the ``ray_current_cluster`` address file that a plain
``ray.init()`` would connect to) under a private ``RAY_TMPDIR``, so other Ray users of this machine
never see it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from xder_cli.main import main

XDER_RUN = str(Path(sys.executable).parent / "xder-run")
# Long enough that the test sees a trial inside task 1 and kills its node there (an epoch takes
# about 0.1 s here); one thread, so that an interrupted trial repeats its figures exactly.
SETS = {
    "train.epochs": 10,
    "backbone.width": 4,
    "train.tasks": 2,
    "run.threads": 1,
    "run.device": "cpu",
}
# Three points: two that train, one whose loss diverges at once (the trial's own fault).
GOOD_LRS, DIVERGING_LR = (0.05, 0.1), 1e30
GRID = (
    'method = "er"\nbenchmark = "seq-digits"\nbuffer_size = 20\nseeds = [0]\n[set]\n'
    + "".join(f'"{key}" = {json.dumps(value)}\n' for key, value in SETS.items())
    + f'[grid]\n"train.lr" = [{GOOD_LRS[0]}, {GOOD_LRS[1]}, {DIVERGING_LR:g}]\n'
)
# The GCS declares a node dead after 3 missed health checks, 0.5 s apart (Ray's default: 5 x 3 s).
SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}


@dataclass
class TwoNodes:
    cluster: Any  # ray.cluster_utils.Cluster
    worker: Any  # its worker node (replaced when a test kills it)

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def head_id(self) -> str:
        return self.cluster.head_node.node_id

    def add_worker(self) -> Any:
        self.worker = self.cluster.add_node(num_cpus=1, resources={"worker": 1})
        self.cluster.wait_for_nodes()
        return self.worker


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    # A private Ray temp dir: the cluster's sessions and its address file stay out of /tmp/ray (short:
    # Ray's Unix socket paths must stay under 107 bytes).
    temp = tempfile.mkdtemp(prefix="xr-", dir="/tmp")
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"head": 1},
            "include_dashboard": False,
            "_system_config": SYSTEM_CONFIG,
        },
    )
    nodes = TwoNodes(cluster, None)
    try:
        nodes.add_worker()
        yield nodes
    finally:
        cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(temp, ignore_errors=True)


def sweep_command(grid: Path, out: Path, address: str) -> list[str]:
    return ["sweep", str(grid), "--out", str(out), "--address", address, "--max-concurrent", "2"]


def trials_by_lr(summary: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {t["point"]["train.lr"]: t for t in summary["trials"]}


def matrices(run_dir: Path) -> tuple:
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is True
    return results["accuracy_matrix"], results["task_il_accuracy_matrix"], results["val_faa"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def check_trained_once(run_dir: Path) -> None:
    """Each epoch of each task logged exactly once, in order, between one start and one end: no
    two processes trained this trial at once, and a resume repeated nothing."""
    events = read_jsonl(run_dir / "events.jsonl")
    kinds = [e["event"] for e in events]
    assert kinds.count("start") == 1
    assert kinds.count("end") == 1
    epochs = [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch"]
    assert epochs == [(t, e) for t in range(SETS["train.tasks"]) for e in range(SETS["train.epochs"])]


def wait_inside_task_1(trials: Path, node_id: str | None, deadline: float) -> Path:
    """A trial (started on ``node_id``, if given) that has logged an epoch of task 1: it is training
    its second task, its checkpoints of task 0 and of that epoch on disk."""
    while time.monotonic() < deadline:
        for run_dir in trials.iterdir() if trials.exists() else []:
            starts = read_jsonl(run_dir / "attempts.jsonl")
            if not starts or (node_id is not None and starts[-1]["node"]["id"] != node_id):
                continue
            if any(e["event"] == "epoch" and e["task"] == 1 for e in read_jsonl(run_dir / "events.jsonl")):
                return run_dir
        time.sleep(0.05)
    raise AssertionError("no trial reached task 1 in time")


def wait_until_gone(pid: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} is still alive")


@pytest.fixture(scope="module")
def reference(two_nodes: TwoNodes, tmp_path_factory) -> dict[str, Any]:
    """The sweep undisturbed, through ``xder-run sweep --address`` in this process."""
    folder = tmp_path_factory.mktemp("reference")
    grid = folder / "grid.toml"
    grid.write_text(GRID)
    out = folder / "sweep"
    assert main(sweep_command(grid, out, two_nodes.address)) == 0
    summary = json.loads((out / "sweep.json").read_text())
    return {"grid": grid, "out": out, "summary": summary}


def test_a_sweep_trains_on_both_nodes_and_says_where(reference, two_nodes: TwoNodes) -> None:
    summary = reference["summary"]
    by_lr = trials_by_lr(summary)
    good = [by_lr[lr] for lr in GOOD_LRS]
    assert all(t["status"] == "finished" and t["attempts"] == 1 and t["retries"] == 0 for t in good)
    # Two trials at once, one CPU per node and per trial: one on each node.
    assert {t["node"]["id"] for t in good} == {two_nodes.head_id, two_nodes.worker.node_id}
    assert all(t["node"]["ip"] and t["node"]["host"] for t in good)
    for trial in good:  # the record and the trial's own attempts.jsonl agree
        (start,) = read_jsonl(reference["out"] / trial["run_dir"] / "attempts.jsonl")
        assert start["node"] == trial["node"]
        assert start["resume"] is False
    # The diverging trial fails by its own fault: recorded once with its error, not retried.
    diverged = by_lr[DIVERGING_LR]
    assert diverged["status"] == "failed"
    assert diverged["error"].startswith("NonFiniteLossError: ")
    assert (diverged["attempts"], diverged["retries"]) == (1, 0)
    assert summary["retries"] == 0
    assert summary["best"]["point"]["train.lr"] in GOOD_LRS


def test_an_experiment_table_trains_on_both_nodes_and_says_where(
    two_nodes: TwoNodes, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "table"
    sets = [arg for key, value in SETS.items() for arg in ("--set", f"{key}={value}")]
    sets[sets.index("train.epochs=10")] = "train.epochs=1"
    command = ["experiment", "table", "--benchmark", "seq-digits", "--buffer-size", "20"]
    command += ["--methods", "sgd,er", "--seeds", "0", "--address", two_nodes.address]
    assert main([*command, "--max-concurrent", "2", *sets, "--out", str(out)]) == 0
    summary = json.loads((out / "experiment.json").read_text())
    runs = summary["runs"]
    assert [r["status"] for r in runs] == ["finished", "finished"]
    assert {r["node"]["id"] for r in runs} == {two_nodes.head_id, two_nodes.worker.node_id}
    assert all((r["attempts"], r["retries"]) == (1, 0) for r in runs)
    assert summary["retries"] == 0
    assert "retries" not in capsys.readouterr().out


def lose_the_worker_mid_task(two_nodes: TwoNodes, command: list[str]) -> tuple[Path, str]:
    """Run ``xder-run COMMAND`` (a sweep or an experiment on the cluster) in a subprocess; when a
    trial on the worker node is inside task 1, lose that node, and every process on it with it (its
    raylet and the trial's worker, which would end by itself a moment after its raylet, about 2 s
    here), and add a fresh one, so that the retry need not wait for the head's CPU. Returns the
    trial's run directory and what the command printed; the command must have succeeded."""
    out = Path(command[command.index("--out") + 1])
    lost = two_nodes.worker
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen(
        [XDER_RUN, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        runs = out / ("trials" if command[0] == "sweep" else "runs")
        victim = wait_inside_task_1(runs, lost.node_id, time.monotonic() + 300)
        (start,) = read_jsonl(victim / "attempts.jsonl")
        two_nodes.cluster.remove_node(lost, allow_graceful=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(start["pid"], signal.SIGKILL)
        two_nodes.add_worker()
        printed, _ = driver.communicate(timeout=600)
    finally:
        driver.kill()
    assert driver.returncode == 0, printed
    return victim, printed


@pytest.mark.slow
def test_a_lost_node_costs_only_time(reference, two_nodes: TwoNodes, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    lost = two_nodes.worker
    victim, printed = lose_the_worker_mid_task(
        two_nodes, sweep_command(reference["grid"], out, two_nodes.address)
    )

    summary = json.loads((out / "sweep.json").read_text())
    by_lr = trials_by_lr(summary)
    retried = next(t for t in summary["trials"] if t["name"] == victim.name)
    # Every trial that could finish did, none failed for the lost node, and the retry is counted.
    assert [by_lr[lr]["status"] for lr in GOOD_LRS] == ["finished", "finished"], printed
    assert (retried["attempts"], retried["retries"]) == (2, 1)
    assert summary["retries"] == 1
    assert retried["node"]["id"] != lost.node_id  # finished on a live node
    first, second = read_jsonl(victim / "attempts.jsonl")
    assert (first["node"]["id"], first["resume"]) == (lost.node_id, False)
    assert second["node"]["id"] != lost.node_id
    assert second["resume"] is True
    assert first["submission"] == second["submission"]  # Ray's retry of the same task
    assert re.search(rf"\] {victim.name} finished .*\(retried 1 x after a lost worker or node\)", printed)
    note = "etries: 1 (a trial run again after a lost Ray worker or node resumes from its last checkpoint)"
    assert f"\nr{note}\n" in printed
    assert f"\nR{note}:\n\n- trials/{victim.name}: finished, 2 attempts\n" in (out / "sweep.md").read_text()
    # It resumed in task 1 (from the checkpoint of task 0's end or of an epoch of task 1), repeating
    # nothing (check_trained_once below).
    resume = next(e for e in read_jsonl(victim / "events.jsonl") if e["event"] == "resume")
    assert resume["task"] == 1
    # The diverging trial: failed once, by its own fault, not retried.
    diverged = by_lr[DIVERGING_LR]
    assert (diverged["status"], diverged["attempts"], diverged["retries"]) == ("failed", 1, 0)
    # Exactly the undisturbed sweep's figures (CPU, one thread).
    for lr in GOOD_LRS:
        trial = by_lr[lr]
        check_trained_once(out / trial["run_dir"])
        assert matrices(out / trial["run_dir"]) == matrices(reference["out"] / trial["run_dir"]), lr
    assert summary["best"] == reference["summary"]["best"]


@pytest.mark.slow
def test_a_killed_driver_costs_only_time(reference, two_nodes: TwoNodes, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    command = sweep_command(reference["grid"], out, two_nodes.address)
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen(
        [XDER_RUN, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        interrupted = wait_inside_task_1(out / "trials", None, time.monotonic() + 300)
        (start,) = read_jsonl(interrupted / "attempts.jsonl")
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
        # Ray ends a dead driver's tasks at once (a tenth of a second here): the rerun, a moment
        # later, finds the trial's worker gone (were it not, the lock would make the rerun report
        # the trial as running elsewhere, never train it twice at once).
        wait_until_gone(start["pid"], time.monotonic() + 60)
    finally:
        driver.kill()
    capsys.readouterr()
    assert main(command) == 0  # the same command again
    printed = capsys.readouterr().out
    assert "running elsewhere" not in printed  # the killed driver's tasks were gone when it started

    summary = json.loads((out / "sweep.json").read_text())
    by_lr = trials_by_lr(summary)
    assert [by_lr[lr]["status"] for lr in GOOD_LRS] == ["finished", "finished"], printed
    assert summary["retries"] == 0  # a new sweep, not a Ray retry
    kinds = [e["event"] for e in read_jsonl(interrupted / "events.jsonl")]
    assert kinds.count("resume") == 1  # continued from its checkpoint
    for lr in GOOD_LRS:
        trial = by_lr[lr]
        check_trained_once(out / trial["run_dir"])
        assert matrices(out / trial["run_dir"]) == matrices(reference["out"] / trial["run_dir"]), lr
    assert summary["best"] == reference["summary"]["best"]


def table_command(address: str) -> list[str]:
    """``experiment table`` on seq-digits, FT and ER, on the cluster, with the sweep's settings."""
    command = [
        "experiment",
        "table",
        "--benchmark",
        "seq-digits",
        "--buffer-size",
        "20",
        "--methods",
        "sgd,er",
    ]
    command += ["--seeds", "0", "--address", address, "--max-concurrent", "2"]
    return command + [arg for key, value in SETS.items() for arg in ("--set", f"{key}={value}")]


def table_matrices(run_dir: Path) -> tuple:
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is True
    return results["accuracy_matrix"], results["task_il_accuracy_matrix"]


@pytest.mark.slow
def test_a_lost_node_costs_an_experiment_table_only_time(two_nodes: TwoNodes, tmp_path: Path) -> None:
    """As for the sweep: the table's run on the lost node is retried from its checkpoint on a live
    node, counted, and ends with the figures of the same table trained undisturbed."""
    reference = tmp_path / "undisturbed"
    assert main([*table_command(two_nodes.address), "--out", str(reference)]) == 0
    out = tmp_path / "table"
    lost = two_nodes.worker
    victim, printed = lose_the_worker_mid_task(
        two_nodes, [*table_command(two_nodes.address), "--out", str(out)]
    )

    summary = json.loads((out / "experiment.json").read_text())
    runs = {Path(r["run_dir"]).name: r for r in summary["runs"]}
    assert sorted(runs) == ["er-m20-s0", "sgd-s0"]
    assert [r["status"] for r in runs.values()] == ["finished", "finished"], printed
    retried = runs[victim.name]
    assert (retried["attempts"], retried["retries"]) == (2, 1)
    assert retried["node"]["id"] != lost.node_id
    assert summary["retries"] == 1
    assert "\nretries: 1 (" in printed
    first, second = read_jsonl(victim / "attempts.jsonl")
    assert (first["node"]["id"], second["resume"]) == (lost.node_id, True)
    for name in runs:
        check_trained_once(out / "runs" / name)
        assert table_matrices(out / "runs" / name) == table_matrices(reference / "runs" / name), name
