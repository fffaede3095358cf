"""A run's life, the one every caller goes through (:func:`live`): ``xder-run train`` and its
``--resume``, a sweep's or an experiment's runs (:mod:`xder_cli.runs.scheduler`), and
:func:`start_run` / :func:`train_run` from Python.

Its steps, in order:

1. a new run: its plan checked (the device, the trackers) before anything is made, then a folder
   made for it (``OUT/<date>-<method>-<benchmark>-m<buffer>-s<seed>``); an existing one: its plan
   given, or read back from its ``config.toml`` with the plugins it records
   (:func:`~xder_cli.runs.settings.load_plan`);
2. a run asked to resume that is complete already is returned as it is, untouched (looked at
   before the lock and again once it is held);
3. the run directory's lock (:func:`~xder_cli.runs.rundir.lock_run_dir`), held to the end: a
   second writer is refused (or, where the caller says so, waits for a lost attempt's lock);
4. ``config.toml`` written, unless a checkpoint is there already;
5. trained (:func:`run_training`), from its last checkpoint where it resumes;
6. a new run that fails by a user's mistake before its first checkpoint (a data error, a
   divergence in the first epoch) is removed again: nothing in it could be resumed.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from xder_cli.runs import errors, rundir
from xder_cli.runs.build import (
    benchmark_setting,
    build_method,
    build_network,
    load_data,
    resolve_device,
    run_generator,
)
from xder_cli.runs.errors import RunError
from xder_cli.runs.recorder import RunRecorder, ThreadNews, ThreadShare, ignore_news
from xder_cli.runs.settings import Notify, RunPlan, ignore, load_plan
from xder_cli.runs.trackers import check_loggers, start_loggers
from xder_data import DataError, Progress
from xder_data.benchmark import no_progress
from xder_methods import Callback, MethodError, NonFiniteLossError, ThreadPolicy, fit
from xder_models import UnknownBackboneError

__all__ = [
    "USER_ERRORS",
    "Lived",
    "RunDisplay",
    "Start",
    "check_plan",
    "live",
    "run_training",
    "start_run",
    "train_run",
]

USER_ERRORS = (RunError, DataError, MethodError, UnknownBackboneError)
"""What a run raises for its user's mistakes (each one line, exit status 2 on the command line)."""


@dataclass(frozen=True)
class RunDisplay:
    """What shows a run while it trains: ``callbacks`` follow the training after the run's own
    (e.g. a progress bar); ``notify`` hears the lines the run has for its user (where a tracker
    logs, a test set split off from the data, a buffer larger than the training set);
    ``read_progress`` wraps the loop that reads a benchmark's files; ``threads`` hears the CPU
    thread count of a run on the CPU (:class:`~xder_cli.runs.recorder.ThreadNews`: at the start,
    at each change of a fair share, at the end), which the run's numbers depend on."""

    callbacks: Sequence[Callback] = ()
    notify: Notify = ignore
    read_progress: Progress = no_progress
    threads: Callable[[ThreadNews], None] = ignore_news


class Start(enum.Enum):
    """How a run's life began."""

    NEW = "new"
    """Trained from the beginning (a new run, or one without a checkpoint yet)."""
    RESUMED = "resumed"
    """Continued from its last checkpoint."""
    COMPLETE = "complete"
    """Complete already: returned as it is, nothing trained."""


@dataclass(frozen=True)
class Lived:
    """The end of a run's life: how it began, its directory and its ``results.json``."""

    start: Start
    run_dir: Path
    results: dict[str, Any]


def _ignore(*args: Any) -> None:
    """The default callback: does nothing."""


def check_plan(plan: RunPlan) -> None:
    """What a run needs of this machine, checked before anything is made: its device, its
    trackers' packages.

    Raises:
        SettingError: a device this machine lacks.
        TrackerError: a tracker whose package is missing.
    """
    resolve_device(plan.settings.device)
    check_loggers(plan.settings.loggers)


