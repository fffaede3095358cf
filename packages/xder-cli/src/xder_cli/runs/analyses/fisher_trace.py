"""``fisher_trace``: the trace of the empirical Fisher information on up to 200 training items per
task (``max_items``, at most 200)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from xder_cli.runs.analyses._common import train_subset
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.loaded import Predictor, TrainedRun
from xder_eval.analyses import fisher_trace

__all__ = ["FisherResult", "analyse_fisher"]


class FisherResult(TypedDict):
    """``fisher_trace`` of ``analysis.json``."""

    trace: float
    items_per_task: int


def summary(value: FisherResult) -> str:
    return f"Tr(F) {value['trace']:.4f}"


@register_analysis("fisher_trace", summary=summary)
def analyse_fisher(run: TrainedRun, out: Path, options: AnalysisOptions) -> FisherResult:
    data = train_subset(run, min(options.max_items, 200))
    return {
        "trace": fisher_trace(Predictor(run.method).eval(), data),
        "items_per_task": min(options.max_items, 200),
    }
