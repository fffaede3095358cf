"""xder_eval.analysis_report: the figures read from an analysis, the statistics per group of runs,
the published rows matched across protocols, and the paper's orderings set against ours, each
against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from xder_eval import (
    PublishedAnalysis,
    RunRecord,
    analyses_markdown,
    analysis_rows,
    analysis_values,
    base_benchmark,
    build_report,
    newest_head_curve,
    paper_orders,
)


def _analyses(ss_err: float, ss_nll: float, ece: float, shares: list[float]) -> dict:
    """An ``analyses`` object as xder-run analyze writes it; ``shares[i]``: the newest head's share
    of the mistakes on past tasks after task i + 1."""
    per_task = []
    for i, share in enumerate(shares):
        task = i + 1
        fractions = [(1 - share) / task] * task + [share] + [0.0] * (len(shares) - task)
        per_task.append({"task": task, "mistakes": 10, "fraction_by_head": fractions})
    return {
        "ece": {"ece": ece, "n_bins": 15},
        "ss_err": ss_err,
        "ss_nll": ss_nll,
        "head_bias": {"per_task": per_task, "newest_head_share": shares[-1]},
    }


def test_the_figures_of_one_analysis() -> None:
    analyses = _analyses(0.8, 2.5, 0.064, [0.9, 0.25])
    assert analysis_values(analyses) == {
        "ss_err": 0.8,
        "ss_nll": 2.5,
        "ece": pytest.approx(6.4),
        "newest_head_share": pytest.approx(25.0),
    }
    # task 1's mistakes (on task 0) 90% in head 1; task 2's (on tasks 0-1) 25% in head 2
    assert newest_head_curve(analyses) == {1: pytest.approx(90.0), 2: pytest.approx(25.0)}
    # an analysis skipped, or a figure that is not a finite number, is left out
    assert analysis_values({"ss_err": math.nan, "ss_nll": True, "ece": {"ece": 0.1}}) == {"ece": 10.0}
    assert newest_head_curve({"ece": {"ece": 0.1}}) == {}
    assert base_benchmark("seq-cifar100 (laptop)") == "seq-cifar100"
    assert base_benchmark("seq-cifar100") == "seq-cifar100"


def _record(method: str, seed: int, protocol: str = "laptop", preset: str = "tuned") -> RunRecord:
    config = {
        "run": {
            "method": method,
            "benchmark": "seq-cifar100",
            "seed": seed,
            "protocol": protocol,
            "preset": preset,
        },
        "method": {"buffer_size": 500},
    }
    results = {
        "method": method,
        "benchmark": "seq-cifar100",
        "seed": seed,
        "buffer_size": 500,
        "complete": True,
    }
    results |= {"accuracy_matrix": [[80.0], [30.0, 40.0]], "task_il_accuracy_matrix": [[80.0], [60.0, 70.0]]}
    return RunRecord(f"runs/{method}-{preset}-s{seed}", config, results)


PUBLISHED = [
    PublishedAnalysis("seq-cifar100", 500, "er", "er", {"ss_err": 0.71, "ss_nll": 4.00}),
    PublishedAnalysis("seq-cifar100", 500, "xder", "xder", {"ss_err": 0.57, "ss_nll": 1.83}),
    PublishedAnalysis("seq-cifar100", 500, "xder-no-memory-update", "xder", {"ss_err": 0.64}),
    PublishedAnalysis("seq-cifar100", 2000, "derpp", "derpp", {"ss_err": 0.64}),
]


def test_rows_statistics_and_the_papers_orderings() -> None:
    records = [_record(m, s) for m in ("er", "derpp", "xder") for s in (0, 1, 2)]
    records.append(_record("xder", 0, preset="tuned:xder-no-memory-update"))
    report = build_report(records)
    (column,) = report.columns
    analyses = {
        # ER: SS-ERR 0.84, 0.86 (seed 2 not analysed): mean 0.85, std sqrt(0.0002) = 0.01414
        "runs/er-tuned-s0": _analyses(0.84, 3.0, 0.30, [0.8]),
        "runs/er-tuned-s1": _analyses(0.86, 3.2, 0.40, [0.6]),
        # DER++: one seed analysed, and its SS-NLL missing: n 1, no std
        "runs/derpp-tuned-s0": {"ss_err": 0.85},
        # X-DER: three seeds
        "runs/xder-tuned-s0": _analyses(0.80, 2.0, 0.05, [0.1]),
        "runs/xder-tuned-s1": _analyses(0.82, 2.2, 0.07, [0.2]),
        "runs/xder-tuned-s2": _analyses(0.84, 2.4, 0.09, [0.3]),
        # the ablation: X-DER w/o memory update (its own published row), one seed
        "runs/xder-tuned:xder-no-memory-update-s0": _analyses(0.83, 2.1, 0.08, [0.4]),
    }
    rows = analysis_rows(report, column, analyses, PUBLISHED)
    by_entry = {r.entry: r for r in rows}
    # the report's row order (the paper's); X-DER's two presets are two rows of one method
    assert [r.entry for r in rows] == ["er", "derpp", "xder", "xder-no-memory-update"]
    er, derpp, xder = by_entry["er"], by_entry["derpp"], by_entry["xder"]
    assert (er.stats["ss_err"].mean, er.stats["ss_err"].std) == (
        pytest.approx(0.85),
        pytest.approx(0.0141421356),
    )
    assert er.stats["ece"].values == pytest.approx((30.0, 40.0))
    assert er.curve == {1: pytest.approx(70.0)}
    assert (derpp.stats["ss_err"].mean, derpp.stats["ss_err"].std, derpp.stats["ss_err"].n) == (0.85, None, 1)
    assert derpp.stats["ss_nll"].n == 0
    assert derpp.published is None  # the paper's DER++ figure is at buffer 2000 only here
    assert xder.stats["ss_nll"].mean == pytest.approx(2.2)
    assert xder.stats["ss_nll"].std == pytest.approx(0.2)
    # the laptop runs match the paper-protocol rows, the variant its own row
    assert xder.published is PUBLISHED[1]
    assert by_entry["xder-no-memory-update"].published is PUBLISHED[2]
    # the paper: X-DER 0.57 < w/o memory update 0.64 < ER 0.71; ours: X-DER 0.82, w/o mu 0.83,
    # ER 0.85: all three pairs agree. SS-NLL: X-DER 1.83 < ER 4.00, ours 2.2 < 3.1: agrees.
    orders = paper_orders(rows, "ss_err")
    pairs = {(o.lower, o.higher): o.agrees for o in orders}
    names = {r.entry: r.name for r in rows}
    assert pairs == {
        (names["xder"], names["er"]): True,
        (names["xder-no-memory-update"], names["er"]): True,
        (names["xder"], names["xder-no-memory-update"]): True,
    }
    # separated? X-DER 0.80, 0.82, 0.84 against ER 0.84, 0.86: d = -0.03, SE = sqrt(0.0004/3 +
    # 0.0002/2) = 0.01528, 2 SE 0.0306 > 0.03: not; against the ablation (one seed): undefined
    separated = {(o.lower, o.higher): o.separated for o in orders}
    assert separated[names["xder"], names["er"]] is False
    assert separated[names["xder"], names["xder-no-memory-update"]] is None
    order = next(o for o in orders if (o.lower, o.higher) == (names["xder"], names["er"]))
    assert order.verdict() == "agrees (within 2 SE)"
    (nll,) = paper_orders(rows, "ss_nll")  # the ablation's SS-NLL is not published here
    assert (nll.lower, nll.paper_lower, nll.ours_lower, nll.ours_higher, nll.agrees) == (
        names["xder"],
        1.83,
        pytest.approx(2.2),
        pytest.approx(3.1),
        True,
    )
    text = analyses_markdown(column, rows)
    assert "The paper's orderings, in ours: 4 of 4 agree in direction." in text
    assert f"| {names['derpp']} | 0.850 (n 1) | - | - | - | - | - |" in text


def test_an_order_against_the_paper_and_equal_figures() -> None:
    records = [_record("er", 0), _record("xder", 0)]
    report = build_report(records)
    analyses = {"runs/er-tuned-s0": {"ss_err": 0.80}, "runs/xder-tuned-s0": {"ss_err": 0.80}}
    rows = analysis_rows(report, report.columns[0], analyses, PUBLISHED)
    (order,) = paper_orders(rows, "ss_err")
    assert (order.lower, order.higher, order.agrees) == ("xder", "er", False)  # equal means: no
    assert (order.separated, order.verdict()) == (None, "**does not agree**")  # one seed each
    same = [PublishedAnalysis("seq-cifar100", 500, e, e, {"ss_err": 0.6}) for e in ("er", "xder")]
    assert paper_orders(analysis_rows(report, report.columns[0], analyses, same), "ss_err") == []
    assert analysis_rows(report, report.columns[0], {}, PUBLISHED) == []  # no analysed run


def test_the_newest_head_share_names_how_many_mistakes_it_is_a_share_of() -> None:
    records = [_record("er", 0), _record("er", 1)]
    report = build_report(records)
    analyses = {}
    for seed, (share, mistakes) in enumerate(((0.8, 15), (0.6, 25))):
        value = _analyses(0.8, 2.5, 0.1, [0.5, share])
        value["head_bias"]["mistakes"] = mistakes
        analyses[f"runs/er-tuned-s{seed}"] = value
    (row,) = analysis_rows(report, report.columns[0], analyses)
    assert row.mistakes == 40  # 15 + 25 over the two seeds
    assert "70.0 ± 14.1 (n 2), of 40 mistakes" in analyses_markdown(report.columns[0], [row])
    del (
        analyses["runs/er-tuned-s1"]["head_bias"]["mistakes"],
        analyses["runs/er-tuned-s0"]["head_bias"]["mistakes"],
    )
    (row,) = analysis_rows(report, report.columns[0], analyses)  # analyses from before the count
    assert row.mistakes is None
    assert "70.0 ± 14.1 (n 2) |" in analyses_markdown(report.columns[0], [row])  # no count to give
