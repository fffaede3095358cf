"""``xder-run report``: the report over run directories (:func:`xder_cli.runs.report.write_report`),
its tables printed."""

from __future__ import annotations

import argparse

from xder_cli.catalogue import REPORT_OUT
from xder_cli.commands.common import add_plugin_argument

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run report`` (``args``: ``run_dirs``, ``out``, ``task_il``): write the report,
    print its tables, a note per seed run twice or more, and what it wrote."""
    from xder_cli.progress import repeated_seed_notes
    from xder_cli.runs.report import write_report

    written = write_report(list(args.run_dirs), args.out, task_il=bool(args.task_il))
    print(written.markdown, end="")
    print(written.analyses_markdown, end="")
    print("".join(f"{note}\n" for note in repeated_seed_notes(written)), end="")
    print(
        f"\n{written.runs} runs read, {written.groups} groups"
        + (f" ({written.analysed} runs analysed)" if written.analysed else "")
        + f": wrote {', '.join(written.files)} and {len(written.plots)} plots to {written.out}"
    )
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``xder-run report`` to the subcommands."""

    report = commands.add_parser(
        "report",
        help="Table-1-style tables (FAA ± std (FF ± std) over seeds) and plots from run directories",
        description=(
            "Tabulate the final average accuracy (FAA) and final forgetting (FF) of complete runs as "
            "mean ± sample std over seeds: one row per method (and preset, and any setting on which its "
            "runs differ), one column per benchmark and buffer size, buffer-less methods in every column "
            "of their benchmark. The accuracy is each scenario's own (Class-IL, Domain-IL, a general "
            "stream's with no FF), one table a scenario, no column of a metric a scenario lacks. "
            "Plots the accuracy after each task (mean ± std band) per column and the "
            "mean accuracy matrix per group. Runs without results.json, unreadable or incomplete runs, "
            "and missing seeds are listed, not fatal; with no complete run at all, nothing is written "
            "(exit status 2). DIR receives table.md, table.csv, report.json, "
            "curves_<benchmark>_m<buffer>.png and matrix_<benchmark>_m<buffer>_<method>.png. Runs "
            "analysed with xder-run analyze add analyses.md and analyses_<benchmark>_m<buffer>.png: "
            "SS-ERR, SS-NLL, ECE and the newest-head share over seeds, beside the paper's figures, with "
            "the paper's claims on them checked. n counts distinct seeds: of complete runs sharing a "
            "configuration and a seed, the first by folder name counts, the others are named in a note."
        ),
    )
    report.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory, or a folder whose subfolders are run directories (e.g. runs)",
    )
    report.add_argument(
        "--out",
        default=REPORT_OUT,
        metavar="DIR",
        help=f"folder for the tables, plots and report.json (default: {REPORT_OUT})",
    )
    report.add_argument(
        "--task-il", action="store_true", help="tabulate and plot Task-IL, not the scenario's own accuracy"
    )
    add_plugin_argument(report)
    report.set_defaults(handler="report")
