"""PNN on the backbones it runs on (xder-models' ``pnn_stages``): its laterals have the shapes of the
authors' (mammoth ``backbone/MNISTMLP_PNN.py``, ``backbone/ResNet18_PNN.py``), column 0 is the
backbone, and a step trains the newest column alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xder_methods import PNN, Batch, ContinualSetting, PNNConfig, Transforms
from xder_models import create_backbone


def to_float(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return x.float() / 255


def pnn(name: str, **options: object) -> PNN:
    torch.manual_seed(0)
    setting = ContinualSetting((2, 2, 2), (1, 8, 8), scenario="task-il")
    net = create_backbone(name, 6, **options)
    return PNN(net, setting, Transforms(to_float, to_float), PNNConfig(), torch.Generator().manual_seed(0))


def shapes(method: PNN, column: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(alpha, W) shapes of each lateral of ``column``."""
    return [(tuple(a.alpha.shape), tuple(a.weight.shape)) for a in method.laterals[column - 1]]


def test_the_mlps_laterals_join_fc2_and_the_logits_as_the_authors() -> None:
    """MNISTMLP_PNN: adaptor1 = alpha(100 k) -> Linear(100 k, 100) -> ReLU -> Linear(100, 100) into
    fc2; adaptor2 = alpha(100 k) -> Linear(100 k, 100) -> ReLU -> Linear(100, C) into the logits."""
    method = pnn("mnist-mlp", in_features=64)
    assert shapes(method, 1) == [((1, 100), (100, 100)), ((1, 100), (100, 100))]
    assert shapes(method, 2) == [((1, 200), (100, 200)), ((1, 200), (100, 200))]
    uppers = [(a.upper.in_features, a.upper.out_features) for a in method.laterals[1]]
    assert uppers == [(100, 100), (100, 6)]


def test_the_resnets_laterals_join_layers_2_to_4_and_the_logits_as_the_authors() -> None:
    """ResNet18_PNN (nf = w): adaptor i (i = 1..3) = alpha(w 2^(i-1) k, H/2^(i-1), W/2^(i-1)) ->
    1x1 conv to w 2^(i-1) -> ReLU -> a fresh layer i+1, into layer i+1's output; adaptor4 =
    alpha(8 w k) on the pooled layer4 -> 1x1 conv to 8 w -> ReLU -> Linear(8 w, C), into the logits."""
    method = pnn("resnet18-cifar", width=4, in_channels=1)
    assert shapes(method, 2) == [
        ((1, 8, 8, 8), (4, 8)),
        ((1, 16, 4, 4), (8, 16)),
        ((1, 32, 2, 2), (16, 32)),
        ((1, 64), (32, 64)),
    ]
    layer4_copy = method.laterals[1][2].upper[0]
    assert [tuple(b.conv1.weight.shape) for b in layer4_copy] == [(32, 16, 3, 3), (32, 32, 3, 3)]


@pytest.mark.parametrize(
    ("name", "options"),
    [("mnist-mlp", {"in_features": 64}), ("resnet18-cifar", {"width": 4, "in_channels": 1})],
)
def test_column_0_is_the_backbone_and_a_step_trains_the_newest_column(name, options) -> None:
    method = pnn(name, **options)
    x_raw = torch.randint(0, 256, (8, 1, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    x = to_float(x_raw)
    method.eval()
    with torch.no_grad():
        torch.testing.assert_close(method.forward_columns(x, 0)[0], method.net(x))
    method.begin_task(1)
    method.train(True)
    before = {k: v.clone() for k, v in method.state_dict().items() if torch.is_tensor(v)}
    optimizer = torch.optim.SGD(method.optimizer_parameters(), lr=0.1)
    loss = method.observe(Batch(x, torch.tensor([2, 3] * 4), x_raw, 1)).loss
    assert loss is not None
    loss.backward()
    optimizer.step()
    after = method.state_dict()
    moved = {k.split(".")[0] + "." + k.split(".")[1] for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"columns.0", "laterals.0"}
    assert all(p.grad is None for p in method.net.parameters())
    assert F.softmax(method.predict(x), 1).shape == (8, 6)
