"""The run as a library: a run's settings layered and planned (:mod:`~xder_cli.runs.settings`, the
one owner of settings, with :mod:`~xder_cli.runs.presets`), built (:mod:`~xder_cli.runs.build`)
and trained into a run directory with resume and a lock through the one run life
(:mod:`~xder_cli.runs.lifecycle`, :mod:`~xder_cli.runs.recorder`, :mod:`~xder_cli.runs.rundir`),
logged to trackers (:mod:`~xder_cli.runs.trackers`), loaded back (:mod:`~xder_cli.runs.loaded`)
and analysed (:mod:`~xder_cli.runs.analyses`, :mod:`~xder_cli.runs.analysis_records`), and set beside
the papers' tables and claims (:mod:`~xder_cli.runs.published`, :mod:`~xder_cli.runs.claims`).
Many runs at once: trained in this process or as Ray tasks, each under its lock, retried on a
lost Ray node (:mod:`~xder_cli.runs.scheduler`), for a grid search selected on validation
(:mod:`~xder_cli.runs.sweep`) and the paper's experiments (:mod:`~xder_cli.runs.experiments`, a
registry of them). The step-time and fair-share benchmarks: :mod:`~xder_cli.runs.bench`,
:mod:`~xder_cli.runs.bench_share`. The commands of ``xder-run`` are a thin layer over it: they
parse, print and show progress (passed in as callbacks); these modules do neither. What a caller
gets wrong is a :class:`~xder_cli.runs.errors.RunError` (:mod:`~xder_cli.runs.errors`), whose
message names settings and arguments, never a command-line flag.
"""

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
