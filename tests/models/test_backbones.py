"""Every registered backbone, through the registry: shapes, protocol, backward, parameter count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

import xder_models
from xder_models import UnknownBackboneError, create_backbone, list_backbones

# name -> (options for a small instance, input shape, feature size)
SMALL = {
    "resnet18-cifar": ({"width": 8, "in_channels": 3}, (3, 16, 16), 64),
    "resnet18": ({}, (3, 32, 32), 512),
    "mnist-mlp": ({}, (1, 28, 28), 100),
    "efficientnet-b2": ({}, (3, 32, 32), 1408),
    # raw NTU joints (3, T, 25 joints, M = 2 bodies)
    "efficientgcn-b0": ({"drop_prob": 0.25}, (3, 16, 25, 2), 128),
    "efficientgcn-b2": ({}, (3, 16, 25, 2), 192),
    "efficientgcn-b4": ({"edge": False}, (3, 16, 25, 2), 272),
}
# name -> (num_classes, options, parameters): the figures of docs/data-formats.md ("Backbones").
PARAMETERS = {
    "resnet18-cifar": (100, {"width": 64, "in_channels": 3}, 11_220_132),
    "resnet18": (200, {}, 11_279_112),
    "mnist-mlp": (10, {}, 89_610),  # 784*100+100 + 100*100+100 + 100*10+10
    "efficientnet-b2": (100, {}, 7_841_894),
    "efficientgcn-b0": (60, {}, 345_333),
    "efficientgcn-b2": (60, {}, 814_401),
    "efficientgcn-b4": (60, {}, 2_055_585),
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


def test_torch_geometric_and_torchvision_are_imported_only_inside_functions() -> None:
    # torch_geometric is an optional extra, and both take seconds to import: `import xder_models` must
    # not pay for them. Checked on the source, so it holds even after another test imported them.
    package = Path(xder_models.__file__).parent
    for source in sorted(package.glob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        nested = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(name.split(".")[0] in {"torch_geometric", "torchvision"} for name in names):
                assert id(node) in nested, f"{source.name}:{node.lineno} imports {names[0]} at import time"
