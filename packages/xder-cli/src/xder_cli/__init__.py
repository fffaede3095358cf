"""xder-cli: the ``xder-run`` command (:mod:`xder_cli.commands`, assembled by :mod:`xder_cli.main`)
over the run as a library (:mod:`xder_cli.runs`).

The names below are imported on first use (PEP 562), so that ``import xder_cli.runs`` loads the
library alone, not the command line.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "RunSettings",
    "UsageError",
    "build_parser",
    "coerce",
    "main",
    "parse_assignment",
    "validate_section",
]

_HOMES = {
    "UsageError": "xder_cli.errors",
    "build_parser": "xder_cli.main",
    "main": "xder_cli.main",
    "RunSettings": "xder_cli.runs.settings",
    "coerce": "xder_cli.runs.settings",
    "parse_assignment": "xder_cli.runs.settings",
    "validate_section": "xder_cli.runs.settings",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'xder_cli' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
