"""A run's life, the one every caller goes through (:class:`RunLife`): ``xder-run train`` and its
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
5. trained (:meth:`RunLife.train`), from its last checkpoint where it resumes;
6. a new run that fails by a user's mistake before its first checkpoint (a data error, a
   divergence in the first epoch) is removed again: nothing in it could be resumed.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
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
from xder_cli.runs.records import Checkpoint, Results
from xder_cli.runs.settings import Notify, RunPlan, ignore, load_plan
from xder_cli.runs.trackers import check_loggers, start_loggers
from xder_data import Benchmark, DataError, Progress
from xder_data.benchmark import no_progress
from xder_methods import Callback, ContinualMethod, MethodError, NonFiniteLossError, ThreadPolicy, fit
from xder_models import UnknownBackboneError

__all__ = [
    "USER_ERRORS",
    "Lived",
    "RunDisplay",
    "RunLife",
    "Start",
    "check_plan",
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
    results: Results


def _ignore(*args: object) -> None:
    """The default hook: does nothing."""


def check_plan(plan: RunPlan[Any]) -> None:
    """What a run needs of this machine, checked before anything is made: its device, its
    trackers' packages.

    Raises:
        SettingError: a device this machine lacks.
        TrackerError: a tracker whose package is missing.
    """
    resolve_device(plan.settings.device)
    check_loggers(plan.settings.loggers)


@dataclass(frozen=True)
class RunLife:
    """A run's life (module docstring), with what its caller hears of it and shows: :meth:`new`
    trains a new run, :meth:`existing` an existing run directory, :meth:`start` only makes a new
    one (its folder and ``config.toml``).

    Attributes:
        display: what shows the run while it trains.
        then: what to do once another writer is gone, for the message when the lock is held
            (None: run it again, resuming).
        on_start: ``(start, plan, run_dir)`` once the life knows how it begins (a complete run
            included), before anything trains.
        on_locked: ``(run_dir, resumes)`` as soon as the lock is held (a sweep's record of the
            attempt).
        lock_wait: asked while another process holds the lock: True waits a second and tries
            again, False (and None) gives up.
    """

    display: RunDisplay = RunDisplay()
    then: str | None = None
    on_start: Callable[[Start, RunPlan[Any], Path], None] = _ignore
    on_locked: Callable[[Path, bool], None] = _ignore
    lock_wait: Callable[[], bool] | None = None

    def start(self, plan: RunPlan[Any], out: str | Path) -> Path:
        """A new run directory for ``plan`` under ``out`` (``<date>-<method>-<benchmark>-m<buffer>-s<seed>``),
        holding its ``config.toml``; nothing trains."""
        s = plan.settings
        run_dir = rundir.new_run_dir(Path(out), s.method, s.benchmark, plan.buffer_size, s.seed)
        with self._locked(run_dir):
            rundir.write_config(run_dir / rundir.CONFIG, plan.config)
        return run_dir

    def new(self, plan: RunPlan[Any], out: str | Path) -> Lived:
        """A new run under ``out``: its plan checked, its folder made, trained; removed again when it
        fails by a user's mistake before its first checkpoint.

        Raises:
            RunError, DataError, MethodError, UnknownBackboneError: the user's mistakes, each in
                one line.
        """
        check_plan(plan)
        s = plan.settings
        folder = rundir.new_run_dir(Path(out), s.method, s.benchmark, plan.buffer_size, s.seed)
        try:
            return self._live(plan, folder, resume=False)
        except USER_ERRORS:
            # Nothing in it can be resumed (and report would list it); the error is the one line.
            if not (folder / rundir.CHECKPOINT).exists():
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def existing(
        self, run_dir: str | Path, plan: RunPlan[Any] | None = None, *, resume: bool = True
    ) -> Lived:
        """The run directory ``run_dir`` trained with ``plan`` (None: read back from its
        ``config.toml``). ``resume`` continues from the last checkpoint, and returns a complete run
        as it is (read only: the lock is not even taken); False trains from the beginning whatever
        the folder holds.

        Raises:
            RunDirBusyError: another process holds the lock (and ``lock_wait`` gave up).
            RunError, DataError, MethodError, UnknownBackboneError: the user's mistakes.
        """
        folder = Path(run_dir)
        if plan is None:
            plan = load_plan(folder)
        if resume and (done := rundir.complete_results(folder)) is not None:
            self.on_start(Start.COMPLETE, plan, folder)
            return Lived(Start.COMPLETE, folder, done)
        check_plan(plan)
        return self._live(plan, folder, resume=resume)

    @contextlib.contextmanager
    def _locked(self, run_dir: Path) -> Iterator[None]:
        """Hold ``run_dir``'s lock, waiting for it as long as :attr:`lock_wait` says."""
        then = self.then or f"run {errors.option('train_run')} {errors.option('resume')} {run_dir} again"
        with contextlib.ExitStack() as held:
            while True:
                try:
                    held.enter_context(rundir.lock_run_dir(run_dir, then=then))
                    break
                except errors.RunDirBusyError:
                    if self.lock_wait is None or not self.lock_wait():
                        raise
                    time.sleep(1.0)
            yield

    def _live(self, plan: RunPlan[Any], run_dir: Path, *, resume: bool) -> Lived:
        with self._locked(run_dir):
            if resume and (done := rundir.complete_results(run_dir)) is not None:  # finished meanwhile
                self.on_start(Start.COMPLETE, plan, run_dir)
                return Lived(Start.COMPLETE, run_dir, done)
            checkpoint = run_dir / rundir.CHECKPOINT
            resumes = resume and checkpoint.exists()
            self.on_locked(run_dir, resumes)
            (run_dir / rundir.PLOTS).mkdir(exist_ok=True)
            if not checkpoint.exists():
                rundir.write_config(run_dir / rundir.CONFIG, plan.config)
            start = Start.RESUMED if resumes else Start.NEW
            self.on_start(start, plan, run_dir)
            return Lived(start, run_dir, self.train(plan, run_dir, resume=resumes))

    def train(self, plan: RunPlan[Any], run_dir: Path, *, resume: bool = False) -> Results:
        """Train the planned run inside ``run_dir`` (continuing from its checkpoint if ``resume``),
        shown by :attr:`display`. The caller holds the run directory's lock: :meth:`new` and
        :meth:`existing` do.

        The run's experiment trackers (``run.loggers``) start first, before any data is read, and
        log alongside ``events.jsonl``.

        Returns:
            The final ``results.json``.

        Raises:
            rundir.RunDirWriteError: a file of the run directory could not be written.
            TrackerError: a tracker that cannot start.
            errors.NonFiniteLossError: the loss diverged; the message says where the last good
                state is, or that there is none yet.
        """
        display = self.display
        device = resolve_device(plan.settings.device)
        state: Checkpoint | None = None
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
            trackers = start_loggers(
                plan.settings.loggers,
                run_dir,
                plan.config,
                epochs=plan.schedule.epochs,
                resumed_at=None if state is None else (state["position"]["task"], state["position"]["epoch"]),
                results=lambda: recorder.results or {},
            )
            for tracker in trackers:
                display.notify(f"{tracker.name}: {tracker.where}")
            failed = True
            try:
                method, bench, generator = _build(plan, device, display)
                # The recorder checkpoints first (and writes the results the trackers read at the
                # end); the trackers log an epoch or task right after its checkpoint, before
                # anything else.
                callbacks = [recorder, *trackers, share, *display.callbacks]
                fit(
                    method,
                    bench,
                    plan.fit_schedule,
                    generator=generator,
                    callbacks=callbacks,
                    resume=state,
                    threads=None,
                )
                failed = False
            except NonFiniteLossError as error:
                raise errors.NonFiniteLossError(f"{error}; {_last_good_state(plan, checkpoint)}") from error
            finally:
                for tracker in trackers:
                    tracker.close(failed=failed)
        assert recorder.results is not None  # written at the end of the fit
        return recorder.results


