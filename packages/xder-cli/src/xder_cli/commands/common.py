"""The flags several commands share and what they mean for a run: the defaults, the flags that
shape every run a command trains (:data:`RUN_FLAGS`), the plugin, logger, protocol and Ray flags,
and what ``sweep`` and ``experiment`` hand the scheduler. The argument types and the parser are
:mod:`xder_cli.arguments`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from xder_cli.arguments import DeprecatedAlias, at_least, protocol_name
from xder_cli.catalogue import LOGGERS

__all__ = [
    "DEFAULT_BENCHMARK",
    "DEFAULT_METHOD",
    "DEFAULT_OUT",
    "RUN_FLAGS",
    "RunFlag",
    "add_logger_argument",
    "add_plugin_argument",
    "add_protocol_argument",
    "add_ray_arguments",
    "add_run_flags",
    "run_flag_settings",
    "scheduling",
]

DEFAULT_METHOD = "xder"
DEFAULT_BENCHMARK = "seq-digits"
DEFAULT_OUT = "runs"


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


def add_logger_argument(parser: argparse.ArgumentParser, runs: str) -> None:
    parser.add_argument(
        "--logger",
        action="append",
        choices=LOGGERS,
        metavar="NAME",
        help=f"also log {runs} to an experiment tracker: {' or '.join(LOGGERS)} (repeatable; under each run "
        "directory, wandb offline unless WANDB_MODE says otherwise; recorded as run.loggers)",
    )


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


def scheduling(args: argparse.Namespace, lines: Any) -> dict[str, Any]:
    """What ``sweep`` and ``experiment`` pass on to the scheduler: :func:`add_ray_arguments`'
    values, and the terminal's progress lines (an ``OutcomeLines``) and run output."""
    from xder_cli.progress import in_run_log

    ray = {"max_concurrent": args.max_concurrent, "address": args.address, "gpus_per_run": args.gpus_per_run}
    return ray | {"on_start": lines.on_start, "on_done": lines.on_done, "log_output": in_run_log}


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
