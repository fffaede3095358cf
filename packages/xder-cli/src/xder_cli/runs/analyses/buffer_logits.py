"""``buffer_logits``: the mean logits the buffer stores per class, at the run's end (from its
checkpoint) and after each task (recorded with ``run.record_analyses``), with the heat map of
the final ones (``buffer_logits.png``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np

from xder_cli.runs.analyses._common import class_ranges, run_name, task_events
from xder_cli.runs.analyses.registry import AnalysisOptions, TaskEndRecord, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun
from xder_eval.analyses import class_mean_logits
from xder_eval.plots import new_figure, save_figure
from xder_methods import FitState

__all__ = ["MAX_LOGIT_CLASSES", "BufferLogitsResult", "analyse_buffer_logits", "plot_buffer_logits"]

MAX_LOGIT_CLASSES = 200
"""The buffer-logit matrix shows at most this many classes (said in its title when cut)."""


class BufferLogitsResult(TypedDict):
    """``buffer_logits`` of ``analysis.json``: the mean stored logit vector per class (NaN rows:
    classes with no stored item), finally and after each task (by task, from 0)."""

    final: list[list[float]]
    after_task: dict[str, list[list[float]]]
    plot: str


def record(loop: FitState) -> Mapping[str, object]:
    """``buffer_class_logits``: the mean stored logit vector per class (Fig. "derpplogits")."""
    buffer = loop.method.replay_memory()
    if buffer is None or buffer.logits is None or not len(buffer):
        return {}
    size = len(buffer)
    return {
        "buffer_class_logits": class_mean_logits(
            buffer.logits[:size], buffer.labels[:size], loop.setting.num_classes
        )
    }


def summary(value: BufferLogitsResult) -> str:
    return f"mean stored logits of {sum(1 for row in value['final'] if np.isfinite(row).all())} classes"


@register_analysis(
    "buffer_logits",
    summary=summary,
    recorded_keys=("buffer_class_logits",),
    at_task_end=TaskEndRecord(record),
)
def analyse_buffer_logits(run: TrainedRun, out: Path, options: AnalysisOptions) -> BufferLogitsResult:
    buffer = run.method.replay_memory()
    if buffer is None or buffer.logits is None or not len(buffer):
        raise AnalysisSkipped("the method stores no logits")
    size = len(buffer)
    final = class_mean_logits(buffer.logits[:size], buffer.labels[:size], run.bench.num_classes)
    over_time = {
        str(e["task"]): e["buffer_class_logits"]
        for e in task_events(run, "analysis")
        if "buffer_class_logits" in e
    }
    plot = plot_buffer_logits(final, out / "buffer_logits.png", run.bench.classes_per_task, run_name(run))
    return {"final": final, "after_task": over_time, "plot": plot.name}


def plot_buffer_logits(
    matrix: list[list[float]], path: Path, classes_per_task: Sequence[int], run: str
) -> Path:
    """Heat map of the mean stored logit per (class of the stored item, logit); classes are
    labels (from 0), the tasks' class blocks are outlined; a class with no stored item is grey."""
    from matplotlib.ticker import MaxNLocator

    values = np.asarray(matrix, dtype=np.float64)
    shown = values[:MAX_LOGIT_CLASSES, :MAX_LOGIT_CLASSES]
    fig = new_figure(6.5, 5.2)
    ax = fig.add_subplot()
    ax.set_facecolor("0.85")  # rows of classes without stored items (NaN)
    limit = np.nanmax(np.abs(shown)) if np.isfinite(shown).any() else 1.0
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="coolwarm", vmin=-limit, vmax=limit)
    n = shown.shape[0]
    for first, _ in class_ranges(classes_per_task)[1:]:
        if first < n:
            ax.axhline(first - 0.5, color="0.3", linewidth=0.6)
            ax.axvline(first - 0.5, color="0.3", linewidth=0.6)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    ax.set_xlim(-0.5, shown.shape[1] - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("logit of class")
    ax.set_ylabel("class of the stored item")
    title = "Mean logits stored in the buffer (lines: task boundaries)"
    if values.shape[0] > n or values.shape[1] > shown.shape[1]:
        title += f", first {MAX_LOGIT_CLASSES} classes"
    if np.isnan(shown).all(axis=1).any():
        title += "; grey: no item stored"
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8, label="mean stored logit")
    return save_figure(fig, path, run=run)
