"""Settings checked against the types their targets declare (:func:`validate_section`,
:func:`coerce`): a dataclass's fields, a factory's keyword-only parameters, or a mapping of
option name -> type hint. Used by :mod:`xder_cli.runs.settings`, the one owner of settings."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from xder_cli.runs.errors import SettingError
from xder_cli.runs.records import Section

__all__ = ["coerce", "validate_section"]

_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string (in quotes)"}
_PLURALS = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}


def _describe(hint: Any, *, plural: bool = False) -> str:
    """A type hint in words: ``int | None`` -> "an integer, or unset"."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if int in options and float in options:  # an integer is a number
            options = tuple(a for a in options if a is not int)
        words = " or ".join(_describe(a, plural=plural) for a in options if a is not type(None))
        return f"{words}, or unset" if type(None) in options else words
    if origin in (tuple, list):
        (item, *_) = typing.get_args(hint) or (Any,)
        union = typing.get_origin(item) in (typing.Union, types.UnionType)
        kinds = typing.get_args(item) if union else (item,)
        example = "[35, 45]" if {int, float} & set(kinds) else '["a", "b"]' if str in kinds else None
        words = f"a list of {_describe(item, plural=True)}"
        return words if plural or example is None else f"{words}, e.g. {example}"
    if hint in _WORDS:
        return _PLURALS[hint] if plural else _WORDS[hint]
    return getattr(hint, "__name__", str(hint))


def coerce(value: Any, hint: Any, name: str) -> Any:
    """Check ``value`` against the type ``hint`` and convert it (int -> float, list -> tuple).

    Raises:
        SettingError: naming ``name``, the value and the expected type.
    """
    origin = typing.get_origin(hint)
    fail = SettingError(f"{name} = {value!r} is not valid: expected {_describe(hint)}")
    if hint is Any:
        return value
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise fail
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        for option in typing.get_args(hint):
            if option is type(None):
                continue
            try:
                return coerce(value, option, name)
            except SettingError:
                continue
        raise fail
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise fail
        (item,) = typing.get_args(hint)[:1] or (Any,)
        items = [coerce(v, item, name) for v in value]
        return tuple(items) if origin is tuple else items
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise fail
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise fail
    if hint is str:
        if isinstance(value, str):
            return value
        raise fail
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise fail


def field_hints(target: Any) -> dict[str, Any]:
    """Field name -> type hint, for a dataclass, a factory's keyword-only parameters, or a
    mapping that is already name -> type hint."""
    if isinstance(target, Mapping):
        return dict(target)
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        return {f.name: hints[f.name] for f in dataclasses.fields(target) if f.init}
    hints = typing.get_type_hints(target)
    params = inspect.signature(target).parameters
    return {p.name: hints.get(p.name, Any) for p in params.values() if p.kind is p.KEYWORD_ONLY}


def validate_section(section: str, values: Mapping[str, Any], target: Any, *, what: str) -> Section:
    """Check every key of ``values`` against ``target``'s fields and coerce its value.

    Args:
        section: the section name, for messages.
        values: the section's resolved key/values.
        target: a dataclass (run/train/method), a backbone factory, or a mapping of option
            name -> type hint (a benchmark's :func:`xder_data.benchmark_option_types`).
        what: how to name the target in messages (e.g. "method 'derpp'").
    """
    hints = field_hints(target)
    out: Section = {}
    for key, value in values.items():
        if key not in hints:
            known = ", ".join(sorted(hints)) or "no settings"
            raise SettingError(f"{section}.{key} is not a setting of {what}: it takes {known}")
        out[key] = coerce(value, hints[key], f"{section}.{key}")
    return out
