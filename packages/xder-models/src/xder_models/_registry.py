"""The backbone registry: filled by ``@register_backbone`` in the model modules."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = [
    "UnknownBackboneError",
    "backbone_factory",
    "backbone_options",
    "create_backbone",
    "list_backbones",
    "register_backbone",
]

BackboneFactory = Callable[..., nn.Module]
_REGISTRY: dict[str, BackboneFactory] = {}


class UnknownBackboneError(ValueError):
    """No backbone is registered under the requested name, or an option it does not take."""


def register_backbone(name: str) -> Callable[[BackboneFactory], BackboneFactory]:
    """Register ``factory(num_classes, **options) -> nn.Module`` under ``name``."""

    def decorator(factory: BackboneFactory) -> BackboneFactory:
        if name in _REGISTRY:
            raise ValueError(f"backbone {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorator


def list_backbones() -> list[str]:
    """Registered backbone names, sorted."""
    return sorted(_REGISTRY)


def backbone_factory(name: str) -> BackboneFactory:
    """The registered factory ``(num_classes, **options) -> nn.Module`` of ``name``."""
    return _factory(name)


def _factory(name: str) -> BackboneFactory:
    if name not in _REGISTRY:
        raise UnknownBackboneError(f"unknown backbone {name!r}: choose one of {', '.join(list_backbones())}")
    return _REGISTRY[name]


def backbone_options(name: str) -> dict[str, Any]:
    """The keyword options a backbone takes, with their defaults (``inspect.Parameter.empty``
    where there is none)."""
    params = inspect.signature(_factory(name)).parameters
    return {p.name: p.default for p in params.values() if p.kind is p.KEYWORD_ONLY}


def create_backbone(name: str, num_classes: int, **options: Any) -> nn.Module:
    """Build a registered backbone.

    The result satisfies the backbone protocol: ``forward(x) -> logits (B, num_classes)``,
    ``forward_features(x) -> (B, num_features)``, ``forward_head(features) -> logits``,
    ``num_features`` and ``gradcam_layer`` (the module Grad-CAM should hook).
    """
    factory = _factory(name)
    known = backbone_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UnknownBackboneError(
            f"backbone {name!r} has no option {', '.join(map(repr, unknown))}: "
            f"it takes {', '.join(sorted(known)) or 'no options'}"
        )
    return factory(num_classes, **options)
