"""The paper's analyses of a trained run (Sec. 6 and its appendix), one module each, in a registry
(:mod:`~xder_cli.runs.analyses.registry`: ``@register_analysis``) that a plugin can add to.

Each module holds one analysis whole: its runner (from the trained run, loaded back by
:func:`~xder_cli.runs.loaded.load_trained_run`), its result's type, its summary line, its plot,
and what it records while the run trains. Two kinds:

* recorded while training (:func:`~xder_cli.runs.analyses.registry.task_end_analysis`, the
  ``analysis`` event of ``events.jsonl`` after each task): by every run, the Class-IL mistakes by
  head and the peak memory (``head_bias``, ``resources``); by a run trained with
  ``run.record_analyses`` also the gradient norms of stream vs replay data at sampled steps
  (``train.record_every``), the few-shot transfer of the future heads and the mean stored logits
  per class (``grad_norms``, ``future_fewshot_auc``, ``buffer_logits``). Those cost a few percent
  of a run, so they are off by default: :func:`recorded_analyses` names the analyses that need them;
* computed from the final checkpoint: calibration, secondary information, flatness, Fisher trace,
  buffer informativeness, Grad-CAM pointing (where the benchmark has masks) and secondary targets
  (where COCO-stitched data are prepared).

Results go to ``RUN_DIR/analysis/analysis.json`` (:mod:`xder_cli.runs.run_analysis`) and PNG plots
beside it. Importing this package registers the built-in analyses, in the order ``xder-run
analyze`` runs and lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The order of these imports is the registry's: the order xder-run analyze runs and lists them.
# isort: off
from xder_cli.runs.analyses import (  # noqa: F401  (each registers its analysis, in this order)
    ece,
    ss,
    head_bias,
    grad_norms,
    buffer_logits,
    future_fewshot_auc,
    resources,
    flatness,
    fisher_trace,
    buffer_informativeness,
    pointing,
    secondary_targets,
)

# isort: on
from xder_cli.runs.analyses.flatness import FLATNESS_SIGMAS
from xder_cli.runs.analyses.registry import (
    ANALYSIS_FOLDER,
    RECORD_HINT,
    Analysis,
    AnalysisOptions,
    TaskEndRecord,
    get_analysis,
    list_analyses,
    recorded_analyses,
    recorded_keys,
    register_analysis,
    task_end_analysis,
)
from xder_cli.runs.analyses.secondary_targets import probe_optimizer
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun, load_trained_run

__all__ = [
    "ANALYSES",
    "ANALYSIS_FOLDER",
    "FLATNESS_SIGMAS",
    "RECORD_HINT",
    "Analysis",
    "AnalysisOptions",
    "AnalysisSkipped",
    "TaskEndRecord",
    "TrainedRun",
    "analyse",
    "get_analysis",
    "list_analyses",
    "load_trained_run",
    "probe_optimizer",
    "recorded_analyses",
    "recorded_keys",
    "register_analysis",
    "task_end_analysis",
]

ANALYSES = tuple(list_analyses())
"""The built-in analyses, in order (:func:`list_analyses`: with those plugins registered)."""


def analyse(
    run: TrainedRun, name: str, *, out: str | Path | None = None, **options: Any
) -> Mapping[str, Any]:
    """One registered analysis (:func:`list_analyses`) on a trained run (:func:`load_trained_run`),
    its plots written to ``out`` (default: ``RUN_DIR/analysis``); returns its result. ``options``
    are the fields of :class:`AnalysisOptions` (``max_items=500``, ``buffer_epochs=70``,
    ``probe_epochs=50``, ``tolerance=0.0``, ``data_root=None``).

    Raises:
        AnalysisSkipped: the analysis does not apply to this run (the reason says why).
        SettingError: no analysis of that name.
        TypeError: an option :class:`AnalysisOptions` does not have.
    """
    analysis = get_analysis(name)
    folder = Path(out) if out is not None else run.run_dir / ANALYSIS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    result: Mapping[str, Any] = analysis.run(run, folder, AnalysisOptions(**options))
    return result
