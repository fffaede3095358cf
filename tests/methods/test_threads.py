"""The machine's register of training runs, the load of other programs and the thread counts they give
(xder_methods.core.threads), and fit's use of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xder_methods import Callback, TrainingSchedule, create_method, fit, machine_cores
from xder_methods.core.threads import (
    RECHECK_SECONDS,
    CpuShare,
    MachineLoad,
    ThreadPolicy,
    fair_threads,
    fixed_threads,
)


@pytest.mark.parametrize(
    ("cores", "runs", "threads"),
    [(2, 1, 2), (2, 2, 1), (2, 3, 1), (2, 5, 1), (16, 1, 16), (16, 3, 5), (16, 4, 4), (16, 5, 3), (1, 1, 1)],
)
def test_fair_threads(cores: int, runs: int, threads: int) -> None:
    assert fair_threads(cores, runs) == threads


@pytest.mark.parametrize(
    ("cores", "runs", "busy", "threads"),
    [(2, 1, 1, 1), (2, 1, 2, 1), (2, 1, 5, 1), (16, 1, 4, 12), (16, 2, 4, 6), (16, 3, 1, 5), (8, 1, -1, 8)],
)
def test_fair_threads_share_the_cores_other_programs_leave_free(
    cores: int, runs: int, busy: int, threads: int
) -> None:
    assert fair_threads(cores, runs, busy) == threads


def test_runs_come_and_go(tmp_path: Path) -> None:
    with CpuShare(tmp_path, cores=4) as first:
        assert (first.runs(), first.threads()) == (1, 4)
        with CpuShare(tmp_path, cores=4) as second:
            assert (first.runs(), second.runs()) == (2, 2)
            assert (first.threads(), second.threads()) == (2, 2)
            with CpuShare(tmp_path, cores=4) as third:
                assert [s.threads() for s in (first, second, third)] == [1, 1, 1]
        assert (first.runs(), first.threads()) == (1, 4)
    assert list(tmp_path.iterdir()) == []  # each run removed its own file


def test_a_killed_run_is_not_counted_and_its_file_goes(tmp_path: Path) -> None:
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom xder_methods.core.threads import CpuShare\n"
        "share = CpuShare(Path(sys.argv[1])).__enter__()\nprint('in', flush=True)\ntime.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "in\n"
        with CpuShare(tmp_path, cores=2) as share:
            assert (share.runs(), share.threads()) == (2, 1)  # the child is alive and counted
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            files = sorted(p.name for p in tmp_path.iterdir())
            assert len(files) == 2  # kill -9 left its file behind...
            assert (share.runs(), share.threads()) == (1, 2)  # ...but not its lock: not counted
            assert len(list(tmp_path.iterdir())) == 1  # and the stale file is gone
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_an_unusable_register_counts_the_run_alone(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with CpuShare(blocked / "register", cores=2) as share:
        assert (share.runs(), share.threads()) == (1, 2)


def test_fixed_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert fixed_threads(0) is None
    assert fixed_threads(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert fixed_threads(0) == 1
    assert fixed_threads(2) == 2  # run.threads wins over the environment


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_fair_share_run_follows_the_register(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    clock = Clock()
    with ThreadPolicy(0, share=CpuShare(tmp_path, cores=2), clock=clock) as policy:
        assert policy.auto
        assert torch.get_num_threads() == 2
        with CpuShare(tmp_path, cores=2):
            assert policy.poll() is None  # not yet time to look again
            clock.now += RECHECK_SECONDS
            assert policy.poll() == 1
            assert torch.get_num_threads() == 1
            clock.now += RECHECK_SECONDS
            assert policy.poll() is None  # unchanged
        clock.now += RECHECK_SECONDS
        assert policy.poll() == 2  # the other run ended: the cores come back
        assert policy.used == [2, 1]
    assert torch.get_num_threads() == before


def test_a_fixed_count_is_kept_whatever_runs_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    clock = Clock()
    share = CpuShare(tmp_path, cores=2)
    with CpuShare(tmp_path, cores=2), ThreadPolicy(1, share=share, clock=clock) as policy:
        assert not policy.auto
        assert torch.get_num_threads() == 1
        with CpuShare(tmp_path, cores=2), CpuShare(tmp_path, cores=2):
            clock.now += 10 * RECHECK_SECONDS
            assert policy.poll() is None
        assert policy.used == [1]
    assert torch.get_num_threads() == before
    assert list(tmp_path.iterdir()) == []  # it left the register at the end of the block


def test_a_fixed_run_is_counted_by_the_fair_share_runs_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A one-thread Ray trial beside a fair-share run: the fair-share run must not take both cores.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    with CpuShare(tmp_path, cores=2) as fair:
        assert fair.threads() == 2
        with ThreadPolicy(0, share=CpuShare(tmp_path, cores=2)) as fixed:
            assert not fixed.auto
            assert torch.get_num_threads() == 1
            assert (fair.runs(), fair.threads()) == (2, 1)
        assert (fair.runs(), fair.threads()) == (1, 2)
    assert torch.get_num_threads() == before


class FakeMachine:
    """The CPU seconds psutil would report: the machine's busy time and each process's time."""

    def __init__(self) -> None:
        self.busy = 100.0
        self.processes: dict[int, float] = {os.getpid(): 10.0}

    def machine(self) -> float:
        return self.busy

    def of(self, pids) -> dict[int, float]:
        return {pid: self.processes[pid] for pid in pids if pid in self.processes}


def test_machine_load_counts_what_the_training_runs_do_not() -> None:
    clock, fake, waited = Clock(), FakeMachine(), []
    load = MachineLoad(clock=clock, sleep=lambda s: (waited.append(s), setattr(clock, "now", clock.now + s)),
                       machine=fake.machine, processes=fake.of)  # fmt: skip
    # The first reading waits out its window: 0.25 s, during which the machine spent 0.5 CPU
    # seconds, 0.25 of them this process's own: 1 core busy elsewhere.
    fake.busy += 0.5
    fake.processes[os.getpid()] += 0.25
    assert load.busy() == 1
    assert waited == [0.25]
    # 2 s: 3.2 CPU seconds, of which this run 1.9 and another training run (pid 4242) 1.0. The
    # other run is new to it, its time before unknown: counted as busy elsewhere, for this reading
    # only ((3.2 - 1.9) / 2 = 0.65 core); the next one leaves it out ((3.2 - 2.9) / 2: none).
    fake.processes[4242] = 50.0
    for expected in (1, 0):
        clock.now += 2
        fake.busy += 3.2
        fake.processes[os.getpid()] += 1.9
        fake.processes[4242] += 1.0
        assert load.busy([4242]) == expected
    # Then another program takes 1.6 cores for 2 s beside the two runs.
    clock.now += 2
    fake.busy += 2.9 + 3.2
    fake.processes[os.getpid()] += 1.9
    fake.processes[4242] += 1.0
    assert load.busy([4242]) == 2
    assert waited == [0.25]  # later readings do not wait


def test_a_fair_share_run_follows_the_load_of_other_programs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    busy, clock, before = [0], Clock(), torch.get_num_threads()
    seen: list[list[int]] = []

    def load(pids: list[int]) -> int:
        seen.append(list(pids))
        return busy[0]

    with ThreadPolicy(0, share=CpuShare(tmp_path, cores=4), load=load, clock=clock) as policy:
        assert (policy.threads, policy.busy) == (4, 0)
        busy[0] = 3
        clock.now += RECHECK_SECONDS
        assert policy.poll() == 1
        with CpuShare(tmp_path, cores=4):
            busy[0] = 1
            clock.now += RECHECK_SECONDS
            assert policy.poll() is None  # (4 - 1) // 2 runs: still 1
            assert (policy.runs, policy.busy) == (2, 1)
        busy[0] = 0
        clock.now += RECHECK_SECONDS
        assert policy.poll() == 4
        assert policy.used == [4, 1]
    assert torch.get_num_threads() == before
    assert all(os.getpid() in pids for pids in seen)  # the load is told the training runs' processes
    assert max(len(pids) for pids in seen) == 2


def test_other_programs_are_left_out_where_the_environment_says_so(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("XDER_CPU_LOAD", "ignore")
    assert ThreadPolicy(0, share=CpuShare(tmp_path)).load is None
    monkeypatch.delenv("XDER_CPU_LOAD")
    assert isinstance(ThreadPolicy(0, share=CpuShare(tmp_path)).load.__self__, MachineLoad)
    assert ThreadPolicy(2, share=CpuShare(tmp_path)).load is None  # a fixed count reads no load


class CountThreads(Callback):
    def __init__(self) -> None:
        self.counts: set[int] = set()

    def on_step(self, loop) -> None:
        self.counts.add(torch.get_num_threads())


def fit_once(stream, tiny_net, setting_of, transforms, threads):
    method = create_method(
        "sgd",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        generator=torch.Generator().manual_seed(0),
    )
    counter = CountThreads()
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1)
    fit(
        method,
        stream,
        schedule,
        generator=torch.Generator().manual_seed(0),
        callbacks=[counter],
        threads=threads,
    )
    return counter.counts


def test_fit_takes_the_fair_share_and_warns_when_it_is_less_than_the_cores(
    stream, tiny_net, setting_of, transforms, monkeypatch, recwarn
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores, before = machine_cores(), torch.get_num_threads()
    assert fit_once(stream, tiny_net, setting_of, transforms, 0) == {cores}  # alone: every core
    assert not [w for w in recwarn if "fit trains on" in str(w.message)]
    assert fit_once(stream, tiny_net, setting_of, transforms, 1) == {1}
    assert torch.get_num_threads() == before  # restored
    torch.set_num_threads(1)
    try:
        assert fit_once(stream, tiny_net, setting_of, transforms, None) == {1}  # left alone
    finally:
        torch.set_num_threads(before)
    # Beside another training run of this machine (the register the test session shares), on
    # more cores than the share: fewer threads, and a warning that says how to fix the count.
    with (
        CpuShare(cores=cores),
        pytest.warns(UserWarning, match=r"fit trains on \d+ CPU threads of \d+ cores .* pass threads=\d+"),
    ):
        counts = fit_once(stream, tiny_net, setting_of, transforms, 0)
    assert counts == {max(1, cores // 2)}
