"""``xder-run bench``: its parser; the work is :func:`xder_cli.bench.command_bench`."""

from __future__ import annotations

import argparse

from xder_cli.commands.common import (
    add_plugin_argument,
    add_protocol_argument,
)

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``xder-run bench`` to the subcommands."""
    bench = commands.add_parser(
        "bench",
        help="step time vs the hardware floor, host syncs and ops per step, per method",
        description="Benchmark training steps (PERFORMANCE.md): in one process, methods interleaved, on "
        "synthetic data shaped like the benchmark with each method at task T and its buffer full. Reports "
        "seconds per step (median after warm-up), images per step, the floor (one forward+backward of the "
        "backbone over the same images), their ratio, host syncs and ops per step (counted by intercepting "
        "dispatched ops), one synthetic epoch and the projected time of the protocol (--protocol: paper, "
        "or a variant the benchmark defines; width, batch and buffer default to its values).",
    )
    bench.add_argument("--methods", default="er,derpp,xder", metavar="A,B", help="methods (er,derpp,xder)")
    bench.add_argument(
        "--benchmark",
        default="seq-cifar100",
        metavar="NAME",
        help="data shape: seq-cifar10, seq-cifar100, seq-miniimg, seq-digits (seq-cifar100)",
    )
    add_protocol_argument(bench, recorded=False)
    bench.add_argument(
        "--backbone",
        metavar="NAME",
        help="backbone (the protocol's: efficientnet-b2 on seq-miniimg, resnet18-cifar on the others)",
    )
    bench.add_argument(
        "--width",
        type=int,
        metavar="W",
        help="resnet18-cifar width (the protocol's: 64 on the papers' protocols, 8 on the laptop protocols)",
    )
    bench.add_argument(
        "--batch-size", type=int, metavar="B", help="stream and replay batch (the protocol's: 32)"
    )
    bench.add_argument("--buffer-size", type=int, metavar="M", help="buffer size (the protocol's)")
    bench.add_argument("--task", type=int, default=1, metavar="T", help="task index the steps belong to (1)")
    bench.add_argument("--device", default="auto", metavar="DEV", help="auto (default), cpu, cuda, cuda:N")
    bench.add_argument("--steps", type=int, default=20, metavar="N", help="timed rounds (20)")
    bench.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed rounds first (5)")
    bench.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="autocast (fp32)")
    bench.add_argument("--channels-last", action="store_true", help="channels-last memory format")
    bench.add_argument("--compile", action="store_true", help="nn.Module.compile the backbone")
    bench.add_argument("--no-epoch", dest="epoch", action="store_false", help="skip the synthetic epoch")
    bench.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    bench.add_argument(
        "--concurrent",
        metavar="N,N",
        help="instead: the fair-share benchmark. Each method's timed steps run in one xder-run process "
        "alone, then in N processes at once (each taking its threads as a training run does); reports "
        "the ratio of N at once to N x alone (target <= 1.25), e.g. --concurrent 2 or 2,4",
    )
    bench.add_argument(
        "--rounds", type=int, default=3, metavar="R", help="--concurrent: rounds, medians taken (3)"
    )
    bench.add_argument("--start-after", help=argparse.SUPPRESS)  # a --concurrent child's start signal
    add_plugin_argument(bench)
    bench.set_defaults(handler="bench")


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run bench`` (``args`` from its parser)."""
    from xder_cli.bench import command_bench

    return command_bench(args)
