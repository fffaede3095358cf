"""A run directory's analyses (``xder-run analyze``, :func:`analyze_run`): the loop over the
asked analyses of :mod:`xder_cli.runs.analyses` under the run's lock, ``analysis.json`` (its one
writer, :func:`write_analysis`, and reader, :func:`read_analysis`), and each result's summary in
a few words (:func:`summary_line`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xder_cli.runs import rundir
from xder_cli.runs.analyses import (
    ANALYSES,
    ANALYSIS_FOLDER,
    RECORD_HINT,
    RECORDED,
    RUNNERS,
    AnalysisOptions,
)
from xder_cli.runs.errors import AnalysisSkipped, RunError, SettingError, option
from xder_cli.runs.loaded import load_trained_run
from xder_cli.runs.settings import Notify, ignore
from xder_methods import ThreadPolicy

__all__ = [
    "ANALYSIS_JSON",
    "analyze_run",
    "has_training_records",
    "read_analysis",
    "summary_line",
    "write_analysis",
]

ANALYSIS_JSON = "analysis.json"
"""``RUN_DIR/analysis/analysis.json``: the analyses of a run, as :func:`analyze_run` wrote them."""


def has_training_records(run_dir: Path) -> bool:
    """Whether ``run_dir`` was trained recording the analyses of :data:`RECORDED`: its config says
    so, or its events hold them (runs made before recording became optional always did)."""
    try:
        if rundir.read_config(run_dir / rundir.CONFIG).get("run", {}).get("record_analyses"):
            return True
        events = rundir.read_events(run_dir)
    except (OSError, RunError):
        return False
    return any(e.get("grad_norms") or "fewshot" in e or "buffer_class_logits" in e for e in events)


def write_analysis(run_dir: Path, report: dict[str, Any]) -> Path:
    """Write ``RUN_DIR/analysis/analysis.json`` (atomically): the one writer of that file."""
    path = Path(run_dir) / ANALYSIS_FOLDER / ANALYSIS_JSON
    path.parent.mkdir(exist_ok=True)
    rundir.write_json(path, report)
    return path


def read_analysis(run_dir: Path) -> dict[str, Any] | None:
    """The ``analyses`` object of a run's ``analysis/analysis.json`` (its one reader), or None
    where the run has none or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / ANALYSIS_FOLDER / ANALYSIS_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    analyses = data.get("analyses") if isinstance(data, dict) else None
    return analyses if isinstance(analyses, dict) else None


def _ignore(*args: Any) -> None:
    """The default callback: does nothing."""


def analyze_run(
    run_dir: str | Path,
    names: Sequence[str] | None = None,
    *,
    options: AnalysisOptions | None = None,
    device: str | None = None,
    on_result: Callable[[str, dict[str, Any] | None, str | None], None] = _ignore,
    notify: Notify = ignore,
    spell: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """The analyses ``names`` (None: all of :data:`ANALYSES`) of a run directory, holding its lock
    (one writer at a time, never beside a training run) and a fair share of the cores, written to
    ``RUN_DIR/analysis/analysis.json`` (:func:`write_analysis`) with their plots.

    An analysis that does not apply is skipped with the reason. Those of :data:`RECORDED` on a
    run trained without recording them are skipped too, unless ``names`` asks for them by name:
    that is an error.

    Args:
        options: how the analyses that compute something run (None: the defaults).
        device: where to compute (None: the run's own ``run.device``).
        on_result: ``(name, value, None)`` as each analysis ends, ``(name, None, reason)`` as
            one is skipped.
        notify: hears the notes for the user (a run that is not finished is analysed at its last
            checkpoint).
        spell: how a skip's reason spells the options it names (:meth:`RunError.render`; None:
            their names), in ``on_result`` and analysis.json.

    Returns:
        analysis.json's object: ``run``, ``complete``, ``analyses`` and ``skipped``.

    Raises:
        SettingError: an unknown analysis, or one of :data:`RECORDED` asked for by name on a run
            trained without recording it.
        RunDirError: not a run directory (or one without a checkpoint yet); RunDirBusyError:
            another process writes it.
    """
    options = options or AnalysisOptions()
    asked = list(names) if names is not None else list(ANALYSES)
    unknown = [n for n in asked if n not in ANALYSES]
    if unknown:
        raise SettingError(f"unknown analysis {unknown[0]!r}: choose from {', '.join(ANALYSES)}")
    run_dir = rundir.check_run_dir(Path(run_dir))
    with (
        rundir.lock_run_dir(run_dir, then=f"run {option('analyze_run')} {run_dir} again"),
        ThreadPolicy(),  # some analyses train networks: a fair share of the cores, as a run takes
    ):
        unrecorded = [] if has_training_records(run_dir) else [n for n in asked if n in RECORDED]
        if unrecorded and names is not None:
            reads = "reads" if len(unrecorded) == 1 else "read"
            raise SettingError(
                f"{run_dir} was trained without recording what {', '.join(unrecorded)} {reads}: {RECORD_HINT}"
            )
        run = load_trained_run(run_dir, device=device, data_root=options.data_root)
        out = run.run_dir / ANALYSIS_FOLDER
        out.mkdir(exist_ok=True)
        if not run.complete:
            notify(f"note: {run.run_dir} is not finished; analysing its last checkpoint")
        report: dict[str, Any] = {
            "run": str(run.run_dir),
            "complete": run.complete,
            "analyses": {},
            "skipped": {},
        }
        for name in asked:
            started = time.perf_counter()
            try:
                if name in unrecorded:
                    raise AnalysisSkipped(f"not recorded while training: {RECORD_HINT}")
                value = RUNNERS[name](run, out, options)
            except AnalysisSkipped as skip:
                reason = skip.render(spell)
                report["skipped"][name] = reason
                on_result(name, None, reason)
                continue
            value["seconds"] = time.perf_counter() - started
            found = {"ss_err": value["ss_err"], "ss_nll": value["ss_nll"]} if name == "ss" else {name: value}
            report["analyses"].update(found)
            on_result(name, value, None)
        write_analysis(run_dir, report)
    return report


def summary_line(name: str, value: dict[str, Any]) -> str:
    """An analysis's result in a few words, as ``xder-run analyze`` prints it."""
    if name == "ece":
        accuracy = 100 * value["accuracy"]
        return f"ECE {100 * value['ece']:.2f}% (15 bins), accuracy over all classes {accuracy:.2f}%"
    if name == "ss":
        return f"SS-ERR {value['ss_err']:.4f}, SS-NLL {value['ss_nll']:.4f}"
    if name == "head_bias":
        share, mistakes = value["newest_head_share"], value.get("mistakes")
        if mistakes is None:  # an analysis.json written before the count was kept
            return (
                f"after the last task, {100 * share:.1f}% of the mistakes on past tasks go to the newest head"
            )
        return (
            f"after the last task, {100 * share:.1f}% of the {mistakes} mistakes on past tasks "
            f"({round(share * mistakes)}) go to the newest head"
        )
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
