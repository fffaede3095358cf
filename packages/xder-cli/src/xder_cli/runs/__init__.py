"""The run as a library: a run's settings layered and planned (:mod:`~xder_cli.runs.settings`, the
one owner of settings, with :mod:`~xder_cli.runs.presets`), built (:mod:`~xder_cli.runs.build`)
and trained into a run directory with resume and a lock through the one run life
(:mod:`~xder_cli.runs.lifecycle`, :mod:`~xder_cli.runs.recorder`, :mod:`~xder_cli.runs.rundir`),
logged to trackers (:mod:`~xder_cli.runs.trackers`), loaded back (:mod:`~xder_cli.runs.loaded`)
and analysed (:mod:`~xder_cli.runs.analyses`, one module per analysis in a registry), and set beside
the papers' tables and claims (:mod:`~xder_cli.runs.published`, :mod:`~xder_cli.runs.claims`).
Many runs at once: trained in this process or as Ray tasks, each under its lock, retried on a
lost Ray node (:mod:`~xder_cli.runs.scheduler`), for a grid search selected on validation
(:mod:`~xder_cli.runs.sweep`) and the paper's experiments (:mod:`~xder_cli.runs.experiments`, a
registry of them). The step-time and fair-share benchmarks: :mod:`~xder_cli.runs.bench`,
:mod:`~xder_cli.runs.bench_share`. The commands of ``xder-run`` are a thin layer over it: they
parse, print and show progress (passed in as callbacks); these modules do neither. What a caller
gets wrong is a :class:`~xder_cli.runs.errors.RunError` (:mod:`~xder_cli.runs.errors`), whose
message names settings and arguments, never a command-line flag.

The names below are imported on first use (PEP 562), so that importing one module of the library
(:mod:`~xder_cli.runs.errors`, :mod:`~xder_cli.runs.plugins`) loads that module alone: the
command line words its errors and loads its plugins before it parses, without the library (and
torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, imported on first use
    from xder_cli.runs.analyses import analyse
    from xder_cli.runs.errors import AnalysisSkipped, RunError
    from xder_cli.runs.lifecycle import start_run, train_run
    from xder_cli.runs.loaded import TrainedRun
    from xder_cli.runs.loaded import load_trained_run as load_run
    from xder_cli.runs.settings import RunPlan, load_plan, resolve_run

__all__ = [
    "AnalysisSkipped",
    "RunError",
    "RunPlan",
    "TrainedRun",
    "analyse",
    "load_plan",
    "load_run",
    "resolve_run",
    "start_run",
    "train_run",
]

_HOMES = {
    "analyse": ("xder_cli.runs.analyses", "analyse"),
    "AnalysisSkipped": ("xder_cli.runs.errors", "AnalysisSkipped"),
    "RunError": ("xder_cli.runs.errors", "RunError"),
    "start_run": ("xder_cli.runs.lifecycle", "start_run"),
    "train_run": ("xder_cli.runs.lifecycle", "train_run"),
    "TrainedRun": ("xder_cli.runs.loaded", "TrainedRun"),
    "load_run": ("xder_cli.runs.loaded", "load_trained_run"),
    "RunPlan": ("xder_cli.runs.settings", "RunPlan"),
    "load_plan": ("xder_cli.runs.settings", "load_plan"),
    "resolve_run": ("xder_cli.runs.settings", "resolve_run"),
}
"""Where each name of :data:`__all__` is defined (module, name there)."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'xder_cli.runs' has no attribute {name!r}")
    module, attribute = _HOMES[name]
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
