"""``pointing``: the pointing game of the Grad-CAM saliency against the test set's object masks
(where the benchmark has masks and the backbone names a Grad-CAM layer)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from xder_cli.runs.analyses._common import grad_cam
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import Predictor, TrainedRun
from xder_eval import pointing_accuracy

__all__ = ["PointingResult", "analyse_pointing"]


class PointingResult(TypedDict):
    """``pointing`` of ``analysis.json``: the mean accuracy over classes, over items, and the
    tolerance (pixels)."""

    accuracy: float
    overall_accuracy: float
    tolerance: float


def summary(value: PointingResult) -> str:
    return f"pointing accuracy {100 * value['accuracy']:.2f}% (tolerance {value['tolerance']} px)"


@register_analysis("pointing", summary=summary)
def analyse_pointing(run: TrainedRun, out: Path, options: AnalysisOptions) -> PointingResult:
    masks = run.bench.test_masks
    if masks is None:
        raise AnalysisSkipped(f"{run.bench.name} has no object masks (Split CUB-200 has)")
    net = run.method.net
    layer = getattr(net, "gradcam_layer", None)
    if layer is None:
        raise AnalysisSkipped("the backbone names no Grad-CAM layer")
    model = Predictor(run.method)
    x = run.bench.test_transform(run.bench.test_x)
    saliency = grad_cam(model, layer, x, run.bench.test_y)
    result = pointing_accuracy(saliency, masks, run.bench.test_y, tolerance=options.tolerance)
    run.method.train(False)
    return {
        "accuracy": result.accuracy,
        "overall_accuracy": result.overall_accuracy,
        "tolerance": options.tolerance,
    }
