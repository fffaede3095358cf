"""``ece``: the expected calibration error on the test set (15 bins), with its reliability
diagram (``reliability.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from xder_cli.runs.analyses._common import run_name, test_set_logits
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.loaded import TrainedRun
from xder_eval import expected_calibration_error, plot_reliability_diagram, reliability_bins

__all__ = ["EceResult", "analyse_ece"]


class EceResult(TypedDict):
    """``ece`` of ``analysis.json``: the ECE (a fraction), its bins, the accuracy over all
    classes (a fraction) and the plot's file name."""

    ece: float
    n_bins: int
    accuracy: float
    plot: str


def summary(value: EceResult) -> str:
    accuracy = 100 * value["accuracy"]
    return f"ECE {100 * value['ece']:.2f}% (15 bins), accuracy over all classes {accuracy:.2f}%"


@register_analysis("ece", summary=summary)
def analyse_ece(run: TrainedRun, out: Path, options: AnalysisOptions) -> EceResult:
    logits = test_set_logits(run)
    probs = logits.softmax(dim=1)
    labels = run.bench.test_y
    bins = reliability_bins(probs, labels, n_bins=15)
    plot = plot_reliability_diagram(bins, out / "reliability.png", run=run_name(run))
    return {
        "ece": expected_calibration_error(probs, labels, n_bins=15),
        "n_bins": 15,
        "accuracy": float((logits.argmax(1) == labels.cpu()).float().mean()),
        "plot": plot.name,
    }
