"""The analysis registry: ``@register_analysis("name", summary=...)`` on each analysis's runner.

An analysis (an :class:`Analysis`) is one module of :mod:`xder_cli.runs.analyses`, or a plugin's
(``--plugin``): its runner, computing the result from a trained run (a JSON object, with the
names of the plots it wrote beside ``analysis.json``), the one line ``xder-run analyze`` prints of
it, and what it records while the run trains (a :class:`TaskEndRecord` in the run's ``analysis``
event after each task, :func:`task_end_analysis`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.loaded import TrainedRun
from xder_methods import FitState

__all__ = [
    "ANALYSIS_FOLDER",
    "RECORD_HINT",
    "Analysis",
    "AnalysisOptions",
    "Runner",
    "TaskEndRecord",
    "get_analysis",
    "list_analyses",
    "recorded_analyses",
    "recorded_keys",
    "register_analysis",
    "task_end_analysis",
]

RECORD_HINT = f"train it with {option('run.record_analyses')} (run.record_analyses = true)"
"""What to do for an analysis that needs the records (:func:`recorded_analyses`), as a template of
:mod:`~xder_cli.runs.errors`."""
ANALYSIS_FOLDER = "analysis"
"""Where a run's analyses go: ``RUN_DIR/analysis/``, their plots and
:data:`xder_cli.runs.run_analysis.ANALYSIS_JSON`."""


@dataclass(frozen=True, kw_only=True)
class AnalysisOptions:
    """How the analyses that compute something run (defaults: ``xder-run analyze``'s).

    Attributes:
        max_items: training items per task for ``flatness`` (and, at most 200, ``fisher_trace``).
        buffer_epochs: epochs of ``buffer_informativeness``'s from-scratch training on the buffer.
        probe_epochs: epochs of ``secondary_targets``' linear probe.
        tolerance: the pointing game's tolerance in pixels (``pointing``, ``secondary_targets``).
        data_root: where ``secondary_targets`` finds the COCO-stitched data (None: the run's).
    """

    max_items: int = 500
    buffer_epochs: int = 70
    probe_epochs: int = 50
    tolerance: float = 0.0
    data_root: str | None = None


R = TypeVar("R", bound=Mapping[str, Any])
Runner = Callable[[TrainedRun, Path, AnalysisOptions], R]
"""``runner(run, out, options) -> result``: the analysis of a trained run, its plots written to
``out``; raises :class:`~xder_cli.runs.errors.AnalysisSkipped` (the reason) where it does not apply."""


@dataclass(frozen=True)
class TaskEndRecord:
    """What an analysis records while the run trains, after each task: ``record(loop)`` returns
    the keys it adds to that task's ``analysis`` event of ``events.jsonl`` (none: ``{}``).

    Attributes:
        always: recorded by every run (it costs nothing); else only by a run trained with
            ``run.record_analyses``, which takes every record with the method in evaluation mode.
    """

    record: Callable[[FitState], Mapping[str, object]]
    always: bool = False


@dataclass(frozen=True)
class Analysis(Generic[R]):
    """A registered analysis (:func:`register_analysis` says what each field is)."""

    name: str
    run: Runner[R]
    summary: Callable[[R], str]
    needs_records: bool = False
    recorded_keys: tuple[str, ...] = ()
    at_task_end: TaskEndRecord | None = None
    filed_as: tuple[str, ...] = ()


_ANALYSES: dict[str, Analysis[Any]] = {}


def register_analysis(
    name: str,
    *,
    summary: Callable[[R], str],
    needs_records: bool = False,
    recorded_keys: tuple[str, ...] = (),
    at_task_end: TaskEndRecord | None = None,
    filed_as: tuple[str, ...] = (),
) -> Callable[[Runner[R]], Runner[R]]:
    """Register an analysis's runner (``runner(run, out, options) -> result``, a :data:`Runner`)
    under ``name`` (``xder-run analyze --only NAME``), in the order ``xder-run analyze`` runs them.

    Args:
        summary: the result in a few words, as ``xder-run analyze`` prints it.
        needs_records: it reads what only a run trained with ``run.record_analyses`` records: on a
            run without, it is skipped (:data:`RECORD_HINT`), and asking for it by name is an error.
        recorded_keys: the keys of ``events.jsonl`` it reads that only a run trained with
            ``run.record_analyses`` writes (a run that has one of them was trained recording).
        at_task_end: what it records while the run trains (:class:`TaskEndRecord`).
        filed_as: the fields of the result that ``analysis.json`` files each under its own name
            among the analyses (empty: the result under ``name``).

    Raises:
        ValueError: ``name`` is already registered (by this package or a plugin).
    """

    def decorator(runner: Runner[R]) -> Runner[R]:
        if name in _ANALYSES:
            raise ValueError(f"analysis {name!r} is already registered")
        _ANALYSES[name] = Analysis(name, runner, summary, needs_records, recorded_keys, at_task_end, filed_as)
        return runner

    return decorator


def list_analyses() -> list[str]:
    """Registered analysis names, in the order they were registered (the paper's twelve first)."""
    return list(_ANALYSES)


def recorded_analyses() -> list[str]:
    """The analyses that read what only a run trained with ``run.record_analyses`` records."""
    return [name for name, analysis in _ANALYSES.items() if analysis.needs_records]


def recorded_keys() -> list[str]:
    """The keys of ``events.jsonl`` that only a run trained with ``run.record_analyses`` writes."""
    return [key for analysis in _ANALYSES.values() for key in analysis.recorded_keys]


def get_analysis(name: str) -> Analysis[Any]:
    """The analysis registered under ``name``.

    Raises:
        SettingError: no analysis has that name.
    """
    if name not in _ANALYSES:
        raise SettingError(f"unknown analysis {name!r}: choose from {', '.join(list_analyses())}")
    return _ANALYSES[name]


def task_end_analysis(loop: FitState, *, full: bool = True) -> dict[str, object]:
    """What a run records after each task for later analysis (``events.jsonl`` ``analysis``):
    ``event``, ``task`` (the task just finished) and what each analysis's :class:`TaskEndRecord`
    adds; ``full`` (``run.record_analyses``) adds those not recorded always, with the method in
    evaluation mode, and ``seconds``: what recording them took. The analyses that need the records
    go first, those recorded always last (the peak memory measures what the others took)."""
    record: dict[str, object] = {"event": "analysis", "task": loop.task - 1}
    hooks = [(a.at_task_end, a.needs_records) for a in _ANALYSES.values() if a.at_task_end is not None]
    if not full:
        for hook, _ in hooks:
            if hook.always:
                record.update(hook.record(loop))
        return record
    started = time.perf_counter()
    method: Any = loop.method  # a MethodBase: an nn.Module
    was_training = method.training
    method.train(False)
    for hook, _ in sorted(hooks, key=lambda pair: (pair[0].always, not pair[1])):
        record.update(hook.record(loop))
    method.train(was_training)
    record["seconds"] = time.perf_counter() - started
    return record
