"""``flatness`` (X-DER paper Sec. 6.2, the "stable regime" study): for each pair of adjacent tasks
(k, k+1), a two-task sequence (``train.tasks = 2``, ``run.class_order`` a permutation putting task
k's classes first and task k+1's second, :func:`pair_class_order`) trained with ``er_flat`` for
each regulariser: ``none`` (the plastic regime, the baseline), ``lfr``, ``llr``. The figure of
merit is the final Class-IL test accuracy on the FIRST task of the pair (the paper's radar plot,
one axis per pair), with that task's forgetting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.experiments.common import (
    OWNED_BY_ALL,
    Common,
    ExperimentOptions,
    PlannedExperiment,
    Summary,
    cell,
    check_owned,
    fmt,
    fmt_stat,
    mean_std,
    not_finished,
    or_nan,
    overrides_label,
    percent_bars_axis,
    run_config,
    run_records,
    with_overrides,
)
from xder_cli.runs.records import Outcome, Results
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import Notify, ignore
from xder_data import DEFAULT_PROTOCOL, load_benchmark
from xder_eval.plots import legend_outside, new_figure, save_figure

__all__ = [
    "FLATNESS_METHOD",
    "REGULARISERS",
    "Flatness",
    "flatness_markdown",
    "flatness_metrics",
    "pair_class_order",
    "plan_flatness",
    "plot_flatness",
    "summarize_flatness",
]

REGULARISERS = ("none", "lfr", "llr")
REGULARISER_LABELS = {"none": "none (plastic)", "lfr": "LFR", "llr": "LLR"}
FLATNESS_METHOD = "er_flat"
PLOT = "flatness.png"


def pair_class_order(classes_per_task: Sequence[int], pair: int) -> list[int]:
    """The class order of the two-task sequence of tasks ``(pair, pair + 1)``: task ``pair``'s
    classes (natural numbering), then task ``pair + 1``'s, then every other class in order.

    Raises:
        SettingError: ``pair`` is not in ``0..T-2``, or the two tasks' sizes differ from those of
            the benchmark's first two tasks (the slots they take in the sequence).
    """
    n_tasks = len(classes_per_task)
    if n_tasks < 2:
        raise SettingError(f"the benchmark has {n_tasks} task: the flatness study needs two or more")
    if not 0 <= pair <= n_tasks - 2:
        raise SettingError(
            f"{option('pairs')}: {pair} is not a pair of adjacent tasks; pair k is tasks (k, k+1) "
            f"with k in 0..{n_tasks - 2}"
        )
    sizes = (classes_per_task[pair], classes_per_task[pair + 1])
    if sizes != (classes_per_task[0], classes_per_task[1]):
        raise SettingError(
            f"{option('pairs')}: tasks {pair} and {pair + 1} hold {sizes[0]} and {sizes[1]} classes, but "
            f"the two tasks of a sequence hold {classes_per_task[0]} and {classes_per_task[1]}: "
            "pick other pairs"
        )
    start = sum(classes_per_task[:pair])
    first_two = list(range(start, start + sizes[0] + sizes[1]))
    rest = [c for c in range(sum(classes_per_task)) if c not in first_two]
    return first_two + rest


def plan_flatness(
    benchmark: str,
    classes_per_task: Sequence[int],
    pairs: Sequence[int],
    seeds: Sequence[int],
    sets: Mapping[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
) -> list[PlannedRun]:
    """Every (pair, regulariser, seed) of the stable-regime study, configured and validated."""
    runs = []
    for pair in pairs:
        order = pair_class_order(classes_per_task, pair)
        for regulariser in REGULARISERS:
            study = {"run.class_order": order, "train.tasks": 2, "method.regulariser": regulariser}
            for seed in seeds:
                runs.append(
                    PlannedRun(
                        f"pair{pair}-{regulariser}-s{seed}",
                        seed,
                        run_config(FLATNESS_METHOD, benchmark, seed, {**sets, **study}, protocol),
                        {"pair": pair, "regulariser": regulariser},
                    )
                )
    return runs


def flatness_metrics(results: Results | None) -> dict[str, float | None]:
    """From a two-task run's results.json: the final Class-IL accuracy (%) on its first task, and
    that task's forgetting (its best accuracy before the last task minus the final one)."""
    matrix = (results["accuracy_matrix"] if results is not None else None) or []
    if len(matrix) < 2 or not matrix[-1] or matrix[-1][0] is None:
        return {"first_task_accuracy": None, "first_task_forgetting": None}
    final = float(matrix[-1][0])
    before = [float(row[0]) for row in matrix[:-1] if row and row[0] is not None]
    return {
        "first_task_accuracy": final,
        "first_task_forgetting": max(before) - final if before else None,
    }


