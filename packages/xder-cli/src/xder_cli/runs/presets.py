"""Presets: hyperparameter values shipped as data (TOML files in ``xder_cli/runs/presets/``).

A preset file ``<name>.toml`` holds, per benchmark, a ``protocol`` table (the benchmark's fixed
settings) and one entry per method, under ``m<buffer size>`` for methods with a buffer::

    [seq-cifar100.protocol]
    "train.epochs" = 50

    [seq-cifar100.sgd]                       # no buffer
    chosen = { "train.lr" = 0.03 }
    grid = { "train.lr" = [0.03, 0.1] }

    [seq-cifar100.m500.xder-rpc]             # an X-DER variant: an entry with its own name
    method = "xder"
    chosen = { "method.future_heads" = "rpc", "method.alpha" = 0.1 }
    grid = { "method.alpha" = [0.1, 0.3, 0.7] }

A benchmark's protocol other than ``paper`` (e.g. ``laptop``) has tables of its own, under
``"<benchmark>:<protocol>"``::

    ["seq-cifar10:laptop".m200.derpp]
    chosen = { "train.lr" = 0.03 }

Keys are a run configuration's ``section.key``. ``chosen`` is what preset ``NAME`` applies (with
the protocol); ``grid`` is what was searched, for ``xder-run sweep --grid NAME:BENCH:BUFFER:ENTRY``.
An entry is named after its method unless ``method`` says otherwise; preset ``NAME:ENTRY`` picks
such an entry. ``none`` is built in: the benchmark's protocol plus the method's own defaults. The
default preset of a run is the first of :data:`DEFAULT_ORDER` with an entry for its benchmark,
protocol, buffer size and method, else ``none``.

What the papers published (``papers/published.toml``, ``papers/published_analyses.toml``,
keyed the same way: :mod:`xder_cli.runs.published`) and claimed (``papers/claims.toml``:
:mod:`xder_cli.runs.claims`) is not a preset: it lives in ``papers/`` beside this folder.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.records import Settings
from xder_data import DEFAULT_PROTOCOL, canonical_protocol

__all__ = [
    "DEFAULT_ORDER",
    "PresetEntry",
    "choose_preset",
    "default_preset",
    "list_presets",
    "preset_entries",
    "preset_entry",
    "preset_values",
    "split_preset",
    "table_key",
]

DEFAULT_ORDER = ("tuned", "paper")


def table_key(benchmark: str, protocol: str = DEFAULT_PROTOCOL) -> str:
    """The preset table of a benchmark under a protocol: ``seq-cifar10`` (its full protocol) or
    ``seq-cifar10:laptop``."""
    protocol = canonical_protocol(protocol)
    return benchmark if protocol == DEFAULT_PROTOCOL else f"{benchmark}:{protocol}"


def _split_table(key: str) -> tuple[str, str]:
    benchmark, _, protocol = key.partition(":")
    return benchmark, protocol or DEFAULT_PROTOCOL


@dataclass(frozen=True)
class PresetEntry:
    """One (benchmark, buffer size, entry) of a preset.

    Attributes:
        preset: the preset's name.
        benchmark: the benchmark.
        protocol: the benchmark's protocol the entry is for (``paper`` unless a table is named
            ``"<benchmark>:<protocol>"``).
        buffer_size: the buffer size the entry is for (None: a method without a buffer).
        name: the entry's name (the method's, or a variant's such as ``xder-rpc``).
        method: the registered method it runs.
        chosen: ``"section.key" -> value`` selected by the preset's authors.
        grid: ``"section.key" -> [values]`` they searched.
        protocol: ``"section.key" -> value``, the benchmark's fixed settings.
    """

    preset: str
    benchmark: str
    buffer_size: int | None
    name: str
    method: str
    chosen: Settings = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    fixed: Settings = field(default_factory=dict)
    """The preset's ``protocol`` table: settings it fixes for every method of the benchmark."""
    protocol: str = DEFAULT_PROTOCOL


def split_preset(text: str) -> tuple[str, str | None]:
    """``"paper:xder-rpc"`` -> ``("paper", "xder-rpc")``; ``"paper"`` -> ``("paper", None)``."""
    name, _, entry = text.partition(":")
    return name, entry or None


