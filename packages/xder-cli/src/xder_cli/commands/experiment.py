"""``xder-run experiment``: its parser and its handler, which turns the flags into
:class:`~xder_cli.runs.experiments.ExperimentOptions`, prints the runs' progress and the table;
the experiments themselves are :mod:`xder_cli.runs.experiments`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xder_cli import catalogue
from xder_cli.arguments import ExamplesFormatter, assignment, int_list, name_list
from xder_cli.commands.common import (
    DEFAULT_BENCHMARK,
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


EXPERIMENT_EXAMPLES = """examples:
  xder-run experiment table --benchmark seq-cifar100 --protocol laptop --buffer-size 500 \\
      --seeds 0,1,2 --set run.data_root=data --out tables/c100-laptop
  xder-run experiment table --benchmark seq-digits --buffer-size 200 --paper der --out tables/digits-der
  xder-run experiment class-order --benchmark seq-digits --methods xder,er --out exp/order
  xder-run experiment sensitivity --method xder --param method.alpha=0.1,0.3,0.6 --out exp/alpha"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``xder-run experiment`` to the subcommands."""
    experiment = commands.add_parser(
        "experiment",
        formatter_class=ExamplesFormatter,
        epilog=EXPERIMENT_EXAMPLES,
        help="the paper's experiments as protocols: flatness, class-order, sensitivity; table: a published "
        "table reproduced and set beside its numbers",
        description="Run one of the X-DER paper's experiments as ordinary run directories under OUT/runs/ "
        "and tabulate them: OUT receives experiment.json (every number, per run and aggregated), "
        "experiment.md (the table, also printed) and a PNG plot. flatness (Sec. 6.2): for each pair of "
        "adjacent tasks (k, k+1), a two-task sequence trained with er_flat for regulariser none (the plastic "
        "regime), lfr and llr; the final accuracy on the pair's first task and its forgetting. class-order "
        "(App. A): each method in natural and reversed class order; FAA and FF. sensitivity (App. "
        '"Sensitivity analysis"): each --param value varied alone around the run\'s resolved values, test '
        "FAA against the value, on Ray like a sweep. table (--buffer-size M): every row of the published "
        "table of the benchmark at buffer M (the X-DER paper's Table 1; the DER paper's Table 2 on "
        "seq-cifar10, and on its other benchmarks, seq-mnist, seq-tinyimg, perm-mnist, rot-mnist and "
        "mnist-360, whose figures are not transcribed, the rows its paper preset holds), each with its "
        "preset, over the seeds; OUT receives table.md and table.csv (per "
        "method: our FAA and FF, the published value, the difference, whether it exceeds two standard "
        "errors; then the papers' claims about the table, each checked on our rows: holds, does not hold or "
        "not separated by two standard errors) and table.png (ours against published); a Domain-IL or "
        "general benchmark's table has no Task-IL column and says why. Another --protocol "
        "(laptop on seq-cifar10 or seq-cifar100) gives a quick table, "
        "the published values for orientation only; a benchmark with nothing published (seq-digits) trains "
        "the X-DER paper's Table 1 methods and tabulates ours alone. --paper der (or x-der) trains that "
        "paper's methods on any benchmark, and --methods may name any registered method: a row with no "
        "published value shows -; a method no preset has values for runs with preset none. flatness, "
        "class-order and table train in this process one run after the other unless --max-concurrent or "
        "--address sends them to Ray. Rerunning skips finished runs and resumes interrupted ones; a run "
        "another process is training is reported as running elsewhere and left to it.",
    )
    choices = catalogue.EXPERIMENTS.names()
    experiment.add_argument("name", choices=choices, metavar="NAME", help=", ".join(choices))
    experiment.add_argument(
        "--out", required=True, metavar="DIR", help="the experiment's folder (runs, table, plot)"
    )
    experiment.add_argument(
        "--benchmark", default=DEFAULT_BENCHMARK, metavar="NAME", help=f"benchmark ({DEFAULT_BENCHMARK})"
    )
    add_protocol_argument(experiment)
    seeds = ",".join(map(str, catalogue.EXPERIMENT_SEEDS))
    experiment.add_argument(
        "--seeds",
        type=int_list,
        default=catalogue.EXPERIMENT_SEEDS,
        metavar="S,S",
        help=f"seeds of every setting ({seeds})",
    )
    experiment.add_argument(
        "--set",
        action="append",
        type=assignment,
        metavar="KEY=VALUE",
        help="override a setting of every run, e.g. --set train.epochs=2 (repeatable)",
    )
    experiment.add_argument(
        "--pairs",
        type=int_list,
        metavar="K,K",
        help="flatness: pairs (k, k+1) to run, by k (default: all T-1)",
    )
    experiment.add_argument(
        "--methods",
        type=name_list,
        metavar="A,B",
        help=f"class-order: methods ({','.join(catalogue.CLASS_ORDER_METHODS)}); table: rows by method or "
        "variant entry, e.g. er,derpp,xder-rpc: the table's or any registered method's (default: every row)",
    )
    papers = ", ".join(catalogue.TABLE_PAPERS.names())
    help_paper = f"table: the rows are this paper's methods, {papers} (default: the benchmark's, else x-der)"
    experiment.add_argument("--paper", metavar="NAME", help=help_paper)
    experiment.add_argument(
        "--buffer-size",
        type=int,
        metavar="M",
        help="table (required): the buffer size of the published table, e.g. 200, 500 or 5120 on seq-cifar10",
    )
    experiment.add_argument(
        "--method", metavar="NAME", help=f"sensitivity: the method ({catalogue.SENSITIVITY_METHOD})"
    )
    experiment.add_argument(
        "--param",
        action="append",
        metavar="KEY=V1,V2",
        help="sensitivity: a parameter and its values, e.g. --param method.alpha=0.1,0.3,0.6 (repeatable)",
    )
    add_run_flags(experiment, "of every run")
    add_ray_arguments(experiment, "run")
    add_logger_argument(experiment, "every run")
    add_plugin_argument(experiment)
    experiment.set_defaults(handler="experiment")