def summarize_flatness(
    runs: Sequence[PlannedRun], outcomes: dict[str, Outcome], root: Path, common: Common
) -> Summary:
    """experiment.json of ``flatness``: per pair and regulariser, the first task's final accuracy
    and forgetting (mean, std over the finished seeds), their means over pairs, and every run."""
    records = run_records(runs, outcomes, root, flatness_metrics)
    pairs = list(dict.fromkeys(r["pair"] for r in records))
    orders = {r.tags["pair"]: r.config["run"]["class_order"] for r in runs}
    keys = {"first_task_accuracy": "first_task_accuracy", "first_task_forgetting": "forgetting"}
    rows = []
    for pair in pairs:
        cells = {
            reg: cell([r for r in records if r["pair"] == pair and r["regulariser"] == reg], keys)
            for reg in REGULARISERS
        }
        rows.append({"pair": pair, "tasks": [pair, pair + 1], "class_order": orders[pair], "cells": cells})
    mean_over_pairs = {}
    for reg in REGULARISERS:
        accuracy = [row["cells"][reg]["first_task_accuracy_mean"] for row in rows]
        forgetting = [row["cells"][reg]["forgetting_mean"] for row in rows]
        mean_over_pairs[reg] = {
            "first_task_accuracy": mean_std([a for a in accuracy if a is not None])[0],
            "forgetting": mean_std([f for f in forgetting if f is not None])[0],
            "pairs": sum(a is not None for a in accuracy),
        }
    return {
        **common,
        "method": FLATNESS_METHOD,
        "pairs": pairs,
        "regularisers": list(REGULARISERS),
        "metric": "final Class-IL test accuracy (%) on the first task of each two-task sequence",
        "rows": rows,
        "mean_over_pairs": mean_over_pairs,
        "runs": records,
    }


def flatness_markdown(summary: Summary) -> str:
    """The table of ``flatness``: one row per pair, one column per regulariser."""
    lines = [
        f"# Flatness: the stable-regime study on {summary['benchmark']} (X-DER paper Sec. 6.2)",
        "",
        "Two-task sequences of adjacent tasks (k, k+1), trained with er_flat: the first task with "
        "cross-entropy plus the regulariser (none: the plastic regime), the second with ER. Each cell: "
        "the final Class-IL test accuracy (%) on the FIRST task of the pair, mean ± std over seeds "
        f"{', '.join(map(str, summary['seeds']))}; in brackets, its forgetting (its accuracy after its "
        "own task minus the final one).",
        "",
        "| pair | " + " | ".join(REGULARISER_LABELS[r] for r in REGULARISERS) + " |",
        "|---|" + "---:|" * len(REGULARISERS),
    ]
    for row in summary["rows"]:
        cells = []
        for reg in REGULARISERS:
            c = row["cells"][reg]
            cells.append(
                f"{fmt_stat(c['first_task_accuracy_mean'], c['first_task_accuracy_std'])} "
                f"({fmt_stat(c['forgetting_mean'], c['forgetting_std'])})"
                if c["seeds_finished"]
                else "-"
            )
        lines.append(f"| {row['pair']} (tasks {row['pair']}→{row['pair'] + 1}) | " + " | ".join(cells) + " |")
    means = summary["mean_over_pairs"]
    lines.append(
        "| mean over pairs | "
        + " | ".join(
            f"{fmt(means[r]['first_task_accuracy'])} ({fmt(means[r]['forgetting'])})" for r in REGULARISERS
        )
        + " |"
    )
    return "\n".join(with_overrides(lines, summary) + not_finished(summary["runs"])) + "\n"


