"""The backbones PNN runs on give their stages (``pnn_stages``): a chain of their own submodules
that computes their forward, each stage after the first taken before a ReLU, and whose modules
are the backbone's (a copy of the backbone copies them)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_models import create_backbone

BACKBONES = [
    ("mnist-mlp", {"in_features": 64}, (1, 8, 8), 3),
    ("resnet18-cifar", {"width": 4, "in_channels": 1}, (1, 8, 8), 5),
]


def through_stages(stages: tuple[nn.Module, ...], x: Tensor) -> Tensor:
    """``s_n(relu(s_{n-1}(... relu(s_2(s_1(x))))))``: PNN's chain with no lateral."""
    h = stages[0](x)
    for stage in stages[1:-1]:
        h = F.relu(stage(h))
    out: Tensor = stages[-1](h)
    return out


@pytest.mark.parametrize(("name", "options", "shape", "n_stages"), BACKBONES)
@pytest.mark.parametrize("training", [False, True])
def test_the_stages_chained_are_the_forward(name, options, shape, n_stages, training) -> None:
    torch.manual_seed(0)
    net = create_backbone(name, 6, **options).train(training)
    x = torch.randn(5, *shape)
    stages = net.pnn_stages()
    assert len(stages) == n_stages
    expected = copy.deepcopy(net)(x)  # a copy: train mode moves the BatchNorm statistics
    torch.testing.assert_close(through_stages(stages, x), expected, rtol=0, atol=0)
    assert stages[-1] is net.classifier


@pytest.mark.parametrize(("name", "options", "shape", "n_stages"), BACKBONES)
def test_the_stages_are_the_backbones_own_modules(name, options, shape, n_stages) -> None:
    net = create_backbone(name, 6, **options)
    owned = {id(p) for p in net.parameters()}
    staged = {id(p) for stage in net.pnn_stages() for p in stage.parameters()}
    assert staged == owned
    twin = copy.deepcopy(net)
    assert not {id(p) for stage in twin.pnn_stages() for p in stage.parameters()} & owned
