"""Plots of a run (PNG, matplotlib's object API: no pyplot, no global backend state).

matplotlib is the ``[plots]`` extra of xder-eval and is imported only when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xder_eval.calibration import ReliabilityBins
from xder_eval.metrics import AccuracyMatrix, _rows

__all__ = ["plot_accuracy_curves", "plot_accuracy_matrix", "plot_reliability_diagram"]


def _figure(width: float, height: float) -> Any:  # matplotlib is optional: no Figure type here
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'xder-eval[plots]'") from error
    return Figure(figsize=(width, height), dpi=120, layout="constrained")


def plot_accuracy_curves(
    curves: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    title: str = "Average accuracy on the tasks seen so far",
) -> Path:
    """Line plot of accuracy (%) after each task, one line per label (e.g. Class-IL, Task-IL)."""
    fig = _figure(6, 4)
    ax = fig.add_subplot()
    for label, values in curves.items():
        tasks = np.arange(1, len(values) + 1)
        ax.plot(tasks, values, marker="o", label=label)
    ax.set_xlabel("tasks trained")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    longest = max((len(v) for v in curves.values()), default=1)
    ax.set_xticks(np.arange(1, longest + 1))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    path = Path(path)
    fig.savefig(path)
    return path


def plot_accuracy_matrix(matrix: AccuracyMatrix, path: str | Path, *, title: str = "Accuracy (%)") -> Path:
    """Heat map of ``R[t][i]``: rows = after training task t, columns = evaluated task i."""
    rows = _rows(matrix)
    n_rows, n_cols = len(rows), max(row.shape[0] for row in rows)
    grid = np.full((n_rows, n_cols), np.nan)
    for t, row in enumerate(rows):
        grid[t, : row.shape[0]] = row
    fig = _figure(1.2 + 0.6 * n_cols, 1.0 + 0.5 * n_rows)
    ax = fig.add_subplot()
    image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis")
    if n_rows * n_cols <= 400:
        for t in range(n_rows):
            for i in range(n_cols):
                if not np.isnan(grid[t, i]):
                    color = "white" if grid[t, i] < 50 else "black"
                    ax.text(i, t, f"{grid[t, i]:.0f}", ha="center", va="center", fontsize=8, color=color)
    ax.set_xlabel("evaluated task")
    ax.set_ylabel("after training task")
    ax.set_xticks(range(n_cols), [str(i + 1) for i in range(n_cols)])
    ax.set_yticks(range(n_rows), [str(t + 1) for t in range(n_rows)])
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8)
    path = Path(path)
    fig.savefig(path)
    return path


def plot_reliability_diagram(
    bins: ReliabilityBins, path: str | Path, *, title: str = "Reliability diagram"
) -> Path:
    """Reliability diagram (Guo et al., 2017) of :func:`xder_eval.reliability_bins`' output.

    Top: each bin's accuracy as a bar over its confidence interval, the gap to the bin's mean
    confidence hatched, and the diagonal of perfect calibration; the ECE (a fraction) is in the
    title. Bottom: the fraction of items in each bin. Empty bins draw nothing.
    """
    fig = _figure(5, 6)
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
        color="tab:red",
        alpha=0.3,
        hatch="//",
        edgecolor="tab:red",
        linewidth=0.5,
        label="gap to confidence",
    )
    top.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfect calibration")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    top.set_title(f"{title} (ECE {bins.expected_calibration_error():.4f})")
    share = bins.counts / max(bins.total, 1)
    bottom.bar(left, share, width=width, align="edge", color="gray", edgecolor="black", linewidth=0.5)
    bottom.set_xlabel("confidence (max probability)")
    bottom.set_ylabel("fraction of items")
    bottom.grid(alpha=0.3)
    path = Path(path)
    fig.savefig(path)
    return path
