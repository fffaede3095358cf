"""The method registry: ``@register_method("name", ConfigClass)`` on each method class."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

from xder_methods.core.errors import UnknownMethodError
from xder_methods.core.protocols import ContinualMethod, ContinualSetting, MethodConfig, Transforms

if TYPE_CHECKING:
    from xder_methods.core.schedule import TrainingSchedule

__all__ = [
    "check_schedule",
    "create_method",
    "list_methods",
    "method_class",
    "method_config_class",
    "register_method",
    "registered_name",
]

_METHODS: dict[str, tuple[type, type]] = {}
M = TypeVar("M", bound=type)


def register_method(name: str, config: type) -> Callable[[M], M]:
    """Register a method class and its frozen config dataclass under ``name``.

    A config with rules on the loop's :class:`~xder_methods.TrainingSchedule` subclasses
    :class:`~xder_methods.MethodConfig` and overrides its ``check_schedule``, raising
    :class:`~xder_methods.MethodConfigError` for a schedule it cannot train with
    (:func:`check_schedule` calls it).
    """
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"the config of method {name!r} must be a dataclass")

    def decorator(cls: M) -> M:
        if name in _METHODS:
            raise ValueError(f"method {name!r} is already registered")
        _METHODS[name] = (cls, config)
        return cls

    return decorator


def check_schedule(config: object, schedule: TrainingSchedule) -> None:
    """Apply a method config's own rules on the training schedule
    (:meth:`MethodConfig.check_schedule <xder_methods.MethodConfig.check_schedule>`; a config that
    is no :class:`~xder_methods.MethodConfig` has none): e.g. JT in ``final`` mode trains only at
    the benchmark's last task, so a schedule shortened by ``tasks`` would train nothing.

    Raises:
        MethodConfigError: the method cannot train with ``schedule``.
    """
    if isinstance(config, MethodConfig):
        config.check_schedule(schedule)


def list_methods() -> list[str]:
    """Registered method names, sorted."""
    return sorted(_METHODS)


def registered_name(cls: type) -> str:
    """The name ``cls`` is registered under, else that of its nearest registered base class,
    else the class's own name (what a method's messages call it)."""
    names = {registered: name for name, (registered, _) in _METHODS.items()}
    return next((names[base] for base in cls.__mro__ if base in names), cls.__name__)


def _lookup(name: str) -> tuple[type, type]:
    if name not in _METHODS:
        raise UnknownMethodError(f"unknown method {name!r}: choose one of {', '.join(list_methods())}")
    return _METHODS[name]


def method_class(name: str) -> type:
    """The class registered under ``name``."""
    return _lookup(name)[0]


def method_config_class(name: str) -> type:
    """The config dataclass of method ``name`` (its defaults are the paper's values)."""
    return _lookup(name)[1]


def create_method(
    name: str,
    *,
    net: nn.Module,
    setting: ContinualSetting,
    transforms: Transforms,
    config: object | None = None,
    generator: torch.Generator | None = None,
) -> ContinualMethod:
    """Build method ``name`` around ``net`` (already on the training device).

    Args:
        config: an instance of :func:`method_config_class` (default: its defaults).
        generator: the source of every random draw the method makes (buffer sampling,
            augmentation of buffer items); on the training device.
    """
    cls, config_cls = _lookup(name)
    if config is None:
        config = config_cls()
    if not isinstance(config, config_cls):
        raise TypeError(f"method {name!r} takes a {config_cls.__name__}, got {type(config).__name__}")
    method: ContinualMethod = cls(net, setting, transforms, config, generator)
    return method
