"""Run these runs, in this process or on Ray: the one scheduler of ``sweep`` and ``experiment``.

A :class:`PlannedRun` is a run to train, as a sweep or an experiment plans it: its name (its run
directory's, under the folder the runs train into), its seed, its configuration and what its plan
varies in it. :func:`train_runs` skips the runs whose run directory holds a finished run already,
trains the others (each with :func:`train_one`, resuming from its checkpoint where it has one) one
after the other in this process, or as Ray tasks (:func:`train_on_ray`: on a local Ray instance
started for them, or on the cluster at ``address``), and hands each outcome to a callback as it
ends. It prints nothing: the commands show progress through its callbacks.

Each run holds its run directory's lock while it trains (:func:`xder_cli.runs.rundir.lock_run_dir`):
the same sweep or experiment started twice never trains a run twice; a run that the other one
holds is reported as :data:`RUNNING_ELSEWHERE` (not failed) and a later rerun finds it finished.
A run that fails by its own fault (a configuration error, a diverged loss, an exception in the
method) is an outcome, ``failed`` with its one-line error, never an exception.

On Ray, a run whose worker process or node is lost (a Ray system failure) is run again by Ray
(:data:`RAY_MAX_RETRIES` times at most) on a live node, where it resumes from its last checkpoint;
a run's own failure is never retried. Every start of a run is a line of its ``attempts.jsonl``
(:data:`ATTEMPTS`) naming the Ray node that trained it; its outcome says that node (``node``) and
how many times this invocation started it (``attempts``; :func:`run_retries`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO, cast

from xder_cli.runs import rundir
from xder_cli.runs.errors import RunDirError
from xder_cli.runs.lifecycle import RunDisplay, RunLife, Start
from xder_cli.runs.plugins import load_plugins, loaded_plugins
from xder_cli.runs.records import Attempt, Config, Node, Outcome, Status, own_metric
from xder_cli.runs.settings import build_plan

__all__ = [
    "ATTEMPTS",
    "LOG",
    "RAY_MAX_RETRIES",
    "RETRY_LOCK_WAIT_S",
    "RUNNING_ELSEWHERE",
    "LogOutput",
    "PlannedRun",
    "outcome_note",
    "read_attempts",
    "retry_note",
    "run_cpus",
    "run_finished",
    "run_outcome",
    "run_retries",
    "split_finished",
    "this_node",
    "train_on_ray",
    "train_one",
    "train_runs",
]

RUNNING_ELSEWHERE: Final = "running elsewhere"  # a run another process holds (the command started twice)
LOG = "log.txt"
"""What a run printed (its progress lines, a failure's traceback)."""
ATTEMPTS = "attempts.jsonl"
"""A run's starts, one JSON line each (written under its lock, before it trains): ``submission``
(one per run per invocation: Ray's retries of a task share it), ``node`` (:func:`this_node`),
``pid``, ``time`` and ``resume`` (whether it continued from a checkpoint)."""
RAY_MAX_RETRIES = 3
"""How many times Ray runs a run again after a system failure (its worker process died, its node
was lost); never after the run's own failure, which :func:`train_one` returns as an outcome."""
RETRY_LOCK_WAIT_S = 150.0
"""How long a retried run waits for the run directory's lock still held by its lost attempt: the
kernel frees it when that process dies, but a shared filesystem may keep a dead node's lock until
its lease runs out (NFSv4: about 90 s)."""

LogOutput = Callable[[], RunDisplay]
"""Makes, for one run, the :class:`~xder_cli.runs.lifecycle.RunDisplay` that shows a run (its
callbacks, notices and read progress); what they print goes to the run's ``log.txt``. The
commands pass :func:`xder_cli.progress.in_run_log`; on Ray it is called in the worker (a
module-level function travels by its name)."""


@dataclass(frozen=True)
class PlannedRun:
    """A run to train, as a sweep (:func:`xder_cli.runs.sweep.plan_trials`: a trial) or an
    experiment (:class:`xder_cli.runs.experiments.PlannedExperiment`) plans it, and as
    :func:`train_runs` trains it.

    Attributes:
        name: its run directory's name under the folder the runs train into (a sweep's
            ``DIR/trials``, an experiment's ``OUT/runs``); its name in outcomes and progress lines.
        seed: its ``run.seed``.
        config: its resolved configuration, by section.
        tags: what its plan varies in it: a sweep's grid point (``{"train.lr": 0.1}``), an
            experiment's protocol (``{"pair": 0, "regulariser": "lfr"}``, ``{"entry": "derpp"}``).
    """

    name: str
    seed: int
    config: Config
    tags: dict[str, object] = field(default_factory=dict)


def _ignore(*args: object) -> None:
    """The default callback: does nothing."""


# ---------------------------------------------------------------------------------------------
# Outcomes


def run_outcome(run_dir: Path, status: Status, error: str | None = None) -> Outcome:
    """A run's outcome as the sweep and the experiments record it: ``status``, ``error``, the
    metrics of its ``results.json`` (None where it has none, or an unreadable one) and the node of
    its last start (:data:`ATTEMPTS`)."""
    try:
        results = rundir.read_results(run_dir)
    except rundir.ResultsUnreadableError:
        results = None
    attempts = read_attempts(run_dir)
    return {
        "status": status,
        "val_faa": own_metric(results, "val_faa") if results is not None else None,
        "faa": own_metric(results, "faa") if results is not None else None,
        "ff": own_metric(results, "ff") if results is not None else None,
        "wall_time_s": results.get("wall_time_s") if results is not None else None,
        "error": error,
        "node": attempts[-1].get("node") if attempts else None,
    }


def run_finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a complete run (its results.json says so)."""
    return rundir.complete_results(run_dir) is not None


def split_finished(runs: Sequence[tuple[str, Path]]) -> tuple[dict[str, Outcome], list[str]]:
    """``(outcomes, pending)`` of named run directories: the outcome of each one already finished
    (marked ``skipped``), and the names of the others, in order."""
    outcomes: dict[str, Outcome] = {}
    pending = []
    for name, run_dir in runs:
        if run_finished(run_dir):
            outcomes[name] = {**run_outcome(run_dir, "finished"), "skipped": True}
        else:
            pending.append(name)
    return outcomes, pending


def run_retries(outcome: Mapping[str, Any]) -> int:
    """How many times Ray ran a run again after losing its worker or node: its ``attempts``
    (starts in this invocation) less one."""
    return max(0, int(outcome.get("attempts") or 0) - 1)


def retry_note(count: int, unit: str = "trial") -> str:
    """``retries: N (...)``, how many times Ray ran a sweep's trials (or an experiment's runs,
    ``unit``) again after losing their worker or node ("" if none)."""
    if not count:
        return ""
    return (
        f"retries: {count} (a {unit} run again after a lost Ray worker or node resumes from its last "
        "checkpoint)"
    )


def outcome_note(outcome: Mapping[str, Any]) -> str:
    """`` (the error)`` of a failed run, `` (held by <process>)`` of one running elsewhere,
    `` (finished by another process)`` of one found finished when its turn came, else ``""``;
    then `` (retried N x after a lost worker or node)`` of one Ray ran again."""
    note = ""
    if outcome.get("error"):
        note = f" ({outcome['error']})"
    elif outcome.get("held_by"):
        note = f" (held by {outcome['held_by']})"
    elif outcome.get("skipped"):  # split_finished's skipped runs never reach a progress line
        note = " (finished by another process)"
    count = run_retries(outcome)
    return note + (f" (retried {count} x after a lost worker or node)" if count else "")


# ---------------------------------------------------------------------------------------------
# One run


def this_node() -> Node:
    """Where this process runs: ``{"id", "ip", "host"}``, the Ray node's id and IP address as Ray
    reports them inside a task (None outside Ray) and the machine's host name."""
    node: Node = {"id": None, "ip": None, "host": socket.gethostname()}
    ray = sys.modules.get("ray")  # imported by a Ray worker; never imported here for this
    if ray is not None and ray.is_initialized():
        with contextlib.suppress(Exception):
            node["id"] = ray.get_runtime_context().get_node_id()
            node["ip"] = ray.util.get_node_ip_address()
    return node