# ---------------------------------------------------------------------------------------------
# The handler


def run(args: argparse.Namespace) -> int:
    """Run ``xder-run experiment NAME`` (``args`` from its parser): plan every run (any
    configuration mistake is a usage error before anything trains), train the unfinished ones, a
    line per run as it ends, then print the table; exit status 1 when every run failed."""
    from xder_cli.progress import OutcomeLines, print_notice
    from xder_cli.runs import experiments
    from xder_cli.runs.scheduler import RUNNING_ELSEWHERE, retry_note
    from xder_cli.runs.settings import parse_values
    from xder_cli.runs.trackers import check_loggers
    from xder_data import DEFAULT_PROTOCOL

    if args.logger:
        check_loggers(args.logger)
    options = experiments.ExperimentOptions(
        benchmark=args.benchmark,
        protocol=args.protocol or DEFAULT_PROTOCOL,
        seeds=args.seeds,
        sets=run_flag_settings(args) | dict(args.set or ()),
        loggers=tuple(args.logger or ()),
        pairs=args.pairs,
        methods=args.methods,
        method=args.method,
        params=tuple(parse_values(text) for text in args.param or ()),
        buffer_size=args.buffer_size,
        paper=args.paper,
    )
    planned = experiments.plan_experiment(args.name, options, notify=print_notice)
    out = Path(args.out)
    try:
        (out / experiments.RUNS).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output folder {out}: {error.strerror}") from error
    print(f"experiment {args.name} on {args.benchmark}{planned.qualifier} -> {out}", flush=True)
    use_ray = planned.on_ray or args.address is not None or args.max_concurrent is not None
    where = "on Ray" if use_ray else "in this process"
    lines = OutcomeLines(
        lambda total, finished: (
            f"{total} runs, {finished} already finished; training {total - finished} {where}"
        )
    )
    summary, outcomes = experiments.run_experiment(planned, out, use_ray=use_ray, **scheduling(args, lines))
    sys.stdout.write("\n" + planned.markdown(summary))
    print(f"\nwrote {', '.join(planned.files)} to {out}")
    elsewhere = sum(outcome["status"] == RUNNING_ELSEWHERE for outcome in outcomes.values())
    if elsewhere:
        print(
            f"note: {elsewhere} run(s) are being trained by another process (this experiment started "
            "twice?): run it again after that process ends to include them"
        )
    if summary["retries"]:
        print(retry_note(summary["retries"], "run"))
    failed = sum(outcome["status"] == "failed" for outcome in outcomes.values())
    return 1 if failed == len(planned.runs) else 0
