"""Which runs enter a report and how they group (steps 1 and 2 of :mod:`xder_eval.report`): a run
enters the means only when its results are complete, name a scenario the report knows and hold
the accuracy matrices of that scenario (else it is a :class:`RunProblem`); the runs that do are
grouped by (benchmark, buffer size, method, preset, settings, scenario), and each group is
summarized over its seeds, one run a seed (:mod:`xder_eval.report.statistics`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xder_eval.report.records import (
    CLASS_IL,
    RUN_IDENTITY_KEYS,
    GroupKey,
    GroupSummary,
    RunProblem,
    RunRecord,
    ScenarioFacts,
)
from xder_eval.report.statistics import SettingSummary, count_each_seed_once, summarize_setting

__all__ = ["group_runs", "summarize_group"]

_CLASS_IL_ONLY: Mapping[str, ScenarioFacts] = {"class-il": CLASS_IL}


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
    scenario: str = "class-il"

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
        scenario=str(results.get("scenario") or "class-il"),  # results.json before scenarios
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


def _status(run: _Run, scenarios: Mapping[str, ScenarioFacts]) -> RunProblem | None:
    """None for a run that enters the means, else why it does not (``scenarios``: those the
    report knows)."""
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
    matrix = results.get("accuracy_matrix") or results.get("task_il_accuracy_matrix") or []
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
    facts = scenarios.get(run.scenario)
    if facts is None:
        return RunProblem(
            "unreadable",
            f"{record.path}: results.json names the scenario {run.scenario!r}, which this report does not "
            f"know ({', '.join(scenarios)}) ({run.describe()})",
            **known,
        )
    needed = [key for key, used in _MATRICES.items() if getattr(facts, used)]
    if not all(_matrix_ok(results.get(key)) for key in needed):
        return RunProblem(
            "unreadable",
            f"{record.path}: results.json has no valid {'/'.join(needed)} ({run.describe()})",
            **known,
        )
    return None


_MATRICES = {"accuracy_matrix": "class_il", "task_il_accuracy_matrix": "task_il"}
"""Each accuracy matrix of ``results.json`` and the :class:`ScenarioFacts` field saying whether a
scenario reports it."""


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
    records: Iterable[RunRecord],
    ignore: Collection[str] = (),
    *,
    scenarios: Mapping[str, ScenarioFacts] = _CLASS_IL_ONLY,
) -> tuple[dict[GroupKey, list[RunRecord]], list[RunProblem]]:
    """Split ``records`` into groups of complete runs and a list of the runs left out.

    See the module docstring for the grouping rule; ``ignore``: flattened keys that do not define a
    run (e.g. ``run.device``), never compared; ``scenarios``: the facts of the scenarios the report
    knows (a run of another is unreadable). Returns the groups (records in input order) and the
    run-level problems (``unreadable``, ``missing``, ``incomplete``) in input order.
    """
    included: list[_Run] = []
    problems: list[RunProblem] = []
    for record in records:
        run = _identify(record)
        problem = _status(run, scenarios)
        if problem is None:
            included.append(run)
        else:
            problems.append(problem)

    # (benchmark, buffer, buffered, method, preset, scenario)
    cells: dict[tuple[Any, ...], list[_Run]] = defaultdict(list)
    for run in included:
        cell = (run.benchmark, run.buffer_size, run.buffered, run.method, run.preset, run.scenario)
        cells[cell].append(run)
    varying: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (_, _, _, method, preset, _), runs in cells.items():
        keys = set().union(*(run.flat_config for run in runs)) - RUN_IDENTITY_KEYS - set(ignore)
        for key in keys:
            first = runs[0].flat_config.get(key, _UNSET)
            if any(run.flat_config.get(key, _UNSET) != first for run in runs[1:]):
                varying[(method, preset)].add(key)

    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for (benchmark, buffer_size, buffered, method, preset, scenario), runs in cells.items():
        label_keys = sorted(varying[(method, preset)])
        for run in runs:
            label = ", ".join(f"{k}={_format_value(run.flat_config.get(k, _UNSET))}" for k in label_keys)
            groups[GroupKey(benchmark, buffer_size, method, preset, label, buffered, scenario)].append(
                run.record
            )
    return dict(groups), problems


# ---------------------------------------------------------------------------------------------
# A group's statistics


def _as_float_rows(matrix: Sequence[Sequence[Any]]) -> list[list[float]]:
    return [[math.nan if v is None else float(v) for v in row] for row in matrix]


def _seed_of(record: RunRecord) -> int:
    """The seed of a complete run (:func:`_status` has checked that it is known)."""
    seed = _identify(record).seed
    if seed is None:  # pragma: no cover - excluded by _status
        raise ValueError(f"{record.path}: seed unknown")
    return seed


def summarize_group(
    key: GroupKey, records: Sequence[RunRecord], facts: ScenarioFacts = CLASS_IL
) -> GroupSummary:
    """Mean and sample std over seeds of FAA, FF, the accuracy curve and the accuracy matrix,
    for each accuracy of the group's scenario (``facts``: Class-IL and Task-IL by default), one
    run per seed (:func:`count_each_seed_once`: the others are the summary's ``repeated``); the
    runs that count are sorted by seed.

    Raises:
        ValueError: no records, or a record without valid results (use :func:`group_runs`).
    """
    if not records:
        raise ValueError(f"group {key} has no runs")
    for run in records:
        if run.results is None or _status(_identify(run), {key.scenario: facts}) is not None:
            raise ValueError(f"{run.path} is not a complete run")
    runs, repeated = count_each_seed_once(records, seed=_seed_of, path=lambda r: r.path)
    # A run can declare forgetting meaningless (JT trained once after the last task: the paper's
    # "-"); a scenario of one task has none.
    defined = facts.forgetting and all((r.results or {}).get("forgetting_defined", True) for r in runs)

    def summary(matrix: str) -> SettingSummary | None:
        if not getattr(facts, _MATRICES[matrix]):
            return None
        return summarize_setting([_as_float_rows(r.results[matrix]) for r in runs], defined)  # type: ignore[index]

    return GroupSummary(
        key=key,
        seeds=tuple(_seed_of(r) for r in runs),
        paths=tuple(r.path for r in runs),
        class_il=summary("accuracy_matrix"),
        task_il=summary("task_il_accuracy_matrix"),
        repeated=tuple(repeated),
    )
