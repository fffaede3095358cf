"""Dotted settings as text: the one reader of a dotted key (:func:`split_key`), of a value
(:func:`parse_value`), of ``section.key=value`` (:func:`parse_assignment`) and of
``section.key=V1,V2`` (:func:`parse_values`), and their way back to sections and to text. Part of
:mod:`xder_cli.runs.settings`, the one owner of settings, which exports every name here."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from typing import Any

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.records import Config

__all__ = [
    "SECTIONS",
    "parse_assignment",
    "parse_value",
    "parse_values",
    "sections",
    "settings_text",
    "split_key",
]

SECTIONS = ("run", "train", "backbone", "method", "benchmark")
"""The sections of a run's configuration, in ``config.toml``'s order."""


def split_key(dotted: str) -> tuple[str, str]:
    """``"method.alpha"`` -> ``("method", "alpha")``: the one reader of a dotted key.

    Raises:
        SettingError: not ``section.name`` with a section of :data:`SECTIONS`.
    """
    section, _, key = dotted.strip().partition(".")
    if section not in SECTIONS or not key or "." in key:
        raise SettingError(
            f"{dotted!r} is not a setting: write section.name with section one of {', '.join(SECTIONS)}, "
            "e.g. method.alpha"
        )
    return section, key


def parse_value(text: str) -> Any:
    """A setting's value as written: a TOML value (``0.2``, ``true``, ``[35, 45]``, ``"text"``), or
    the text itself where it is none (``xder``)."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_assignment(text: str) -> tuple[str, Any]:
    """``section.key=value`` -> ``("section.key", value)`` (:func:`split_key`, :func:`parse_value`).

    Raises:
        SettingError: no ``=``, or a key that is not a setting.
    """
    overrides = option("overrides")
    if "=" not in text:
        raise SettingError(
            f"{overrides} {text!r} needs the form section.key=value, e.g. {overrides} method.alpha=0.2"
        )
    dotted, raw = text.split("=", 1)
    try:
        section, key = split_key(dotted)
    except SettingError:
        raise SettingError(
            f"{overrides} {text!r}: the key must be section.name with section one of {', '.join(SECTIONS)}"
        ) from None
    return f"{section}.{key}", parse_value(raw)


def parse_values(text: str) -> tuple[str, list[Any]]:
    """``section.key=V1,V2,...`` -> ``("section.key", [V1, V2, ...])``; each value read as a TOML
    value (``0.1``, ``true``, ``"text"``, else a bare string). Values that hold commas (lists) are
    given as one TOML array: ``train.milestones=[[35, 45], [20, 40]]``.

    Raises:
        SettingError: no ``=``, a key that is not ``section.name``, no value, a repeated value.
    """
    params = option("params")
    hint = f"e.g. {params} method.alpha=0.1,0.3,0.6"
    if "=" not in text:
        raise SettingError(f"{params} {text!r} needs the form section.key=V1,V2,...: {hint}")
    dotted, raw = (part.strip() for part in text.split("=", 1))
    try:
        split_key(dotted)
    except SettingError as error:
        raise SettingError(f"{params} {text!r}: {error.template}") from None
    if raw.startswith("["):
        values = parse_value(raw)
        if not isinstance(values, list):
            raise SettingError(f"{params} {text!r}: {raw!r} is not a TOML array of values")
    else:
        items = [item.strip() for item in raw.split(",")]
        if any(not item for item in items):
            raise SettingError(f"{params} {text!r}: give one or more comma-separated values, {hint}")
        values = [parse_value(item) for item in items]
    if not values:
        raise SettingError(f"{params} {text!r}: give one or more values, {hint}")
    tokens = [json.dumps(v, sort_keys=True) for v in values]
    if len(set(tokens)) != len(tokens):
        raise SettingError(f"{params} {text!r} repeats a value")
    return dotted, values


def sections(settings: Mapping[str, Any]) -> Config:
    """Dotted settings as sections: ``{"train.lr": 0.1}`` -> ``{"train": {"lr": 0.1}}``."""
    out: Config = {}
    for dotted, value in settings.items():
        section, key = split_key(dotted)
        out.setdefault(section, {})[key] = value
    return out


def settings_text(values: Mapping[str, Any]) -> str:
    """Dotted settings as ``key=value`` pairs, values as JSON (as :func:`parse_assignment` reads
    them), e.g. ``train.epochs=1, backbone.width=4``: how overrides are named wherever results
    are shown."""
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items())
