"""What a run on the CPU says of its thread count, which its numbers depend on: the count it starts
with and whether it is fixed or the machine's fair share, a line at each change of a fair share
(above the progress bar), and the summary's line when it trained on more than one count. The
share is a register of this test's own, the clock a fake one: nothing depends on the wall clock or
on the machine's other work."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xder_cli.main import main
from xder_cli.progress import (
    ThreadLines,
    in_run_log,
    on_terminal,
    print_summary,
    thread_line,
    threads_summary,
)
from xder_cli.runs.recorder import ThreadNews, ThreadShare
from xder_methods.core import threads as thread_policy
from xder_methods.core.threads import RECHECK_SECONDS, CpuShare, ThreadPolicy

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_omp_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def drive(policy: ThreadPolicy, clock: Clock, lines: ThreadLines, register: Path) -> list[dict[str, Any]]:
    """A run of three tasks: a second run joins the register in task 2 (epoch 4) and leaves in
    task 3 (epoch 1); the run polls between steps, as the training loop calls it."""
    events: list[dict[str, Any]] = []
    loop: Any = SimpleNamespace(task=0, epoch=0)
    share = ThreadShare(policy, events.append, lines)
    share.on_fit_start(loop)
    clock.now += RECHECK_SECONDS
    share.on_step(loop)  # alone still: nothing to say
    with CpuShare(register, cores=2):
        loop.task, loop.epoch = 1, 3
        share.on_step(loop)  # not yet time to look again
        clock.now += RECHECK_SECONDS
        share.on_step(loop)
        clock.now += RECHECK_SECONDS
        share.on_step(loop)  # unchanged: nothing to say
    loop.task, loop.epoch = 2, 0
    clock.now += RECHECK_SECONDS
    share.on_step(loop)
    loop.task = 3
    share.on_fit_end(loop)
    return events


def test_a_fair_share_run_says_its_count_each_change_and_how_to_repeat(tmp_path: Path, capsys) -> None:
    clock = Clock()
    with ThreadPolicy(0, share=CpuShare(tmp_path, cores=2), clock=clock) as policy:
        events = drive(policy, clock, ThreadLines(), tmp_path)
    assert capsys.readouterr().out.splitlines() == [
        "threads: 2, this machine's fair share (2 cores, no other xder-run training); "
        "--threads 2 fixes the count",
        "threads 2 -> 1 in task 2, epoch 4: another xder-run training started on this machine; "
        "the numbers will differ from a run on 2 threads throughout; --threads 2 fixes the count",
        "threads 1 -> 2 in task 3, epoch 1: an xder-run training on this machine ended; "
        "the numbers will differ from a run on 2 threads throughout; --threads 2 fixes the count",
        "threads: trained on 2 and 1 threads, so these numbers will not repeat; --threads 2 fixes the count",
    ]
    assert [(e["task"], e["epoch"], e["threads"], e["auto"]) for e in events] == [
        (0, 0, 2, True),
        (1, 3, 1, True),
        (2, 0, 2, True),
    ]


def test_a_fair_share_run_that_starts_beside_another_says_so(tmp_path: Path, capsys) -> None:
    loop: Any = SimpleNamespace(task=0, epoch=0)
    share = CpuShare(tmp_path, cores=4)
    with CpuShare(tmp_path, cores=4), CpuShare(tmp_path, cores=4), ThreadPolicy(0, share=share) as policy:
        ThreadShare(policy, lambda event: None, ThreadLines()).on_fit_start(loop)
    assert capsys.readouterr().out.splitlines() == [
        "threads: 1, this machine's fair share (4 cores, 2 other xder-run trainings); "
        "--threads 1 fixes the count"
    ]


def test_a_run_beside_other_busy_programs_says_it_took_fewer_threads_and_why(tmp_path: Path, capsys) -> None:
    """Other programs keep a core busy as the run starts, then leave it free: a fake load source
    stands in for the machine's (xder_methods.core.threads.MachineLoad)."""
    busy, clock = [1], Clock()
    loop: Any = SimpleNamespace(task=0, epoch=0)
    policy = ThreadPolicy(0, share=CpuShare(tmp_path, cores=2), load=lambda pids: busy[0], clock=clock)
    with policy:
        share = ThreadShare(policy, lambda event: None, ThreadLines())
        share.on_fit_start(loop)
        busy[0], loop.task = 0, 1
        clock.now += RECHECK_SECONDS
        share.on_step(loop)
    assert capsys.readouterr().out.splitlines() == [
        "threads: 1, this machine's fair share (2 cores, 1 busy with other programs, no other xder-run "
        "training); --threads 1 fixes the count",
        "threads 1 -> 2 in task 2, epoch 1: other programs left 1 core free; the numbers will differ "
        "from a run on 1 thread throughout; --threads 1 fixes the count",
    ]


