"""The ``xder-run`` subcommands: one module each, owning its parser (``add_parser``) and its
handler (``run``); :mod:`xder_cli.main` only assembles them. They parse, print and show
progress; the work is in :mod:`xder_cli.runs` and the four library packages, which a command's
handler imports, never its module: ``--help`` and a usage mistake answer without them (what a
parser names of them is :mod:`xder_cli.catalogue`'s)."""

from __future__ import annotations

from types import ModuleType

__all__ = ["COMMANDS", "command_modules"]

COMMANDS = ("train", "data", "analyze", "report", "bench", "sweep", "experiment")
"""The subcommands, in the order ``xder-run --help`` lists them."""


def command_modules() -> dict[str, ModuleType]:
    """Each subcommand's module, by name (imported on demand: ``--help`` of one command does not
    pay for the others' imports beyond their parsers)."""
    import importlib

    return {name: importlib.import_module(f"xder_cli.commands.{name}") for name in COMMANDS}
