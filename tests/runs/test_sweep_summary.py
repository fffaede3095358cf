"""A sweep's summary (xder_cli.runs.sweep.select, sweep_markdown) from outcomes worked out by hand:
the mean and sample standard deviation over seeds, a point with one seed shown without a
standard deviation (never as ``± 0.00``), selection on validation over the points every seed
finished, and retries counted."""

from __future__ import annotations

import statistics

import pytest

from xder_cli.runs import scheduler
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.sweep import SweepSpec, select, sweep_markdown


def _trials(seeds: tuple[int, ...]) -> tuple[SweepSpec, list[PlannedRun]]:
    spec = SweepSpec(method="er", benchmark="seq-digits", seeds=seeds, grid={"train.lr": [0.1, 0.2]})
    trials = [
        PlannedRun(f"p00{i}-abc-s{seed}", seed, {}, {"train.lr": lr})
        for i, lr in enumerate((0.1, 0.2))
        for seed in seeds
    ]
    return spec, trials


def _finished(val: float, test: float) -> dict:
    return {"status": "finished", "val_faa": val, "faa": test}


def test_two_seeds_give_mean_and_sample_std() -> None:
    spec, trials = _trials((0, 1))
    outcomes = {
        "p000-abc-s0": _finished(60.0, 50.0),
        "p000-abc-s1": _finished(64.0, 54.0),
        "p001-abc-s0": _finished(70.0, 40.0),
        "p001-abc-s1": _finished(66.0, 44.0),
    }
    summary = select(spec, trials, outcomes)
    first, _ = summary["points"]
    assert (first["val_faa_mean"], first["val_faa_std"]) == (62.0, statistics.stdev([60.0, 64.0]))
    assert summary["best"]["point"] == {"train.lr": 0.2}  # 68 on validation; the test FAA is not used
    assert "validation FAA 68.00 ± 2.83, test FAA 42.00 ± 2.83" in sweep_markdown(summary)


def test_one_seed_shows_no_standard_deviation() -> None:
    spec, trials = _trials((0,))
    outcomes = {"p000-abc-s0": _finished(61.25, 50.5), "p001-abc-s0": _finished(58.0, 49.0)}
    summary = select(spec, trials, outcomes)
    assert [p["val_faa_std"] for p in summary["points"]] == [None, None]
    text = sweep_markdown(summary)
    assert "±" not in text
    assert "validation FAA 61.25, test FAA 50.50" in text
    assert "| 1 | 0.1 | 61.25 | 50.50 | 1/1 |" in text


def test_retries_are_counted_in_the_summary_and_the_report() -> None:
    spec = SweepSpec(method="er", benchmark="seq-digits", seeds=(0,), grid={"train.lr": [0.1, 0.2]})
    trials = [PlannedRun(f"p{i}-s0", 0, {}, {"train.lr": lr}) for i, lr in enumerate((0.1, 0.2))]
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
        PlannedRun(f"p{i}-s{s}", s, {}, {"train.lr": lr})
        for i, lr in enumerate((0.1, 0.2, 0.3))
        for s in (0, 1)
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


def test_a_trial_with_a_checkpoint_is_unfinished_not_unrun(tmp_path) -> None:
    # An interrupted sweep's summary: one trial finished, one stopped after a checkpoint, one
    # never started.
    spec, trials = _trials((0,))
    trials.append(PlannedRun("p002-abc-s0", 0, {}, {"train.lr": 0.3}))
    (tmp_path / "trials" / "p001-abc-s0").mkdir(parents=True)
    (tmp_path / "trials" / "p001-abc-s0" / "checkpoint.pt").write_bytes(b"")
    summary = select(spec, trials, {"p000-abc-s0": _finished(61.0, 50.0)}, tmp_path)
    statuses = [t["status"] for t in summary["trials"]]
    assert statuses == [
        "finished",
        "unfinished: resumes from its checkpoint when the sweep runs again",
        "not run",
    ]
    text = sweep_markdown(summary)
    assert "- trials/p001-abc-s0: unfinished: resumes from its checkpoint when the sweep runs again" in text
    assert "- trials/p002-abc-s0: not run" in text