def _build(
    plan: RunPlan[Any], device: torch.device, display: RunDisplay
) -> tuple[ContinualMethod, Benchmark, torch.Generator]:
    """Load the data, build the network and the method (and the run's generator) for ``fit``."""
    bench = load_data(plan, device, notify=display.notify, read_progress=display.read_progress)
    examples = bench.train_y.shape[0]
    if plan.buffer_size > examples:
        display.notify(
            f"warning: buffer size {plan.buffer_size} exceeds the {examples} training examples: "
            "the buffer holds the whole training set, so the method replays everything it has seen"
        )
    net = build_network(plan, bench.num_classes, device)
    generator = run_generator(plan, device)
    return build_method(plan, net, *benchmark_setting(bench), generator), bench, generator


def _last_good_state(plan: RunPlan[Any], checkpoint: Path) -> str:
    """Where a diverged run's last good state is, or what to do as it has none."""
    if checkpoint.exists():
        return f"last good state: {checkpoint}"
    return (
        "no checkpoint exists yet (it diverged within the first epoch), so the run must be started "
        "again: lower the learning rate, e.g. "
        f"{errors.option('overrides')} train.lr={plan.schedule.lr / 10:g}"
    )


# ---------------------------------------------------------------------------------------------
# From Python


def start_run(plan: RunPlan[Any], out: str | Path = "runs") -> Path:
    """A new run directory for ``plan`` under ``out`` (``<date>-<method>-<benchmark>-m<buffer>-s<seed>``,
    as ``xder-run train`` names it), holding its ``config.toml`` (:meth:`RunLife.start`)."""
    return RunLife(then="train it again once that process ends").start(plan, out)


def train_run(
    plan: RunPlan[Any],
    run_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    notify: Notify = ignore,
) -> Results:
    """Train ``plan`` into ``run_dir`` (from :func:`start_run`) through the run's life
    (:class:`RunLife`), holding the run directory's lock throughout; ``resume`` continues from its
    last checkpoint, and a run that is complete already is not trained again. ``callbacks`` follow
    the training after the run's own (e.g. a progress bar); ``notify`` hears the run's notes and
    warnings.

    Returns:
        The run's ``results.json``.

    Raises:
        rundir.RunDirBusyError: another process is training it.
    """
    life = RunLife(RunDisplay(tuple(callbacks), notify), then="train it again once that process ends")
    return life.existing(run_dir, plan, resume=resume).results
