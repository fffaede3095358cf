"""Plots of a run (PNG, matplotlib's object API: no pyplot, no global backend state).

matplotlib is the ``[plots]`` extra of xder-eval and is imported only when a plot is drawn.

Every figure of the toolkit (these, the reports' and xder-cli's) is made by :func:`new_figure`
and written by :func:`save_figure`, which names the run in a suptitle when asked and wraps every
title to the width it has, so that nothing is cut at the size the PNG is written.
:func:`set_percent_axis` chooses an accuracy axis from the data, :func:`legend_outside` puts a
legend where it covers no data.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xder_eval.calibration import ReliabilityBins
from xder_eval.metrics import AccuracyMatrix, _rows

__all__ = [
    "NOT_TRAINED",
    "legend_outside",
    "new_figure",
    "percent_limits",
    "plot_accuracy_curves",
    "plot_accuracy_matrix",
    "plot_reliability_diagram",
    "save_figure",
    "set_percent_axis",
]

DPI = 120
NOT_TRAINED = "not yet trained"
"""The legend label of an accuracy matrix's cells of tasks not trained yet (column > row)."""
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def new_figure(width: float, height: float) -> Any:  # matplotlib is optional: no Figure type here
    """A ``width`` x ``height`` inch figure at 120 dpi, laid out by matplotlib's constrained
    layout, on its own Agg canvas (no pyplot, no global backend state). Write it with
    :func:`save_figure`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'xder-eval[plots]'") from error
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | Path, *, run: str | None = None) -> Path:
    """Write ``fig`` (from :func:`new_figure`) as a PNG at ``path`` and return the path.

    ``run`` (a run directory's name) is put in a suptitle, above what the figure's own suptitle
    says, so that a plot copied out of its folder still names its run. Every title and the
    suptitle are wrapped to fit the width they have (a title to its column of the grid).
    """
    if run:
        current = getattr(fig, "_suptitle", None)
        below = current.get_text() if current is not None else ""
        fig.suptitle(f"{run}\n{below}" if below else run, fontsize="medium")
    _fit_titles(fig)
    path = Path(path)
    fig.savefig(path)
    return path


def _fit_titles(fig: Any) -> None:
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        _wrap(suptitle, 0.94 * width, renderer)
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        share = 1.0
        if spec is not None:
            columns = spec.get_gridspec().ncols
            share = (spec.colspan.stop - spec.colspan.start) / columns
        _wrap(ax.title, 0.8 * share * width, renderer)


def _wrap(text: Any, available: float, renderer: Any) -> None:
    content = text.get_text()
    if not content:
        return
    extent = text.get_window_extent(renderer).width
    if extent <= available:
        return
    lines = content.split("\n")
    longest = max(len(line) for line in lines)
    characters = max(12, math.floor(longest * available / extent))
    text.set_text("\n".join(textwrap.fill(line, characters) or line for line in lines))


MIN_PERCENT_SPAN = 30.0
"""The narrowest accuracy axis, in points: a 3-point dip then spans a tenth of it, not a third (on
a 10-point axis a dip of 97 -> 94 looked like a collapse)."""


def percent_limits(values: Iterable[float], *, margin: float = 3.0, step: float = 5.0) -> tuple[float, float]:
    """An accuracy (%) axis range for ``values``: their min and max widened by ``margin`` and
    rounded out to multiples of ``step``, clipped to [0, 100], at least :data:`MIN_PERCENT_SPAN`
    points wide (so that noise is not blown up), widened downwards first; (0, 100) without a
    finite value."""
    finite = np.asarray([v for v in values if v is not None], dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return 0.0, 100.0
    low = max(0.0, math.floor((finite.min() - margin) / step) * step)
    high = min(100.0, math.ceil((finite.max() + margin) / step) * step)
    if high - low < MIN_PERCENT_SPAN:
        low = max(0.0, high - MIN_PERCENT_SPAN)
        high = max(high, low + MIN_PERCENT_SPAN)
    return low, high


def set_percent_axis(ax: Any, values: Iterable[float], *, axis: str = "y") -> tuple[float, float]:
    """Set ``ax``'s ``axis`` to :func:`percent_limits` of ``values`` plus a 3% pad on each side,
    so that a line at a limit (100%) is drawn inside the frame, not hidden under it; ticks stay
    within the range. Returns the range."""
    from matplotlib.ticker import MaxNLocator

    low, high = percent_limits(values)
    pad = 0.03 * (high - low)
    locator = MaxNLocator(nbins=6, steps=[1, 2, 5, 10])
    ticks = [t for t in locator.tick_values(low, high) if low <= t <= high]
    if axis == "y":
        ax.set_ylim(low - pad, high + pad)
        ax.set_yticks(ticks)
    else:
        ax.set_xlim(low - pad, high + pad)
        ax.set_xticks(ticks)
    return low, high


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """The legend of ``ax`` to the right of it, outside the data (constrained layout makes room);
    long legends in several columns."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    kwargs.setdefault("ncols", max(1, math.ceil(len(handles) / 16)))
    kwargs.setdefault("fontsize", "small")
    return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kwargs)


