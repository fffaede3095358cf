"""``head_bias``: after each task, which head wins the Class-IL mistakes on the past tasks (from
the head counts every run records after each task), with its stacked bars (``head_bias.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from xder_cli.runs.analyses._common import head_label, run_name, task_events
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun
from xder_eval.analyses import head_bias_fractions
from xder_eval.plots import legend_outside, new_figure, save_figure

__all__ = ["HeadBiasResult", "HeadBiasTask", "analyse_head_bias", "plot_head_bias"]


class HeadBiasTask(TypedDict):
    """After task ``task`` (from 0): the mistakes on the past tasks and each head's share of them."""

    task: int
    mistakes: int
    fraction_by_head: list[float]


class HeadBiasResult(TypedDict):
    """``head_bias`` of ``analysis.json``: every task after the first, and the last one's figures."""

    per_task: list[HeadBiasTask]
    newest_head_share: float
    mistakes: int
    plot: str


def summary(value: HeadBiasResult) -> str:
    share, mistakes = value["newest_head_share"], value.get("mistakes")
    if mistakes is None:  # an analysis.json written before the count was kept
        return f"after the last task, {100 * share:.1f}% of the mistakes on past tasks go to the newest head"
    return (
        f"after the last task, {100 * share:.1f}% of the {mistakes} mistakes on past tasks "
        f"({round(share * mistakes)}) go to the newest head"
    )


@register_analysis("head_bias", summary=summary)
def analyse_head_bias(run: TrainedRun, out: Path, options: AnalysisOptions) -> HeadBiasResult:
    per_task: list[HeadBiasTask] = []
    for event in task_events(run, "task"):
        counts = np.asarray(event.get("head_counts") or [], dtype=np.int64)
        t = event["task"]
        if t == 0 or counts.size == 0:
            continue
        past = counts[:t].sum(axis=0, keepdims=True)  # mistakes on every task before t
        per_task.append(
            {"task": t, "mistakes": int(past.sum()), "fraction_by_head": head_bias_fractions(past)[0]}
        )
    if not per_task:
        raise AnalysisSkipped("no task after the first was evaluated")
    plot = plot_head_bias(per_task, out / "head_bias.png", run.bench.classes_per_task, run_name(run))
    last = per_task[-1]
    return {
        "per_task": per_task,
        "newest_head_share": last["fraction_by_head"][last["task"]],
        "mistakes": last["mistakes"],
        "plot": plot.name,
    }


def plot_head_bias(
    per_task: Sequence[HeadBiasTask], path: Path, classes_per_task: Sequence[int], run: str
) -> Path:
    """Stacked bars: after each task (from 1), the share of the mistakes on the past tasks that
    each head (from 1, with its classes) wins."""
    n_heads = max(len(p["fraction_by_head"]) for p in per_task)
    fig = new_figure(7.5 if n_heads <= 16 else 9, 4.2)
    ax = fig.add_subplot()
    bottoms = np.zeros(len(per_task))
    labels = [str(p["task"] + 1) for p in per_task]
    colours = head_colours(n_heads)
    for head in range(n_heads):
        share = np.array([
            100 * p["fraction_by_head"][head] if head < len(p["fraction_by_head"]) else 0.0 for p in per_task
        ])  # fmt: skip
        share = np.nan_to_num(share)
        ax.bar(labels, share, bottom=bottoms, color=colours[head], label=head_label(head, classes_per_task))
        bottoms += share
    for x, p in enumerate(per_task):  # the count each bar's shares are of
        ax.text(x, 101, f"n={p['mistakes']}", ha="center", va="bottom", fontsize="x-small")
    ax.set_xlabel("after training task (n: the mistakes on past tasks)")
    ax.set_ylabel("share of the mistakes on past tasks (%)")
    ax.set_ylim(0, 108)
    ax.set_title("Which head wins the Class-IL mistakes on past tasks")
    legend_outside(ax, title="predicted head", title_fontsize="small")
    return save_figure(fig, path, run=run)


def head_colours(n: int) -> list[Any]:
    """One colour per head: tab10 or tab20 while they suffice (no colour repeats), else viridis."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(n - 1, 1)) for i in range(n)]