def live(
    plan: RunPlan | None = None,
    *,
    out: str | Path | None = None,
    run_dir: str | Path | None = None,
    resume: bool = True,
    then: str | None = None,
    display: RunDisplay = RunDisplay(),
    on_start: Callable[[Start, RunPlan, Path], None] = _ignore,
    on_locked: Callable[[Path, bool], None] = _ignore,
    lock_wait: Callable[[], bool] | None = None,
) -> Lived:
    """A run's life (module docstring): a new run under ``out``, or the run directory ``run_dir``.

    Args:
        plan: the run's plan; None (``run_dir`` only): read back from its ``config.toml``.
        resume: continue from the last checkpoint, and return a complete run as it is; False
            trains from the beginning whatever the folder holds.
        then: what to do once another writer is gone, for the message when the lock is held
            (default: run it again, resuming).
        display: what shows the run while it trains.
        on_start: ``(start, plan, run_dir)`` once the life knows how it begins (a complete run
            included), before anything trains.
        on_locked: ``(run_dir, resumes)`` as soon as the lock is held (a sweep's record of the
            attempt).
        lock_wait: asked while another process holds the lock: True waits a second and tries
            again, False (and None) gives up.

    Raises:
        RunDirBusyError: another process holds the lock (and ``lock_wait`` gave up).
        RunError, DataError, MethodError, UnknownBackboneError: the user's mistakes, each in one
            line; a new run's folder is gone again when nothing in it could be resumed.
    """
    if (out is None) == (run_dir is None):
        raise TypeError("live() takes out (a new run) or run_dir (an existing one), exactly one")
    if out is not None:
        if plan is None:
            raise TypeError("live() needs the plan of a new run")
        check_plan(plan)
        s = plan.settings
        folder = rundir.new_run_dir(Path(out), s.method, s.benchmark, plan.buffer_size, s.seed)
        try:
            return _live(plan, folder, False, then, display, on_start, on_locked, lock_wait)
        except USER_ERRORS:
            # Nothing in it can be resumed (and report would list it); the error is the one line.
            if not (folder / rundir.CHECKPOINT).exists():
                shutil.rmtree(folder, ignore_errors=True)
            raise
    assert run_dir is not None
    folder = Path(run_dir)
    if plan is None:
        plan = load_plan(folder)
    if resume and (done := rundir.complete_results(folder)) is not None:
        on_start(Start.COMPLETE, plan, folder)  # read only: the lock is not even taken
        return Lived(Start.COMPLETE, folder, done)
    check_plan(plan)
    return _live(plan, folder, resume, then, display, on_start, on_locked, lock_wait)


def _live(
    plan: RunPlan,
    run_dir: Path,
    resume: bool,
    then: str | None,
    display: RunDisplay,
    on_start: Callable[[Start, RunPlan, Path], None],
    on_locked: Callable[[Path, bool], None],
    lock_wait: Callable[[], bool] | None,
) -> Lived:
    then = then or f"run {errors.option('train_run')} {errors.option('resume')} {run_dir} again"
    with contextlib.ExitStack() as held:
        while True:
            try:
                held.enter_context(rundir.lock_run_dir(run_dir, then=then))
                break
            except errors.RunDirBusyError:
                if lock_wait is None or not lock_wait():
                    raise
                time.sleep(1.0)
        if resume and (done := rundir.complete_results(run_dir)) is not None:  # finished meanwhile
            on_start(Start.COMPLETE, plan, run_dir)
            return Lived(Start.COMPLETE, run_dir, done)
        checkpoint = run_dir / rundir.CHECKPOINT
        resumes = resume and checkpoint.exists()
        on_locked(run_dir, resumes)
        (run_dir / rundir.PLOTS).mkdir(exist_ok=True)
        if not checkpoint.exists():
            path = run_dir / rundir.CONFIG
            with rundir.write_errors(path, then=f"train again (and delete {run_dir})"):
                rundir.write_config(path, plan.config)
        start = Start.RESUMED if resumes else Start.NEW
        on_start(start, plan, run_dir)
        return Lived(start, run_dir, run_training(plan, run_dir, resume=resumes, display=display))


# ---------------------------------------------------------------------------------------------
# Training, inside the life


def run_training(
    plan: RunPlan, run_dir: Path, *, resume: bool = False, display: RunDisplay = RunDisplay()
) -> dict[str, Any]:
    """Train the planned run inside ``run_dir`` (continuing from its checkpoint if ``resume``),
    shown by ``display``. The caller holds the run directory's lock: :func:`live` does.

    The run's experiment trackers (``run.loggers``) start first, before any data is read, and
    log alongside ``events.jsonl``.

    Returns:
        The final ``results.json`` payload.

    Raises:
        rundir.RunDirWriteError: a file of the run directory could not be written.
        TrackerError: a tracker that cannot start.
        errors.NonFiniteLossError: the loss diverged; the message says where the last good state is, or
            that there is none yet.
    """
    device = resolve_device(plan.settings.device)
    state: dict[str, Any] | None = None
    elapsed = 0.0
    checkpoint = run_dir / rundir.CHECKPOINT
    if resume and checkpoint.exists():
        state = rundir.load_checkpoint(checkpoint, device)
        elapsed = float(state.get("run", {}).get("elapsed_s", 0.0))
    events = rundir.EventLog(run_dir / rundir.EVENTS)
    with rundir.write_errors(events.path, then=rundir.resume_hint(run_dir)):
        events.truncate(int(state["run"]["events"]) if state is not None else 0)
    with ThreadPolicy(plan.settings.threads) as threads:
        before = [] if state is None else list(state.get("run", {}).get("threads", []))
        recorder = RunRecorder(run_dir, plan, device, events, elapsed, threads, before)
        # Only on the CPU does the count change the numbers: on another device it goes unsaid.
        report = display.threads if device.type == "cpu" else ignore_news
        share = ThreadShare(threads, recorder.log, report, recorder.threads_used)
        return _record_run(plan, run_dir, device, state, recorder, [share, *display.callbacks], display)


