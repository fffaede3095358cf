"""xder-models: backbones behind one interface, built by name with :func:`create_backbone`."""

from xder_models import resnet as _resnet  # noqa: F401  (registers resnet18-cifar)
from xder_models._registry import (
    UnknownBackboneError,
    backbone_factory,
    backbone_options,
    create_backbone,
    list_backbones,
    register_backbone,
)
from xder_models.resnet import BasicBlock, ResNet18CIFAR

__all__ = [
    "BasicBlock",
    "ResNet18CIFAR",
    "UnknownBackboneError",
    "backbone_factory",
    "backbone_options",
    "create_backbone",
    "list_backbones",
    "register_backbone",
]
