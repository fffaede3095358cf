"""The ``xder-run`` command: the subcommands of :mod:`xder_cli.commands` assembled, plugins loaded
first, and every user mistake turned into one line and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from xder_cli import catalogue
from xder_cli.arguments import Parser, command_word, error_line, out_folder, plugin_arguments
from xder_cli.commands import command_modules
from xder_cli.commands.common import add_plugin_argument
from xder_cli.errors import Interrupted, UsageError
from xder_cli.runs.defaults import EXPERIMENT_RUNS
from xder_cli.runs.errors import RunError
from xder_cli.runs.plugins import load_plugins, load_recorded_under

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``xder-run`` parser; its help lists the methods, benchmarks and backbones registered
    when it is built (plugins included), read without importing the library
    (:mod:`xder_cli.catalogue`)."""
    methods, benchmarks, backbones = (
        ", ".join(registry.names())
        for registry in (catalogue.METHODS, catalogue.BENCHMARKS, catalogue.BACKBONES)
    )
    parser = Parser(
        prog="xder-run",
        description="X-DER and its competitors for continual learning (class-, task-, domain-incremental, "
        "general streams). Methods: "
        f"{methods}. Benchmarks: {benchmarks}. Backbones: {backbones}.",
    )
    add_plugin_argument(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for module in command_modules().values():
        module.add_parser(commands)
    return parser


RESUMABLE = {
    command: f": run the same command again; finished {items} are kept and interrupted ones resume "
    "from their checkpoints"
    for command, items in (("sweep", "trials"), ("experiment", "runs"))
}
"""What an interrupted command that resumes its runs says after "interrupted"."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``xder-run``; returns the exit status (2 for every user mistake).

    Plugins (entry points, every ``--plugin`` in ``argv``, and for ``experiment`` those its
    ``--out`` folder's runs record) are loaded first, so that the parser and its help know the
    names they register. Until a command's handler runs, nothing
    imports the library (torch): ``--help`` and a usage mistake answer at once.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        load_plugins(plugin_arguments(argv))
        out = out_folder(argv)
        if command_word(argv) == "experiment" and out is not None:
            load_recorded_under(Path(out) / EXPERIMENT_RUNS)  # run again, it resumes as it started
    except RunError as error:
        print(f"xder-run: error: {error_line(error)}", file=sys.stderr)
        return 2
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed in one line
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        status: int = command_modules()[args.handler].run(args)
        return status
    except Interrupted as interrupted:  # a run's Ctrl-C: the message names the run to resume
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # Ctrl-C, or a kill of a driver on Ray (its SIGTERM ends it so)
        print(f"\ninterrupted{RESUMABLE.get(args.command, '')}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `xder-run data info ... --json | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (silence the interpreter's final flush)
        return 0
    except Exception as error:
        message = _mistake_line(error)
        if message is None:
            raise
        print(f"xder-run {args.command}: error: {message}", file=sys.stderr)
        return 2


def _mistake_line(error: Exception) -> str | None:
    """The line ``xder-run`` prints for a user's mistake (the command line's, the run library's
    or a library package's error), or None for any other error."""
    if isinstance(error, (RunError, UsageError)):
        return error_line(error)
    # A library package's error: the handler has imported the library by now.
    from xder_data import DataError, DataNotFoundError, UnknownBenchmarkError
    from xder_methods import MethodError, UnknownMethodError
    from xder_models import UnknownBackboneError

    if not isinstance(error, (DataError, MethodError, UnknownBackboneError)):
        return None
    message = error_line(error)
    if isinstance(error, DataNotFoundError) and not ("--data-root" in message or "--source" in message):
        message += " (the data folder is --data-root, run.data_root; default: data)"
    if isinstance(error, (UnknownMethodError, UnknownBenchmarkError, UnknownBackboneError)):
        message += "; one a plugin registers? load it with --plugin MODULE_OR_FILE"
    return message


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