def plot_accuracy_curves(
    curves: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    title: str = "Average accuracy on the tasks seen so far",
    run: str | None = None,
) -> Path:
    """Line plot of accuracy (%) after each task, one line per label (e.g. Class-IL, Task-IL).

    The y range follows the data (:func:`set_percent_axis`); each line has its own marker, the
    earlier lines' smaller and on top, so that equal points (Class-IL = Task-IL after the first
    task) show both. ``run`` names the run in a suptitle.
    """
    fig = new_figure(6.5, 4)
    ax = fig.add_subplot()
    for index, (label, values) in enumerate(curves.items()):
        tasks = np.arange(1, len(values) + 1)
        ax.plot(
            tasks,
            values,
            marker=_MARKERS[index % len(_MARKERS)],
            markersize=5 + 2.5 * min(index, 3),  # equal points: the earlier line's marker inside
            zorder=3 + len(curves) - index,
            label=label,
        )
    ax.set_xlabel("tasks trained")
    ax.set_ylabel("accuracy (%)")
    set_percent_axis(ax, [v for values in curves.values() for v in values])
    longest = max((len(v) for v in curves.values()), default=1)
    ax.set_xlim(0.7, longest + 0.3)
    ax.set_xticks(range(1, longest + 1, math.ceil(longest / 20)))  # whole tasks, a tick at 1
    ax.grid(alpha=0.3)
    legend_outside(ax)
    ax.set_title(title)
    return save_figure(fig, path, run=run)


def plot_accuracy_matrix(
    matrix: AccuracyMatrix, path: str | Path, *, title: str = "Accuracy (%)", run: str | None = None
) -> Path:
    """Heat map of ``R[t][i]``: rows = after training task t, columns = evaluated task i.

    Cells of tasks not trained yet (i > t: a square Task-IL matrix has them) are masked: grey,
    hatched, no number, and named in a legend (:data:`NOT_TRAINED`), so that they do not read as
    forgetting. The size follows the number of tasks; ``run`` names the run in a suptitle.
    """
    from matplotlib.patches import Patch, Rectangle

    rows = _rows(matrix)
    n_rows, n_cols = len(rows), max(row.shape[0] for row in rows)
    grid = np.full((n_rows, n_cols), np.nan)
    for t, row in enumerate(rows):
        grid[t, : row.shape[0]] = row
    untrained = np.arange(n_cols)[None, :] > np.arange(n_rows)[:, None]
    hidden = untrained | np.isnan(grid)
    n = max(n_rows, n_cols)
    cell = min(0.6, max(0.22, 9.0 / n))  # inches
    fig = new_figure(max(4.8, 2.4 + cell * n_cols), max(3.8, 2.0 + cell * n_rows))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_array(grid, mask=hidden), vmin=0, vmax=100, cmap="viridis")
    for t, i in zip(*np.nonzero(untrained), strict=True):
        ax.add_patch(
            Rectangle((i - 0.5, t - 0.5), 1, 1, facecolor="0.9", edgecolor="0.65", hatch="///", linewidth=0)
        )
    if cell >= 0.3:
        fontsize = 8 if cell >= 0.45 else 6
        for t, i in zip(*np.nonzero(~hidden), strict=True):
            color = "white" if grid[t, i] < 50 else "black"
            ax.text(i, t, f"{grid[t, i]:.0f}", ha="center", va="center", fontsize=fontsize, color=color)
    ax.set_xlabel("evaluated task")
    ax.set_ylabel("after training task")
    step = math.ceil(n / 20)  # at most 20 numbered tasks per axis
    ax.set_xticks(range(0, n_cols, step), [str(i + 1) for i in range(0, n_cols, step)])  # tasks from 1
    ax.set_yticks(range(0, n_rows, step), [str(t + 1) for t in range(0, n_rows, step)])
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8, label="accuracy (%)")
    if untrained.any():
        swatch = Patch(facecolor="0.9", edgecolor="0.65", hatch="///", label=NOT_TRAINED)
        fig.legend(handles=[swatch], loc="outside lower center", fontsize="small", frameon=False)
    return save_figure(fig, path, run=run)


def plot_reliability_diagram(
    bins: ReliabilityBins, path: str | Path, *, title: str = "Reliability diagram", run: str | None = None
) -> Path:
    """Reliability diagram (Guo et al., 2017) of :func:`xder_eval.reliability_bins`' output.

    Top: each bin's accuracy as a bar over its confidence interval, the gap to the bin's mean
    confidence hatched, and the diagonal of perfect calibration; the ECE is in the title, in
    percent as ``xder-run analyze`` prints it. Bottom: the fraction of items in each bin. Empty
    bins draw nothing. ``run`` names the run in a suptitle.
    """
    fig = new_figure(5, 6)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    left = bins.edges[:-1]
    width = np.diff(bins.edges)
    filled = bins.counts > 0
    top.bar(
        left[filled],
        bins.accuracy[filled],
        width=width[filled],
        align="edge",
        color="tab:blue",
        edgecolor="black",
        linewidth=0.5,
        label="accuracy",
    )
    gap = bins.confidence[filled] - bins.accuracy[filled]
    top.bar(
        left[filled],
        gap,
        bottom=bins.accuracy[filled],
        width=width[filled],
        align="edge",
        facecolor="none",  # the hatch alone: it reads the same over a bar and over the blank
        hatch="///",
        edgecolor="tab:red",
        linewidth=0.8,
        label="gap to confidence",
    )
    top.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfect calibration")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.legend(loc="upper left", fontsize="small")
    top.grid(alpha=0.3)
    top.set_title(f"{title} (ECE {100 * bins.expected_calibration_error():.2f}%)")
    share = bins.counts / max(bins.total, 1)
    bottom.bar(left, share, width=width, align="edge", color="gray", edgecolor="black", linewidth=0.5)
    bottom.set_xlabel("confidence (max probability)")
    bottom.set_ylabel("fraction of items")
    bottom.grid(alpha=0.3)
    return save_figure(fig, path, run=run)
