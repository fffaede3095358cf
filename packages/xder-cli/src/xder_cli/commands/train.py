"""``xder-run train``: resolve a run's configuration, build it, train it, record it."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xder_cli.commands.common import (
    DEFAULT_BENCHMARK,
    DEFAULT_METHOD,
    DEFAULT_OUT,
    ExamplesFormatter,
    add_logger_argument,
    add_plugin_argument,
    add_protocol_argument,
    assignment,
    class_order,
    error_line,
    fraction,
)
from xder_cli.errors import Interrupted, UsageError
from xder_cli.progress import on_terminal
from xder_cli.runs import rundir
from xder_cli.runs.errors import RunError
from xder_cli.runs.plan import RunPlan, build_plan, resolve_config, resolve_device
from xder_cli.runs.plugins import PluginError, load_plugin, loaded_plugins
from xder_cli.runs.trackers import check_loggers
from xder_cli.runs.training import run_training
from xder_data import DEFAULT_PROTOCOL, DataError, list_benchmarks
from xder_methods import (
    MethodError,
    list_methods,
    method_config_class,
)
from xder_models import UnknownBackboneError

__all__ = ["command_train", "print_summary"]


def _run(plan: RunPlan, run_dir: Path, *, resume: bool = False) -> dict[str, Any]:
    """Train ``plan`` into ``run_dir`` with the terminal's progress bars and lines."""
    return run_training(plan, run_dir, resume=resume, **on_terminal())


