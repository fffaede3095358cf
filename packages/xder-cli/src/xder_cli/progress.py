"""What a training run shows on a terminal: a progress bar per task and one line per task, bars
over the images a reader walks through, the run's notes and warnings, and on a CPU its thread
count (:class:`ThreadLines`: at the start, at each change, at the end where it changed); the
line a sweep or an experiment prints as each of its runs ends (:class:`OutcomeLines`); and the
note of a report on a seed run more than once (:func:`repeated_seed_notes`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from xder_cli.runs import rundir
from xder_cli.runs._stats import fmt
from xder_cli.runs.lifecycle import RunDisplay
from xder_cli.runs.recorder import ThreadNews
from xder_cli.runs.records import Results, own_metric, results_scenario
from xder_cli.runs.report import WrittenReport
from xder_cli.runs.scheduler import outcome_note
from xder_methods import (
    SCENARIO_ACCURACY,
    Callback,
    EpochRecord,
    FitState,
    TaskRecord,
)

__all__ = [
    "OutcomeLines",
    "TaskProgress",
    "ThreadLines",
    "in_run_log",
    "on_terminal",
    "print_notice",
    "print_summary",
    "progress_bar",
    "repeated_seed_notes",
    "summary_figures",
    "thread_line",
    "threads_summary",
]


def progress_bar(description: str) -> Callable[[Iterable[Any]], Iterable[Any]]:
    """A tqdm bar over the items a reader walks through (shown on a terminal only)."""

    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        bar: Iterable[Any] = tqdm(items, desc=description, unit="item", leave=False, disable=None)
        return bar

    return wrap


def repeated_seed_notes(written: WrittenReport) -> list[str]:
    """One line per seed a report's group holds more than once: the run that counted, those set aside."""
    return [
        f"note: {where}, seed {r.seed}: counted {r.counted}, set aside {', '.join(r.set_aside)} "
        "(one run per seed: the first by folder name)"
        for where, r in written.repeated
    ]


def print_notice(message: str) -> None:
    """A run's line for its user, on the terminal: warnings on stderr, the rest on stdout."""
    print(message, file=sys.stderr if message.startswith("warning:") else sys.stdout, flush=True)


class TaskProgress(Callback):
    """A tqdm bar per task (on a terminal) and one printed line per finished task."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None

    def on_task_start(self, loop: FitState) -> None:
        total = (loop.schedule.epochs - loop.epoch) * loop.steps_per_epoch
        self.bar = tqdm(
            total=total,
            desc=f"task {loop.task + 1}/{loop.n_tasks}",
            unit="step",
            leave=False,
            disable=None,
        )

    def on_step(self, loop: FitState) -> None:
        if self.bar is not None:
            self.bar.update()

    def on_epoch_end(self, loop: FitState, record: EpochRecord) -> None:
        if self.bar is not None:
            self.bar.set_postfix(
                epoch=record.epoch + 1, loss=f"{record.losses.get('loss', float('nan')):.3f}"
            )

    def on_task_end(self, loop: FitState, record: TaskRecord) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        setting = loop.setting
        parts = [f"task {record.task + 1}/{loop.n_tasks}"]
        if setting.reports_class_il:
            accs = " ".join(f"{a:5.1f}" for a in record.class_il)
            label = SCENARIO_ACCURACY[setting.scenario].lower()
            mean = sum(record.class_il) / len(record.class_il)
            parts.append(f"{label} [{accs}] avg {mean:.2f}")
        if setting.reports_task_il:
            til_seen = record.task_il[: record.task + 1]
            parts.append(f"task-il avg {sum(til_seen) / len(til_seen):.2f}")
        print(" | ".join([*parts, f"{record.seconds:.1f} s"]), flush=True)


def _threads(count: int) -> str:
    return f"{count} thread{'' if count == 1 else 's'}"


def _cores(count: int) -> str:
    return f"{count} core{'' if count == 1 else 's'}"


def _others(runs: int, busy: int = 0) -> str:
    others = runs - 1
    trainings = (
        "no other xder-run training"
        if others == 0
        else f"{others} other xder-run training{'' if others == 1 else 's'}"
    )
    return f"{busy} busy with other programs, {trainings}" if busy > 0 else trainings


def _why(news: ThreadNews) -> str:
    """Why a fair share changed: xder-run trainings or other programs that came or went."""
    runs = news.runs - (news.before_runs if news.before_runs is not None else news.runs)
    busy = news.busy - (news.before_busy if news.before_busy is not None else news.busy)
    reasons = [
        *(["another xder-run training started on this machine"] if runs > 0 else []),
        *(["an xder-run training on this machine ended"] if runs < 0 else []),
        *([f"other programs keep {_cores(news.busy)} busy"] if busy > 0 else []),
        *([f"other programs left {_cores(-busy)} free"] if busy < 0 else []),
    ]
    if reasons:
        return " and ".join(reasons)
    assert news.before is not None
    return (
        "another xder-run training started on this machine"
        if news.threads < news.before
        else "an xder-run training on this machine ended"
    )


def _listed(counts: Sequence[int]) -> str:
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def threads_summary(device: str, used: Sequence[int]) -> str | None:
    """The summary's line about a run that trained on more than one CPU thread count (its numbers
    will not repeat), else None; nothing for a run on another device, whose numbers the count
    does not change.

    >>> threads_summary("cpu", [2, 1])
    'threads: trained on 2 and 1 threads, so these numbers will not repeat; --threads 2 fixes the count'
    >>> threads_summary("cpu", [2]), threads_summary("cuda:0", [2, 1])
    (None, None)
    """
    if not device.startswith("cpu") or len(used) < 2:
        return None
    return (
        f"threads: trained on {_listed(used)} threads, so these numbers will not repeat; "
        f"--threads {used[0]} fixes the count"
    )


def thread_line(news: ThreadNews) -> str | None:
    """The line a run's :class:`~xder_cli.runs.recorder.ThreadNews` prints: at the start, the
    count and where it comes from; at a change, the new count, why and how to keep one; at the end,
    :func:`threads_summary`."""
    if news.kind == "start":
        if not news.auto:
            return f"threads: {news.threads} (fixed)"
        share = f"this machine's fair share ({_cores(news.cores)}, {_others(news.runs, news.busy)})"
        return f"threads: {news.threads}, {share}; --threads {news.threads} fixes the count"
    if news.kind == "change":
        assert news.before is not None
        why = _why(news)
        first, where = news.used[0], f"task {news.task + 1}, epoch {news.epoch + 1}"
        return (
            f"threads {news.before} -> {news.threads} in {where}: {why}; the numbers will differ "
            f"from a run on {_threads(first)} throughout; --threads {first} fixes the count"
        )
    return threads_summary("cpu", news.used)


class ThreadLines:
    """Prints a run's :func:`thread_line` as it comes (a display's ``threads``:
    :class:`~xder_cli.runs.lifecycle.RunDisplay`), above a progress bar without breaking it; the
    end's line only where ``summary`` (``xder-run train`` prints it with its own summary instead)."""

    def __init__(self, *, summary: bool = True) -> None:
        self.summary = summary

    def __call__(self, news: ThreadNews) -> None:
        if news.kind == "end" and not self.summary:
            return
        line = thread_line(news)
        if line is not None:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()


