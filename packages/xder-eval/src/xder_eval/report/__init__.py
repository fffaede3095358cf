"""Table-1-style reports over many runs: FAA (FF) as mean ± std over seeds, curves, heat maps.

The input is what a run directory holds, already parsed (:class:`RunRecord`: its path, the
sections of ``config.toml`` and the ``results.json`` object); this package reads no file. A
:class:`Report` is built in three steps:

1. **Status.** A run enters the means only when its results say ``complete: true``, name a
   scenario the report knows (``scenario``, ``class-il`` where absent; the caller gives each
   scenario's :class:`ScenarioFacts`, class-il alone by default) and hold the accuracy matrices
   that scenario reports. Every other run is listed as a :class:`RunProblem` (no
   ``results.json``, unreadable files, ``complete: false`` with the number of tasks done)
   instead of failing the report.
2. **Grouping.** Complete runs are grouped by ``(benchmark, buffer size, method, preset,
   settings, scenario)``. ``settings`` names the configuration keys on which runs of the same method and
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
3. **Table.** One row per (method, preset, settings), one column per (benchmark, buffer size),
   each column of one scenario; the columns of scenarios whose accuracy is the same name make one
   table (:meth:`Report.tables`: Class-IL, Domain-IL, a general stream's Accuracy with no FF,
   Task-IL), so runs of two scenarios are never one table.
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
(:mod:`xder_eval.metrics`), each scenario's own accuracy by default and Task-IL on request (an
error where a scenario has none); an accuracy a scenario does not report is no column, CSV value
(empty) or JSON statistics (null).

matplotlib (the ``[plots]`` extra) is imported only when a plot is drawn.

The package's modules: :mod:`~xder_eval.report.records` (what a report reads and holds),
:mod:`~xder_eval.report.statistics` (the statistics over seeds, public for every aggregate over
seeds), :mod:`~xder_eval.report.grouping` (steps 1 and 2), :mod:`~xder_eval.report.table` (steps 3
and 4), :mod:`~xder_eval.report.render` (Markdown, CSV, JSON) and :mod:`~xder_eval.report.figures`.
Every public name is here.
"""

from xder_eval.report.figures import file_token, plot_report_curves, plot_report_matrix
from xder_eval.report.grouping import group_runs, summarize_group
from xder_eval.report.records import (
    CLASS_IL,
    RUN_IDENTITY_KEYS,
    GroupKey,
    GroupSummary,
    Report,
    ReportColumn,
    ReportRow,
    ReportTable,
    RunProblem,
    RunRecord,
    ScenarioFacts,
)
from xder_eval.report.render import CSV_COLUMNS, report_csv, report_dict, report_markdown, report_problems
from xder_eval.report.statistics import (
    RepeatedSeed,
    SeedStats,
    SettingSummary,
    columnwise_mean_std,
    count_each_seed_once,
    seed_stats,
    summarize_setting,
)
from xder_eval.report.table import build_report, group_title

__all__ = [
    "CLASS_IL",
    "CSV_COLUMNS",
    "RUN_IDENTITY_KEYS",
    "GroupKey",
    "GroupSummary",
    "RepeatedSeed",
    "Report",
    "ReportColumn",
    "ReportRow",
    "ReportTable",
    "RunProblem",
    "RunRecord",
    "ScenarioFacts",
    "SeedStats",
    "SettingSummary",
    "build_report",
    "columnwise_mean_std",
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
    "seed_stats",
    "summarize_group",
    "summarize_setting",
]
