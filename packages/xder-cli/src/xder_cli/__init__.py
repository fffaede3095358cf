"""xder-cli: the ``xder-run`` command (train; run directories, presets, configuration)."""

from xder_cli.errors import UsageError
from xder_cli.main import build_parser, main
from xder_cli.runs.config import RunSettings, coerce, parse_assignment, validate_section

__all__ = [
    "RunSettings",
    "UsageError",
    "build_parser",
    "coerce",
    "main",
    "parse_assignment",
    "validate_section",
]