def plot_flatness(summary: Summary, path: Path) -> None:
    """First-task accuracy per pair, one series per regulariser (plain SGD greyed out, as in the
    paper): a radar plot, the paper's, with three pairs or more; grouped bars with fewer."""
    rows = summary["rows"]
    labels = [f"{row['pair']}→{row['pair'] + 1}" for row in rows]
    colours = {"none": "0.55", "lfr": "tab:blue", "llr": "tab:orange"}
    radar = len(rows) >= 3
    if radar:
        fig = new_figure(6, 6.3)
        ax = fig.add_subplot(projection="polar")
        angles = [2 * math.pi * i / len(rows) for i in range(len(rows))]
        for reg in REGULARISERS:
            values = [or_nan(row["cells"][reg]["first_task_accuracy_mean"]) for row in rows]
            ax.plot([*angles, angles[0]], [*values, values[0]], marker="o", color=colours[reg], label=reg)
            ax.fill([*angles, angles[0]], [*values, values[0]], color=colours[reg], alpha=0.08)
        ax.set_xticks(angles, [f"tasks {label}" for label in labels])
        ax.set_ylim(0, 100)
        ax.set_rlabel_position(90 + 180 / len(rows))  # the radial scale between two pairs' spokes
        ax.legend(
            title="regulariser", loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize="small"
        )
    else:
        fig = new_figure(max(5.5, 1.8 + 1.6 * len(rows)), 4)
        ax = fig.add_subplot()
        width = 0.8 / len(REGULARISERS)
        for i, reg in enumerate(REGULARISERS):
            cells = [row["cells"][reg] for row in rows]
            ax.bar(
                [p + (i - 1) * width for p in range(len(rows))],
                [or_nan(c["first_task_accuracy_mean"]) for c in cells],
                width,
                yerr=[or_nan(c["first_task_accuracy_std"]) for c in cells],
                color=colours[reg],
                capsize=3,
                label=reg,
            )
        ax.set_xticks(range(len(rows)), [f"tasks {label}" for label in labels])
        ax.set_xlabel("pair of adjacent tasks (first → second)")
        ax.set_ylabel("first-task accuracy (%)")
        percent_bars_axis(
            ax, [row["cells"][reg] for row in rows for reg in REGULARISERS], "first_task_accuracy"
        )
        legend_outside(ax, title="regulariser")
    title = f"{summary['benchmark']}: final accuracy (%) on each pair's first task"
    ax.set_title(title, fontsize="medium", pad=32 if radar else None)  # clear of the top spoke's label
    save_figure(fig, path, run=overrides_label(summary))


class Flatness:
    """``flatness`` (an :class:`~xder_cli.runs.experiments.common.Experiment`): every pair of
    adjacent tasks (``options.pairs``, default all T-1) x regulariser x seed."""

    name = "flatness"
    options = frozenset({"pairs"})

    def plan(self, options: ExperimentOptions, common: Common, notify: Notify = ignore) -> PlannedExperiment:
        """Plan every run (see :class:`~xder_cli.runs.experiments.common.Experiment`); the
        benchmark is loaded to learn its tasks."""
        sets, seeds = options.run_sets(), options.seeds
        owned = {
            "run.class_order": "the experiment sets it: each pair's order",
            "train.tasks": "the experiment sets it: 2, the pair",
            "method.regulariser": "the experiment sets it: none, lfr and llr",
        }
        check_owned(sets, OWNED_BY_ALL | owned)
        base = run_config(FLATNESS_METHOD, options.benchmark, seeds[0], sets, options.protocol)
        classes_per_task = load_benchmark(
            options.benchmark, base["run"]["data_root"], **base.get("benchmark", {})
        ).classes_per_task
        n_tasks = len(classes_per_task)
        if n_tasks < 2:
            raise SettingError(
                f"{options.benchmark} has {n_tasks} task: the flatness study needs two or more"
            )
        pairs = options.pairs if options.pairs is not None else tuple(range(n_tasks - 1))
        runs = plan_flatness(options.benchmark, classes_per_task, pairs, seeds, sets, options.protocol)

        def describe(results: Results | None) -> str:
            m = flatness_metrics(results)
            return (
                f"first-task accuracy {fmt(m['first_task_accuracy'])}, "
                f"forgetting {fmt(m['first_task_forgetting'])}"
            )

        return PlannedExperiment(
            runs,
            lambda outcomes, root: summarize_flatness(runs, outcomes, root, common),
            flatness_markdown,
            plot_flatness,
            describe,
            plot_file=PLOT,
        )
