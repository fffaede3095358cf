"""``xder-run bench``: its parser and its handler, which turns the arguments into
:class:`~xder_cli.runs.bench.BenchOptions` and prints the figures; the measuring is
:mod:`xder_cli.runs.bench` (and :mod:`xder_cli.runs.bench_share` for ``--concurrent``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xder_cli.arguments import assignment, at_least, int_list, name_list
from xder_cli.catalogue import BENCH_BENCHMARKS
from xder_cli.commands.common import add_plugin_argument, add_protocol_argument

if TYPE_CHECKING:
    from xder_cli.runs.bench import BenchOptions

__all__ = ["add_parser", "bench_options", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``xder-run bench`` to the subcommands."""
    bench = commands.add_parser(
        "bench",
        help="step time vs the hardware floor, host syncs and ops per step, per method",
        description="Benchmark training steps (docs/development.md#how-it-is-fast): in one process, "
        "methods interleaved, on synthetic data shaped like the benchmark with each method at task T and "
        "its buffer full. Reports "
        "seconds per step (median after warm-up), images per step, the floor (one forward+backward of the "
        "backbone over the same images), their ratio, host syncs and ops per step (counted by intercepting "
        "dispatched ops), peak device memory (CUDA), one synthetic epoch and the projected time of the "
        "protocol (--protocol: full, or a variant the benchmark defines; width, batch and buffer default to "
        "its values).",
    )
    bench.add_argument(
        "--methods",
        type=name_list,
        default=("er", "derpp", "xder"),
        metavar="A,B",
        help="methods (er,derpp,xder)",
    )
    bench.add_argument(
        "--benchmark",
        default="seq-cifar100",
        metavar="NAME",
        help=f"data shape: {', '.join(BENCH_BENCHMARKS.names())} (seq-cifar100)",
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
    bench.add_argument(
        "--set", dest="settings", action="append", type=assignment, metavar="KEY=VALUE",
        help="a training setting for every measured method, as train takes it: e.g. train.precision=bf16, "
        "train.channels_last=true, train.compile=true, train.compile_mode=reduce-overhead (CUDA graphs), "
        "train.step_graph=true (whole steps replayed as CUDA graphs); or a method setting for each measured "
        "method that has it, e.g. method.replay_forward=joint (repeatable; sections train and method)",
    )  # fmt: skip
    bench.add_argument("--no-epoch", dest="epoch", action="store_false", help="skip the synthetic epoch")
    bench.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    bench.add_argument(
        "--concurrent",
        type=_process_counts,
        metavar="N,N",
        help="instead: the fair-share benchmark. Each method's timed steps run in one xder-run process "
        "alone, then in N processes at once (each taking its threads as a training run does); reports "
        "the ratio of N at once to N x alone (target <= 1.25), e.g. --concurrent 2 or 2,4",
    )
    bench.add_argument(
        "--rounds", type=at_least(1), default=3, metavar="R", help="--concurrent: rounds, medians taken (3)"
    )
    add_plugin_argument(bench)
    bench.set_defaults(handler="bench")


def _process_counts(text: str) -> tuple[int, ...]:
    """``--concurrent``'s group sizes: comma-separated integers of at least 2."""
    try:
        counts = int_list(text)
    except argparse.ArgumentTypeError:
        counts = ()
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError(f"takes process counts of at least 2, e.g. 2 or 2,4; got {text!r}")
    return counts


def bench_options(args: argparse.Namespace) -> BenchOptions:
    """The options of ``xder-run bench`` (``args`` from its parser, whose destinations are the
    options' names; ``--plugin`` gives ``plugins``)."""
    from xder_cli.runs.bench import BenchOptions

    named = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchOptions) if hasattr(args, f.name)}
    named["settings"] = tuple(args.settings or ())
    return BenchOptions(**named, plugins=tuple(args.plugin or ()))


def print_share(payload: dict[str, Any]) -> None:
    """The fair-share benchmark's figures (:func:`xder_cli.runs.bench_share.run_share_bench`)."""
    print(
        f"fair share ({payload['steps']} steps per process, median of {payload['rounds']} rounds; "
        f"ratio = N at once / (N x alone), target <= {payload['target']}):"
    )
    print(f"{'method':8} {'N':>3} {'alone s':>9} {'N at once s':>12} {'ratio':>7}  threads alone / at once")
    for row in payload["groups"]:
        print(
            f"{row['method']:8} {row['processes']:3d} {row['alone_seconds']:9.2f} "
            f"{row['group_seconds']:12.2f} {row['fair_share_ratio']:7.2f}  "
            f"{row['alone_threads']} / {row['group_threads']}"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run bench`` (``args`` from its parser): the step-time benchmark, or with
    ``--concurrent`` the fair-share one; print its figures, and write them to ``--json``."""
    from xder_methods import method_config_class

    options = bench_options(args)
    if getattr(args, "concurrent", None) is not None:
        from xder_cli.runs.bench_share import run_share_bench

        groups = list(args.concurrent)
        for name in options.methods:
            method_config_class(name)  # UnknownMethodError names the choices
        payload = run_share_bench(options, groups)
        print_share(payload)
        return _write(args, payload)
    from xder_cli.runs.bench import run_bench

    payload = run_bench(options)
    print(f"device: {payload['device']}, torch {payload['torch']}, {json.dumps(payload['settings'])}")
    header = ["method", "s/step", "images", "floor s", "x floor", "syncs", "ops", "launches", "epoch s"]
    header.append("protocol")
    print(f"{header[0]:8} " + " ".join(f"{h:>9}" for h in header[1:]))
    for row in payload["methods"]:
        epoch = "-" if row["epoch_seconds"] is None else f"{row['epoch_seconds']:.1f}"
        protocol = (
            "-"
            if row["projected_protocol_seconds"] is None
            else f"{row['projected_protocol_seconds'] / 3600:.2f} h"
        )
        print(
            f"{row['method']:8} {row['seconds_per_step']:9.4f} {row['images_per_step']:9d} "
            f"{row['floor_seconds']:9.4f} {row['step_over_floor']:9.2f} {row['host_syncs_per_step']:9d} "
            f"{row['ops_per_step']:9d} {row['launches_per_step']:9d} {epoch:>9} {protocol:>9}"
        )
    for name, value in payload["ratios"].items():
        print(f"{name}: {value:.2f}")
    if payload["settings"]["step_graph"]:
        replayed = ", ".join(f"{r['method']} {r['replayed_steps']}" for r in payload["methods"])
        print(f"steps replayed from CUDA graphs (on a CPU: checked): {replayed}")
    return _write(args, payload)


def _write(args: argparse.Namespace, payload: dict[str, Any]) -> int:
    """``--json``: the figures written there."""
    if args.json:
        from xder_cli.runs.rundir import write_json

        write_json(Path(args.json), payload)
        print(f"written: {args.json}")
    return 0
