"""xder-models: backbones behind one interface, built by name with :func:`create_backbone`."""

from __future__ import annotations

# Each model module registers its backbones on import: these imports fill the registry.
from xder_models import efficientgcn as _efficientgcn  # noqa: F401  (efficientgcn-b0, -b2, -b4)
from xder_models import efficientnet as _efficientnet  # noqa: F401  (efficientnet-b2)
from xder_models import mlp as _mlp  # noqa: F401  (mnist-mlp)
from xder_models import resnet as _resnet  # noqa: F401  (resnet18-cifar)
from xder_models import resnet_imagenet as _resnet_imagenet  # noqa: F401  (resnet18)
from xder_models._registry import (
    UnknownBackboneError,
    backbone_factory,
    backbone_options,
    create_backbone,
    list_backbones,
    register_backbone,
)
from xder_models._weights import BackboneWeightsError
from xder_models.efficientgcn import EfficientGCN
from xder_models.efficientnet import EfficientNetB2
from xder_models.mlp import MNISTMLP
from xder_models.resnet import BasicBlock, ResNet18CIFAR
from xder_models.resnet_imagenet import ResNet18

__all__ = [
    "MNISTMLP",
    "BackboneWeightsError",
    "BasicBlock",
    "EfficientGCN",
    "EfficientNetB2",
    "ResNet18",
    "ResNet18CIFAR",
    "UnknownBackboneError",
    "backbone_factory",
    "backbone_options",
    "create_backbone",
    "list_backbones",
    "register_backbone",
]
