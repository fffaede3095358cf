"""What the commands share: argument types, the flags several commands take, the help formatter
that keeps an ``examples:`` epilog as written, and the library's errors as the command line words
them (:func:`flag`, :func:`error_line`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from xder_cli.runs.errors import OPTIONS, RunError
from xder_cli.runs.settings import LOGGERS, parse_assignment
from xder_data import canonical_protocol

__all__ = [
    "DEFAULT_BENCHMARK",
    "DEFAULT_METHOD",
    "DEFAULT_OUT",
    "FLAGS",
    "RUN_FLAGS",
    "DeprecatedAlias",
    "ExamplesFormatter",
    "Parser",
    "RunFlag",
    "add_logger_argument",
    "add_plugin_argument",
    "add_protocol_argument",
    "add_ray_arguments",
    "add_run_flags",
    "assignment",
    "at_least",
    "class_order",
    "error_line",
    "flag",
    "fraction",
    "int_list",
    "name_list",
    "plugin_arguments",
    "protocol_name",
    "run_flag_settings",
    "scheduling",
]

DEFAULT_METHOD = "xder"
DEFAULT_BENCHMARK = "seq-digits"
DEFAULT_OUT = "runs"

_SPELT_OTHERWISE = {
    "overrides": "--set",
    "run.loggers": "--logger",
    "params": "--param",
    "train_run": "xder-run train",
    "analyze_run": "xder-run analyze",
}
FLAGS = {
    name: _SPELT_OTHERWISE.get(name, "--" + name.rsplit(".", 1)[-1].replace("_", "-")) for name in OPTIONS
}
"""The command line's spelling of each option the library's messages name
(:data:`xder_cli.runs.errors.OPTIONS`): its flag, ``--`` and its last part with dashes unless
spelt otherwise (``train_run``: the command)."""


def flag(option: str) -> str:
    """How the command line spells a library option: ``run.device`` -> ``--device``."""
    return FLAGS[option]


def error_line(error: BaseException) -> str:
    """An error as ``xder-run`` prints it: one line, the library's options spelled as flags
    (:mod:`xder_cli.runs.errors`)."""
    text = error.render(flag) if isinstance(error, RunError) else str(error)
    return " ".join(text.split())


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit status 2, and a subcommand
    refuses the flags it does not know itself (naming its own ``--help``, not ``xder-run``'s)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:  # a subcommand's parser: "xder-run experiment"
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def class_order(text: str) -> str | list[int]:
    if text in ("natural", "reversed", "random"):
        return text
    try:
        value = json.loads(text if text.lstrip().startswith("[") else f"[{text}]")
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not natural, reversed, random or a comma-separated permutation like 3,1,0,2"
        )
    return value


def assignment(text: str) -> tuple[str, object]:
    """``--set section.key=value`` -> ``("section.key", value)``."""
    try:
        return parse_assignment(text)
    except RunError as error:
        raise argparse.ArgumentTypeError(error_line(error)) from error


def int_list(text: str) -> tuple[int, ...]:
    """A flag's comma-separated integers (``0,1,2``): at least one, none repeated."""
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 0,1,2") from error
    if not values:
        raise argparse.ArgumentTypeError("give at least one value, e.g. 0,1,2")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a value")
    return values


def name_list(text: str) -> tuple[str, ...]:
    """A flag's comma-separated names (``xder,derpp,er``): at least one, none repeated."""
    values = tuple(s.strip() for s in text.split(",") if s.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one name, e.g. xder,derpp,er")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a name")
    return values


def at_least(low: float, kind: type = int) -> Any:
    """A flag's number of type ``kind``, at least ``low`` (an argparse type)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}"
            ) from error
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
        return value

    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from error
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return value


@dataclass(frozen=True)
class RunFlag:
    """A flag that shapes every run a command trains, spelt, typed and explained alike on
    ``train``, ``sweep`` and ``experiment``; ``key`` is the setting it gives."""

    flag: str
    key: str
    type: Any
    metavar: str
    help: str


RUN_FLAGS = (
    RunFlag("--epochs", "train.epochs", int, "N", "epochs per task{of} (default: the protocol's)"),
    RunFlag("--data-root", "run.data_root", str, "DIR", "folder holding the datasets (default: data)"),
    RunFlag(
        "--device",
        "run.device",
        str,
        "DEV",
        "device{of}: auto (default: CUDA if available), cpu, cuda, cuda:N",
    ),
    RunFlag(
        "--threads",
        "run.threads",
        int,
        "N",
        "CPU threads{of} (default 0: all the cores alone, a fair share beside other xder-run trainings)",
    ),
)
"""The flags every training command takes (train also --seed, sweep and experiment --seeds)."""


def add_run_flags(parser: argparse.ArgumentParser, of: str = "") -> None:
    """:data:`RUN_FLAGS` on ``parser`` (``of``: whose, for the help, e.g. "of every trial")."""
    for run_flag in RUN_FLAGS:
        help_text = run_flag.help.format(of=f" {of}" if of else "")
        parser.add_argument(run_flag.flag, type=run_flag.type, metavar=run_flag.metavar, help=help_text)


def run_flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings :data:`RUN_FLAGS` give, as dotted keys (flags not given left out)."""
    given = ((f.key, getattr(args, f.flag.removeprefix("--").replace("-", "_"))) for f in RUN_FLAGS)
    return {key: value for key, value in given if value is not None}


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE_OR_FILE",
        help="import a module (by name) or a .py file first, for the methods, benchmarks and backbones it "
        "registers (repeatable; installed packages declaring xder.methods, xder.benchmarks or "
        "xder.backbones entry points load by themselves)",
    )


