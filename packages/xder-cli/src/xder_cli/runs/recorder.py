"""What a run records while it trains: the run directory kept current (events, checkpoint,
results, plots: :class:`RunRecorder`), the thread count followed and reported
(:class:`ThreadShare`, :class:`ThreadNews`), and the results of a history (:func:`summarize`)."""

from __future__ import annotations

import dataclasses
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import torch

from xder_cli.runs import rundir
from xder_cli.runs.analyses import task_end_analysis
from xder_cli.runs.records import Event, Metrics, Results
from xder_cli.runs.settings import RunPlan
from xder_eval import (
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
    plot_accuracy_curves,
    plot_accuracy_matrix,
)
from xder_methods import (
    SCENARIO_ACCURACY,
    Callback,
    EpochRecord,
    FitState,
    History,
    Scenario,
    TaskRecord,
    ThreadPolicy,
    reports_class_il,
    reports_task_il,
)

__all__ = ["RunRecorder", "ThreadNews", "ThreadShare", "ignore_news", "summarize"]


def _matrix_metrics(matrix: list[list[float]], prefix: str) -> dict[str, float | list[float] | None]:
    out: dict[str, float | list[float] | None] = {
        f"{prefix}faa": None,
        f"{prefix}ff": None,
        f"{prefix}bwt": None,
    }
    if matrix:
        out[f"{prefix}faa"] = final_average_accuracy(matrix)
        out[f"{prefix}average_accuracy"] = average_accuracy_curve(matrix)
    if len(matrix) >= 2:
        out[f"{prefix}ff"] = final_forgetting(matrix)
        out[f"{prefix}bwt"] = backward_transfer(matrix)
    return out


def summarize(
    history: History, *, forgetting_defined: bool = True, scenario: Scenario = "class-il"
) -> Metrics:
    """The metrics of ``results.json`` from the accuracy matrices (in %).

    Keys: ``scenario``; ``accuracy_matrix``/``faa``/``ff``/``bwt``/``average_accuracy`` (Class-IL;
    in ``domain-il`` the Domain-IL accuracy, in ``general`` the stream's accuracy: one task),
    ``task_il_accuracy_matrix`` (square: every task after each task) with ``task_il_faa``,
    ``task_il_ff``, ``task_il_bwt`` and ``fwt`` (Task-IL forward transfer against the untrained
    network), and the same with a ``val_`` prefix when there is a validation split. With
    ``forgetting_defined=False`` (a method whose rows before the last task are not trained models,
    as JT's default) FF and BWT are null and ``forgetting_defined`` says why. A matrix the
    scenario does not report is null, and so are its metrics: Task-IL in ``domain-il`` and
    ``general`` (every class is the task's own), Class-IL in ``task-il``.
    """
    cil = history.class_il if reports_class_il(scenario) else None
    til = history.task_il if reports_task_il(scenario) else None
    out: dict[str, object] = {
        "scenario": scenario,
        "accuracy_matrix": cil,
        "task_il_accuracy_matrix": til,
        "random_init_task_il_accuracy": history.random_init_task_il if til is not None else None,
        "tasks_done": len(history.class_il),
    }
    out |= _matrix_metrics(cil or [], "")
    out |= _matrix_metrics(til or [], "task_il_")
    out["fwt"] = None
    if til is not None and len(til) >= 2 and history.random_init_task_il is not None:
        out["fwt"] = forward_transfer(til, history.random_init_task_il)
    if history.val_class_il:
        val_cil = history.val_class_il if reports_class_il(scenario) else None
        val_til = history.val_task_il if reports_task_il(scenario) else None
        out["val_accuracy_matrix"] = val_cil
        out["val_task_il_accuracy_matrix"] = val_til
        out |= _matrix_metrics(val_cil or [], "val_")
        out |= _matrix_metrics(val_til or [], "val_task_il_")
    out["forgetting_defined"] = forgetting_defined
    if not forgetting_defined:
        out |= {k: None for k in out if k.endswith(("ff", "bwt"))}
    return cast(Metrics, out)  # its keys made by prefix: those Metrics names


# ---------------------------------------------------------------------------------------------
# Callbacks


