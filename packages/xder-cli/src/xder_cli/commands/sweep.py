"""``xder-run sweep``: its parser; the work is :func:`xder_cli.sweep.command_sweep`."""

from __future__ import annotations

import argparse

from xder_cli.commands.common import (
    add_logger_argument,
    add_plugin_argument,
    add_protocol_argument,
    add_ray_arguments,
)

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
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
    sweep.add_argument("--seeds", metavar="S,S", help="seeds (default: the file's, else 0)")
    add_protocol_argument(sweep)
    add_ray_arguments(sweep, "trial")
    add_logger_argument(sweep, "every trial")
    add_plugin_argument(sweep)
    sweep.set_defaults(handler="sweep")


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run sweep`` (``args`` from its parser)."""
    from xder_cli.sweep import command_sweep

    return command_sweep(args)
