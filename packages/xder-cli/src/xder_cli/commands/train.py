"""``xder-run train``: its flags turned into settings, the run's life (:mod:`xder_cli.runs.lifecycle`)
shown on the terminal, its summary printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xder_cli import catalogue
from xder_cli.arguments import ExamplesFormatter, assignment, class_order, fraction
from xder_cli.commands.common import (
    DEFAULT_BENCHMARK,
    DEFAULT_METHOD,
    DEFAULT_OUT,
    add_logger_argument,
    add_plugin_argument,
    add_protocol_argument,
    add_run_flags,
    run_flag_settings,
)
from xder_cli.errors import Interrupted, UsageError
from xder_cli.runs.plugins import loaded_plugins

if TYPE_CHECKING:
    from xder_cli.runs.lifecycle import Start
    from xder_cli.runs.records import Settings
    from xder_cli.runs.settings import RunPlan

__all__ = ["command_train", "run_settings"]


TRAIN_FLAGS = {
    "seed": "run.seed",
    "class_order": "run.class_order",
    "validation": "run.validation",
    "logger": "run.loggers",
    "record_analyses": "run.record_analyses",
}
"""Train's own flags that are settings (argparse's name -> the dotted key it sets), beside the
ones every training command takes (:data:`xder_cli.commands.common.RUN_FLAGS`)."""


def run_settings(args: argparse.Namespace) -> Settings:
    """The settings the flags give, as dotted keys, then ``--set``'s in their order."""
    from xder_cli.runs.settings import takes_buffer

    settings = run_flag_settings(args) | {
        key: getattr(args, name) for name, key in TRAIN_FLAGS.items() if getattr(args, name) is not None
    }
    if args.buffer_size is not None:  # its range is the method config's to check
        if takes_buffer(args.method):
            settings["method.buffer_size"] = args.buffer_size
        else:
            print(f"note: method {args.method!r} keeps no buffer; --buffer-size is ignored", file=sys.stderr)
    if loaded_plugins():
        settings["run.plugins"] = list(loaded_plugins())
    return settings | dict(args.set or [])


def command_train(args: Any) -> int:
    """Entry point of ``xder-run train`` (``args`` from the argument parser)."""
    from xder_cli.progress import on_terminal, print_summary
    from xder_cli.runs import rundir
    from xder_cli.runs.lifecycle import RunLife, Start
    from xder_cli.runs.settings import build_plan, resolve_config, start_notes
    from xder_data import DEFAULT_PROTOCOL

    started: list[Path] = []  # the run directory, once the run's life knows it

    def on_start(start: Start, plan: RunPlan[Any], run_dir: Path) -> None:
        started.append(run_dir)
        _announce(start, plan, run_dir, resumed=args.resume is not None)
        for note in start_notes(plan, preset_named=args.preset is not None) if start is Start.NEW else []:
            print(note, flush=True)

    if args.resume is not None:
        given = _given_flags(args)
        if given:
            raise UsageError(
                f"--resume takes no other settings (got {given[0]}): "
                "the run continues with its own config.toml"
            )
        run_dir = rundir.check_run_dir(Path(args.resume), named_by="resume")
    else:
        config = resolve_config(
            args.method,
            args.benchmark,
            protocol=args.protocol or DEFAULT_PROTOCOL,
            preset=args.preset,
            settings=run_settings(args),
        )
        plan = build_plan(config)
    life = RunLife(on_terminal(), on_start=on_start)
    try:
        lived = life.existing(run_dir) if args.resume is not None else life.new(plan, Path(args.out))
    except KeyboardInterrupt:
        if not started:
            raise
        raise Interrupted(f"interrupted: continue with xder-run train --resume {started[0]}") from None
    print_summary(lived.results, lived.run_dir)
    return 0


def _announce(start: Start, plan: RunPlan[Any], run_dir: Path, *, resumed: bool) -> None:
    """The run's first lines: what trains, from where (or that it is complete already)."""
    from xder_cli.runs.lifecycle import Start
    from xder_data import DEFAULT_PROTOCOL

    if start is Start.COMPLETE:
        print(f"{run_dir} is already complete.")
        return
    if resumed and start is Start.NEW:
        print(f"{run_dir}: no checkpoint yet: starting from the beginning", flush=True)
    s, epochs = plan.settings, plan.schedule.epochs
    verb = "resuming" if start is Start.RESUMED else "training"
    protocol = "" if s.protocol == DEFAULT_PROTOCOL else f", protocol {s.protocol}"
    print(
        f"{verb} {s.method} on {s.benchmark} (buffer {plan.buffer_size}, seed {s.seed}, preset {s.preset}"
        f"{protocol}, {epochs} epoch{'' if epochs == 1 else 's'}/task) -> {run_dir}",
        flush=True,
    )


