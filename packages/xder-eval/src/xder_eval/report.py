"""Table-1-style reports over many runs: FAA (FF) as mean ± std over seeds, curves, heat maps.

The input is what a run directory holds, already parsed (:class:`RunRecord`: its path, the
sections of ``config.toml`` and the ``results.json`` object); this module reads no file. A
:class:`Report` is built in three steps:

1. **Status.** A run enters the means only when its results say ``complete: true`` and hold an
   accuracy matrix. Every other run is listed as a :class:`RunProblem` (no ``results.json``,
   unreadable files, ``complete: false`` with the number of tasks done) instead of failing the
   report.
2. **Grouping.** Complete runs are grouped by ``(benchmark, buffer size, method, preset,
   settings)``. ``settings`` names the configuration keys on which runs of the same method and
   preset disagree *within one (benchmark, buffer) cell*: for each (method, preset) the keys that
   vary inside any of its cells are collected, and every group of that (method, preset) is
   labelled with its values of those keys, e.g. ``"train.epochs=1"`` (the ``--set`` spelling).
   Keys that identify the run (:data:`RUN_IDENTITY_KEYS`: its seed, and the method, benchmark,
   protocol, preset and buffer size already in the key) are never compared, nor those the caller
   says do not define a run (``ignore``: where it trained, what watched it; ``xder-run report``
   passes those its settings table says place or observe a run). So two differently configured
   sets of runs of one method are never averaged together, and a setting that differs only
   between benchmarks (their protocols) labels nothing. A run on a protocol other than ``full``
   (``run.protocol``) counts as a benchmark of its own, named ``"<benchmark> (<protocol>)"``, e.g.
   ``seq-cifar10 (laptop)``.
3. **Table.** One row per (method, preset, settings), one column per (benchmark, buffer size).
   Runs of methods without a buffer (FT, JT, LwF.MC: no ``method.buffer_size`` in their
   configuration) fill every buffer column of their benchmark, as in the paper's Table 1; a
   benchmark holding only such runs gets one column. A replay method run with buffer size 0 is
   not one of them: it has its column ``m0``.
   Each group's seeds are compared with the union of seeds run on its benchmark (complete or
   not): the seeds it lacks are listed as a problem.
   **One run per seed.** A group counts each seed once (:func:`count_each_seed_once`): where
   several complete runs share the group's configuration and a seed, the one whose run directory's
   folder name sorts first counts (ties: the whole path), the others are set aside. ``xder-run
   train`` folders begin with their start time, so that is the earliest started. The set-aside
   runs are listed as a problem (``duplicate_seed``) naming the run that counted, and kept in
   :attr:`GroupSummary.repeated`; n is the number of distinct seeds.
4. **Published values** (optional, :class:`xder_eval.PublishedResult`, passed in by the caller):
   a group that matches a published cell (same benchmark, buffer size, and method or preset
   variant: :meth:`PublishedResult.matches`) shows the published FAA (FF) beside its own in the
   Class-IL table, the CSV and the JSON. A run on another protocol than ``full`` matches none:
   its benchmark is ``"<benchmark> (<protocol>)"``.

Statistics are the mean and the sample standard deviation (``ddof=1``) over a group's distinct
seeds, one run each; with one seed there is no standard deviation. Accuracies are in percent, as
in ``results.json``. FAA and FF are recomputed from the accuracy matrices
(:mod:`xder_eval.metrics`), Class-IL by default and Task-IL on request.

matplotlib (the ``[plots]`` extra) is imported only when a plot is drawn.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, TypeVar

import numpy as np

from xder_eval.metrics import average_accuracy_curve, final_average_accuracy, final_forgetting
from xder_eval.plots import legend_outside, new_figure, plot_accuracy_matrix, save_figure, set_percent_axis
from xder_eval.published import PublishedResult

__all__ = [
    "CSV_COLUMNS",
    "RUN_IDENTITY_KEYS",
    "GroupKey",
    "GroupSummary",
    "RepeatedSeed",
    "Report",
    "ReportColumn",
    "ReportRow",
    "RunProblem",
    "RunRecord",
    "SeedStats",
    "SettingSummary",
    "build_report",
    "count_each_seed_once",
    "file_token",
    "group_runs",
    "group_title",
    "plot_report_curves",
    "plot_report_matrix",
    "report_csv",
    "report_dict",
    "report_markdown",
    "report_problems",
    "summarize_group",
]

RUN_IDENTITY_KEYS = frozenset(
    {"run.seed", "run.method", "run.benchmark", "run.protocol", "run.preset", "method.buffer_size"}
)
"""Flattened ``config.toml`` keys that identify a run in the report (its group's key and its seed):
never compared as settings."""

# Rows follow the paper's Table 1 (bounds, regularisation, replay, DER family); other methods
# come after, alphabetically.
_METHOD_ORDER = (
    "joint",
    "sgd",
    "lwf_mc",
    "er",
    "gdumb",
    "er_ace",
    "rpc",
    "bic",
    "icarl",
    "lucir",
    "der",
    "derpp",
    "xder",
)

CSV_COLUMNS = (
    "benchmark",
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
"""The header of :func:`report_csv`: one line per group, Class-IL and Task-IL side by side, then
the published (Class-IL) values of the group's cell where it matches one (else empty)."""


# ---------------------------------------------------------------------------------------------
# Inputs and outputs


@dataclass(frozen=True)
class RunRecord:
    """One run directory as read from disk.

    Attributes:
        path: where the run lives (only shown, never opened).
        config: the sections of ``config.toml`` (``{"run": {...}, "method": {...}, ...}``), or
            None when it could not be read.
        results: the ``results.json`` object, or None when the file does not exist.
        error: why the directory could not be read (unreadable JSON or TOML, no config.toml);
            such a run is listed, never averaged.
    """

    path: str
    config: Mapping[str, Mapping[str, Any]] | None = None
    results: Mapping[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunProblem:
    """A run or group left out of (or thin in) the means.

    Attributes:
        kind: ``unreadable``, ``missing`` (no results.json), ``incomplete`` (``complete: false``),
            ``missing_seeds`` (a group lacks seeds its benchmark's other runs have) or
            ``duplicate_seed`` (a group holds one seed more than once: one run counted, the others
            set aside, :func:`count_each_seed_once`).
        message: one line for people, naming the path or group.
        path: the run directory (empty for group-level problems).
        method, benchmark, buffer_size, seed: what is known of the run or group (None if unknown).
        tasks_done, n_tasks: progress of an incomplete run.
        seeds: the missing or duplicated seeds of a group problem.
    """

    kind: str
    message: str
    path: str = ""
    method: str | None = None
    benchmark: str | None = None
    buffer_size: int | None = None
    seed: int | None = None
    tasks_done: int | None = None
    n_tasks: int | None = None
    seeds: tuple[int, ...] = ()


@dataclass(frozen=True, order=True)
class GroupKey:
    """What a group's runs share. ``settings`` is the label of their distinguishing settings
    (``"train.epochs=1, backbone.width=4"``; empty when nothing distinguishes them).
    ``buffered``: the method keeps a replay buffer (of ``buffer_size``, 0 included); a group
    without one (FT, JT, LwF.MC: ``buffer_size`` 0) fills every buffer column of its benchmark."""

    benchmark: str
    buffer_size: int
    method: str
    preset: str
    settings: str = ""
    buffered: bool = True


@dataclass(frozen=True)
class SeedStats:
    """Mean and sample standard deviation (None below two values) of per-seed values."""

    mean: float | None
    std: float | None
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class SettingSummary:
    """One setting's (Class-IL or Task-IL) statistics of a group: FAA and FF over seeds, the mean
    and sample std of the accuracy-after-each-task curve (std None below two seeds), and the
    element-wise mean accuracy matrix (rows as ``results.json`` stores them)."""

    faa: SeedStats
    ff: SeedStats
    curve_mean: tuple[float, ...]
    curve_std: tuple[float | None, ...]
    matrix_mean: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class RepeatedSeed:
    """A seed that several complete runs of one group share: the run that counts
    (:func:`count_each_seed_once`) and those set aside, by path."""

    seed: int
    counted: str
    set_aside: tuple[str, ...]


@dataclass(frozen=True)
class GroupSummary:
    """The statistics of one group of complete runs: one run per seed (seeds in ascending order,
    ``paths`` the runs that count), ``repeated`` the seeds run more than once and the runs set aside.

    ``class_il`` and ``task_il`` hold the FAA and FF :class:`SeedStats`, the mean and std of the
    accuracy-after-each-task curve, and the element-wise mean accuracy matrix.
    """

    key: GroupKey
    seeds: tuple[int, ...]
    paths: tuple[str, ...]
    class_il: SettingSummary
    task_il: SettingSummary
    missing_seeds: tuple[int, ...] = ()
    repeated: tuple[RepeatedSeed, ...] = ()

    @property
    def n(self) -> int:
        return len(self.seeds)

    def setting(self, task_il: bool) -> SettingSummary:
        """``task_il`` if asked for, else ``class_il``."""
        return self.task_il if task_il else self.class_il


@dataclass(frozen=True)
class ReportColumn:
    """A table column: a benchmark at one buffer size (0 included), or, with ``buffered`` False,
    a benchmark with buffer-less runs only."""

    benchmark: str
    buffer_size: int
    buffered: bool = True

    @property
    def header(self) -> str:
        return f"{self.benchmark} m{self.buffer_size}" if self.buffered else self.benchmark

    def holds(self, key: GroupKey) -> bool:
        """Whether group ``key`` shows in this column: its benchmark at this buffer size, or its
        benchmark and no buffer at all."""
        same_buffer = self.buffered and key.buffer_size == self.buffer_size
        return key.benchmark == self.benchmark and (same_buffer or not key.buffered)


@dataclass(frozen=True)
class ReportRow:
    """A table row. ``name`` is the method alone when no other row has the same method, else
    ``method [preset; settings]``: the legend and file-name label."""

    method: str
    preset: str
    settings: str
    name: str


@dataclass(frozen=True)
class Report:
    """Groups, the table's rows and columns, and the problems, in display order; ``published``
    maps each group that matches a published cell to it."""

    groups: tuple[GroupSummary, ...]
    rows: tuple[ReportRow, ...]
    columns: tuple[ReportColumn, ...]
    problems: tuple[RunProblem, ...]
    published: Mapping[GroupKey, PublishedResult] = field(default_factory=dict)

    def published_for(self, group: GroupSummary) -> PublishedResult | None:
        """The published cell ``group`` matches, or None."""
        return self.published.get(group.key)

    def cell(self, row: ReportRow, column: ReportColumn) -> GroupSummary | None:
        """The group shown at (row, column): its own buffer size, or a buffer-less group of the
        column's benchmark."""
        for group in self.groups:
            k = group.key
            if (k.method, k.preset, k.settings) != (row.method, row.preset, row.settings):
                continue
            if column.holds(k):
                return group
        return None

    def row_of(self, group: GroupSummary) -> ReportRow:
        k = group.key
        return next(
            r for r in self.rows if (r.method, r.preset, r.settings) == (k.method, k.preset, k.settings)
        )


# ---------------------------------------------------------------------------------------------
# Reading the records


@dataclass(frozen=True)
class _Run:
    record: RunRecord
    method: str | None
    benchmark: str | None
    buffer_size: int | None
    seed: int | None
    preset: str
    flat_config: dict[str, Any]
    buffered: bool = True

    def describe(self) -> str:
        parts = [self.method or "?", "on", self.benchmark or "?"]
        if self.buffered and self.buffer_size is not None:
            parts.append(f"m{self.buffer_size}")
        parts.append(f"seed {'?' if self.seed is None else self.seed}")
        return " ".join(parts)


def _flatten(config: Mapping[str, Any] | None) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, values in (config or {}).items():
        if isinstance(values, Mapping):
            for key, value in values.items():
                flat[f"{section}.{key}"] = value
        else:
            flat[str(section)] = values
    return flat


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _identify(record: RunRecord) -> _Run:
    results = record.results if isinstance(record.results, Mapping) else {}
    config = record.config if isinstance(record.config, Mapping) else {}
    run = config.get("run", {}) if isinstance(config.get("run"), Mapping) else {}
    method_section = config.get("method", {}) if isinstance(config.get("method"), Mapping) else {}

    def pick(result_key: str, config_value: Any) -> Any:
        value = results.get(result_key)
        return config_value if value is None else value

    method = pick("method", run.get("method"))
    benchmark = pick("benchmark", run.get("benchmark"))
    protocol = run.get("protocol", "full")
    # Another protocol is another column; "paper" is the full protocol's name before it was "full".
    if benchmark is not None and protocol not in ("full", "paper"):
        benchmark = f"{benchmark} ({protocol})"
    buffer_size = _int_or_none(pick("buffer_size", method_section.get("buffer_size", 0 if config else None)))
    # A method with a buffer has method.buffer_size in its config, 0 included; without a config,
    # a positive buffer size in results.json says so.
    buffered = "buffer_size" in method_section if config else bool(buffer_size)
    return _Run(
        record=record,
        method=str(method) if method is not None else None,
        benchmark=str(benchmark) if benchmark is not None else None,
        buffer_size=buffer_size,
        seed=_int_or_none(pick("seed", run.get("seed"))),
        preset=str(run.get("preset", "none")),
        flat_config=_flatten(config),
        buffered=buffered,
    )


def _matrix_ok(matrix: Any) -> bool:
    if not isinstance(matrix, Sequence) or isinstance(matrix, str) or not matrix:
        return False
    for t, row in enumerate(matrix):
        if not isinstance(row, Sequence) or isinstance(row, str) or len(row) < t + 1:
            return False
        if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in row):
            return False
    return True


def _status(run: _Run) -> RunProblem | None:
    """None for a run that enters the means, else why it does not."""
    record = run.record
    known: dict[str, Any] = {  # RunProblem's keyword arguments
        "path": record.path,
        "method": run.method,
        "benchmark": run.benchmark,
        "buffer_size": run.buffer_size,
        "seed": run.seed,
    }
    if record.error is not None:
        return RunProblem("unreadable", f"{record.path}: {record.error} ({run.describe()})", **known)
    if record.results is None:
        return RunProblem(
            "missing", f"{record.path}: no results.json, no task finished ({run.describe()})", **known
        )
    results = record.results
    if not isinstance(results, Mapping):
        return RunProblem("unreadable", f"{record.path}: results.json is not a JSON object", **known)
    if None in (run.method, run.benchmark, run.buffer_size, run.seed):
        return RunProblem(
            "unreadable",
            f"{record.path}: method, benchmark, buffer size or seed unknown ({run.describe()})",
            **known,
        )
    n_tasks = _int_or_none(results.get("n_tasks"))
    matrix = results.get("accuracy_matrix") or []
    tasks_done = _int_or_none(results.get("tasks_done"))
    if tasks_done is None and isinstance(matrix, Sequence):
        tasks_done = len(matrix)
    if results.get("complete") is not True:
        of = "?" if n_tasks is None else str(n_tasks)
        return RunProblem(
            "incomplete",
            f"{record.path}: incomplete, {tasks_done} of {of} tasks done ({run.describe()})",
            tasks_done=tasks_done,
            n_tasks=n_tasks,
            **known,
        )
    if not _matrix_ok(results.get("accuracy_matrix")) or not _matrix_ok(
        results.get("task_il_accuracy_matrix")
    ):
        return RunProblem(
            "unreadable",
            f"{record.path}: results.json has no valid accuracy_matrix/task_il_accuracy_matrix "
            f"({run.describe()})",
            **known,
        )
    return None


# ---------------------------------------------------------------------------------------------
# Grouping


def _format_value(value: Any) -> str:
    if value is _UNSET:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


class _Unset:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "unset"


_UNSET = _Unset()


def group_runs(
    records: Iterable[RunRecord], ignore: Collection[str] = ()
) -> tuple[dict[GroupKey, list[RunRecord]], list[RunProblem]]:
    """Split ``records`` into groups of complete runs and a list of the runs left out.

    See the module docstring for the grouping rule; ``ignore``: flattened keys that do not define a
    run (e.g. ``run.device``), never compared. Returns the groups (records in input order)
    and the run-level problems (``unreadable``, ``missing``, ``incomplete``) in input order.
    """
    included: list[_Run] = []
    problems: list[RunProblem] = []
    for record in records:
        run = _identify(record)
        problem = _status(run)
        if problem is None:
            included.append(run)
        else:
            problems.append(problem)

    cells: dict[tuple[Any, ...], list[_Run]] = defaultdict(
        list
    )  # (benchmark, buffer, buffered, method, preset)
    for run in included:
        cells[(run.benchmark, run.buffer_size, run.buffered, run.method, run.preset)].append(run)
    varying: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (_, _, _, method, preset), runs in cells.items():
        keys = set().union(*(run.flat_config for run in runs)) - RUN_IDENTITY_KEYS - set(ignore)
        for key in keys:
            first = runs[0].flat_config.get(key, _UNSET)
            if any(run.flat_config.get(key, _UNSET) != first for run in runs[1:]):
                varying[(method, preset)].add(key)

    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for (benchmark, buffer_size, buffered, method, preset), runs in cells.items():
        label_keys = sorted(varying[(method, preset)])
        for run in runs:
            label = ", ".join(f"{k}={_format_value(run.flat_config.get(k, _UNSET))}" for k in label_keys)
            groups[GroupKey(benchmark, buffer_size, method, preset, label, buffered)].append(run.record)
    return dict(groups), problems


# ---------------------------------------------------------------------------------------------
# Statistics

_T = TypeVar("_T")


def _counting_order(path: str) -> tuple[str, str]:
    """The order in which runs of one seed are considered: folder name, then the whole path."""
    return (PurePath(path).name, path)


def count_each_seed_once(
    runs: Iterable[_T], seed: Callable[[_T], int], path: Callable[[_T], str]
) -> tuple[list[_T], list[RepeatedSeed]]:
    """One run per seed, the rule of every aggregate over seeds: of the runs sharing a seed, the
    one whose folder name (the last part of ``path``) sorts first counts, ties broken by the whole
    path; the others are set aside. ``xder-run train`` names a run's folder after its start time,
    so of its runs the earliest started counts. The rule reads only the paths: the same runs give
    the same choice in any order.

    Args:
        runs: the runs of one group (one configuration), complete.
        seed: a run's seed.
        path: a run's directory.

    Returns:
        The runs that count, by ascending seed, and for each seed run more than once (ascending)
        the run that counts and those set aside (in the rule's order).

    >>> runs = [("b/er-s0", 0), ("c/er-s1", 1), ("a/er-s0", 0)]
    >>> kept, repeated = count_each_seed_once(runs, seed=lambda r: r[1], path=lambda r: r[0])
    >>> kept, repeated
    ([('a/er-s0', 0), ('c/er-s1', 1)], [RepeatedSeed(seed=0, counted='a/er-s0', set_aside=('b/er-s0',))])
    """
    by_seed: dict[int, list[_T]] = defaultdict(list)
    for run in runs:
        by_seed[seed(run)].append(run)
    kept: list[_T] = []
    repeated: list[RepeatedSeed] = []
    for value in sorted(by_seed):
        ordered = sorted(by_seed[value], key=lambda run: _counting_order(path(run)))
        kept.append(ordered[0])
        if len(ordered) > 1:
            repeated.append(RepeatedSeed(value, path(ordered[0]), tuple(path(r) for r in ordered[1:])))
    return kept, repeated


def _stat(values: Sequence[float | None]) -> SeedStats:
    finite = tuple(float(v) for v in values if v is not None and math.isfinite(v))
    if not finite:
        return SeedStats(None, None, ())
    array = np.asarray(finite, dtype=np.float64)
    std = float(array.std(ddof=1)) if array.size >= 2 else None
    return SeedStats(float(array.mean()), std, finite)


def _columnwise(rows: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std per position over sequences of possibly different lengths (NaN where
    no value, std NaN below two values)."""
    width = max(len(r) for r in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        grid[i, : len(r)] = np.asarray(r, dtype=np.float64)
    counts = np.sum(~np.isnan(grid), axis=0)
    sums = np.nansum(grid, axis=0)
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    squares = np.nansum((grid - mean) ** 2, axis=0)
    std = np.where(counts > 1, np.sqrt(squares / np.maximum(counts - 1, 1)), np.nan)
    return mean, std


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _as_float_rows(matrix: Sequence[Sequence[Any]]) -> list[list[float]]:
    return [[math.nan if v is None else float(v) for v in row] for row in matrix]


def _mode_summary(matrices: Sequence[list[list[float]]], forgetting_defined: bool = True) -> SettingSummary:
    faa = _stat([final_average_accuracy(m) for m in matrices])
    ff = _stat([final_forgetting(m) if len(m) >= 2 and forgetting_defined else None for m in matrices])
    mean, std = _columnwise([average_accuracy_curve(m) for m in matrices])
    n_rows = max(len(m) for m in matrices)
    matrix_mean = []
    for t in range(n_rows):
        row_mean, _ = _columnwise([m[t] for m in matrices if len(m) > t])
        matrix_mean.append(tuple(float(v) for v in row_mean))
    return SettingSummary(
        faa=faa,
        ff=ff,
        curve_mean=tuple(float(v) for v in mean),
        curve_std=tuple(_none_if_nan(v) for v in std),
        matrix_mean=tuple(matrix_mean),
    )


def _seed_of(record: RunRecord) -> int:
    """The seed of a complete run (:func:`_status` has checked that it is known)."""
    seed = _identify(record).seed
    if seed is None:  # pragma: no cover - excluded by _status
        raise ValueError(f"{record.path}: seed unknown")
    return seed


def summarize_group(key: GroupKey, records: Sequence[RunRecord]) -> GroupSummary:
    """Mean and sample std over seeds of FAA, FF, the accuracy curve and the accuracy matrix,
    for Class-IL and Task-IL, one run per seed (:func:`count_each_seed_once`: the others are
    the summary's ``repeated``); the runs that count are sorted by seed.

    Raises:
        ValueError: no records, or a record without valid results (use :func:`group_runs`).
    """
    if not records:
        raise ValueError(f"group {key} has no runs")
    for run in records:
        if run.results is None or _status(_identify(run)) is not None:
            raise ValueError(f"{run.path} is not a complete run")
    runs, repeated = count_each_seed_once(records, seed=_seed_of, path=lambda r: r.path)
    class_il = [_as_float_rows(r.results["accuracy_matrix"]) for r in runs]  # type: ignore[index]
    task_il = [_as_float_rows(r.results["task_il_accuracy_matrix"]) for r in runs]  # type: ignore[index]
    # A run can declare forgetting meaningless (JT trained once after the last task: the paper's "-").
    defined = all((r.results or {}).get("forgetting_defined", True) for r in runs)
    return GroupSummary(
        key=key,
        seeds=tuple(_seed_of(r) for r in runs),
        paths=tuple(r.path for r in runs),
        class_il=_mode_summary(class_il, defined),
        task_il=_mode_summary(task_il, defined),
        repeated=tuple(repeated),
    )


# ---------------------------------------------------------------------------------------------
# The report


def _method_rank(method: str) -> tuple[int, str]:
    return (_METHOD_ORDER.index(method) if method in _METHOD_ORDER else len(_METHOD_ORDER), method)


def build_report(
    records: Iterable[RunRecord], published: Iterable[PublishedResult] = (), *, ignore: Collection[str] = ()
) -> Report:
    """Group ``records`` (:func:`group_runs`, ``ignore`` as there), summarize every group, lay out
    the table and list the problems; match each group with the ``published`` cell it belongs to,
    if any.

    Never raises on a bad run: it becomes a :class:`RunProblem`.
    """
    records = list(records)
    grouped, problems = group_runs(records, ignore)

    expected: dict[str, set[int]] = defaultdict(set)  # every seed tried on a benchmark
    for record in records:
        run = _identify(record)
        if run.benchmark is not None and run.seed is not None:
            expected[run.benchmark].add(run.seed)

    summaries: list[GroupSummary] = []
    group_problems: list[RunProblem] = []
    for key in sorted(grouped, key=lambda k: (k.benchmark, k.buffer_size, *_method_rank(k.method), k)):
        summary = summarize_group(key, grouped[key])
        missing = tuple(sorted(expected[key.benchmark] - set(summary.seeds)))
        summary = dataclasses.replace(summary, missing_seeds=missing)
        summaries.append(summary)
        where = group_title(key)
        if missing:
            group_problems.append(
                RunProblem(
                    "missing_seeds",
                    f"{where}: seed{'s' if len(missing) > 1 else ''} {_join(missing)} missing "
                    f"(complete: {_join(summary.seeds)})",
                    method=key.method,
                    benchmark=key.benchmark,
                    buffer_size=key.buffer_size,
                    seeds=missing,
                )
            )
        for repeat in summary.repeated:
            group_problems.append(
                RunProblem(
                    "duplicate_seed",
                    f"{where}: seed {repeat.seed} run {1 + len(repeat.set_aside)} times, counted once: "
                    f"{repeat.counted} counts, set aside {', '.join(repeat.set_aside)} "
                    "(the first run directory by folder name counts)",
                    method=key.method,
                    benchmark=key.benchmark,
                    buffer_size=key.buffer_size,
                    seed=repeat.seed,
                    seeds=(repeat.seed,),
                )
            )

    row_keys = sorted(
        {(g.key.method, g.key.preset, g.key.settings) for g in summaries},
        key=lambda r: (*_method_rank(r[0]), r[1], r[2]),
    )
    per_method: defaultdict[str, int] = defaultdict(int)
    for method, _, _ in row_keys:
        per_method[method] += 1
    rows = tuple(
        ReportRow(
            method,
            preset,
            settings,
            method if per_method[method] == 1 else _variant_name(method, preset, settings),
        )
        for method, preset, settings in row_keys
    )

    buffered = {(g.key.benchmark, g.key.buffer_size, True) for g in summaries if g.key.buffered}
    benchmarks = {g.key.benchmark for g in summaries}
    columns = sorted(buffered | {(b, 0, False) for b in benchmarks if not any(c[0] == b for c in buffered)})
    cells = list(published)
    matched = {}
    for group in summaries:
        k = group.key
        match = next((p for p in cells if p.matches(k.benchmark, k.buffer_size, k.method, k.preset)), None)
        if match is not None:
            matched[k] = match
    return Report(
        groups=tuple(summaries),
        rows=rows,
        columns=tuple(ReportColumn(b, m, buffered) for b, m, buffered in columns),
        problems=tuple(problems + group_problems),
        published=matched,
    )


def _variant_name(method: str, preset: str, settings: str) -> str:
    return f"{method} [{preset}; {settings}]" if settings else f"{method} [{preset}]"


def group_title(key: GroupKey) -> str:
    """A group in words: ``er [none] on seq-cifar10 m200`` (its method, preset and settings, on
    its column)."""
    where = ReportColumn(key.benchmark, key.buffer_size, key.buffered).header
    return f"{_variant_name(key.method, key.preset, key.settings)} on {where}"


def _join(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)


# ---------------------------------------------------------------------------------------------
# Rendering


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mean_std(stat: SeedStats) -> str:
    if stat.mean is None:
        return "-"
    return _number(stat.mean) if stat.std is None else f"{stat.mean:.2f} ± {stat.std:.2f}"


def _cell(report: Report, group: GroupSummary | None, task_il: bool) -> str:
    if group is None:
        return ""
    mode = group.setting(task_il)
    text = f"{_mean_std(mode.faa)} ({_mean_std(mode.ff)}) n={group.n}"
    published = report.published_for(group)
    if published is not None and not task_il:
        text += f"; published {_published_stat(published.faa, published.faa_std)} "
        text += f"({_published_stat(published.ff, published.ff_std)})"
    elif published is not None and published.task_il is not None:  # Task-IL: an FAA, no FF
        text += f"; published {_published_stat(published.task_il, published.task_il_std)}"
    return text


def _published_stat(value: float | None, std: float | None) -> str:
    if value is None:
        return "-"
    return _number(value) if std is None else f"{value:.2f} ± {std:.2f}"


def _published_sources(report: Report, task_il: bool = False) -> list[str]:
    cells = [p for p in report.published.values() if not task_il or p.task_il is not None]
    return list(dict.fromkeys(p.source for p in cells if p.source))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def report_markdown(report: Report, *, task_il: bool = False) -> str:
    """The table as Markdown: a caption line, then one row per method (variant) with columns
    ``method``, ``preset``, ``settings`` (only when a row has distinguishing settings) and one
    column per (benchmark, buffer); a cell reads ``FAA ± std (FF ± std) n=<seeds>`` (2 decimals,
    ``± std`` omitted with one seed, ``-`` for a missing value, empty where no group), followed in
    the Class-IL table by ``; published FAA (FF)`` where the group matches a published cell (the
    sources listed under the table), and a list of the problems when there are any."""
    setting = "Task-IL" if task_il else "Class-IL"
    lines = [
        f"{setting} final average accuracy FAA (final forgetting FF), %: "
        "mean ± sample standard deviation over n seeds.",
        "",
    ]
    if not report.rows:
        lines.append("No complete runs.")
    else:
        with_settings = any(row.settings for row in report.rows)
        header = [
            "method",
            "preset",
            *(["settings"] if with_settings else []),
            *(c.header for c in report.columns),
        ]
        lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
        lines.append("|" + "|".join(["---"] * (2 + with_settings) + [":-:"] * len(report.columns)) + "|")
        for row in report.rows:
            cells = [row.method, row.preset, *([row.settings] if with_settings else [])]
            cells += [_cell(report, report.cell(row, column), task_il) for column in report.columns]
            lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    sources = _published_sources(report, task_il)
    if sources:
        setting = "Task-IL FAA" if task_il else "Class-IL"
        lines += ["", f"Published (the paper protocol, {setting}): " + "; ".join(sources) + "."]
    if report.problems:
        lines += ["", "Missing or incomplete:", ""]
        lines += [f"- {problem.message}" for problem in report.problems]
    return "\n".join(lines) + "\n"


def _csv_number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def report_csv(report: Report) -> str:
    """One line per group (a buffer-less group once, with buffer 0) under :data:`CSV_COLUMNS`:
    means and sample stds to 4 decimals (empty when undefined), seeds and run paths joined by
    ``;``. Independent of the Class-IL/Task-IL choice: both are there."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for group in report.groups:
        k = group.key
        c, t = group.class_il, group.task_il
        writer.writerow(
            [
                k.benchmark,
                k.buffer_size,
                k.method,
                k.preset,
                k.settings,
                group.n,
                ";".join(str(s) for s in group.seeds),
                ";".join(str(s) for s in group.missing_seeds),
                *(_csv_number(v) for v in (c.faa.mean, c.faa.std, c.ff.mean, c.ff.std)),
                *(_csv_number(v) for v in (t.faa.mean, t.faa.std, t.ff.mean, t.ff.std)),
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


def _mode_dict(mode: SettingSummary) -> dict[str, Any]:
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
    """Everything in the report as strict-JSON-ready data (NaN -> None): the table layout, each
    group's statistics (both settings, per-seed values, curves, mean matrices), the runs that count
    (``runs``) and the seeds run more than once with the runs set aside (``repeated_seeds``), its published
    (Class-IL) cell where it matches one (else None), and the problems. ``setting`` records which
    of Class-IL/Task-IL the table shows."""
    return {
        "setting": "task-il" if task_il else "class-il",
        "columns": [
            {"benchmark": c.benchmark, "buffer_size": c.buffer_size, "buffered": c.buffered}
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


# ---------------------------------------------------------------------------------------------
# Plots


def file_token(text: str) -> str:
    """``text`` reduced to a file-name-safe token (letters, digits, ``.``, ``_``, ``-``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def plot_report_curves(
    report: Report, column: ReportColumn, path: str | Path, *, task_il: bool = False, note: str | None = None
) -> Path:
    """The paper's Fig. "accuracies" for one (benchmark, buffer): the mean accuracy on the seen
    tasks after each task, one line per row shown in ``column`` (buffer-less methods included),
    with a band of ± one sample std over seeds where there are two or more. ``note``: a line
    above the title (e.g. the overrides the runs were trained with)."""
    setting = "Task-IL" if task_il else "Class-IL"
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
    ax.set_ylabel(f"{setting} accuracy on seen tasks (%)")
    set_percent_axis(ax, drawn)
    ax.set_xlim(0.7, longest + 0.3)
    ax.set_xticks(np.arange(1, longest + 1, max(1, math.ceil(longest / 20))))
    ax.grid(alpha=0.3)
    legend_outside(ax)
    ax.set_title(f"{column.header}: mean ± std over seeds")
    return save_figure(fig, path, run=note)


def plot_report_matrix(
    report: Report, group: GroupSummary, path: str | Path, *, task_il: bool = False, note: str | None = None
) -> Path:
    """Heat map of a group's mean accuracy matrix (:func:`xder_eval.plot_accuracy_matrix`);
    ``note``: a line above the title (e.g. the overrides the runs were trained with)."""
    setting = "Task-IL" if task_il else "Class-IL"
    where = ReportColumn(group.key.benchmark, group.key.buffer_size).header
    return plot_accuracy_matrix(
        [list(row) for row in group.setting(task_il).matrix_mean],
        path,
        title=f"{report.row_of(group).name} on {where}\nmean {setting} accuracy (%), n={group.n}",
        run=note,
    )