def list_presets() -> list[str]:
    """``none`` and every preset file shipped with xder-cli (``presets/<name>.toml``)."""
    folder = resources.files("xder_cli.runs") / "presets"
    names = (
        [p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml")]
        if folder.is_dir()
        else []
    )
    return ["none", *sorted(names)]


@functools.cache
def _load(name: str) -> dict[str, Any]:
    if name not in list_presets() or name == "none":
        raise SettingError(f"unknown preset {name!r}: choose one of {', '.join(list_presets())}")
    text = (resources.files("xder_cli.runs") / "presets" / f"{name}.toml").read_text()
    return tomllib.loads(text)


def _entry(preset: str, table: str, buffer_size: int | None, name: str, raw: dict[str, Any]) -> PresetEntry:
    benchmark, protocol = _split_table(table)
    return PresetEntry(
        preset=preset,
        benchmark=benchmark,
        buffer_size=buffer_size,
        name=name,
        method=raw.get("method", name),
        chosen=dict(raw.get("chosen", {})),
        grid={k: list(v) for k, v in raw.get("grid", {}).items()},
        fixed=dict(_load(preset).get(table, {}).get("protocol", {})),
        protocol=protocol,
    )


def preset_entries(preset: str) -> list[PresetEntry]:
    """Every entry of preset ``preset`` (for listings and tests)."""
    out = []
    for table, tables in _load(preset).items():
        for key, raw in tables.items():
            if key == "protocol":
                continue
            if key.startswith("m") and key[1:].isdigit():
                out += [_entry(preset, table, int(key[1:]), name, e) for name, e in raw.items()]
            else:
                out.append(_entry(preset, table, None, key, raw))
    return out


def preset_entry(
    preset: str,
    benchmark: str,
    buffer_size: int | None,
    entry: str,
    *,
    method: str | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> PresetEntry:
    """The entry ``entry`` of ``preset`` for ``benchmark`` under ``protocol`` at ``buffer_size``
    (an entry without a buffer level serves every buffer size).

    Args:
        method: when given, the entry must run this method.

    Raises:
        SettingError: unknown preset, no such entry (the message lists the buffer sizes and entries
            the preset has), or an entry of another method.
    """
    table = table_key(benchmark, protocol)
    tables = _load(preset).get(table, {})
    raw = tables.get(f"m{buffer_size}", {}).get(entry) if buffer_size is not None else None
    level: int | None = buffer_size
    if raw is None and isinstance(tables.get(entry), dict) and entry != "protocol":
        raw, level = tables[entry], None
    if raw is None:
        sizes = sorted(int(k[1:]) for k in tables if k.startswith("m") and k[1:].isdigit())
        where = f"buffer {buffer_size}" if buffer_size is not None else "no buffer"
        on = f"{benchmark!r}" + ("" if protocol == DEFAULT_PROTOCOL else f" (protocol {protocol!r})")
        hint = f"it has buffer sizes {', '.join(map(str, sizes))}" if sizes else f"it has no values for {on}"
        raise SettingError(
            f"preset {preset!r} has no entry {entry!r} for {on} with {where} ({hint}): "
            f"use {option('preset')} none (protocol + the method's defaults) or another "
            f"{option('buffer_size')}"
        )
    found = _entry(preset, table, level, entry, raw)
    if method is not None and found.method != method:
        raise SettingError(
            f"preset entry {preset}:{entry} is for method {found.method!r}, not {method!r}: "
            f"pass {option('method')} {found.method}"
        )
    return found


def preset_values(
    preset: str,
    benchmark: str,
    method: str,
    buffer_size: int | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> Settings:
    """The settings preset ``preset`` (``NAME`` or ``NAME:ENTRY``) gives a run, as dotted keys: the
    benchmark's fixed settings, then the entry's chosen values; ``{}`` for ``none``.

    Raises:
        SettingError: unknown preset, or no entry for this benchmark, protocol, buffer size and
            method.
    """
    name, entry = split_preset(preset)
    if name == "none":
        return {}
    found = preset_entry(name, benchmark, buffer_size, entry or method, method=method, protocol=protocol)
    return {**found.fixed, **found.chosen}


def choose_preset(
    preset: str | None,
    benchmark: str,
    method: str,
    buffer_size: int | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> tuple[str, Settings]:
    """The preset a run takes and the settings it gives (:func:`preset_values`), each entry
    looked up once: ``preset`` itself, or where None, the first of :data:`DEFAULT_ORDER` with an
    entry for (benchmark, protocol, buffer size, method), else ``none``.

    Raises:
        SettingError: a named preset that is unknown or has no such entry.
    """
    if preset is not None:
        return preset, preset_values(preset, benchmark, method, buffer_size, protocol)
    available = list_presets()
    for name in DEFAULT_ORDER:
        if name not in available:
            continue
        try:
            found = preset_entry(name, benchmark, buffer_size, method, method=method, protocol=protocol)
        except SettingError:
            continue
        return name, {**found.fixed, **found.chosen}
    return "none", {}


def default_preset(
    benchmark: str, method: str, buffer_size: int | None = None, protocol: str = DEFAULT_PROTOCOL
) -> str:
    """The preset used when none is named (:func:`choose_preset`): the first of ``tuned``,
    ``paper`` with an entry for (benchmark, protocol, buffer size, method), else ``none``."""
    return choose_preset(None, benchmark, method, buffer_size, protocol)[0]