def _given_flags(args: Any) -> list[str]:
    """The flags given on the command line besides ``--resume`` and ``--plugin``."""
    ignored = {"resume", "plugin", "handler", "command", "method", "benchmark", "out"}
    return [
        "--" + dest.removesuffix("_given").replace("_", "-")
        for dest, value in vars(args).items()
        if dest not in ignored and value not in (None, [])
    ]


TRAIN_EXAMPLES = """examples:
  xder-run train                                    # X-DER on seq-digits, the tuned preset
  xder-run train --method derpp --benchmark seq-cifar10 --protocol laptop --seed 1
  xder-run train --benchmark folder --data-root my_images --protocol laptop --set benchmark.tasks=5
  xder-run train --resume runs/20261124-214107-xder-seq-digits-m200-s0"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``xder-run train`` to the subcommands."""
    train = commands.add_parser(
        "train",
        formatter_class=ExamplesFormatter,
        epilog=TRAIN_EXAMPLES,
        help=f"train one run (default: {DEFAULT_METHOD} on {DEFAULT_BENCHMARK}) into a run directory",
        description=(
            "Train a continual learner on a benchmark of any scenario, evaluating every seen task "
            "after each task. The run directory OUT/<date>-<method>-<benchmark>-m<buffer>-s<seed>/ "
            "receives config.toml, events.jsonl, results.json, checkpoint.pt and plots/; one process at a "
            "time writes it (RUN_DIR/.lock). "
            "Settings layer as: method defaults < benchmark protocol < preset < flags < --set. "
            "On a CPU the run takes a fair share of the cores among the xder-run trainings of the "
            "machine (all of them alone), followed as others start and end; --threads N (run.threads) or "
            "OMP_NUM_THREADS fixes the count."
        ),
    )
    train.add_argument(
        "--method",
        dest="method_given",
        metavar="NAME",
        help=f"continual method: {', '.join(catalogue.METHODS.names())} (default: {DEFAULT_METHOD})",
    )
    train.add_argument(
        "--benchmark",
        dest="benchmark_given",
        metavar="NAME",
        help=f"benchmark: {', '.join(catalogue.BENCHMARKS.names())} (default: {DEFAULT_BENCHMARK})",
    )
    add_protocol_argument(train)
    train.add_argument(
        "--buffer-size", type=int, metavar="N", help="replay buffer size (default: the protocol's)"
    )
    train.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of initialisation and of every random draw (default: 0)",
    )
    train.add_argument(
        "--class-order",
        type=class_order,
        metavar="ORDER",
        help="natural (default), reversed, random (from the seed) or a permutation such as 9,8,7,...,0",
    )
    add_run_flags(train)
    train.add_argument(
        "--validation",
        type=fraction,
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
        type=assignment,
        metavar="KEY=VALUE",
        help="override any setting, e.g. --set method.alpha=0.2 --set train.lr=0.03 --set benchmark.tasks=3 "
        "(repeatable; sections run, train, backbone, method, benchmark)",
    )
    train.add_argument(
        "--preset",
        metavar="NAME[:ENTRY]",
        help="hyperparameter preset: paper (the published chosen values per benchmark and buffer size: "
        "the X-DER paper's, the DER paper's on seq-cifar10, seq-mnist, seq-tinyimg, perm-mnist, rot-mnist "
        "and mnist-360), tuned (ours, selected on validation: "
        "seq-digits, seq-cifar10 laptop, seq-cifar100 laptop) or none (benchmark protocol + the "
        "method's own defaults); NAME:ENTRY "
        "picks a variant's entry, e.g. paper:xder-rpc (default: tuned, else paper, where it has an entry "
        "for this benchmark, protocol, buffer size and method, else none)",
    )
    add_logger_argument(train, "the run")
    train.add_argument(
        "--record-analyses",
        action="store_const",
        const=True,
        help="also record what xder-run analyze's grad_norms and future_fewshot_auc read (gradient norms, "
        "few-shot curves of the future heads, buffer logits per task): a few percent of the run's time; "
        "results unchanged (run.record_analyses)",
    )
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint (a complete run only prints its summary; "
        "refused while another process writes RUN_DIR)",
    )
    add_plugin_argument(train)
    train.set_defaults(handler="train")


def run(args: argparse.Namespace) -> int:
    """``xder-run train``, its defaults filled in."""
    args.method = args.method_given or DEFAULT_METHOD
    args.benchmark = args.benchmark_given or DEFAULT_BENCHMARK
    args.out = args.out_given or DEFAULT_OUT
    return command_train(args)
