"""The ``xder-run`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from xder_cli.config import parse_assignment
from xder_cli.errors import UsageError
from xder_data import DataError, list_benchmarks
from xder_methods import MethodError, list_methods
from xder_models import UnknownBackboneError

__all__ = ["build_parser", "main"]

DEFAULT_METHOD = "xder"
DEFAULT_BENCHMARK = "seq-digits"
DEFAULT_OUT = "runs"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _class_order(text: str) -> str | list[int]:
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


def _assignment(text: str) -> tuple[str, str, object]:
    try:
        return parse_assignment(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from error
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="xder-run",
        description="X-DER and its competitors for class-incremental continual learning.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    train = commands.add_parser(
        "train",
        help=f"train one run (default: {DEFAULT_METHOD} on {DEFAULT_BENCHMARK}) into a run directory",
        description=(
            "Train a continual learner on a class-incremental benchmark, evaluating every seen task "
            "after each task. The run directory OUT/<date>-<method>-<benchmark>-m<buffer>-s<seed>/ "
            "receives config.toml, events.jsonl, results.json, checkpoint.pt and plots/. "
            "Settings layer as: method defaults < benchmark protocol < preset < flags < --set."
        ),
    )
    train.add_argument(
        "--method",
        dest="method_given",
        metavar="NAME",
        help=f"continual method: {', '.join(list_methods())} (default: {DEFAULT_METHOD})",
    )
    train.add_argument(
        "--benchmark",
        dest="benchmark_given",
        metavar="NAME",
        help=f"benchmark: {', '.join(list_benchmarks())} (default: {DEFAULT_BENCHMARK})",
    )
    train.add_argument(
        "--buffer-size", type=int, metavar="N", help="replay buffer size (default: the benchmark's)"
    )
    train.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of initialisation and of every random draw (default: 0)",
    )
    train.add_argument("--epochs", type=int, metavar="N", help="epochs per task (default: the benchmark's)")
    train.add_argument(
        "--class-order",
        type=_class_order,
        metavar="ORDER",
        help="natural (default), reversed, random (from the seed) or a permutation such as 9,8,7,...,0",
    )
    train.add_argument("--data-root", metavar="DIR", help="folder holding the datasets (default: data)")
    train.add_argument("--device", metavar="DEV", help="auto (default: CUDA if available), cpu, cuda, cuda:N")
    train.add_argument(
        "--validation",
        type=_fraction,
        metavar="FRACTION",
        help="hold out this stratified fraction of train for model selection, e.g. 0.1 (default: 0)",
    )
    train.add_argument(
        "--out",
        dest="out_given",
        metavar="DIR",
        help=f"where run directories go (default: {DEFAULT_OUT})",
    )
    train.add_argument(
        "--set",
        action="append",
        type=_assignment,
        metavar="KEY=VALUE",
        help="override any setting, e.g. --set method.alpha=0.2 --set train.lr=0.03 (repeatable)",
    )
    train.add_argument(
        "--preset",
        metavar="NAME",
        help="hyperparameter preset; none = benchmark protocol + the method's own defaults "
        "(default: the preset shipped for this benchmark and method, else none)",
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue an interrupted run from its last checkpoint"
    )
    train.set_defaults(handler="train")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``xder-run``; returns the exit status (2 for every user mistake)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed in one line
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        if args.handler == "train":
            from xder_cli.train import command_train

            args.method = args.method_given or DEFAULT_METHOD
            args.benchmark = args.benchmark_given or DEFAULT_BENCHMARK
            args.out = args.out_given or DEFAULT_OUT
            return command_train(args)
        raise AssertionError(f"unhandled command {args.handler}")  # pragma: no cover
    except (UsageError, DataError, MethodError, UnknownBackboneError) as error:
        message = " ".join(str(error).split())
        print(f"xder-run {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: continue with xder-run train --resume RUN_DIR", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
