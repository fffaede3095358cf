"""The DER paper's MNIST MLP: its layout, its initialisation (the authors' ``xavier``) and its forward."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from xder_models import MNISTMLP, create_backbone
from xder_models.mlp import xavier_uniform_


def test_layout_is_784_100_100_classes() -> None:
    net = create_backbone("mnist-mlp", 10)
    assert isinstance(net, MNISTMLP)
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 100), (100, 100), (100, 10)]
    assert [name for name, _ in net.named_parameters(remove_duplicate=False)] == [
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "classifier.weight", "classifier.bias",
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["mnist-mlp", "resnet18-cifar", "resnet18", "efficientnet-b2"])
def test_no_backbone_registers_a_module_under_two_names(name: str) -> None:
    """A module reachable under two names comes back from torch.func.functional_call (per-example
    gradients: GSS's scores, oEWC's Fisher) with new parameter objects that the optimiser does not
    hold, so those layers stop training."""
    net = create_backbone(name, 10)
    assert len(list(net.named_modules(remove_duplicate=False))) == len(list(net.named_modules()))


def test_features_are_after_the_second_relu_and_logits_a_linear_map_of_them() -> None:
    torch.manual_seed(0)
    net = MNISTMLP(10).eval()
    x = torch.rand(3, 1, 28, 28)
    flat = x.flatten(1)
    hidden = torch.relu(flat @ net.fc1.weight.T + net.fc1.bias)
    expected = torch.relu(hidden @ net.fc2.weight.T + net.fc2.bias)
    torch.testing.assert_close(net.forward_features(x), expected)
    assert (net.forward_features(x) >= 0).all()
    torch.testing.assert_close(net(x), expected @ net.classifier.weight.T + net.classifier.bias)


@pytest.mark.parametrize(("fan_in", "fan_out"), [(784, 100), (100, 100), (100, 10)])
def test_init_is_the_authors_xavier_uniform(fan_in: int, fan_out: int) -> None:
    torch.manual_seed(0)
    net = MNISTMLP(10)
    layer = next(m for m in net.modules() if isinstance(m, nn.Linear) and m.weight.shape == (fan_out, fan_in))
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (fan_in + fan_out))
    w = layer.weight.detach()
    assert w.abs().max() <= bound
    assert w.abs().max() > 0.95 * bound  # uniform over the whole interval, not a narrower default
    assert abs(w.std().item() - bound / math.sqrt(3.0)) < 0.1 * bound / math.sqrt(3.0)
    assert torch.equal(layer.bias.detach(), torch.zeros(fan_out))


def test_xavier_helper_matches_by_hand() -> None:
    layer = nn.Linear(6, 2)
    torch.manual_seed(1)
    xavier_uniform_(layer)
    torch.manual_seed(1)
    expected = torch.empty(2, 6).uniform_(-math.sqrt(3 * 2 / 8), math.sqrt(3 * 2 / 8))
    torch.testing.assert_close(layer.weight.detach(), expected)
    assert torch.equal(layer.bias.detach(), torch.zeros(2))


def test_in_features_is_an_option() -> None:
    net = create_backbone("mnist-mlp", 4, in_features=64)
    assert net(torch.rand(2, 1, 8, 8)).shape == (2, 4)
    with pytest.raises(ValueError, match="positive"):
        MNISTMLP(0)