def _record_run(
    plan: RunPlan,
    run_dir: Path,
    device: torch.device,
    state: dict[str, Any] | None,
    recorder: RunRecorder,
    callbacks: list[Callback],
    display: RunDisplay,
) -> dict[str, Any]:
    checkpoint = run_dir / rundir.CHECKPOINT
    trackers = start_loggers(
        plan.settings.loggers,
        run_dir,
        plan.config,
        epochs=plan.schedule.epochs,
        resumed_at=None if state is None else (state["position"]["task"], state["position"]["epoch"]),
        results=lambda: recorder.results,
    )
    for tracker in trackers:
        display.notify(f"{tracker.name}: {tracker.where}")
    failed = True
    try:
        # The recorder checkpoints first (and writes the results the trackers read at the end);
        # the trackers log an epoch or task right after its checkpoint, before anything else.
        _train(plan, device, state, [recorder, *trackers, *callbacks], display)
        failed = False
    except NonFiniteLossError as error:
        if checkpoint.exists():
            where = f"last good state: {checkpoint}"
        else:
            where = (
                "no checkpoint exists yet (it diverged within the first epoch), so the run must be started "
                "again: lower the learning rate, e.g. "
                f"{errors.option('overrides')} train.lr={plan.schedule.lr / 10:g}"
            )
        raise errors.NonFiniteLossError(f"{error}; {where}") from error
    finally:
        for tracker in trackers:
            tracker.close(failed=failed)
    return recorder.results


def _train(
    plan: RunPlan,
    device: torch.device,
    state: dict[str, Any] | None,
    callbacks: list[Callback],
    display: RunDisplay,
) -> None:
    """Load the data, build the network and the method, and fit."""
    bench = load_data(plan, device, notify=display.notify, read_progress=display.read_progress)
    examples = bench.train_y.shape[0]
    if plan.buffer_size > examples:
        display.notify(
            f"warning: buffer size {plan.buffer_size} exceeds the {examples} training examples: "
            "the buffer holds the whole training set, so the method replays everything it has seen"
        )
    net = build_network(plan, bench.num_classes, device)
    generator = run_generator(plan, device)
    method = build_method(plan, net, *benchmark_setting(bench), generator)
    fit(
        method, bench, plan.fit_schedule, generator=generator, callbacks=callbacks, resume=state, threads=None
    )


# ---------------------------------------------------------------------------------------------
# From Python


def start_run(plan: RunPlan, out: str | Path = "runs") -> Path:
    """A new run directory for ``plan`` under ``out`` (``<date>-<method>-<benchmark>-m<buffer>-s<seed>``,
    as ``xder-run train`` names it), holding its ``config.toml``."""
    s = plan.settings
    run_dir = rundir.new_run_dir(Path(out), s.method, s.benchmark, plan.buffer_size, s.seed)
    with rundir.lock_run_dir(run_dir, then="train it again once that process ends"):
        rundir.write_config(run_dir / rundir.CONFIG, plan.config)
    return run_dir


def train_run(
    plan: RunPlan,
    run_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    notify: Notify = ignore,
) -> dict[str, Any]:
    """Train ``plan`` into ``run_dir`` (from :func:`start_run`) through :func:`live`, holding the
    run directory's lock throughout; ``resume`` continues from its last checkpoint, and a run
    that is complete already is not trained again. ``callbacks`` follow the training after the
    run's own (e.g. a progress bar); ``notify`` hears the run's notes and warnings.

    Returns:
        The run's ``results.json``.

    Raises:
        rundir.RunDirBusyError: another process is training it.
    """
    display = RunDisplay(tuple(callbacks), notify)
    lived = live(
        plan, run_dir=run_dir, resume=resume, then="train it again once that process ends", display=display
    )
    return lived.results
