"""A run directory's analyses (``xder-run analyze``, :func:`analyze_run`): the loop over the
asked analyses of the registry (:mod:`xder_cli.runs.analyses`) under the run's lock,
``analysis.json`` (its one writer, :func:`write_analysis`, and reader, :func:`read_analysis`), and
each result's summary in a few words (:func:`summary_line`, the analysis's own)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from xder_cli.runs import rundir
from xder_cli.runs.analyses import (
    ANALYSIS_FOLDER,
    RECORD_HINT,
    AnalysisOptions,
    get_analysis,
    list_analyses,
    recorded_analyses,
    recorded_keys,
)
from xder_cli.runs.errors import AnalysisSkipped, RunError, SettingError, option
from xder_cli.runs.loaded import load_trained_run
from xder_cli.runs.plugins import load_recorded
from xder_cli.runs.settings import Notify, ignore
from xder_methods import ThreadPolicy

__all__ = [
    "ANALYSIS_JSON",
    "AnalysisReport",
    "analyze_run",
    "has_training_records",
    "read_analysis",
    "summary_line",
    "write_analysis",
]

ANALYSIS_JSON = "analysis.json"
"""``RUN_DIR/analysis/analysis.json``: the analyses of a run, as :func:`analyze_run` wrote them."""


class AnalysisReport(TypedDict):
    """``analysis.json``: the run, whether it was finished, each analysis's result with the
    ``seconds`` it took (by name, or its fields by theirs: ``ss_err``, ``ss_nll``) and each
    skipped analysis's reason."""

    run: str
    complete: bool
    analyses: dict[str, object]
    skipped: dict[str, str]


def has_training_records(run_dir: Path) -> bool:
    """Whether ``run_dir`` was trained recording what the analyses of
    :func:`~xder_cli.runs.analyses.recorded_analyses` read: its config says so, or its events hold
    some of it (runs made before recording became optional always did)."""
    try:
        if rundir.read_config(run_dir / rundir.CONFIG).get("run", {}).get("record_analyses"):
            return True
        events = rundir.read_events(run_dir)
    except (OSError, RunError):
        return False
    keys = recorded_keys()
    return any(e.get(key) for e in events for key in keys)


def write_analysis(run_dir: Path, report: AnalysisReport) -> Path:
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
    on_result: Callable[[str, Mapping[str, Any] | None, str | None], None] = _ignore,
    notify: Notify = ignore,
    spell: Callable[[str], str] | None = None,
) -> AnalysisReport:
    """The analyses ``names`` (None: every registered one, those of the plugins the run records
    included) of a run directory, holding its lock (one writer at a time, never beside a training
    run) and a fair share of the cores, written to ``RUN_DIR/analysis/analysis.json``
    (:func:`write_analysis`) with their plots.

    An analysis that does not apply is skipped with the reason. Those that need the records
    (:func:`~xder_cli.runs.analyses.recorded_analyses`) on a run trained without recording them
    are skipped too, unless ``names`` asks for them by name: that is an error.

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
        SettingError: an unknown analysis, or one that needs the records asked for by name on a
            run trained without recording them.
        RunDirError: not a run directory (or one without a checkpoint yet); RunDirBusyError:
            another process writes it.
        PluginError: a plugin the run records that does not load now.
    """
    options = options or AnalysisOptions()
    run_dir = rundir.check_run_dir(Path(run_dir))
    # the plugins the run records first: they may register analyses
    load_recorded(rundir.read_config(run_dir / rundir.CONFIG).get("run", {}).get("plugins", []), run_dir)
    asked = list(names) if names is not None else list_analyses()
    analyses = [get_analysis(name) for name in asked]  # SettingError: an unknown one
    with (
        rundir.lock_run_dir(run_dir, then=f"run {option('analyze_run')} {run_dir} again"),
        ThreadPolicy(),  # some analyses train networks: a fair share of the cores, as a run takes
    ):
        needed = recorded_analyses()
        unrecorded = [] if has_training_records(run_dir) else [n for n in asked if n in needed]
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
        report: AnalysisReport = {
            "run": str(run.run_dir),
            "complete": run.complete,
            "analyses": {},
            "skipped": {},
        }
        for analysis in analyses:
            name = analysis.name
            started = time.perf_counter()
            try:
                if name in unrecorded:
                    raise AnalysisSkipped(f"not recorded while training: {RECORD_HINT}")
                result = analysis.run(run, out, options)
            except AnalysisSkipped as skip:
                reason = skip.render(spell)
                report["skipped"][name] = reason
                on_result(name, None, reason)
                continue
            value = {**result, "seconds": time.perf_counter() - started}
            if analysis.filed_as:
                report["analyses"].update({key: value[key] for key in analysis.filed_as})
            else:
                report["analyses"][name] = value
            on_result(name, value, None)
        write_analysis(run_dir, report)
    return report


def summary_line(name: str, value: Mapping[str, Any]) -> str:
    """An analysis's result in a few words, as ``xder-run analyze`` prints it (its ``summary``).

    Raises:
        SettingError: no analysis of that name.
    """
    return str(get_analysis(name).summary(value))
