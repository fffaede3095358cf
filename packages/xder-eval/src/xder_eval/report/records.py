"""What a report reads and what it is made of: a run directory as read (:class:`RunRecord`), a run
or group left out (:class:`RunProblem`), a group's key and statistics (:class:`GroupKey`,
:class:`GroupSummary`), the table's rows and columns and the report itself (:class:`Report`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xder_eval.published import PublishedResult
from xder_eval.report.statistics import RepeatedSeed, SettingSummary

__all__ = [
    "RUN_IDENTITY_KEYS",
    "GroupKey",
    "GroupSummary",
    "Report",
    "ReportColumn",
    "ReportRow",
    "RunProblem",
    "RunRecord",
]

RUN_IDENTITY_KEYS = frozenset(
    {"run.seed", "run.method", "run.benchmark", "run.protocol", "run.preset", "method.buffer_size"}
)
"""Flattened ``config.toml`` keys that identify a run in the report (its group's key and its seed):
never compared as settings."""


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
