"""``xder-run sweep``: its parser and its handler, which prints the sweep's progress and report;
the sweep itself is :mod:`xder_cli.runs.sweep`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xder_cli.arguments import int_list
from xder_cli.commands.common import (
    add_logger_argument,
    add_plugin_argument,
    add_protocol_argument,
    add_ray_arguments,
    add_run_flags,
    run_flag_settings,
    scheduling,
)
from xder_cli.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``xder-run sweep`` to the subcommands."""
    sweep = commands.add_parser(
        "sweep",
        help="a hyperparameter grid x seeds on Ray (local or a cluster), selected on validation",
        description="Train every (grid point, seed) of GRID.toml (or of a preset's grid, --grid) as an "
        "ordinary run directory under OUT/trials/, as Ray tasks: on a local Ray instance started for the "
        "sweep, or on a running cluster (--address). Selection: the highest mean validation FAA over "
        "seeds (the test FAA is reported, never used). OUT receives sweep.json and sweep.md (each trial "
        "with the Ray node that trained it). A failed trial is recorded and the sweep goes on; a trial whose "
        "Ray worker or node is lost is run again on a live node (3 times at most), from its last "
        "checkpoint; rerunning skips finished trials and resumes "
        "interrupted ones from their checkpoints. A trial another process is training (the sweep started "
        "twice) is reported as running elsewhere and left to it. GRID.toml: method, benchmark, "
        '[buffer_size], [seeds], [validation], [preset], [set] "section.key" = value, '
        '[grid] "section.key" = [values].',
    )
    sweep.add_argument("grid_file", nargs="?", metavar="GRID.toml", help="the grid to search")
    sweep.add_argument("--out", required=True, metavar="DIR", help="the sweep's folder (trials, summary)")
    sweep.add_argument(
        "--grid",
        metavar="PRESET:BENCH:BUFFER:METHOD",
        help="search a preset's grid instead of a file, e.g. paper:seq-cifar100:500:derpp "
        "(BUFFER - for methods without a buffer; METHOD may be a variant entry such as xder-rpc)",
    )
    sweep.add_argument("--seeds", type=int_list, metavar="S,S", help="seeds (default: the file's, else 0)")
    sweep.add_argument(
        "--buffer-size", type=int, metavar="N", help="replay buffer size of every trial (default: the file's)"
    )
    add_run_flags(sweep, "of every trial")
    add_protocol_argument(sweep)
    add_ray_arguments(sweep, "trial")
    add_logger_argument(sweep, "every trial")
    add_plugin_argument(sweep)
    sweep.set_defaults(handler="sweep")


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run sweep`` (``args`` from its parser): every trial of the grid, a line per
    trial as it ends, then the report; exit status 1 when every trial failed."""
    from xder_cli.progress import OutcomeLines
    from xder_cli.runs import sweep
    from xder_cli.runs.scheduler import RUNNING_ELSEWHERE, retry_note
    from xder_cli.runs.trackers import check_loggers
    from xder_data import DEFAULT_PROTOCOL

    if (args.grid_file is None) == (args.grid is None):
        raise UsageError("give a GRID.toml or --grid PRESET:BENCHMARK:BUFFER:METHOD (one of them)")
    seeds = args.seeds
    spec = (
        sweep.load_spec(Path(args.grid_file), seeds=seeds, protocol=args.protocol)
        if args.grid_file
        else sweep.spec_from_preset(args.grid, seeds, args.protocol or DEFAULT_PROTOCOL)
    )
    check_loggers(args.logger or [])
    flags = run_flag_settings(args) | ({"run.loggers": list(args.logger)} if args.logger else {})
    spec = sweep.with_settings(spec, flags, args.buffer_size)
    out = Path(args.out)
    n_seeds = len(spec.seeds)
    lines = OutcomeLines(
        lambda total, finished: (
            f"sweep: {total} trials ({total // n_seeds} points x {n_seeds} seeds), "
            f"{finished} already finished -> {out}"
        )
    )
    summary = sweep.run_sweep(spec, out, **scheduling(args, lines))  # Ctrl-C: main says how to resume
    sys.stdout.write(sweep.sweep_markdown(summary))
    print(f"summary: {out / sweep.SWEEP_JSON}  report: {out / sweep.SWEEP_MD}")
    if summary["retries"]:
        print(retry_note(summary["retries"]))
    elsewhere = sum(t["status"] == RUNNING_ELSEWHERE for t in summary["trials"])
    if elsewhere:
        print(
            f"note: {elsewhere} trial(s) are being trained by another process (this sweep started "
            "twice?): run the sweep again after it ends to include them"
        )
    failed = sum(t["status"] == "failed" for t in summary["trials"])
    return 1 if failed == len(summary["trials"]) else 0
