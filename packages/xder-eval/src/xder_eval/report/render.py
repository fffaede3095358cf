"""A report written out: the tables as Markdown (each scenario's own accuracy, or Task-IL), every
group as a CSV line, everything as strict-JSON-ready data, and the problems one line each."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from xder_eval.published import PublishedResult
from xder_eval.report.records import GroupSummary, Report, ReportTable
from xder_eval.report.statistics import SeedStats, SettingSummary

__all__ = ["CSV_COLUMNS", "report_csv", "report_dict", "report_markdown", "report_problems"]

CSV_COLUMNS = (
    "benchmark",
    "scenario",
    "buffer",
    "method",
    "preset",
    "settings",
    "n",
    "seeds",
    "missing_seeds",
    "faa_mean",
    "faa_std",
    "ff_mean",
    "ff_std",
    "task_il_faa_mean",
    "task_il_faa_std",
    "task_il_ff_mean",
    "task_il_ff_std",
    "runs",
    "published_faa",
    "published_faa_std",
    "published_ff",
    "published_ff_std",
    "published_seeds",
    "published_source",
)
"""The header of :func:`report_csv`: one line per group, its scenario, the accuracy of
``accuracy_matrix`` (``faa_*``, ``ff_*``: Class-IL, or Domain-IL, or a general stream's, whose
``ff_*`` are empty) and Task-IL side by side, each empty where the scenario has no such accuracy,
then the published values of the group's cell where it matches one (else empty)."""


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mean_std(stat: SeedStats) -> str:
    if stat.mean is None:
        return "-"
    return _number(stat.mean) if stat.std is None else f"{stat.mean:.2f} ± {stat.std:.2f}"


def _shows_task_il(report: Report, group: GroupSummary, task_il: bool) -> bool:
    """Whether the group's cell shows Task-IL: asked for, or its scenario's own accuracy."""
    return task_il or not report.facts(group.key.scenario).class_il


def _cell(report: Report, table: ReportTable, group: GroupSummary | None, task_il: bool) -> str:
    if group is None:
        return ""
    mode = group.setting(task_il)
    forgetting = f" ({_mean_std(mode.ff)})" if table.forgetting else ""
    text = f"{_mean_std(mode.faa)}{forgetting} n={group.n}"
    published = report.published_for(group)
    if published is not None and not _shows_task_il(report, group, task_il):
        text += f"; published {_published_stat(published.faa, published.faa_std)}"
        if table.forgetting:
            text += f" ({_published_stat(published.ff, published.ff_std)})"
    elif published is not None and published.task_il is not None:  # Task-IL: an FAA, no FF
        text += f"; published {_published_stat(published.task_il, published.task_il_std)}"
    return text


def _published_stat(value: float | None, std: float | None) -> str:
    if value is None:
        return "-"
    return _number(value) if std is None else f"{value:.2f} ± {std:.2f}"


def _published_sources(report: Report, table: ReportTable, task_il: bool = False) -> list[str]:
    cells = [
        published
        for group in report.groups
        if any(column.holds(group.key) for column in table.columns)
        and (published := report.published_for(group)) is not None
        and (not _shows_task_il(report, group, task_il) or published.task_il is not None)
    ]
    return list(dict.fromkeys(p.source for p in cells if p.source))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _caption(table: ReportTable) -> str:
    if table.forgetting:
        return (
            f"{table.accuracy} final average accuracy FAA (final forgetting FF), %: "
            "mean ± sample standard deviation over n seeds."
        )
    return (
        f"{table.accuracy_words} at the end of the stream (one task: no forgetting), %: "
        "mean ± sample standard deviation over n seeds."
    )


