"""The ``xder-run`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from xder_cli.config import LOGGERS, parse_assignment
from xder_cli.errors import Interrupted, UsageError
from xder_cli.plugins import load_plugins, plugin_arguments
from xder_data import DataError, DataNotFoundError, list_benchmarks
from xder_methods import MethodError, list_methods
from xder_models import UnknownBackboneError, list_backbones

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


def _add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE_OR_FILE",
        help="import a module (by name) or a .py file first, for the methods, benchmarks and backbones it "
        "registers (repeatable; installed packages declaring xder.methods, xder.benchmarks or "
        "xder.backbones entry points load by themselves)",
    )


def _add_logger_argument(parser: argparse.ArgumentParser, runs: str) -> None:
    parser.add_argument(
        "--logger",
        action="append",
        choices=LOGGERS,
        metavar="NAME",
        help=f"also log {runs} to an experiment tracker: {' or '.join(LOGGERS)} (repeatable; under each run "
        "directory, wandb offline unless WANDB_MODE says otherwise; recorded as run.loggers)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``xder-run`` parser; its help lists the methods, benchmarks and backbones registered
    when it is built (plugins included)."""
    parser = _Parser(
        prog="xder-run",
        description="X-DER and its competitors for class-incremental continual learning. Methods: "
        f"{', '.join(list_methods())}. Benchmarks: {', '.join(list_benchmarks())}. Backbones: "
        f"{', '.join(list_backbones())}.",
    )
    _add_plugin_argument(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    train = commands.add_parser(
        "train",
        formatter_class=_ExamplesFormatter,
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
    _add_protocol_argument(train)
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
    _add_logger_argument(train, "the run")
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
    _add_plugin_argument(train)
    train.set_defaults(handler="train")
    _add_data_parser(commands)
    _add_analyze_parser(commands)
    _add_report_parser(commands)
    _add_bench_parser(commands)
    _add_sweep_parser(commands)
    _add_experiment_parser(commands)
    return parser


TRAIN_EXAMPLES = """examples:
  xder-run train                                    # X-DER on seq-digits, the tuned preset
  xder-run train --method derpp --benchmark seq-cifar10 --protocol laptop --seed 1
  xder-run train --benchmark folder --data-root my_images --set benchmark.tasks=3 --epochs 5
  xder-run train --resume runs/20261124-214107-xder-seq-digits-m200-s0"""

EXPERIMENT_EXAMPLES = """examples:
  xder-run experiment table --benchmark seq-cifar100 --protocol laptop --buffer-size 500 \\
      --seeds 0,1,2 --set run.data_root=data --out tables/c100-laptop
  xder-run experiment class-order --benchmark seq-digits --methods xder,er --out exp/order
  xder-run experiment sensitivity --method xder --param method.alpha=0.1,0.3,0.6 --out exp/alpha"""


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps an ``examples:`` epilog's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _add_protocol_argument(parser: argparse.ArgumentParser, *, recorded: bool = True) -> None:
    """``--protocol``; ``recorded``: the command writes run directories, whose config.toml records it."""
    parser.add_argument(
        "--protocol",
        metavar="NAME",
        help="the benchmark's training protocol: paper (default: the paper's epochs, backbone, batches, "
        "buffer) or a variant the benchmark defines, e.g. laptop on seq-cifar10 and seq-cifar100 (sized for "
        "a CPU, with presets of its own)" + ("; recorded in config.toml" if recorded else ""),
    )


def _add_experiment_parser(commands: argparse._SubParsersAction) -> None:
    from xder_cli.experiment import DEFAULT_METHODS, DEFAULT_SEEDS, DEFAULT_SENSITIVITY_METHOD, EXPERIMENTS

    experiment = commands.add_parser(
        "experiment",
        formatter_class=_ExamplesFormatter,
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
        "seq-cifar10), each with its preset, over the seeds; OUT receives table.md and table.csv (per "
        "method: our FAA and FF, the published value, the difference, whether it exceeds two standard "
        "errors; then the papers' claims about the table, each checked on our rows: holds, does not hold or "
        "not separated by two standard errors) and table.png (ours against published). Another --protocol "
        "(laptop on seq-cifar10 or seq-cifar100) gives a quick table, "
        "the published values for orientation only; a benchmark with nothing published (seq-digits) trains "
        "the X-DER paper's Table 1 methods and tabulates ours alone. flatness, class-order and table train "
        "in this process one run after the other unless --max-concurrent or --address sends them to Ray. "
        "Rerunning skips finished runs and resumes interrupted ones; a run another process is training is "
        "reported as running elsewhere and left to it.",
    )
    experiment.add_argument("name", choices=EXPERIMENTS, metavar="NAME", help=", ".join(EXPERIMENTS))
    experiment.add_argument(
        "--out", required=True, metavar="DIR", help="the experiment's folder (runs, table, plot)"
    )
    experiment.add_argument(
        "--benchmark", default=DEFAULT_BENCHMARK, metavar="NAME", help=f"benchmark ({DEFAULT_BENCHMARK})"
    )
    _add_protocol_argument(experiment)
    seeds = ",".join(map(str, DEFAULT_SEEDS))
    experiment.add_argument("--seeds", default=seeds, metavar="S,S", help=f"seeds of every setting ({seeds})")
    experiment.add_argument(
        "--set",
        action="append",
        type=_assignment,
        metavar="KEY=VALUE",
        help="override a setting of every run, e.g. --set train.epochs=2 (repeatable)",
    )
    experiment.add_argument(
        "--pairs", metavar="K,K", help="flatness: pairs (k, k+1) to run, by k (default: all T-1)"
    )
    experiment.add_argument(
        "--methods",
        metavar="A,B",
        help=f"class-order: methods ({','.join(DEFAULT_METHODS)}); table: some of the table's rows, by "
        "method or variant entry, e.g. er,derpp,xder-rpc (default: every row)",
    )
    experiment.add_argument(
        "--buffer-size",
        type=int,
        metavar="M",
        help="table (required): the buffer size of the published table, e.g. 200, 500 or 5120 on seq-cifar10",
    )
    experiment.add_argument(
        "--method", metavar="NAME", help=f"sensitivity: the method ({DEFAULT_SENSITIVITY_METHOD})"
    )
    experiment.add_argument(
        "--param",
        action="append",
        metavar="KEY=V1,V2",
        help="sensitivity: a parameter and its values, e.g. --param method.alpha=0.1,0.3,0.6 (repeatable)",
    )
    _add_ray_arguments(experiment, "run")
    _add_logger_argument(experiment, "every run")
    _add_plugin_argument(experiment)
    experiment.set_defaults(handler="experiment")


def _add_ray_arguments(parser: argparse.ArgumentParser, unit: str) -> None:
    """``--max-concurrent``, ``--address`` and ``--gpus-per-<unit>`` of the commands run on Ray."""
    parser.add_argument(
        "--max-concurrent", type=int, metavar="N", help=f"{unit}s at once on Ray (default: as Ray schedules)"
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="a running Ray cluster, e.g. ray://head:10001 (default: start a local Ray instance); OUT must "
        "then be on a filesystem every node sees",
    )
    parser.add_argument(
        f"--gpus-per-{unit}", type=float, default=0.0, metavar="G", help=f"GPUs Ray reserves per {unit} (0)"
    )


def _add_sweep_parser(commands: argparse._SubParsersAction) -> None:
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
    _add_protocol_argument(sweep)
    _add_ray_arguments(sweep, "trial")
    _add_logger_argument(sweep, "every trial")
    _add_plugin_argument(sweep)
    sweep.set_defaults(handler="sweep")


def _add_bench_parser(commands: argparse._SubParsersAction) -> None:
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
    _add_protocol_argument(bench, recorded=False)
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
    _add_plugin_argument(bench)
    bench.set_defaults(handler="bench")


def _add_report_parser(commands: argparse._SubParsersAction) -> None:
    from xder_cli.report import DEFAULT_REPORT_OUT

    report = commands.add_parser(
        "report",
        help="Table-1-style tables (FAA ± std (FF ± std) over seeds) and plots from run directories",
        description=(
            "Tabulate the final average accuracy (FAA) and final forgetting (FF) of complete runs as "
            "mean ± sample std over seeds: one row per method (and preset, and any setting on which its "
            "runs differ), one column per benchmark and buffer size, buffer-less methods in every column "
            "of their benchmark. Plots the accuracy after each task (mean ± std band) per column and the "
            "mean accuracy matrix per group. Runs without results.json, unreadable or incomplete runs, "
            "and missing seeds are listed, not fatal. DIR receives table.md, table.csv, report.json, "
            "curves_<benchmark>_m<buffer>.png and matrix_<benchmark>_m<buffer>_<method>.png."
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
        default=DEFAULT_REPORT_OUT,
        metavar="DIR",
        help=f"folder for the tables, plots and report.json (default: {DEFAULT_REPORT_OUT})",
    )
    report.add_argument(
        "--task-il", action="store_true", help="tabulate and plot Task-IL accuracy instead of Class-IL"
    )
    _add_plugin_argument(report)
    report.set_defaults(handler="report")


def _add_analyze_parser(commands: argparse._SubParsersAction) -> None:
    from xder_cli.analyze import ANALYSES, RECORDED

    analyze = commands.add_parser(
        "analyze",
        help="the paper's analyses of a trained run, into RUN_DIR/analysis/",
        description="Analyses of a trained run (X-DER paper Sec. 6): "
        + ", ".join(ANALYSES)
        + ". Those that do not apply (no super-classes, no masks, no buffer...) are skipped with the reason; "
        + " and ".join(RECORDED)
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
    _add_plugin_argument(analyze)
    analyze.set_defaults(handler="analyze")


def _add_data_parser(commands: argparse._SubParsersAction) -> None:
    from xder_cli.data import DOWNLOADS, PREPARE_KINDS

    data = commands.add_parser(
        "data",
        help="inspect a benchmark, convert raw datasets, download where allowed",
        description="What a benchmark holds (info), converters from the distributed formats (prepare), "
        "and downloads where the source allows them (download).",
    )
    _add_plugin_argument(data)
    data_commands = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=_Parser)
    data_commands.required = True

    info = data_commands.add_parser("info", help="what a benchmark holds: tasks, classes, sizes, protocol")
    info.add_argument("benchmark", metavar="BENCHMARK", help=f"one of {', '.join(list_benchmarks())}")
    info.add_argument("--data-root", default="data", metavar="DIR", help="folder holding the datasets (data)")
    info.add_argument("--class-order", type=_class_order, metavar="ORDER", help="as for train (natural)")
    _add_protocol_argument(info, recorded=False)
    info.add_argument("--seed", type=int, default=0, metavar="N", help="seed of --class-order random (0)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument(
        "--set",
        action="append",
        type=_assignment,
        metavar="benchmark.KEY=VALUE",
        help="a benchmark option, as for train, e.g. --set benchmark.tasks=3 on folder (repeatable)",
    )
    _add_plugin_argument(info)

    prepare = data_commands.add_parser(
        "prepare",
        help="convert a dataset from its distributed format into the layout its benchmark reads",
        description="cifar10: an image-folder copy of CIFAR-10 (--source: a folder or tar archive holding "
        "train/<class>/* and test/<class>/*, 32x32 images) -> DATA_ROOT/cifar-10-batches-py/ in the official "
        "format; cifar100: the same for CIFAR-100 (train/<fine class>/*, 500 a class, and "
        "test/<fine class>/*, 100 a class, the 100 fine class names of the official meta file; the "
        "super-classes from the standard table) -> DATA_ROOT/cifar-100-python/ in the official format; "
        "ntu60: raw .skeleton files (--raw) -> DATA_ROOT/ntu60/xsub.h5; ntu60-stgcn, "
        "ntu60-efficientgcn: those projects' preprocessed .npy + .pkl (--source) -> the same file; "
        "miniimagenet: the CSV + images or mini-imagenet-cache-*.pkl distribution (--source) -> "
        "DATA_ROOT/MINIIMG/*.npy with a seeded per-class train/test split, or image folders already "
        "split (--format folders: a folder or tar archive holding train/<wnid>/* and val/<wnid>/*, "
        "84x84; val/ is the test set, the split is kept); the format is detected (a tar archive, or "
        "train/ and val/ subfolders: folders); cub200: decode "
        "DATA_ROOT/CUB_200_2011 (+ segmentations/) once into the cache DATA_ROOT/cub200/cub200.h5; "
        "coco-stitch: COCO 2017 objects (--source: annotations/, train2017/, val2017/) pasted on "
        "CIFAR-100 images of DATA_ROOT (the secondary-targets set, DATA_ROOT/coco_stitch/).",
    )
    prepare.add_argument("kind", choices=PREPARE_KINDS, metavar="KIND", help=", ".join(PREPARE_KINDS))
    prepare.add_argument("--raw", metavar="DIR", help="ntu60: the folder of raw .skeleton files")
    prepare.add_argument(
        "--source",
        metavar="DIR",
        help="the folder (cifar10, cifar100, miniimagenet folders: or tar archive) holding the files "
        "to convert",
    )
    prepare.add_argument("--data-root", default="data", metavar="DIR", help="where to write (data)")
    prepare.add_argument("--frames", type=int, default=80, metavar="T", help="ntu60*: frames per sample (80)")
    prepare.add_argument(
        "--missing", metavar="FILE", help="ntu60*: the official NTU_RGBD_samples_with_missing_skeletons.txt"
    )
    prepare.add_argument(
        "--format",
        choices=("csv", "pickle", "folders"),
        help="miniimagenet: the source's format (detected)",
    )
    prepare.add_argument(
        "--test-per-class",
        type=int,
        metavar="N",
        help="miniimagenet csv, pickle: test images drawn per class (100)",
    )
    prepare.add_argument(
        "--seed", type=int, default=0, metavar="N", help="miniimagenet csv, pickle; coco-stitch: seed (0)"
    )
    _add_plugin_argument(prepare)

    download = data_commands.add_parser("download", help="fetch and checksum an official archive")
    download.add_argument("dataset", choices=DOWNLOADS, metavar="DATASET", help=", ".join(DOWNLOADS))
    download.add_argument("--data-root", default="data", metavar="DIR", help="where to unpack it (data)")
    _add_plugin_argument(download)
    data.set_defaults(handler="data")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``xder-run``; returns the exit status (2 for every user mistake).

    Plugins (entry points, and every ``--plugin`` in ``argv``) are loaded first, so that the
    parser and its help know the names they register.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        load_plugins(plugin_arguments(argv))
    except UsageError as error:
        print(f"xder-run: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
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
        if args.handler == "data":
            from xder_cli.data import command_data

            return command_data(args)
        if args.handler == "bench":
            from xder_cli.bench import command_bench

            return command_bench(args)
        if args.handler == "report":
            from xder_cli.report import command_report

            return command_report(args)
        if args.handler == "analyze":
            from xder_cli.analyze import command_analyze

            return command_analyze(args)
        if args.handler == "sweep":
            from xder_cli.sweep import command_sweep

            return command_sweep(args)
        if args.handler == "experiment":
            from xder_cli.experiment import command_experiment

            return command_experiment(args)
        raise AssertionError(f"unhandled command {args.handler}")  # pragma: no cover
    except (UsageError, DataError, MethodError, UnknownBackboneError) as error:
        message = " ".join(str(error).split())
        if isinstance(error, DataNotFoundError) and not ("--data-root" in message or "--source" in message):
            message += " (the data folder is --data-root, run.data_root; default: data)"
        print(f"xder-run {args.command}: error: {message}", file=sys.stderr)
        return 2
    except Interrupted as interrupted:  # a run's Ctrl-C: the message names the run to resume
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `xder-run data info ... --json | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (silence the interpreter's final flush)
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