def test_a_fixed_count_says_so_once_and_nothing_else(tmp_path: Path, capsys) -> None:
    clock = Clock()
    with ThreadPolicy(1, share=CpuShare(tmp_path, cores=2), clock=clock) as policy:
        events = drive(policy, clock, ThreadLines(), tmp_path)
    assert capsys.readouterr().out.splitlines() == ["threads: 1 (fixed)"]
    assert [e["threads"] for e in events] == [1]


def test_train_leaves_the_end_to_its_summary_a_sweeps_run_log_says_it(tmp_path: Path, capsys) -> None:
    news = ThreadNews("end", 2, True, 2, 1, (2, 1), task=3)
    on_terminal().threads(news)
    assert capsys.readouterr().out == ""
    in_run_log().threads(news)
    assert capsys.readouterr().out.splitlines() == [thread_line(news)]


@pytest.mark.parametrize(
    ("device", "used", "note"),
    [
        ("cpu", [2], None),
        (
            "cpu",
            [2, 1, 4],
            "threads: trained on 2, 1 and 4 threads, so these numbers will not repeat; "
            "--threads 2 fixes the count",
        ),
        ("cuda:0", [2, 1], None),  # on a GPU the count does not change the numbers
    ],
)
def test_the_summary_says_when_more_than_one_count_was_used(
    device: str, used: list[int], note: str | None, tmp_path: Path, capsys
) -> None:
    assert threads_summary(device, used) == note
    results = {"faa": 90.0, "ff": 5.0, "task_il_faa": 99.0, "wall_time_s": 12.0}
    print_summary(results | {"environment": {"device": device, "threads": used}}, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "Class-IL FAA 90.00  FF 5.00  |  Task-IL FAA 99.00  |  wall time 12.0 s",
        f"results: {tmp_path / 'results.json'}  plots: {tmp_path / 'plots'}",
    ]
    assert lines[2:] == ([] if note is None else [note])


@pytest.mark.parametrize("threads", [[], ["--threads", "1"]])
def test_train_says_its_count_under_its_first_line(
    threads: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("XDER_CPU_SHARE_DIR", str(tmp_path / "register"))  # nothing else trains here
    # One core: the fair share is one thread, as fast as the fixed run on a busy machine.
    monkeypatch.setattr(thread_policy, "machine_cores", lambda: 1)
    assert main(["train", "--method", "sgd", "--out", str(tmp_path / "runs"), *TINY, *threads]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("training sgd on seq-digits (")
    assert lines[1] == (
        "threads: 1 (fixed)"
        if threads
        else "threads: 1, this machine's fair share (1 core, no other xder-run training); "
        "--threads 1 fixes the count"
    )
    assert [line[:9] for line in lines[2:7]] == [f"task {t}/5 " for t in range(1, 6)]
    assert lines[7].startswith("Class-IL FAA ")
    assert lines[8].startswith("results: ")
    assert len(lines) == 9  # one count throughout: no line about it in the summary
