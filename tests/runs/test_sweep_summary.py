"""A sweep's summary (xder_cli.runs.sweep.select, sweep_markdown) from outcomes worked out by hand:
the mean and sample standard deviation over seeds, and a point with one seed shown without a
standard deviation (never as ``± 0.00``)."""

from __future__ import annotations

import statistics

from xder_cli.runs.sweep import SweepSpec, Trial, select, sweep_markdown


def _trials(seeds: tuple[int, ...]) -> tuple[SweepSpec, list[Trial]]:
    spec = SweepSpec(method="er", benchmark="seq-digits", seeds=seeds, grid={"train.lr": [0.1, 0.2]})
    trials = [
        Trial(f"p00{i}-abc-s{seed}", {"train.lr": lr}, seed, {})
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
