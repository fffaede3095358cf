"""``secondary_targets``: a linear multi-label probe on the frozen backbone, trained on the
COCO-stitched data (where it is prepared), its F1 on the secondary targets and, where the data
has masks, the pointing game of its Grad-CAM saliency at them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_cli.runs.analyses._common import AsMethod, grad_cam
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun, predict_all
from xder_data import benchmark_defaults, load_benchmark
from xder_eval import pointing_accuracy, secondary_target_f1

__all__ = ["SecondaryTargetsResult", "analyse_secondary_targets", "probe_optimizer"]


class SecondaryTargetsResult(TypedDict):
    """``secondary_targets`` of ``analysis.json``."""

    f1: float
    probe_epochs: int
    pointing_accuracy: NotRequired[float]


class _Probe(nn.Module):
    """Frozen backbone features followed by a trainable linear multi-label classifier."""

    def __init__(self, net: nn.Module, classes: int) -> None:
        super().__init__()
        self.net = net
        backbone: Any = net  # a Backbone: forward_features, num_features
        self.linear = nn.Linear(int(backbone.num_features), classes).to(next(net.parameters()).device)

    def forward(self, x: Tensor) -> Tensor:
        backbone: Any = self.net
        return cast(Tensor, self.linear(backbone.forward_features(x)))


def probe_optimizer(linear: nn.Module) -> tuple[torch.optim.SGD, int]:
    """The linear probe's SGD and batch size: the ``coco-stitch`` protocol's (its lr, momentum,
    weight decay and batch; the paper states only SGD and 50 epochs)."""
    protocol = benchmark_defaults("coco-stitch")
    optimizer = torch.optim.SGD(
        linear.parameters(), lr=protocol.lr, momentum=protocol.momentum, weight_decay=protocol.weight_decay
    )
    return optimizer, protocol.batch_size


def summary(value: SecondaryTargetsResult) -> str:
    extra = f", pointing {100 * value['pointing_accuracy']:.2f}%" if "pointing_accuracy" in value else ""
    return f"F1 {value['f1']:.4f}{extra}"


@register_analysis("secondary_targets", summary=summary)
def analyse_secondary_targets(run: TrainedRun, out: Path, options: AnalysisOptions) -> SecondaryTargetsResult:
    from xder_data import DataError

    try:
        stitched = load_benchmark(
            "coco-stitch", options.data_root or run.plan.settings.data_root, device=run.device
        )
    except (DataError, ValueError) as error:
        raise AnalysisSkipped(f"COCO-stitched data not available ({str(error).splitlines()[0]})") from error
    if stitched.train_secondary_y is None or stitched.test_secondary_y is None:
        raise AnalysisSkipped("the coco-stitch benchmark carries no secondary labels")
    net = run.method.net
    for p in net.parameters():
        p.requires_grad_(False)
    probe = _Probe(net, stitched.num_classes)
    net.eval()
    optimizer, batch = probe_optimizer(probe.linear)
    generator = torch.Generator(device=run.device).manual_seed(0)
    n = stitched.train_y.shape[0]
    targets = F.one_hot(stitched.train_y, stitched.num_classes) | F.one_hot(
        stitched.train_secondary_y, stitched.num_classes
    )
    for _ in range(options.probe_epochs):
        order = torch.randperm(n, generator=generator, device=run.device)
        for s in range(0, n, batch):
            rows = order[s : s + batch]
            with torch.no_grad():
                features = net.forward_features(stitched.train_transform(stitched.train_x[rows], generator))
            loss = F.binary_cross_entropy_with_logits(probe.linear(features), targets[rows].float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        scores = predict_all(AsMethod(probe), stitched.test_x, stitched.test_transform).sigmoid()
    f1 = secondary_target_f1(scores, stitched.test_y, stitched.test_secondary_y)
    result: SecondaryTargetsResult = {"f1": f1, "probe_epochs": options.probe_epochs}
    if stitched.test_masks is not None and getattr(net, "gradcam_layer", None) is not None:
        for p in net.parameters():
            p.requires_grad_(True)  # Grad-CAM needs the gradient at the backbone's layer
        x = stitched.test_transform(stitched.test_x)
        saliency = grad_cam(probe, net.gradcam_layer, x, stitched.test_secondary_y)
        pointing = pointing_accuracy(
            saliency, stitched.test_masks, stitched.test_secondary_y, tolerance=options.tolerance
        )
        result["pointing_accuracy"] = pointing.accuracy
    return result
