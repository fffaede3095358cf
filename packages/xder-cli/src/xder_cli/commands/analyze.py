"""``xder-run analyze RUN_DIR``: the paper's analyses of a trained run
(:func:`xder_cli.runs.run_analysis.analyze_run`), each printed in one line; the library writes
``RUN_DIR/analysis/analysis.json`` and the plots."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from xder_cli import catalogue
from xder_cli.arguments import flag, spell_settings
from xder_cli.commands.common import add_plugin_argument

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run analyze`` (``args`` from its parser)."""
    from xder_cli.runs.analyses import ANALYSIS_FOLDER, AnalysisOptions
    from xder_cli.runs.run_analysis import ANALYSIS_JSON, analyze_run, summary_line
    from xder_cli.runs.rundir import json_safe

    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None

    def show(name: str, value: Mapping[str, Any] | None, skipped: str | None) -> None:
        if not args.json:
            # A skip's reason may name a library call that makes files: printed as its command.
            if value is None:
                print(f"{name}: skipped ({spell_settings(skipped or '')})")
            else:
                print(f"{name}: {summary_line(name, value)}")

    options = AnalysisOptions(
        max_items=args.max_items,
        buffer_epochs=args.buffer_epochs,
        probe_epochs=args.probe_epochs,
        tolerance=args.tolerance,
        data_root=args.data_root,
    )

    def notify(line: str) -> None:
        print(line, file=sys.stderr)

    report = analyze_run(
        args.run_dir, names, options=options, device=args.device, on_result=show, notify=notify, spell=flag
    )
    if args.json:
        print(json.dumps(json_safe(report), indent=2))
    else:
        print(f"written: {report['run']}/{ANALYSIS_FOLDER}/{ANALYSIS_JSON}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``xder-run analyze`` to the subcommands."""
    analyze = commands.add_parser(
        "analyze",
        help="the paper's analyses of a trained run, into RUN_DIR/analysis/",
        description="Analyses of a trained run (X-DER paper Sec. 6): "
        + ", ".join(catalogue.ANALYSES.names())
        + ". Those that do not apply (no super-classes, no masks, no buffer...) are skipped with the reason; "
        + " and ".join(catalogue.RECORDED_ANALYSES.names())
        + " need a run trained with --record-analyses (asked for with --only on a run without, they are "
        "an error). "
        "Results: RUN_DIR/analysis/analysis.json and PNG plots. Refused while another process writes "
        "RUN_DIR (a training run).",
    )
    analyze.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by xder-run train")
    analyze.add_argument("--only", metavar="NAME,...", help="run only these analyses (comma-separated)")
    analyze.add_argument(
        "--json", action="store_true", help="print the JSON instead of one line per analysis"
    )
    analyze.add_argument("--device", metavar="DEV", help="where to compute (default: the run's)")
    analyze.add_argument("--data-root", metavar="DIR", help="datasets folder (default: the run's)")
    analyze.add_argument(
        "--max-items",
        type=int,
        default=500,
        metavar="N",
        help="training items per task for flatness/Fisher (500)",
    )
    analyze.add_argument(
        "--buffer-epochs",
        type=int,
        default=70,
        metavar="N",
        help="epochs of the from-scratch buffer training (70)",
    )
    analyze.add_argument(
        "--probe-epochs", type=int, default=50, metavar="N", help="epochs of the secondary-targets probe (50)"
    )
    analyze.add_argument(
        "--tolerance", type=float, default=0.0, metavar="PX", help="pointing-game tolerance in pixels (0)"
    )
    add_plugin_argument(analyze)
    analyze.set_defaults(handler="analyze")