def _table_markdown(report: Report, table: ReportTable, task_il: bool) -> list[str]:
    lines = [_caption(table), ""]
    with_settings = any(row.settings for row in table.rows)
    header = ["method", "preset", *(["settings"] if with_settings else [])]
    header += [c.header for c in table.columns]
    lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    lines.append("|" + "|".join(["---"] * (2 + with_settings) + [":-:"] * len(table.columns)) + "|")
    for row in table.rows:
        cells = [row.method, row.preset, *([row.settings] if with_settings else [])]
        cells += [_cell(report, table, report.cell(row, column), task_il) for column in table.columns]
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    sources = _published_sources(report, table, task_il)
    if sources:
        shown = f"{table.accuracy} FAA" if table.accuracy == "Task-IL" else table.accuracy
        lines += ["", f"Published (the paper protocol, {shown}): " + "; ".join(sources) + "."]
    return lines


def report_markdown(report: Report, *, task_il: bool = False) -> str:
    """The tables as Markdown, one per accuracy shown (:meth:`Report.tables`: each scenario's own,
    Class-IL, Domain-IL, a general stream's..., or Task-IL for every column with ``task_il``):
    a caption line naming the accuracy, then one row per method (variant) with columns
    ``method``, ``preset``, ``settings`` (only when a row has distinguishing settings) and one
    column per (benchmark, buffer); a cell reads ``FAA ± std (FF ± std) n=<seeds>`` (2 decimals,
    ``± std`` omitted with one seed, ``-`` for a missing value, empty where no group; no FF in
    a table of one-task streams), followed by ``; published FAA (FF)`` where the group matches
    a published cell (the sources listed under the table); then a list of the problems when
    there are any.

    Raises:
        ValueError: ``task_il`` on a report with a scenario that has no Task-IL
            (:meth:`Report.without_task_il`).
    """
    tables = report.tables(task_il)
    lines: list[str] = []
    if not tables:
        name = "Task-IL" if task_il else "Class-IL"
        lines += [_caption(ReportTable(name, True, (), ())), "", "No complete runs."]
    for index, table in enumerate(tables):
        lines += ([""] if index else []) + _table_markdown(report, table, task_il)
    if report.problems:
        lines += ["", "Missing or incomplete:", ""]
        lines += [f"- {problem.message}" for problem in report.problems]
    return "\n".join(lines) + "\n"


def _csv_number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _csv_stats(mode: SettingSummary | None) -> list[str]:
    if mode is None:  # an accuracy the scenario does not have
        return [""] * 4
    return [_csv_number(v) for v in (mode.faa.mean, mode.faa.std, mode.ff.mean, mode.ff.std)]


