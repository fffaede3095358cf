"""What a report reads and what it is made of: a run directory as read (:class:`RunRecord`), what
a report shows of each scenario (:class:`ScenarioFacts`), a run or group left out
(:class:`RunProblem`), a group's key and statistics (:class:`GroupKey`, :class:`GroupSummary`),
the tables' rows and columns and the report itself (:class:`Report`, :class:`ReportTable`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xder_eval.published import PublishedResult
from xder_eval.report.statistics import RepeatedSeed, SettingSummary

__all__ = [
    "CLASS_IL",
    "RUN_IDENTITY_KEYS",
    "GroupKey",
    "GroupSummary",
    "Report",
    "ReportColumn",
    "ReportRow",
    "ReportTable",
    "RunProblem",
    "RunRecord",
    "ScenarioFacts",
]

RUN_IDENTITY_KEYS = frozenset(
    {"run.seed", "run.method", "run.benchmark", "run.protocol", "run.preset", "method.buffer_size"}
)
"""Flattened ``config.toml`` keys that identify a run in the report (its group's key and its seed):
never compared as settings."""


@dataclass(frozen=True)
class ScenarioFacts:
    """What a report shows of the runs of one scenario (a run's ``results.json`` names it in
    ``scenario``; ``class-il`` where it does not). The caller knows its scenarios and passes
    their facts in (``xder-run report`` gives those of :data:`xder_methods.SCENARIOS`).

    Attributes:
        accuracy: the name of the scenario's own accuracy, which its table shows: ``Class-IL``,
            ``Task-IL``, ``Domain-IL``, ``Accuracy`` (a general stream's).
        class_il: whether ``accuracy_matrix`` (the argmax over the classes seen: Class-IL,
            Domain-IL, the stream's accuracy) is an accuracy of the scenario; where it is not
            (Task-IL only) the scenario's own accuracy is ``task_il_accuracy_matrix``'s.
        task_il: whether ``task_il_accuracy_matrix`` is (the task given at test time); where it
            is not (every task has the same classes, or one task), Task-IL is no column.
        forgetting: whether the scenario has tasks to forget: a general stream is one task to the
            learner, so its table has no FF.
    """

    accuracy: str
    class_il: bool = True
    task_il: bool = True
    forgetting: bool = True

    @property
    def accuracy_words(self) -> str:
        """The accuracy in a phrase: ``Domain-IL accuracy``, or ``Accuracy`` alone.

        >>> ScenarioFacts("Domain-IL").accuracy_words, ScenarioFacts("Accuracy").accuracy_words
        ('Domain-IL accuracy', 'Accuracy')
        """
        return self.accuracy if self.accuracy.lower() == "accuracy" else f"{self.accuracy} accuracy"


CLASS_IL = ScenarioFacts("Class-IL")
"""The facts of ``class-il``, a report's only scenario unless its caller gives others: Class-IL
and, beside it, Task-IL accuracy."""


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
    without one (FT, JT, LwF.MC: ``buffer_size`` 0) fills every buffer column of its benchmark.
    ``scenario``: the scenario its runs' ``results.json`` name."""

    benchmark: str
    buffer_size: int
    method: str
    preset: str
    settings: str = ""
    buffered: bool = True
    scenario: str = "class-il"


@dataclass(frozen=True)
class GroupSummary:
    """The statistics of one group of complete runs: one run per seed (seeds in ascending order,
    ``paths`` the runs that count), ``repeated`` the seeds run more than once and the runs set aside.

    ``class_il`` and ``task_il`` hold the FAA and FF :class:`SeedStats`, the mean and std of the
    accuracy-after-each-task curve, and the element-wise mean accuracy matrix: ``class_il`` of
    ``accuracy_matrix`` (Class-IL, or in its scenario Domain-IL, a stream's accuracy), ``task_il``
    of ``task_il_accuracy_matrix``; None where the group's scenario has no such accuracy
    (:class:`ScenarioFacts`).
    """

    key: GroupKey
    seeds: tuple[int, ...]
    paths: tuple[str, ...]
    class_il: SettingSummary | None
    task_il: SettingSummary | None
    missing_seeds: tuple[int, ...] = ()
    repeated: tuple[RepeatedSeed, ...] = ()

    @property
    def n(self) -> int:
        return len(self.seeds)

    def setting(self, task_il: bool) -> SettingSummary:
        """``task_il`` if asked for, else the scenario's own accuracy (``class_il``, or
        ``task_il`` in a scenario of Task-IL alone).

        Raises:
            ValueError: Task-IL asked of a group whose scenario has none.
        """
        found = self.task_il if task_il or self.class_il is None else self.class_il
        if found is None:
            k = self.key
            raise ValueError(f"{k.method} on {k.benchmark} ({k.scenario}) has no Task-IL accuracy")
        return found


@dataclass(frozen=True)
class ReportColumn:
    """A table column: a benchmark at one buffer size (0 included), or, with ``buffered`` False,
    a benchmark with buffer-less runs only; ``scenario``: its runs' scenario."""

    benchmark: str
    buffer_size: int
    buffered: bool = True
    scenario: str = "class-il"

    @property
    def header(self) -> str:
        return f"{self.benchmark} m{self.buffer_size}" if self.buffered else self.benchmark

    def holds(self, key: GroupKey) -> bool:
        """Whether group ``key`` shows in this column: its benchmark at this buffer size, or its
        benchmark and no buffer at all."""
        same_buffer = self.buffered and key.buffer_size == self.buffer_size
        return (key.benchmark, key.scenario) == (self.benchmark, self.scenario) and (
            same_buffer or not key.buffered
        )


@dataclass(frozen=True)
class ReportRow:
    """A table row. ``name`` is the method alone when no other row has the same method, else
    ``method [preset; settings]``: the legend and file-name label."""

    method: str
    preset: str
    settings: str
    name: str


@dataclass(frozen=True)
class ReportTable:
    """One table of a report: the accuracy it shows (``Class-IL``, ``Task-IL``, ``Domain-IL``,
    ``Accuracy``), whether it shows forgetting beside it, and its columns and rows (the rows with
    a group in one of its columns)."""

    accuracy: str
    forgetting: bool
    columns: tuple[ReportColumn, ...]
    rows: tuple[ReportRow, ...]

    @property
    def accuracy_words(self) -> str:
        """The accuracy in a phrase (:attr:`ScenarioFacts.accuracy_words`)."""
        return ScenarioFacts(self.accuracy).accuracy_words


@dataclass(frozen=True)
class Report:
    """Groups, the table's rows and columns, and the problems, in display order; ``published``
    maps each group that matches a published cell to it; ``scenarios`` the facts of each
    scenario the report knows (:class:`ScenarioFacts`, in the order their tables are shown)."""

    groups: tuple[GroupSummary, ...]
    rows: tuple[ReportRow, ...]
    columns: tuple[ReportColumn, ...]
    problems: tuple[RunProblem, ...]
    published: Mapping[GroupKey, PublishedResult] = field(default_factory=dict)
    scenarios: Mapping[str, ScenarioFacts] = field(default_factory=lambda: {"class-il": CLASS_IL})

    def facts(self, scenario: str) -> ScenarioFacts:
        """The facts of ``scenario`` (one of :attr:`scenarios`: the report holds no other)."""
        return self.scenarios[scenario]

    def without_task_il(self) -> tuple[ReportColumn, ...]:
        """The columns whose scenario has no Task-IL accuracy (a Task-IL report cannot show them)."""
        return tuple(c for c in self.columns if not self.facts(c.scenario).task_il)

    def tables(self, task_il: bool = False) -> tuple[ReportTable, ...]:
        """The report's tables: one per accuracy shown, each column in the one of its scenario's
        accuracy (``task_il``: Task-IL's, for every column), in the order of :attr:`scenarios`.
        Runs of one scenario make one table; Domain-IL runs beside Class-IL runs make two.

        Raises:
            ValueError: ``task_il`` asked of a report with a column whose scenario has no Task-IL
                (:meth:`without_task_il`).
        """
        lacking = self.without_task_il() if task_il else ()
        if lacking:
            raise ValueError(
                f"no Task-IL accuracy in {', '.join(sorted({c.scenario for c in lacking}))} "
                f"({', '.join(dict.fromkeys(c.benchmark for c in lacking))})"
            )
        order = list(self.scenarios)
        laid: dict[tuple[str, bool], list[ReportColumn]] = {}
        for column in sorted(self.columns, key=lambda c: order.index(c.scenario)):
            facts = self.facts(column.scenario)
            laid.setdefault(("Task-IL" if task_il else facts.accuracy, facts.forgetting), []).append(column)
        return tuple(
            ReportTable(
                accuracy,
                forgetting,
                tuple(columns),
                tuple(row for row in self.rows if any(self.cell(row, c) is not None for c in columns)),
            )
            for (accuracy, forgetting), columns in laid.items()
        )

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
