"""The ``xder-run`` command: the subcommands of :mod:`xder_cli.commands` assembled, plugins loaded
first, and every user mistake turned into one line and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from xder_cli.arguments import Parser, error_line, plugin_arguments
from xder_cli.commands import command_modules
from xder_cli.commands.common import add_plugin_argument
from xder_cli.errors import Interrupted, UsageError
from xder_cli.runs.errors import RunError
from xder_cli.runs.plugins import load_plugins
from xder_data import DataError, DataNotFoundError, UnknownBenchmarkError, list_benchmarks
from xder_methods import MethodError, UnknownMethodError, list_methods
from xder_models import UnknownBackboneError, list_backbones

__all__ = ["build_parser", "main"]

UNKNOWN_NAMES = (UnknownMethodError, UnknownBenchmarkError, UnknownBackboneError)
"""Errors naming a method, benchmark or backbone nothing registers: perhaps a plugin's."""


def build_parser() -> argparse.ArgumentParser:
    """The ``xder-run`` parser; its help lists the methods, benchmarks and backbones registered
    when it is built (plugins included)."""
    parser = Parser(
        prog="xder-run",
        description="X-DER and its competitors for class-incremental continual learning. Methods: "
        f"{', '.join(list_methods())}. Benchmarks: {', '.join(list_benchmarks())}. Backbones: "
        f"{', '.join(list_backbones())}.",
    )
    add_plugin_argument(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for module in command_modules().values():
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``xder-run``; returns the exit status (2 for every user mistake).

    Plugins (entry points, and every ``--plugin`` in ``argv``) are loaded first, so that the
    parser and its help know the names they register.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        load_plugins(plugin_arguments(argv))
    except RunError as error:
        print(f"xder-run: error: {error_line(error)}", file=sys.stderr)
        return 2
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed in one line
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return command_modules()[args.handler].run(args)
    except (RunError, UsageError, DataError, MethodError, UnknownBackboneError) as error:
        message = error_line(error)
        if isinstance(error, DataNotFoundError) and not ("--data-root" in message or "--source" in message):
            message += " (the data folder is --data-root, run.data_root; default: data)"
        if isinstance(error, UNKNOWN_NAMES):
            message += "; one a plugin registers? load it with --plugin MODULE_OR_FILE"
        print(f"xder-run {args.command}: error: {message}", file=sys.stderr)
        return 2
    except Interrupted as interrupted:  # a run's Ctrl-C: the message names the run to resume
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `xder-run data info ... --json | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (silence the interpreter's final flush)
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