def plugin_arguments(argv: Sequence[str]) -> list[str]:
    """The values of ``--plugin X`` and ``--plugin=X`` anywhere in ``argv`` (before ``--``): the
    plugins to load before the parser is built."""
    name = flag("plugin")
    specs = []
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == name and i + 1 < len(args):
            specs.append(args[i + 1])
        elif arg.startswith(name + "="):
            specs.append(arg[len(name) + 1 :])
    return specs


def add_logger_argument(parser: argparse.ArgumentParser, runs: str) -> None:
    parser.add_argument(
        "--logger",
        action="append",
        choices=LOGGERS,
        metavar="NAME",
        help=f"also log {runs} to an experiment tracker: {' or '.join(LOGGERS)} (repeatable; under each run "
        "directory, wandb offline unless WANDB_MODE says otherwise; recorded as run.loggers)",
    )


class ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps an ``examples:`` epilog's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def protocol_name(text: str) -> str:
    """``--protocol NAME``; a former name (``paper``, now ``full``) still works, with a warning."""
    name = canonical_protocol(text)
    if name != text:
        print(
            f"warning: --protocol {text} is now called {name} (the same protocol); {text} goes in the next "
            "release",
            file=sys.stderr,
        )
    return name


def add_protocol_argument(parser: argparse.ArgumentParser, *, recorded: bool = True) -> None:
    """``--protocol``; ``recorded``: the command writes run directories, whose config.toml records it."""
    parser.add_argument(
        "--protocol",
        type=protocol_name,
        metavar="NAME",
        help="the benchmark's training protocol: full (default: the paper's epochs, backbone, batches, "
        "buffer) or a variant the benchmark defines, e.g. laptop on seq-cifar10 and seq-cifar100 (sized for "
        "a CPU, with presets of its own)" + ("; recorded in config.toml" if recorded else ""),
    )


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag, kept for one release: it sets the new flag's value and says, on
    stderr, to use the new one (``new``)."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        print(
            f"warning: {option_string} is deprecated and goes in the next release: use {self.new} "
            "(the same setting)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def scheduling(args: argparse.Namespace, lines: Any) -> dict[str, Any]:
    """What ``sweep`` and ``experiment`` pass on to the scheduler: :func:`add_ray_arguments`'
    values, and the terminal's progress lines (an ``OutcomeLines``) and run output."""
    from xder_cli.progress import on_terminal

    ray = {"max_concurrent": args.max_concurrent, "address": args.address, "gpus_per_run": args.gpus_per_run}
    return ray | {"on_start": lines.on_start, "on_done": lines.on_done, "log_output": on_terminal}


def add_ray_arguments(parser: argparse.ArgumentParser, unit: str) -> None:
    """``--max-concurrent``, ``--address`` and ``--gpus-per-run`` of the commands run on Ray
    (``unit``: what the command calls its runs, for the help); a sweep also takes
    ``--gpus-per-trial``, its old spelling, for one release."""
    parser.add_argument(
        "--max-concurrent",
        type=at_least(1),
        metavar="N",
        help=f"{unit}s at once on Ray (default: as Ray schedules)",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="a running Ray cluster, e.g. ray://head:10001 (default: start a local Ray instance); OUT must "
        "then be on a filesystem every node sees",
    )
    parser.add_argument(
        "--gpus-per-run",
        type=at_least(0, float),
        default=0.0,
        metavar="G",
        help=f"GPUs Ray reserves per {unit} (0)",
    )
    if unit == "trial":
        parser.add_argument(
            "--gpus-per-trial",
            dest="gpus_per_run",
            type=at_least(0, float),
            action=DeprecatedAlias,
            new="--gpus-per-run",
            help=argparse.SUPPRESS,
        )
