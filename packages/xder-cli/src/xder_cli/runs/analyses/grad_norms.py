"""``grad_norms``: the gradient norms of the stream and the replay loss terms at sampled steps,
per epoch (recorded by the training loop in each ``epoch`` event with ``train.record_every``,
which a run trained with ``run.record_analyses`` turns on), with their plot (``grad_norms.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import numpy as np

from xder_cli.runs.analyses._common import plot_series, run_name, task_events
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun
from xder_eval.plots import save_figure

__all__ = ["GradNormPoint", "GradNormsResult", "analyse_grad_norms", "plot_grad_norms"]


class GradNormPoint(TypedDict):
    """One epoch's mean gradient norms (L2) of the loss terms recorded in it."""

    task: int
    epoch: int
    stream: NotRequired[float]
    buffer: NotRequired[float]


class GradNormsResult(TypedDict):
    """``grad_norms`` of ``analysis.json``: every epoch's norms and each term's mean over them."""

    epochs: list[GradNormPoint]
    mean: dict[str, float]
    plot: str


def summary(value: GradNormsResult) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in value["mean"].items()) + " (mean gradient norm)"


@register_analysis("grad_norms", summary=summary, needs_records=True, recorded_keys=("grad_norms",))
def analyse_grad_norms(run: TrainedRun, out: Path, options: AnalysisOptions) -> GradNormsResult:
    points: list[GradNormPoint] = []
    for event in task_events(run, "epoch"):
        norms = event.get("grad_norms") or {}
        if not norms:
            continue
        points.append(cast(GradNormPoint, {"task": event["task"], "epoch": event["epoch"], **norms}))
    if not points:
        raise AnalysisSkipped(
            "no gradient norm was recorded (train.record_every = 0, or a method without replay groups)"
        )
    series = _series(points)
    plot = plot_grad_norms(points, out / "grad_norms.png", run_name(run))
    means = {
        k: float(np.mean([v for v in vals if v is not None]))
        for k, vals in series.items()
        if any(v is not None for v in vals)
    }
    return {"epochs": points, "mean": means, "plot": plot.name}


def _series(points: Sequence[GradNormPoint]) -> dict[str, list[float | None]]:
    """Each term's norm per epoch (None where the epoch has none: the first task has no buffer)."""
    return {"stream": [p.get("stream") for p in points], "buffer": [p.get("buffer") for p in points]}


def plot_grad_norms(points: Sequence[GradNormPoint], path: Path, run: str) -> Path:
    """Stream and buffer gradient norms per epoch, epochs counted over all tasks from 1; the
    tasks (from 1) on the top axis, a dotted line where each one starts."""
    ax = plot_series(
        {f"{name} loss": values for name, values in _series(points).items()},
        xlabel="epoch (counted over all tasks)",
        ylabel="gradient norm (L2, mean over the epoch)",
        title="Gradient norms of the stream and the buffer loss terms",
        integer_x=True,
    )
    tasks = [p["task"] for p in points]
    starts = [i + 1 for i, t in enumerate(tasks) if i == 0 or t != tasks[i - 1]]
    ends = [*(s - 1 for s in starts[1:]), len(tasks)]
    if len(starts) > 1:
        for start in starts[1:]:
            ax.axvline(start - 0.5, color="0.6", linestyle=":", linewidth=1)
        top = ax.secondary_xaxis("top")
        step = max(1, len(starts) // 20)
        chosen = list(range(0, len(starts), step))
        top.set_xticks(
            [(starts[i] + ends[i]) / 2 for i in chosen], [str(tasks[starts[i] - 1] + 1) for i in chosen]
        )
        top.set_xlabel("task", fontsize="small")
        top.tick_params(labelsize="small")
    return save_figure(ax.figure, path, run=run)