def read_attempts(run_dir: Path) -> list[Attempt]:
    """The lines of ``run_dir/attempts.jsonl`` (:data:`ATTEMPTS`), oldest first; none if it has none."""
    try:
        text = (Path(run_dir) / ATTEMPTS).read_text()
    except OSError:
        return []
    attempts: list[Attempt] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                attempts.append(cast(Attempt, record))
    return attempts


class _LazyLog(io.TextIOBase):
    """A text file opened for appending at its first write (and closed with the ``with``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: TextIO | None = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.file is None:
            self.file = open(self.path, "a")  # noqa: SIM115  (closed by close())
        return self.file.write(text)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def _attempts_of(run_dir: Path, submission: str) -> int:
    return sum(a.get("submission") == submission for a in read_attempts(run_dir))


def train_one(
    run_dir: str,
    config: Config,
    plugins: Sequence[str] = (),
    submission: str | None = None,
    *,
    log_output: LogOutput | None = None,
) -> Outcome:
    """Train one run into ``run_dir`` through the run's life
    (:class:`xder_cli.runs.lifecycle.RunLife`: resuming from its checkpoint if it has one, holding the
    run directory's lock throughout); never raises.

    Runs inside a Ray worker (or in-process). A run whose lock another process holds (the same
    sweep or experiment started twice) is left alone: its outcome is ``running elsewhere``, with
    ``held_by`` naming that process. A run that another process finished meanwhile is not trained
    again. The run's printed output (what ``log_output`` shows, a failure's traceback) goes to
    ``run_dir/log.txt``. ``plugins`` (the driver's ``--plugin`` specs) are loaded first, with the
    installed entry points, so that a worker knows the names the driver's plugins registered, and
    recorded in the run's ``config.toml`` (``run.plugins``) for the commands that read it later.

    Each start appends a line to ``run_dir/attempts.jsonl`` (:data:`ATTEMPTS`) naming
    ``submission`` (None: a new one) and this node. Ray runs the same submission again after a
    system failure: a retry whose lost attempt still holds the lock (a dead node's lock on a shared
    filesystem lasts until its lease runs out) waits for it, :data:`RETRY_LOCK_WAIT_S` at most,
    instead of calling it ``running elsewhere``.

    Args:
        log_output: what the run shows, into its ``log.txt`` (:data:`LogOutput`); None: nothing.

    Returns:
        ``{"status": "finished" | "failed" | "running elsewhere", "val_faa", "faa", "ff",
        "wall_time_s", "error", "node", "attempts"}`` (and ``held_by``, ``skipped`` where they
        apply): ``node`` the node that trained it (:func:`this_node`), ``attempts`` how many
        times ``submission`` started it.
    """
    path = Path(run_dir)
    submission = submission or uuid.uuid4().hex
    deadline = time.monotonic() + RETRY_LOCK_WAIT_S
    earlier = 0

    def record_attempt(folder: Path, resumes: bool) -> None:
        nonlocal earlier
        earlier = _attempts_of(folder, submission)
        start: Attempt = {
            "submission": submission,
            "node": this_node(),
            "pid": os.getpid(),
            "time": datetime.now().astimezone().isoformat(timespec="seconds"),
            "resume": resumes,
        }
        rundir.EventLog(folder / ATTEMPTS).append(start)

    def retry_waits() -> bool:  # a retry of this submission waits for its lost attempt's lock
        return _attempts_of(path, submission) > 0 and time.monotonic() < deadline

    try:
        path.mkdir(parents=True, exist_ok=True)
        # What the run prints (log_output's lines, a failure's traceback) goes to its log.txt,
        # made at the first line: a run another process holds is left as it is.
        with (
            _LazyLog(path / LOG) as log,
            contextlib.redirect_stdout(log),
            contextlib.redirect_stderr(log),
        ):
            try:
                load_plugins(plugins)
                if plugins:  # recorded, so that whatever reads the run later loads them again
                    config = {**config, "run": {**config.get("run", {}), "plugins": list(plugins)}}
                life = RunLife(
                    log_output() if log_output is not None else RunDisplay(),
                    then="run the sweep again",
                    on_locked=record_attempt,
                    lock_wait=retry_waits,
                )
                lived = life.existing(path, build_plan(config))
            except rundir.RunDirBusyError:
                raise
            except Exception as error:  # a failed run is recorded, never fatal to the others
                traceback.print_exc(file=log)
                outcome = run_outcome(path, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
                return {**outcome, "attempts": _attempts_of(path, submission)}
    except rundir.RunDirBusyError as busy:  # its metrics are those of a run in progress: none
        return {
            "status": RUNNING_ELSEWHERE,
            "val_faa": None,
            "faa": None,
            "ff": None,
            "wall_time_s": None,
            "error": None,
            "held_by": busy.holder,
            "node": None,
            "attempts": _attempts_of(path, submission),
        }
    except (OSError, RunDirError) as error:  # the folder cannot be created, locked or written
        outcome = run_outcome(path, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
        return {**outcome, "attempts": _attempts_of(path, submission)}
    if lived.start is Start.COMPLETE:  # by another process, or by a lost attempt of this submission
        earlier = _attempts_of(path, submission)
        if earlier:
            return {**run_outcome(path, "finished"), "attempts": earlier}
        return {**run_outcome(path, "finished"), "skipped": True}
    return {**run_outcome(path, "finished"), "attempts": earlier + 1}


# ---------------------------------------------------------------------------------------------
# Many runs


def run_cpus(node_cpus: Sequence[float], max_concurrent: int | None) -> int:
    """CPUs (and so threads) for each run: the fair share ``cores // max_concurrent`` of the
    smallest node, at least 1; 1 when ``max_concurrent`` is None (a run per core).

    >>> [run_cpus([2], k) for k in (1, 2, 3)], run_cpus([16, 8], 2), run_cpus([16], None)
    ([2, 1, 1], 4, 1)
    """
    if not max_concurrent or not node_cpus:
        return 1
    return max(1, int(min(node_cpus)) // max_concurrent)


def _node_cpus(ray: Any) -> list[float]:
    return [
        n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU")
    ]


def train_on_ray(
    runs: Sequence[PlannedRun],
    root: Path,
    on_done: Callable[[str, Outcome], None],
    *,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    cpus_per_run: float | None = None,
    log_output: LogOutput | None = None,
) -> None:
    """Train each run into ``root/<name>`` with :func:`train_one` as a Ray task, at most
    ``max_concurrent`` at once (None: as many as Ray schedules);
    ``on_done(name, outcome)`` runs here, in the driver, as each ends. Workers load the plugins
    this process loaded (:func:`xder_cli.runs.plugins.loaded_plugins`).

    A task whose worker process dies or whose node is lost (a Ray system failure) is run again by
    Ray, :data:`RAY_MAX_RETRIES` times at most, on any live node: it resumes from the run's last
    checkpoint. A run's own failure is an outcome (:func:`train_one` never raises), so it is
    never retried. ``outcome["attempts"]`` counts the task's starts (its ``attempts.jsonl`` lines);
    a task that is still lost after its retries is a failed run with Ray's error.

    Args:
        address: a running Ray cluster (``ray://host:10001`` or ``host:6379``); None starts a local
            instance for these runs (and stops it after). On a cluster, ``root`` must be on a
            filesystem every node sees.
        gpus_per_run: the GPUs Ray reserves for each run (0: none).
        cpus_per_run: the CPUs Ray reserves for each run. Ray runs a
            run's kernels on as many threads as it reserves CPUs for it (``OMP_NUM_THREADS``),
            so its thread count is fixed and its figures repeat. None: with ``max_concurrent``
            K, a fair share of the cores, ``cores // K`` (cores of the smallest node); without
            it, one CPU per run, so that as many runs run as there are cores.
        log_output: what each run shows, into its ``log.txt`` (:data:`LogOutput`).
    """
    if not runs:
        return
    # Ray's `uv run` hook would ship the working tree to every worker and build a fresh environment
    # there (minutes per worker): workers use this interpreter's environment instead (opt back in
    # with RAY_ENABLE_UV_RUN_RUNTIME_ENV=1). Set before ray is imported.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray  # a heavy import: only work sent to Ray needs it

    started = not ray.is_initialized()
    before = signal.getsignal(signal.SIGTERM)
    if started:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}},
        )
        _sigterm_as_interrupt()
    try:
        if cpus_per_run is None:
            cpus_per_run = run_cpus(_node_cpus(ray), max_concurrent)
        # Retried on system failures only (retry_exceptions=False): a run's own errors come back
        # as outcomes, and a retry resumes from the run's checkpoint.
        remote: Any = ray.remote(
            num_cpus=cpus_per_run,
            num_gpus=gpus_per_run,
            max_retries=RAY_MAX_RETRIES,
            retry_exceptions=False,
        )(train_one)
        plugins = loaded_plugins()
        limit = max_concurrent or len(runs)
        queue = list(runs)
        running: dict[Any, tuple[str, Path, str]] = {}
        while queue or running:
            while queue and len(running) < limit:
                run = queue.pop(0)
                run_dir = root / run.name
                submission = uuid.uuid4().hex  # one per task; Ray's retries of it share it
                ref = remote.remote(
                    str(run_dir.resolve()), run.config, plugins, submission, log_output=log_output
                )
                running[ref] = (run.name, run_dir, submission)
            ready, _ = ray.wait(list(running), num_returns=1)
            name, run_dir, submission = running.pop(ready[0])
            try:
                outcome = ray.get(ready[0])
            except Exception as error:  # lost RAY_MAX_RETRIES + 1 times (worker or node died, OOM...)
                outcome = run_outcome(run_dir, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
                outcome["attempts"] = _attempts_of(run_dir, submission)
            on_done(name, outcome)
    finally:
        if started:
            ray.shutdown()
            if threading.current_thread() is threading.main_thread() and before is not None:
                signal.signal(signal.SIGTERM, before)


def _sigterm_as_interrupt() -> None:
    """A SIGTERM (``kill``) ends the driver as Ctrl-C does (:class:`KeyboardInterrupt`), so that
    its caller stops the runs and says how to resume them: Ray's core worker replaces the
    process's handler with one that prints a raw stack dump and exits."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def train_runs(
    runs: Sequence[PlannedRun],
    root: Path,
    *,
    use_ray: bool,
    on_start: Callable[[dict[str, Outcome], list[PlannedRun]], None] = _ignore,
    on_done: Callable[[str, Outcome, dict[str, Outcome]], None] = _ignore,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    cpus_per_run: float | None = None,
    log_output: LogOutput | None = None,
) -> dict[str, Outcome]:
    """Train every run whose run directory, ``root/<name>``, does not hold a finished run yet, and
    return the outcome of each run, by name (finished ones marked ``skipped``; see :func:`train_one`).

    With ``use_ray`` the runs are Ray tasks (:func:`train_on_ray`, which takes ``max_concurrent``,
    ``address``, ``gpus_per_run`` and ``cpus_per_run``; no Ray instance starts when nothing is
    left to train); without, they train in this process one after the other.

    Args:
        on_start: ``(outcomes, pending)`` once, before anything trains: the outcomes of the runs
            found finished, and the runs to train.
        on_done: ``(name, outcome, outcomes)`` in this process as each run ends, its outcome
            already in ``outcomes`` (the dict this function returns).
        log_output: what each run shows, into its ``log.txt`` (:data:`LogOutput`).
    """
    outcomes, pending_names = split_finished([(run.name, root / run.name) for run in runs])
    pending = [run for run in runs if run.name in pending_names]
    on_start(outcomes, pending)

    def record(name: str, outcome: Outcome) -> None:
        outcomes[name] = outcome
        on_done(name, outcome, outcomes)

    if use_ray:
        train_on_ray(
            pending,
            root,
            record,
            max_concurrent=max_concurrent,
            address=address,
            gpus_per_run=gpus_per_run,
            cpus_per_run=cpus_per_run,
            log_output=log_output,
        )
    else:
        plugins = loaded_plugins()
        for run in pending:
            record(run.name, train_one(str(root / run.name), run.config, plugins, log_output=log_output))
    return outcomes
