"""``ss``: the super-class error and negative log-likelihood of the test set's mistakes (where the
benchmark has super-classes), filed in ``analysis.json`` as ``ss_err`` and ``ss_nll``."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from xder_cli.runs.analyses._common import test_set_logits
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun
from xder_eval import superclass_error, superclass_nll

__all__ = ["SsResult", "analyse_ss"]


class SsResult(TypedDict):
    """SS-ERR and SS-NLL, each filed under its own name."""

    ss_err: float
    ss_nll: float


def summary(value: SsResult) -> str:
    return f"SS-ERR {value['ss_err']:.4f}, SS-NLL {value['ss_nll']:.4f}"


@register_analysis("ss", summary=summary, filed_as=("ss_err", "ss_nll"))
def analyse_ss(run: TrainedRun, out: Path, options: AnalysisOptions) -> SsResult:
    coarse = run.bench.coarse_labels
    if coarse is None:
        raise AnalysisSkipped(f"{run.bench.name} has no super-classes")
    logits = test_set_logits(run)
    return {
        "ss_err": superclass_error(logits, run.bench.test_y, coarse),
        "ss_nll": superclass_nll(logits, run.bench.test_y, coarse),
    }
