"""``class-order`` (X-DER paper App. A, forward vs backward order): every method in natural and
reversed class order; FAA and FF per method x order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xder_cli.runs.defaults import CLASS_ORDER_METHODS as DEFAULT_METHODS
from xder_cli.runs.experiments.common import (
    OWNED_BY_ALL,
    Common,
    ExperimentOptions,
    PlannedExperiment,
    Summary,
    cell,
    check_owned,
    describe_faa,
    faa_metrics,
    fmt_stat,
    not_finished,
    or_nan,
    overrides_label,
    percent_bars_axis,
    run_config,
    run_records,
    with_overrides,
)
from xder_cli.runs.records import Outcome
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import Notify, ignore
from xder_data import DEFAULT_PROTOCOL
from xder_eval.plots import legend_outside, new_figure, save_figure

__all__ = [
    "DEFAULT_METHODS",
    "ORDERS",
    "ClassOrder",
    "class_order_markdown",
    "plan_class_order",
    "plot_class_order",
    "summarize_class_order",
]

ORDERS = ("natural", "reversed")
PLOT = "class_order.png"


def plan_class_order(
    benchmark: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    sets: Mapping[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
) -> list[PlannedRun]:
    """Every (method, natural | reversed, seed), configured and validated."""
    return [
        PlannedRun(
            f"{method}-{order}-s{seed}",
            seed,
            run_config(method, benchmark, seed, {**sets, "run.class_order": order}, protocol),
            {"method": method, "order": order},
        )
        for method in methods
        for order in ORDERS
        for seed in seeds
    ]


def summarize_class_order(
    runs: Sequence[PlannedRun], outcomes: dict[str, Outcome], root: Path, common: Common
) -> Summary:
    """experiment.json of ``class-order``: per method and order, FAA and FF (mean, std over the
    finished seeds), the FAA difference reversed minus natural, and every run."""
    records = run_records(runs, outcomes, root, faa_metrics)
    methods = list(dict.fromkeys(r["method"] for r in records))
    rows = []
    for method in methods:
        cells = {
            order: cell(
                [r for r in records if r["method"] == method and r["order"] == order],
                {"faa": "faa", "ff": "ff"},
            )
            for order in ORDERS
        }
        natural, reverse = cells["natural"]["faa_mean"], cells["reversed"]["faa_mean"]
        difference = None if natural is None or reverse is None else reverse - natural
        rows.append({"method": method, "cells": cells, "faa_reversed_minus_natural": difference})
    return {
        **common,
        "methods": methods,
        "orders": list(ORDERS),
        "metric": "FAA and FF (%, Class-IL, test)",
        "rows": rows,
        "runs": records,
    }


def class_order_markdown(summary: Summary) -> str:
    """The table of ``class-order``: one row per method, one column per order."""
    lines = [
        f"# Class order: forward vs backward on {summary['benchmark']} (X-DER paper App. A)",
        "",
        "FAA (FF) in %, Class-IL on the test split, mean ± std over seeds "
        f"{', '.join(map(str, summary['seeds']))}; natural: the benchmark's class order (forward), "
        "reversed: the backward order; Δ: reversed minus natural FAA.",
        "",
        "| method | natural | reversed | Δ FAA |",
        "|---|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        cells = [
            f"{fmt_stat(c['faa_mean'], c['faa_std'])} ({fmt_stat(c['ff_mean'], c['ff_std'])})"
            if c["seeds_finished"]
            else "-"
            for c in (row["cells"][order] for order in ORDERS)
        ]
        difference = row["faa_reversed_minus_natural"]
        delta = "-" if difference is None else f"{difference:+.2f}"
        lines.append(f"| {row['method']} | {' | '.join(cells)} | {delta} |")
    return "\n".join(with_overrides(lines, summary) + not_finished(summary["runs"])) + "\n"


def plot_class_order(summary: Summary, path: Path) -> None:
    """Grouped bars of FAA (± std) per method, one bar per class order."""
    rows = summary["rows"]
    fig = new_figure(max(5.0, 1.8 + 1.4 * len(rows)), 4)
    ax = fig.add_subplot()
    width = 0.38
    for i, order in enumerate(ORDERS):
        cells = [row["cells"][order] for row in rows]
        ax.bar(
            [p + (i - 0.5) * width for p in range(len(rows))],
            [or_nan(c["faa_mean"]) for c in cells],
            width,
            yerr=[or_nan(c["faa_std"]) for c in cells],
            capsize=3,
            label=order,
        )
    ax.set_xticks(range(len(rows)), [row["method"] for row in rows])
    ax.set_xlabel("method")
    ax.set_ylabel("FAA (%)")
    percent_bars_axis(ax, [row["cells"][order] for row in rows for order in ORDERS], "faa")
    legend_outside(ax, title="class order")
    ax.set_title(f"{summary['benchmark']}: forward vs backward class order", fontsize="medium")
    save_figure(fig, path, run=overrides_label(summary))


class ClassOrder:
    """``class-order`` (an :class:`~xder_cli.runs.experiments.common.Experiment`): every method
    (``options.methods``, default :data:`DEFAULT_METHODS`) x order x seed."""

    name = "class-order"
    options = frozenset({"methods"})

    def plan(self, options: ExperimentOptions, common: Common, notify: Notify = ignore) -> PlannedExperiment:
        """Plan every run (see :class:`~xder_cli.runs.experiments.common.Experiment`)."""
        sets = options.run_sets()
        check_owned(sets, OWNED_BY_ALL | {"run.class_order": "the experiment sets it: natural and reversed"})
        methods = options.methods if options.methods is not None else DEFAULT_METHODS
        runs = plan_class_order(options.benchmark, methods, options.seeds, sets, options.protocol)

        return PlannedExperiment(
            runs,
            lambda outcomes, root: summarize_class_order(runs, outcomes, root, common),
            class_order_markdown,
            plot_class_order,
            describe_faa,
            plot_file=PLOT,
        )
