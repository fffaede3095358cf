"""A report's figures: the mean accuracy curves of one table column, and a group's mean accuracy
matrix as a heat map. matplotlib (the ``[plots]`` extra) is imported only when a plot is drawn
(:mod:`xder_eval.plots`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from xder_eval.plots import legend_outside, new_figure, plot_accuracy_matrix, save_figure, set_percent_axis
from xder_eval.report.records import GroupSummary, Report, ReportColumn

__all__ = ["file_token", "plot_report_curves", "plot_report_matrix"]


def file_token(text: str) -> str:
    """``text`` reduced to a file-name-safe token (letters, digits, ``.``, ``_``, ``-``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def plot_report_curves(
    report: Report, column: ReportColumn, path: str | Path, *, task_il: bool = False, note: str | None = None
) -> Path:
    """The paper's Fig. "accuracies" for one (benchmark, buffer): the mean accuracy on the seen
    tasks after each task (the column's scenario's own accuracy, Task-IL's with ``task_il``;
    its name in the title and the axis label), one line per row shown in ``column``
    (buffer-less methods included), with a band of ± one sample std over seeds where there are
    two or more. ``note``: a line above the title (e.g. the overrides the runs were trained with).

    Raises:
        ValueError: ``task_il`` on a column whose scenario has no Task-IL.
    """
    words = _accuracy_words(report, column, task_il)
    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot()
    longest = 1
    drawn: list[float] = []
    for index, row in enumerate(report.rows):
        group = report.cell(row, column)
        if group is None:
            continue
        mode = group.setting(task_il)
        mean = np.asarray(mode.curve_mean, dtype=np.float64)
        std = np.asarray([np.nan if s is None else s for s in mode.curve_std], dtype=np.float64)
        tasks = np.arange(1, mean.size + 1)
        longest = max(longest, mean.size)
        marker = "osD^vPX*"[index % 8]
        (line,) = ax.plot(tasks, mean, marker=marker, label=f"{row.name} (n={group.n})")
        drawn += mean.tolist()
        if np.any(~np.isnan(std)):
            ax.fill_between(tasks, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
            drawn += (mean - std).tolist() + (mean + std).tolist()
    ax.set_xlabel("tasks trained")
    ax.set_ylabel(f"{words} on seen tasks (%)")
    set_percent_axis(ax, drawn)
    ax.set_xlim(0.7, longest + 0.3)
    ax.set_xticks(np.arange(1, longest + 1, max(1, math.ceil(longest / 20))))
    ax.grid(alpha=0.3)
    legend_outside(ax)
    ax.set_title(f"{column.header}, {words}: mean ± std over seeds")
    return save_figure(fig, path, run=note)


def plot_report_matrix(
    report: Report, group: GroupSummary, path: str | Path, *, task_il: bool = False, note: str | None = None
) -> Path:
    """Heat map of a group's mean accuracy matrix (:func:`xder_eval.plot_accuracy_matrix`): its
    scenario's own accuracy, Task-IL's with ``task_il``, named in the title; ``note``: a line
    above the title (e.g. the overrides the runs were trained with).

    Raises:
        ValueError: ``task_il`` on a group whose scenario has no Task-IL.
    """
    k = group.key
    column = ReportColumn(k.benchmark, k.buffer_size, scenario=k.scenario)
    words = _accuracy_words(report, column, task_il).replace("Accuracy", "accuracy")
    return plot_accuracy_matrix(
        [list(row) for row in group.setting(task_il).matrix_mean],
        path,
        title=f"{report.row_of(group).name} on {column.header}\nmean {words} (%), n={group.n}",
        run=note,
    )


def _accuracy_words(report: Report, column: ReportColumn, task_il: bool) -> str:
    """The accuracy a plot of ``column`` shows, in a phrase: ``Domain-IL accuracy``."""
    if task_il and not report.facts(column.scenario).task_il:
        raise ValueError(f"{column.header}: no Task-IL accuracy in {column.scenario}")
    return "Task-IL accuracy" if task_il else report.facts(column.scenario).accuracy_words