class RunRecorder(Callback):
    """Keeps the run directory current: events, checkpoint, results, plots.

    A write that fails (a full disk...) ends the run with a one-line :class:`rundir.RunDirWriteError`;
    every file is replaced atomically and the event log cut back, so the previous checkpoint and
    results stay whole and ``xder-run train --resume`` continues from that checkpoint.
    ``results.json`` with ``complete: true`` is written last: a run that says it is complete is.
    """

    def __init__(
        self,
        run_dir: Path,
        plan: RunPlan[Any],
        device: torch.device,
        events: rundir.EventLog,
        elapsed_before: float,
        threads: ThreadPolicy | None = None,
        threads_before: list[int] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.device = device
        self.events = events
        self.elapsed_before = elapsed_before
        self.threads = threads
        self.threads_before = list(threads_before or [])
        self.started = time.perf_counter()
        self.results: Results | None = None

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def _writing(self, path: Path) -> Any:
        return rundir.write_errors(path, then=rundir.resume_hint(self.run_dir))

    def log(self, event: Event) -> None:
        with self._writing(self.events.path):
            self.events.append(event)

    def threads_used(self) -> list[int]:
        """Every CPU thread count the run trained with, before a resume and since."""
        used = list(self.threads_before)
        for count in self.threads.used if self.threads is not None else []:
            if count not in used:
                used.append(count)
        return used

    def checkpoint(self, loop: FitState) -> None:
        state = loop.snapshot()
        state["run"] = {
            "events": self.events.count,
            "elapsed_s": self.elapsed(),
            "threads": self.threads_used(),
        }
        path = self.run_dir / rundir.CHECKPOINT
        with self._writing(path):
            rundir.save_checkpoint(path, state)

    def write_results(self, loop: FitState, *, complete: bool) -> None:
        settings = self.plan.settings
        self.results = {
            "method": settings.method,
            "benchmark": settings.benchmark,
            "seed": settings.seed,
            "buffer_size": self.plan.buffer_size,
            "n_tasks": loop.n_tasks,
            "complete": complete,
            **summarize(
                loop.history,
                forgetting_defined=loop.method.forgetting_defined,
                scenario=loop.setting.scenario,
            ),
            "wall_time_s": self.elapsed(),
            "environment": {
                "device": str(self.device),
                "threads": self.threads_used(),
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }
        path = self.run_dir / rundir.RESULTS
        with self._writing(path):
            rundir.write_json(path, self.results)

    def plot(self, name: str, draw: Callable[[Path], Any]) -> None:
        """``draw(path)`` renders a figure into a scratch folder; it is then written atomically
        into ``plots/`` like every other file of the run directory."""
        path = self.run_dir / rundir.PLOTS / name
        with self._writing(path), tempfile.TemporaryDirectory() as scratch:
            draw(Path(scratch) / name)
            rundir.atomic_write_bytes(path, (Path(scratch) / name).read_bytes())

    def on_fit_start(self, loop: FitState) -> None:
        kind = "resume" if self.elapsed_before else "start"
        self.log(
            {"event": kind, "task": loop.task, "epoch": loop.epoch, "time": datetime.now(UTC).isoformat()}
        )

    def on_epoch_end(self, loop: FitState, record: EpochRecord) -> None:
        # with train.step_graph: the task's steps replayed from CUDA graphs so far (on a CPU,
        # checked op by op); absent where none was recorded yet
        replays = {} if loop.graphs is None else {"replayed_steps": loop.graphs.replays}
        self.log({"event": "epoch", **dataclasses.asdict(record), **replays})
        self.checkpoint(loop)

    def on_task_end(self, loop: FitState, record: TaskRecord) -> None:
        self.log(task_end_analysis(loop, full=self.plan.settings.record_analyses))
        self.log({"event": "task", **dataclasses.asdict(record)})
        self.write_results(loop, complete=False)
        self.checkpoint(loop)

    def on_fit_end(self, loop: FitState) -> None:
        plots = self.run_dir / rundir.PLOTS
        with self._writing(plots):
            plots.mkdir(exist_ok=True)
        history = loop.history
        name = f"{self.plan.settings.method} on {self.plan.settings.benchmark}"
        run = self.run_dir.name  # each plot names its run in a suptitle
        setting = loop.setting
        label = SCENARIO_ACCURACY[setting.scenario]
        if history.class_il:
            curves = {}
            if setting.reports_class_il:
                curves[label] = average_accuracy_curve(history.class_il)
            if setting.reports_task_il:
                curves["Task-IL"] = average_accuracy_curve(history.task_il)
            self.plot(
                "accuracy.png",
                lambda path: plot_accuracy_curves(
                    curves, path, title=f"{name}: average accuracy on seen tasks", run=run
                ),
            )
        if history.class_il and setting.reports_class_il:
            self.plot(
                "accuracy_matrix.png",
                lambda path: plot_accuracy_matrix(
                    history.class_il, path, title=f"{name}: {label} accuracy (%)", run=run
                ),
            )
        if history.task_il and setting.reports_task_il:
            self.plot(
                "task_il_matrix.png",
                lambda path: plot_accuracy_matrix(
                    history.task_il, path, title=f"{name}: Task-IL accuracy (%)", run=run
                ),
            )
        self.log({"event": "end", "wall_time_s": self.elapsed()})
        self.write_results(loop, complete=True)


@dataclass(frozen=True)
class ThreadNews:
    """What a run on the CPU tells its display about its thread count, which its numbers depend on
    (:class:`ThreadShare`): once as it starts (``"start"``), at each change of a fair-share count
    (``"change"``), and once as it ends (``"end"``).

    Attributes:
        kind: ``"start"``, ``"change"`` or ``"end"``.
        threads: the count now.
        auto: whether it is the machine's fair share (else fixed: ``run.threads``,
            ``OMP_NUM_THREADS``, a Ray trial's reservation).
        cores: the cores the fair share divides.
        runs: the training runs sharing them at the last reading, this one included (1 when fixed).
        used: every count the run trained with, before a resume too, in the order first used.
        before: the count before a change (None otherwise).
        task, epoch: where the run is (0-based; the next to train at the start).
        busy: the cores other programs kept busy at the last reading (0 when fixed).
        before_runs, before_busy: ``runs`` and ``busy`` before a change (None otherwise).
    """

    kind: Literal["start", "change", "end"]
    threads: int
    auto: bool
    cores: int
    runs: int
    used: tuple[int, ...]
    before: int | None = None
    task: int = 0
    epoch: int = 0
    busy: int = 0
    before_runs: int | None = None
    before_busy: int | None = None


def ignore_news(news: ThreadNews) -> None:
    """The default listener of :class:`ThreadNews`: nobody listens."""


class ThreadShare(Callback):
    """Keeps a fair-share run's CPU thread count current (:class:`ThreadPolicy`), between steps,
    logs each change to ``events.jsonl`` (``{"event": "threads", ...}``) and tells ``report``
    (:class:`ThreadNews`): the count at the start, each change, the counts used at the end.

    Args:
        policy: the run's thread policy, entered.
        log: appends an event to ``events.jsonl``.
        report: hears the :class:`ThreadNews` (the caller passes it for a run on the CPU only: on
            another device the count does not change the numbers).
        used: every count the run trained with, a resume's earlier ones included (default: the
            policy's).
    """

    def __init__(
        self,
        policy: ThreadPolicy,
        log: Callable[[Event], None],
        report: Callable[[ThreadNews], None] = ignore_news,
        used: Callable[[], list[int]] | None = None,
    ) -> None:
        self.policy = policy
        self.log = log
        self.report = report
        self.used = used if used is not None else lambda: list(policy.used)

    def _news(
        self,
        loop: FitState,
        kind: Literal["start", "change", "end"],
        before: tuple[int, int, int] | None = None,
    ) -> ThreadNews:
        policy = self.policy
        threads, runs, busy = before if before is not None else (None, None, None)
        return ThreadNews(
            kind,
            policy.threads,
            policy.auto,
            policy.share.cores,
            policy.runs,
            tuple(self.used()),
            threads,
            loop.task,
            loop.epoch,
            policy.busy,
            runs,
            busy,
        )

    def on_fit_start(self, loop: FitState) -> None:
        self.log(
            {
                "event": "threads",
                "task": loop.task,
                "epoch": loop.epoch,
                "threads": torch.get_num_threads(),
                "auto": self.policy.auto,
            }
        )
        self.report(self._news(loop, "start"))

    def on_step(self, loop: FitState) -> None:
        before = (self.policy.threads, self.policy.runs, self.policy.busy)
        changed = self.policy.poll()
        if changed is not None:
            self.log(
                {"event": "threads", "task": loop.task, "epoch": loop.epoch, "threads": changed, "auto": True}
            )
            self.report(self._news(loop, "change", before))

    def on_fit_end(self, loop: FitState) -> None:
        self.report(self._news(loop, "end"))