def _fmt(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def print_summary(results: dict[str, Any], run_dir: Path) -> None:
    print(
        f"FAA {_fmt(results['faa'])}  FF {_fmt(results['ff'])}  |  Task-IL FAA {_fmt(results['task_il_faa'])}"
        f"  |  wall time {results['wall_time_s']:.1f} s"
    )
    print(f"results: {run_dir / rundir.RESULTS}  plots: {run_dir / rundir.PLOTS}")


def command_train(args: Any) -> int:
    """Entry point of ``xder-run train`` (``args`` from the argument parser)."""
    if args.resume is not None:
        given = [flag for flag, value in _train_flags(args).items() if value is not None]
        if given:
            raise UsageError(
                f"--resume takes no other settings (got {given[0]}): "
                "the run continues with its own config.toml"
            )
        run_dir = rundir.check_run_dir(Path(args.resume), named_by="resume")
        plan = _resumed_plan(run_dir)
        # A complete run is reported without taking the lock: nothing in the folder is touched.
        if _report_if_complete(run_dir):
            return 0
        with rundir.lock_run_dir(run_dir, then=f"run xder-run train --resume {run_dir} again"):
            if _report_if_complete(run_dir):  # another writer finished it meanwhile
                return 0
            check_loggers(plan.settings.loggers)
            if (run_dir / rundir.CHECKPOINT).exists():
                _announce(plan, run_dir, "resuming")
            else:
                print(f"{run_dir}: no checkpoint yet: starting from the beginning", flush=True)
                _announce(plan, run_dir, "training")
            with _interruptible(run_dir):
                results = _run(plan, run_dir, resume=True)
            print_summary(results, run_dir)
        return 0

    method_values: dict[str, Any] = {}
    if args.buffer_size is not None:
        if args.buffer_size < 0:
            raise UsageError(f"--buffer-size must be >= 0, got {args.buffer_size}")
        fields = {f.name for f in dataclasses.fields(method_config_class(args.method))}
        if "buffer_size" in fields:
            method_values["buffer_size"] = args.buffer_size
        else:
            print(
                f"note: method {args.method!r} keeps no buffer; --buffer-size is ignored",
                file=sys.stderr,
            )
    run = {
        key: value
        for key, value in {
            "seed": args.seed,
            "device": args.device,
            "class_order": args.class_order,
            "data_root": args.data_root,
            "validation": args.validation,
            "loggers": args.logger,
            "record_analyses": args.record_analyses,
            "plugins": list(loaded_plugins()) or None,
        }.items()
        if value is not None
    }
    train = {} if args.epochs is None else {"epochs": args.epochs}
    config = resolve_config(
        method=args.method,
        benchmark=args.benchmark,
        preset=args.preset,
        run=run,
        train=train,
        method_values=method_values,
        sets=list(args.set or []),
        protocol_name=args.protocol or DEFAULT_PROTOCOL,
    )
    plan = build_plan(config)
    resolve_device(plan.settings.device)  # fail before creating anything
    check_loggers(plan.settings.loggers)
    run_dir = rundir.new_run_dir(
        Path(args.out),
        plan.settings.method,
        plan.settings.benchmark,
        plan.buffer_size,
        plan.settings.seed,
    )
    try:
        # Nobody else knows the fresh folder's name yet: the lock is free, and held from here on.
        with rundir.lock_run_dir(run_dir, then=f"run xder-run train --resume {run_dir}"):
            config = run_dir / rundir.CONFIG
            with rundir.write_errors(config, then=f"train again (and delete {run_dir})"):
                rundir.write_config(config, plan.config)
            _announce(plan, run_dir, "training")
            with _interruptible(run_dir):
                results = _run(plan, run_dir)
            print_summary(results, run_dir)
    except (RunError, UsageError, DataError, MethodError, UnknownBackboneError):
        _remove_if_unstarted(run_dir)
        raise
    return 0


def _remove_if_unstarted(run_dir: Path) -> None:
    """Remove a run folder that a failed start left behind (a data error, a bad class order, a
    divergence in the first epoch): nothing in it can be resumed, and ``report`` would list it.
    Never one holding a checkpoint. Silent: the error that follows is the one line to read."""
    if not (run_dir / rundir.CHECKPOINT).exists():
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.contextmanager
def _interruptible(run_dir: Path) -> Iterator[None]:
    """Turn Ctrl-C into the line that says how to continue this run (exit status 130)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: continue with xder-run train --resume {run_dir}") from None


def _resumed_plan(run_dir: Path) -> RunPlan:
    """The plan of a run to resume, its plugins loaded first (those recorded in config.toml)."""
    config = rundir.read_config(run_dir / rundir.CONFIG)
    for spec in config.get("run", {}).get("plugins", []):
        try:
            load_plugin(spec)
        except PluginError as error:
            raise UsageError(
                f"{run_dir} was trained with --plugin {spec}, which does not load now ({error_line(error)}): "
                "install or restore it, or pass --plugin with where it is now"
            ) from error
    method = config.get("run", {}).get("method")
    if method is not None and method not in list_methods():
        raise UsageError(
            f"{run_dir} trains method {method!r}, which nothing registers here: it comes from a plugin "
            "not recorded in its config.toml; resume with --plugin MODULE_OR_FILE naming it"
        )
    return build_plan(config)


def _report_if_complete(run_dir: Path) -> bool:
    """Print the summary of ``run_dir`` if its results.json says it is complete; read only."""
    results = rundir.complete_results(run_dir)
    if results is None:
        return False
    print(f"{run_dir} is already complete.")
    print_summary(results, run_dir)
    return True


def _announce(plan: RunPlan, run_dir: Path, verb: str) -> None:
    s = plan.settings
    protocol = "" if s.protocol == DEFAULT_PROTOCOL else f", protocol {s.protocol}"
    print(
        f"{verb} {s.method} on {s.benchmark} (buffer {plan.buffer_size}, seed {s.seed}, preset {s.preset}"
        f"{protocol}, {plural(plan.schedule.epochs, 'epoch')}/task) -> {run_dir}",
        flush=True,
    )


def plural(count: int, noun: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _train_flags(args: Any) -> dict[str, Any]:
    return {
        "--method": args.method_given,
        "--benchmark": args.benchmark_given,
        "--protocol": args.protocol,
        "--buffer-size": args.buffer_size,
        "--seed": args.seed,
        "--epochs": args.epochs,
        "--class-order": args.class_order,
        "--data-root": args.data_root,
        "--device": args.device,
        "--validation": args.validation,
        "--logger": args.logger,
        "--record-analyses": args.record_analyses,
        "--preset": args.preset,
        "--set": args.set or None,
        "--out": args.out_given,
    }


TRAIN_EXAMPLES = """examples:
  xder-run train                                    # X-DER on seq-digits, the tuned preset
  xder-run train --method derpp --benchmark seq-cifar10 --protocol laptop --seed 1
  xder-run train --benchmark folder --data-root my_images --set benchmark.tasks=3 --epochs 5
  xder-run train --resume runs/20261124-214107-xder-seq-digits-m200-s0"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``xder-run train`` to the subcommands."""
    train = commands.add_parser(
        "train",
        formatter_class=ExamplesFormatter,
        epilog=TRAIN_EXAMPLES,
        help=f"train one run (default: {DEFAULT_METHOD} on {DEFAULT_BENCHMARK}) into a run directory",
        description=(
            "Train a continual learner on a class-incremental benchmark, evaluating every seen task "
            "after each task. The run directory OUT/<date>-<method>-<benchmark>-m<buffer>-s<seed>/ "
            "receives config.toml, events.jsonl, results.json, checkpoint.pt and plots/; one process at a "
            "time writes it (RUN_DIR/.lock). "
            "Settings layer as: method defaults < benchmark protocol < preset < flags < --set. "
            "On a CPU the run takes a fair share of the cores among the xder-run trainings of the "
            "machine (all of them alone), followed as others start and end; --set run.threads=N or "
            "OMP_NUM_THREADS fixes the count."
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
    train.add_argument("--epochs", type=int, metavar="N", help="epochs per task (default: the protocol's)")
    train.add_argument(
        "--class-order",
        type=class_order,
        metavar="ORDER",
        help="natural (default), reversed, random (from the seed) or a permutation such as 9,8,7,...,0",
    )
    train.add_argument("--data-root", metavar="DIR", help="folder holding the datasets (default: data)")
    train.add_argument("--device", metavar="DEV", help="auto (default: CUDA if available), cpu, cuda, cuda:N")
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
        "the X-DER paper's, the DER paper's on seq-cifar10), tuned (ours, selected on validation: "
        "seq-digits, seq-cifar10) or none (benchmark protocol + the method's own defaults); NAME:ENTRY "
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
