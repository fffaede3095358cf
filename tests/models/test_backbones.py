"""Every registered backbone, through the registry: shapes, protocol, backward, parameter count."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from xder_models import UnknownBackboneError, create_backbone, list_backbones

# name -> (options for a small instance, input shape, feature size)
SMALL = {
    "resnet18-cifar": ({"width": 8, "in_channels": 3}, (3, 16, 16), 64),
}
# name -> (num_classes, options, parameters): the figures of DATA-FORMATS.md.
PARAMETERS = {
    "resnet18-cifar": (100, {"width": 64, "in_channels": 3}, 11_220_132),
}


def test_every_backbone_is_covered_here() -> None:
    assert set(list_backbones()) == set(SMALL) == set(PARAMETERS)


@pytest.mark.parametrize("name", list_backbones())
def test_protocol_shapes_and_backward(name: str) -> None:
    options, shape, features = SMALL[name]
    torch.manual_seed(0)
    net = create_backbone(name, 7, **options).eval()
    x = torch.randn(2, *shape)
    assert net.num_features == features
    f = net.forward_features(x)
    assert f.shape == (2, features)
    out = net(x)
    assert out.shape == (2, 7)
    torch.testing.assert_close(out, net.forward_head(f))
    net.train()
    net(x).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert isinstance(net.gradcam_layer, nn.Module)
    assert any(m is net.gradcam_layer for m in net.modules())


@pytest.mark.parametrize("name", list_backbones())
def test_parameter_count(name: str) -> None:
    classes, options, expected = PARAMETERS[name]
    net = create_backbone(name, classes, **options)
    assert sum(p.numel() for p in net.parameters()) == expected


def test_resnet18_cifar_layout() -> None:
    net = create_backbone("resnet18-cifar", 10, width=16, in_channels=1)
    assert net.conv1.kernel_size == (3, 3)
    assert net.conv1.stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in net.modules())
    assert [len(layer) for layer in (net.layer1, net.layer2, net.layer3, net.layer4)] == [
        2,
        2,
        2,
        2,
    ]
    assert net(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_unknown_backbone_and_option() -> None:
    with pytest.raises(UnknownBackboneError, match="resnet18-cifar"):
        create_backbone("resnet99", 10)
    with pytest.raises(UnknownBackboneError, match="depth"):
        create_backbone("resnet18-cifar", 10, depth=3)
