"""The plots of :mod:`xder_cli.runs.analyses` (``xder_eval.plots``' figure helper). Tasks and heads
count from 1, as the terminal counts tasks ("task 1/5") and the accuracy matrices do; classes are
their labels, from 0. Each plot names its run (the run directory's name) in a suptitle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xder_eval.plots import legend_outside, new_figure, save_figure

__all__ = ["MAX_LOGIT_CLASSES", "plot_buffer_logits", "plot_grad_norms", "plot_head_bias", "plot_series"]


def class_ranges(classes_per_task: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` label of each task's classes."""
    ends = np.cumsum(classes_per_task).tolist()
    return [(end - size, end - 1) for size, end in zip(classes_per_task, ends, strict=True)]


def head_label(task: int, classes_per_task: Sequence[int]) -> str:
    """``head 2 (classes 2-3)``: task ``task`` (from 0) named from 1, with its class labels."""
    if task >= len(classes_per_task):
        return f"head {task + 1}"
    first, last = class_ranges(classes_per_task)[task]
    classes = f"class {first}" if first == last else f"classes {first}-{last}"
    return f"head {task + 1} ({classes})"


def plot_series(
    series: Mapping[str, Sequence[float | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    x: Sequence[float] | None = None,
    integer_x: bool = False,
) -> Any:
    """A line per series (a legend only with two or more); returns the axes, saved by the
    caller with :func:`save_figure` after any addition."""
    from matplotlib.ticker import MaxNLocator

    fig = new_figure(6.5, 4)
    ax = fig.add_subplot()
    for index, (name, values) in enumerate(series.items()):
        xs = list(x) if x is not None else list(range(1, len(values) + 1))
        ys = [np.nan if v is None else v for v in values]
        ax.plot(xs, ys, marker="os^D"[index % 4], markersize=4, label=name)
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        legend_outside(ax)
    return ax


def plot_grad_norms(points: list[dict[str, Any]], path: Path, run: str) -> Path:
    """Stream and buffer gradient norms per epoch, epochs counted over all tasks from 1; the
    tasks (from 1) on the top axis, a dotted line where each one starts."""
    series = {f"{name} loss": [p.get(name) for p in points] for name in ("stream", "buffer")}
    ax = plot_series(
        series,
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


def plot_head_bias(
    per_task: list[dict[str, Any]], path: Path, classes_per_task: Sequence[int], run: str
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


MAX_LOGIT_CLASSES = 200
"""The buffer-logit matrix shows at most this many classes (said in its title when cut)."""


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