def on_terminal() -> RunDisplay:
    """What shows ``xder-run train``'s run on the terminal (:class:`xder_cli.runs.lifecycle.RunDisplay`):
    a bar per task and a line per task, a bar over the images read, notes and warnings, the thread
    count on a CPU (the summary's line is the command's)."""
    return RunDisplay((TaskProgress(),), print_notice, progress_bar("images"), ThreadLines(summary=False))


def in_run_log() -> RunDisplay:
    """What shows each run of a sweep or an experiment, into its ``log.txt``
    (:data:`xder_cli.runs.scheduler.LogOutput`): :func:`on_terminal`'s lines, the thread count's
    summary line included."""
    return RunDisplay((TaskProgress(),), print_notice, progress_bar("images"), ThreadLines())


class OutcomeLines:
    """The ``on_start`` and ``on_done`` of a sweep (:func:`xder_cli.runs.sweep.run_sweep`) or an
    experiment (:func:`xder_cli.runs.experiments.run_experiment`) on the terminal: ``heading(total,
    finished)`` once, then ``[done/total] name status<figures><note> | N s elapsed`` as each run
    ends (the note: :func:`xder_cli.runs.scheduler.outcome_note`; N: seconds since the start, not
    the run's own time, which its results.json gives)."""

    def __init__(self, heading: Callable[[int, int], str]) -> None:
        self.heading = heading
        self.total = self.done = 0
        self.begin = time.perf_counter()

    def on_start(self, total: int, finished: int) -> None:
        print(self.heading(total, finished), flush=True)
        self.total, self.done, self.begin = total, finished, time.perf_counter()

    def on_done(self, name: str, outcome: Mapping[str, Any], figures: str) -> None:
        self.done += 1
        print(
            f"[{self.done}/{self.total}] {name} {outcome['status']}{figures}{outcome_note(outcome)}"
            f" | {time.perf_counter() - self.begin:.0f} s elapsed",
            flush=True,
        )


def summary_figures(results: Results) -> str:
    """The figures of a run's summary line, named by its scenario
    (:func:`~xder_cli.runs.records.results_scenario`): the scenario's own FAA and FF (Class-IL,
    Task-IL or Domain-IL; a general stream's accuracy at its end, one task: no forgetting), then
    Task-IL's FAA where a Class-IL run also reports it.

    >>> summary_figures({"scenario": "domain-il", "faa": 53.49, "ff": 26.58, "task_il_faa": None})
    'Domain-IL FAA 53.49  FF 26.58'
    >>> summary_figures({"scenario": "general", "faa": 25.08, "ff": None, "task_il_faa": None})
    'Accuracy 25.08'
    """
    scenario = results_scenario(results)
    name = SCENARIO_ACCURACY[scenario]
    if scenario == "general":
        return f"{name} {fmt(results['faa'])}"
    text = f"{name} FAA {fmt(own_metric(results, 'faa'))}  FF {fmt(own_metric(results, 'ff'))}"
    if scenario == "class-il":
        text += f"  |  Task-IL FAA {fmt(results['task_il_faa'])}"
    return text


def print_summary(results: Results, run_dir: Path) -> None:
    """The run's last lines: its figures (:func:`summary_figures`), where its files are, and on a
    CPU whether it trained on more than one thread count (its numbers then do not repeat:
    :func:`threads_summary`)."""
    print(f"{summary_figures(results)}  |  wall time {results['wall_time_s']:.1f} s")
    print(f"results: {run_dir / rundir.RESULTS}  plots: {run_dir / rundir.PLOTS}")
    environment = results.get("environment", {})
    note = threads_summary(str(environment.get("device", "")), environment.get("threads", []))
    if note is not None:
        print(note)
