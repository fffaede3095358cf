"""The machine's register of training runs and the thread counts it gives (xder_cli.runs.cpushare)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xder_cli.runs.cpushare import RECHECK_SECONDS, CpuShare, ThreadPolicy, fair_threads, fixed_threads


@pytest.mark.parametrize(
    ("cores", "runs", "threads"),
    [(2, 1, 2), (2, 2, 1), (2, 3, 1), (2, 5, 1), (16, 1, 16), (16, 3, 5), (16, 4, 4), (16, 5, 3), (1, 1, 1)],
)
def test_fair_threads(cores: int, runs: int, threads: int) -> None:
    assert fair_threads(cores, runs) == threads


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
        "import sys, time\nfrom pathlib import Path\nfrom xder_cli.runs.cpushare import CpuShare\n"
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