def report_csv(report: Report) -> str:
    """One line per group (a buffer-less group once, with buffer 0) under :data:`CSV_COLUMNS`:
    means and sample stds to 4 decimals (empty when undefined, or an accuracy the group's
    scenario does not have), seeds and run paths joined by ``;``. Independent of the
    Task-IL choice: every accuracy of the scenario is there."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for group in report.groups:
        k = group.key
        writer.writerow(
            [
                k.benchmark,
                k.scenario,
                k.buffer_size,
                k.method,
                k.preset,
                k.settings,
                group.n,
                ";".join(str(s) for s in group.seeds),
                ";".join(str(s) for s in group.missing_seeds),
                *_csv_stats(group.class_il),
                *_csv_stats(group.task_il),
                ";".join(group.paths),
                *_csv_published(report.published_for(group)),
            ]
        )
    return out.getvalue()


def _csv_published(published: PublishedResult | None) -> list[str]:
    if published is None:
        return [""] * 6
    numbers = (published.faa, published.faa_std, published.ff, published.ff_std)
    seeds = "" if published.seeds is None else str(published.seeds)
    return [*(_csv_number(v) for v in numbers), seeds, published.source]


def report_problems(report: Report) -> list[str]:
    """The problems, one line each (empty when every group is complete)."""
    return [problem.message for problem in report.problems]


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _stat_dict(stat: SeedStats) -> dict[str, Any]:
    return {"mean": stat.mean, "std": stat.std, "n": stat.n, "values": list(stat.values)}


def _mode_dict(mode: SettingSummary | None) -> dict[str, Any] | None:
    if mode is None:
        return None
    return {
        "faa": _stat_dict(mode.faa),
        "ff": _stat_dict(mode.ff),
        "curve_mean": [_json_number(v) for v in mode.curve_mean],
        "curve_std": [_json_number(v) for v in mode.curve_std],
        "matrix_mean": [[_json_number(v) for v in row] for row in mode.matrix_mean],
    }


def _published_dict(published: PublishedResult | None) -> dict[str, Any] | None:
    if published is None:
        return None
    return {
        "entry": published.entry,
        "row": published.row,
        "faa": published.faa,
        "faa_std": published.faa_std,
        "ff": published.ff,
        "ff_std": published.ff_std,
        "task_il": published.task_il,
        "task_il_std": published.task_il_std,
        "seeds": published.seeds,
        "source": published.source,
    }


def report_dict(report: Report, *, task_il: bool = False) -> dict[str, Any]:
    """Everything in the report as strict-JSON-ready data (NaN -> None): the tables' layout (each
    with the accuracy it shows), each group's statistics (its scenario, the accuracy its table
    shows, both accuracies of ``results.json``: ``class_il`` of ``accuracy_matrix``, which is
    Class-IL, Domain-IL or a general stream's accuracy, and ``task_il``, each None where the
    scenario has no such accuracy; per-seed values, curves, mean matrices), the runs that count
    (``runs``) and the seeds run more than once with the runs set aside (``repeated_seeds``),
    its published cell where it matches one (else None), and the problems. ``setting``:
    ``task-il`` where the tables show Task-IL, else ``scenario`` (each scenario's own accuracy).

    Raises:
        ValueError: as :func:`report_markdown`.
    """
    tables = report.tables(task_il)
    shown = {c: t.accuracy for t in tables for c in t.columns}
    return {
        "setting": "task-il" if task_il else "scenario",
        "tables": [
            {
                "accuracy": t.accuracy,
                "forgetting": t.forgetting,
                "columns": [c.header for c in t.columns],
                "rows": [r.name for r in t.rows],
            }
            for t in tables
        ],
        "columns": [
            {
                "benchmark": c.benchmark,
                "buffer_size": c.buffer_size,
                "buffered": c.buffered,
                "scenario": c.scenario,
                "accuracy": shown[c],
            }
            for c in report.columns
        ],
        "rows": [
            {"method": r.method, "preset": r.preset, "settings": r.settings, "name": r.name}
            for r in report.rows
        ],
        "groups": [
            {
                "benchmark": g.key.benchmark,
                "buffer_size": g.key.buffer_size,
                "buffered": g.key.buffered,
                "method": g.key.method,
                "preset": g.key.preset,
                "settings": g.key.settings,
                "scenario": g.key.scenario,
                "accuracy": "Task-IL" if task_il else report.facts(g.key.scenario).accuracy,
                "name": report.row_of(g).name,
                "n": g.n,
                "seeds": list(g.seeds),
                "missing_seeds": list(g.missing_seeds),
                "runs": list(g.paths),
                "repeated_seeds": [
                    {"seed": r.seed, "counted": r.counted, "set_aside": list(r.set_aside)} for r in g.repeated
                ],
                "class_il": _mode_dict(g.class_il),
                "task_il": _mode_dict(g.task_il),
                "published": _published_dict(report.published_for(g)),
            }
            for g in report.groups
        ],
        "problems": [
            {
                "kind": p.kind,
                "message": p.message,
                "path": p.path or None,
                "method": p.method,
                "benchmark": p.benchmark,
                "buffer_size": p.buffer_size,
                "seed": p.seed,
                "tasks_done": p.tasks_done,
                "n_tasks": p.n_tasks,
                "seeds": list(p.seeds),
            }
            for p in report.problems
        ],
    }
