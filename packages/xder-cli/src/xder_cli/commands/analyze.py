"""``xder-run analyze RUN_DIR``: the paper's analyses of a trained run (:mod:`xder_cli.runs.analyses`),
each printed in one line and written to ``RUN_DIR/analysis/analysis.json`` with its plots."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from xder_cli.commands.common import add_plugin_argument, flag
from xder_cli.errors import UsageError
from xder_cli.runs import rundir
from xder_cli.runs.analyses import (
    ANALYSES,
    RECORD_HINT,
    RECORDED,
    RUNNERS,
    AnalysisSkipped,
)
from xder_cli.runs.cpushare import ThreadPolicy
from xder_cli.runs.errors import RunError, render
from xder_cli.runs.loaded import load_trained_run

__all__ = ["command_analyze", "has_training_records"]

# ---------------------------------------------------------------------------------------------


def _summary(name: str, value: dict[str, Any]) -> str:
    if name == "ece":
        accuracy = 100 * value["accuracy"]
        return f"ECE {100 * value['ece']:.2f}% (15 bins), accuracy over all classes {accuracy:.2f}%"
    if name == "ss":
        return f"SS-ERR {value['ss_err']:.4f}, SS-NLL {value['ss_nll']:.4f}"
    if name == "head_bias":
        share = 100 * value["newest_head_share"]
        return f"after the last task, {share:.1f}% of the mistakes on past tasks go to the newest head"
    if name == "grad_norms":
        return ", ".join(f"{k} {v:.4f}" for k, v in value["mean"].items()) + " (mean gradient norm)"
    if name == "buffer_logits":
        return f"mean stored logits of {sum(1 for row in value['final'] if np.isfinite(row).all())} classes"
    if name == "future_fewshot_auc":
        return "AUC_t " + " ".join(f"{v:.1f}" for v in value["auc"].values())
    if name == "resources":
        secs = "-" if value["seconds_per_epoch"] is None else f"{value['seconds_per_epoch']:.2f}"
        memory = "-" if value["peak_memory_mb"] is None else f"{value['peak_memory_mb']:.0f}"
        return f"{value['parameters']:,} parameters, {secs} s/epoch, peak memory {memory} MB"
    if name == "flatness":
        return "L_sigma " + " ".join(
            f"{s}:{v:.3f}" for s, v in zip(value["sigmas"], value["loss"], strict=True)
        )
    if name == "fisher_trace":
        return f"Tr(F) {value['trace']:.4f}"
    if name == "buffer_informativeness":
        return (
            " ".join(f"{k} {v:.2f}%" for k, v in value["accuracy"].items()) + f" ({value['epochs']} epochs)"
        )
    if name == "pointing":
        return f"pointing accuracy {100 * value['accuracy']:.2f}% (tolerance {value['tolerance']} px)"
    if name == "secondary_targets":
        extra = f", pointing {100 * value['pointing_accuracy']:.2f}%" if "pointing_accuracy" in value else ""
        return f"F1 {value['f1']:.4f}{extra}"
    return ""


def command_analyze(args: Any) -> int:
    """Entry point of ``xder-run analyze``."""
    names = list(ANALYSES)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in ANALYSES]
        if unknown:
            raise UsageError(f"unknown analysis {unknown[0]!r}: choose from {', '.join(ANALYSES)}")
    run_dir = rundir.check_run_dir(Path(args.run_dir))
    # A writer of the run directory: one at a time, never beside a training run (rundir.lock_run_dir).
    with (
        rundir.lock_run_dir(run_dir, then=f"run xder-run analyze {run_dir} again"),
        ThreadPolicy(),  # some analyses train networks: a fair share of the cores, as a run takes
    ):
        _analyze(run_dir, names, args)
    return 0


def has_training_records(run_dir: Path) -> bool:
    """Whether ``run_dir`` was trained recording the analyses of :data:`RECORDED`: its config says
    so, or its events hold them (runs made before recording became optional always did)."""
    try:
        if rundir.read_config(run_dir / rundir.CONFIG).get("run", {}).get("record_analyses"):
            return True
        lines = (run_dir / rundir.EVENTS).read_text().splitlines()
    except (OSError, RunError):
        return False
    for line in lines:
        event = json.loads(line) if line.strip() else {}
        if event.get("grad_norms") or "fewshot" in event or "buffer_class_logits" in event:
            return True
    return False


def _analyze(run_dir: Path, names: list[str], args: Any) -> None:
    unrecorded = [] if has_training_records(run_dir) else [n for n in names if n in RECORDED]
    record_hint = render(RECORD_HINT, flag)
    if unrecorded and args.only:
        raise UsageError(
            f"{run_dir} was trained without recording what {', '.join(unrecorded)} "
            f"{'reads' if len(unrecorded) == 1 else 'read'}: {record_hint}"
        )
    run = load_trained_run(run_dir, device=args.device, data_root=args.data_root)
    out = run.run_dir / "analysis"
    out.mkdir(exist_ok=True)
    if not run.complete:
        print(f"note: {run.run_dir} is not finished; analysing its last checkpoint", file=sys.stderr)
    report: dict[str, Any] = {
        "run": str(run.run_dir),
        "complete": run.complete,
        "analyses": {},
        "skipped": {},
    }
    for name in names:
        started = time.perf_counter()
        try:
            if name in unrecorded:
                raise AnalysisSkipped(f"not recorded while training: {RECORD_HINT}")
            value = RUNNERS[name](run, out, args)
        except AnalysisSkipped as skip:
            reason = skip.render(flag)
            report["skipped"][name] = reason
            if not args.json:
                print(f"{name}: skipped ({reason})")
            continue
        value["seconds"] = time.perf_counter() - started
        key_values = {"ss_err": value["ss_err"], "ss_nll": value["ss_nll"]} if name == "ss" else {name: value}
        report["analyses"].update(key_values)
        if not args.json:
            print(f"{name}: {_summary(name, value)}")
    rundir.write_json(out / "analysis.json", report)
    if args.json:
        print(json.dumps(rundir.json_safe(report), indent=2))
    else:
        print(f"written: {out / 'analysis.json'}")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``xder-run analyze`` to the subcommands."""
    from xder_cli.runs.analyses import ANALYSES, RECORDED

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
    add_plugin_argument(analyze)
    analyze.set_defaults(handler="analyze")


run = command_analyze
