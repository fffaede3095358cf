"""Presets: hyperparameter values shipped as data (TOML files in ``xder_cli/presets/``).

A preset file ``<name>.toml`` holds one table per benchmark and method, with the sections of a
run's configuration::

    [seq-digits.xder.method]
    alpha = 0.3
    [seq-digits.xder.train]
    lr = 0.03

``none`` is built in: the benchmark's protocol plus the method's own dataclass defaults. The
default preset of a (benchmark, method) is the first of :data:`DEFAULT_ORDER` that has an entry
for it, else ``none``.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

from xder_cli.errors import UsageError

__all__ = ["DEFAULT_ORDER", "default_preset", "list_presets", "preset_values"]

DEFAULT_ORDER = ("tuned", "paper")


def list_presets() -> list[str]:
    """``none`` and every preset file shipped with xder-cli."""
    folder = resources.files("xder_cli") / "presets"
    names = (
        [p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml")]
        if folder.is_dir()
        else []
    )
    return ["none", *sorted(names)]


def _load(name: str) -> dict[str, Any]:
    if name not in list_presets():
        raise UsageError(f"unknown preset {name!r}: choose one of {', '.join(list_presets())}")
    text = (resources.files("xder_cli") / "presets" / f"{name}.toml").read_text()
    return tomllib.loads(text)


def preset_values(name: str, benchmark: str, method: str) -> dict[str, dict[str, Any]]:
    """The sections preset ``name`` sets for (benchmark, method); ``{}`` for ``none``.

    Raises:
        UsageError: unknown preset, or a preset without values for this benchmark and method.
    """
    if name == "none":
        return {}
    entry = _load(name).get(benchmark, {}).get(method)
    if entry is None:
        raise UsageError(
            f"preset {name!r} has no values for method {method!r} on {benchmark!r}: "
            "use --preset none (protocol + the method's defaults)"
        )
    return entry


def default_preset(benchmark: str, method: str) -> str:
    """The preset used when none is named: the first of ``tuned``, ``paper`` with an entry for
    (benchmark, method), else ``none``."""
    available = list_presets()
    for name in DEFAULT_ORDER:
        if name in available and method in _load(name).get(benchmark, {}):
            return name
    return "none"
