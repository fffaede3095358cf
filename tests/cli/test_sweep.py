"""xder-run sweep: a 2x2 grid x 2 seeds on seq-digits through a local Ray instance, selection on
validation, a trial held by another process left alone, failures recorded, and a rerun that
resumes instead of repeating."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import threading
import time
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_cli.progress import TaskProgress
from xder_cli.runs import rundir, scheduler
from xder_cli.runs import sweep as sweep_module
from xder_cli.runs.errors import SettingError
from xder_cli.runs.lifecycle import RunDisplay, run_training
from xder_cli.runs.scheduler import ATTEMPTS, run_cpus, train_one
from xder_cli.runs.settings import build_plan
from xder_cli.runs.sweep import (
    SweepSpec,
    Trial,
    load_spec,
    plan_trials,
    run_sweep,
    select,
    spec_from_preset,
    sweep_markdown,
)

GRID = """\
method = "derpp"
benchmark = "seq-digits"
seeds = [0, 1]
validation = 0.1
[set]
"train.epochs" = 1
"backbone.width" = 4
"run.device" = "cpu"
[grid]
"method.alpha" = [0.1, 0.5]
"method.beta" = [0.5, 1.0]
"""


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _interrupt_after_second_task(trial: Trial, run_dir: Path, monkeypatch) -> None:
    """Leave ``run_dir`` as a run killed after its second task: checkpoint, partial results."""
    plan = build_plan(trial.config)
    run_dir.mkdir(parents=True)
    (run_dir / "plots").mkdir()
    rundir.write_config(run_dir / "config.toml", plan.config)
    original = TaskProgress.on_task_end

    def crash(self, loop, record) -> None:
        original(self, loop, record)
        if record.task == 1:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(TaskProgress, "on_task_end", crash)
        with pytest.raises(KeyboardInterrupt):
            run_training(plan, run_dir, display=RunDisplay([TaskProgress()]))
    assert json.loads((run_dir / "results.json").read_text())["complete"] is False


def test_grid_on_ray_selects_on_validation_and_resumes(tmp_path: Path, monkeypatch) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(GRID)
    spec = load_spec(grid_file)
    trials = plan_trials(spec)
    assert len(trials) == 8
    assert len({t.name for t in trials}) == 8
    assert all(t.config["run"]["validation"] == 0.1 for t in trials)
    out = tmp_path / "sweep"
    interrupted = out / "trials" / trials[0].name
    _interrupt_after_second_task(trials[0], interrupted, monkeypatch)

    # Another process (the same sweep started twice) holds trial 1: left alone, reported, not selected.
    busy = out / "trials" / trials[1].name
    busy.mkdir()
    with rundir.lock_run_dir(busy, then="-"):
        first = run_sweep(spec, out, max_concurrent=2)
    held = next(t for t in first["trials"] if t["name"] == trials[1].name)
    assert held["status"] == "running elsewhere"
    assert held["held_by"].startswith(f"process {os.getpid()} on host {socket.gethostname()} ")
    assert held["error"] is None
    assert [p.name for p in busy.iterdir()] == [".lock"]  # nothing trained, nothing written
    assert sum(t["status"] == "finished" for t in first["trials"]) == 7
    (point,) = [r for r in first["points"] if r["name"] == trials[1].name.rsplit("-s", 1)[0]]
    assert point["seeds_finished"] == 1
    assert first["best"] is None or first["best"]["name"] != point["name"]
    assert (
        f"- trials/{trials[1].name}: running elsewhere (held by process {os.getpid()} "
        in (out / "sweep.md").read_text()
    )

    # Once it is free, the rerun trains that trial and nothing else.
    summary = run_sweep(spec, out, max_concurrent=2)
    assert [t["name"] for t in summary["trials"] if not t.get("skipped")] == [trials[1].name]

    # Every trial is an ordinary, complete run directory.
    for trial in trials:
        results = json.loads((out / "trials" / trial.name / "results.json").read_text())
        assert results["complete"] is True
        assert results["seed"] == trial.seed
        # Two trials at once on Ray: each ran on its fair share of the cores, fixed for its life
        # (the interrupted one began in this process, alone, before Ray resumed it).
        threads = results["environment"]["threads"]
        share = max(1, (os.cpu_count() or 1) // 2)
        assert threads[-1:] == [share]
        assert trial is trials[0] or threads == [share]
    assert all(t["status"] == "finished" for t in summary["trials"])
    # The interrupted trial continued from its checkpoint; the others started once.
    kinds = [e["event"] for e in _events(interrupted)]
    assert kinds.count("start") == 1
    assert kinds.count("resume") == 1
    assert [e["task"] for e in _events(interrupted) if e["event"] == "task"] == [0, 1, 2, 3, 4]

    # Selection: the best mean VALIDATION FAA over seeds, recomputed from the run directories.
    by_point: dict[tuple, list[float]] = {}
    for trial in trials:
        results = json.loads((out / "trials" / trial.name / "results.json").read_text())
        by_point.setdefault(tuple(trial.point.values()), []).append(results["val_faa"])
    best_point = max(by_point, key=lambda p: statistics.fmean(by_point[p]))
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["selected_on"] == "validation"
    assert tuple(saved["best"]["point"].values()) == best_point
    assert saved["best"]["val_faa_mean"] == pytest.approx(statistics.fmean(by_point[best_point]))
    assert len(saved["trials"]) == 8
    assert all(t["val_faa"] is not None and t["faa"] is not None for t in saved["trials"])
    assert "Best: method.alpha" in (out / "sweep.md").read_text()

    # Rerunning repeats nothing: every trial is skipped, the run directories are untouched.
    before = {t.name: (out / "trials" / t.name / "events.jsonl").read_bytes() for t in trials}
    again = run_sweep(spec, out, max_concurrent=2)
    assert all(t.get("skipped") for t in again["trials"])
    assert again["best"] == summary["best"]
    assert {t.name: (out / "trials" / t.name / "events.jsonl").read_bytes() for t in trials} == before


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
    monkeypatch.setattr(scheduler, "RETRY_LOCK_WAIT_S", 0.5)
    with rundir.lock_run_dir(run_dir, then="-"):  # the lost attempt's lock, still held
        begin = time.monotonic()
        other = train_one(str(run_dir), trial.config, (), "another sweep")
        assert other["status"] == "running elsewhere"
        assert time.monotonic() - begin < 0.5
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


def test_retries_are_counted_in_the_summary_and_the_report() -> None:
    spec = SweepSpec(method="er", benchmark="seq-digits", seeds=(0,), grid={"train.lr": [0.1, 0.2]})
    trials = [Trial(f"p{i}-s0", {"train.lr": lr}, 0, {}) for i, lr in enumerate((0.1, 0.2))]
    node = {"id": "abc", "ip": "10.0.0.2", "host": "node2"}
    outcomes = {
        "p0-s0": {"status": "finished", "val_faa": 50.0, "faa": 40.0, "attempts": 3, "node": node},
        "p1-s0": {"status": "finished", "val_faa": 60.0, "faa": 40.0, "attempts": 1, "node": node},
    }
    summary = select(spec, trials, outcomes)
    assert summary["retries"] == 2
    assert [(t["attempts"], t["retries"], t["node"]) for t in summary["trials"]] == [
        (3, 2, node),
        (1, 0, node),
    ]
    report = sweep_markdown(summary)
    assert (
        "\nRetries: 2 (a trial run again after a lost Ray worker or node resumes from its last checkpoint):"
        in report
    )
    assert "- trials/p0-s0: finished, 3 attempts\n" in report
    assert "p1-s0" not in report
    assert scheduler.outcome_note(outcomes["p0-s0"]) == " (retried 2 x after a lost worker or node)"
    assert select(spec, trials, {})["retries"] == 0
    assert "Retries" not in sweep_markdown(select(spec, trials, {}))


def test_selection_ignores_test_accuracy_and_unfinished_points() -> None:
    spec = SweepSpec(method="er", benchmark="seq-digits", seeds=(0, 1), grid={"train.lr": [0.1, 0.2, 0.3]})
    trials = [
        Trial(f"p{i}-s{s}", {"train.lr": lr}, s, {}) for i, lr in enumerate((0.1, 0.2, 0.3)) for s in (0, 1)
    ]
    outcomes = {
        "p0-s0": {"status": "finished", "val_faa": 50.0, "faa": 90.0},
        "p0-s1": {"status": "finished", "val_faa": 60.0, "faa": 90.0},
        "p1-s0": {"status": "finished", "val_faa": 70.0, "faa": 10.0},
        "p1-s1": {"status": "finished", "val_faa": 50.0, "faa": 10.0},
        "p2-s0": {"status": "finished", "val_faa": 99.0, "faa": 99.0},
        "p2-s1": {"status": "failed", "val_faa": None, "faa": None, "error": "boom"},
    }
    summary = select(spec, trials, outcomes)
    assert summary["best"]["point"] == {"train.lr": 0.2}  # val 60 > 55; p2 lacks a seed
    assert summary["best"]["val_faa_mean"] == pytest.approx(60.0)
    assert summary["best"]["val_faa_std"] == pytest.approx(statistics.stdev([70.0, 50.0]))
    assert summary["best"]["test_faa_mean"] == pytest.approx(10.0)
    assert [p["seeds_finished"] for p in summary["points"]] == [2, 2, 1]


def test_grid_from_the_paper_preset() -> None:
    spec = spec_from_preset("paper:seq-cifar100:500:xder-rpc", (0, 1))
    assert spec.method == "xder"
    assert spec.seeds == (0, 1)
    assert spec.grid["method.alpha"] == [0.1, 0.3, 0.7]
    assert spec.fixed["method.future_heads"] == "rpc"
    assert spec.fixed["method.buffer_size"] == 500
    assert spec.fixed["train.epochs"] == 50
    assert "method.alpha" not in spec.fixed
    points = 1
    for values in spec.grid.values():
        points *= len(values)
    assert len(plan_trials(spec)) == 2 * points


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('benchmark = "seq-digits"\n[grid]\n"method.alpha" = [0.1]\n', "'method' is missing"),
        ('method = "er"\nbenchmark = "seq-digits"\n[grid]\n"method.alpha" = 0.1\n', "non-empty list"),
        ('method = "er"\nbenchmark = "seq-digits"\nseeds = []\n[grid]\n"train.lr" = [0.1]\n', "seeds"),
        (
            'method = "er"\nbenchmark = "seq-digits"\nvalidation = 0\n[grid]\n"train.lr" = [0.1]\n',
            "validation",
        ),
        ('method = "er"\nbenchmark = "seq-digits"\nepochs = 3\n[grid]\n"train.lr" = [0.1]\n', "unknown key"),
        ("method = ", "not valid TOML"),
    ],
)
def test_bad_grid_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(text)
    with pytest.raises(SettingError, match=message):
        load_spec(path)


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    assert main(["sweep", "--out", out]) == 2
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", out]) == 2
    assert main(["sweep", "--grid", "paper:seq-cifar100:123:er", "--out", out]) == 2
    assert main(["sweep", "--grid", "paper:seq-cifar100", "--out", out]) == 2
    grid = tmp_path / "grid.toml"
    grid.write_text('method = "er"\nbenchmark = "seq-digits"\n[grid]\n"method.nope" = [1]\n')
    assert main(["sweep", str(grid), "--out", out]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == 5
    assert all(line.startswith("xder-run sweep: error: ") for line in errors)
    assert sweep_module.SWEEP_JSON == "sweep.json"


def test_gpus_per_trial_is_the_old_spelling_of_gpus_per_run(tmp_path: Path, capsys) -> None:
    """One word for a run's GPUs on sweep and experiment; sweep's old flag still works, saying so."""
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    for flag in ("--gpus-per-run", "--gpus-per-trial"):
        assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), flag, "-1"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[-1] == "xder-run sweep: error: --gpus-per-run must be >= 0, got -1.0"
        deprecated = [line for line in err if line.startswith("warning: ")]
        assert deprecated == (
            []
            if flag == "--gpus-per-run"
            else ["warning: --gpus-per-trial is deprecated and goes in the next release: use --gpus-per-run "
                  "(the same setting)"]
        )  # fmt: skip


@pytest.mark.parametrize(
    ("folder", "benchmark", "buffer_size", "methods"),
    [
        ("seq-cifar100-laptop", "seq-cifar100", 500, ["der", "derpp", "er", "er_ace", "icarl", "xder"]),
        ("seq-cifar10-laptop", "seq-cifar10", 200, ["derpp", "er", "xder"]),
    ],
)
def test_the_shipped_selection_grids_give_every_method_the_same_budget(
    folder: str, benchmark: str, buffer_size: int, methods: list[str]
) -> None:
    """examples/selection/<folder>: one grid per method, each 4 points x 2 seeds on the
    validation split, planned (every configuration valid) as the sweep would run it."""
    from xder_cli.runs.sweep import load_spec, plan_trials

    grids = sorted((Path(__file__).resolve().parents[2] / "examples" / "selection" / folder).glob("*.toml"))
    assert [g.stem for g in grids] == methods
    for grid in grids:
        spec = load_spec(grid)
        trials = plan_trials(spec)
        assert (spec.method, spec.benchmark, spec.buffer_size) == (grid.stem, benchmark, buffer_size)
        assert (spec.protocol, spec.validation, spec.seeds) == ("laptop", 0.1, (0, 1)), grid.stem
        assert len(trials) == 8, grid.stem
        assert len({json.dumps(t.point, sort_keys=True) for t in trials}) == 4, grid.stem
