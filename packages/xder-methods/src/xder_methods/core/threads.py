"""CPU threads of a training run: a fair share of the cores that the machine's other work leaves
free.

Why: PyTorch's CPU kernels run on an OpenMP team of as many threads as the machine has cores, and
its OpenMP (GNU libgomp in the PyPI wheels) spin-waits at every barrier before it sleeps. A run of
two threads on two cores beside any other busy program then burns its time slices spinning for a
thread the other program holds: measured on a 2-core machine, a ``seq-cifar10`` laptop DER++ step
took 0.077 s alone and 0.38-8.6 s (not 0.15) beside a second such run; the Python API's
``seq-digits`` example took 185 s on two threads beside another busy program, against 35 s on one.
One thread each, the cores are simply shared. Waiting passively (``OMP_WAIT_POLICY=PASSIVE``) or
spinning less (``GOMP_SPINCOUNT``) does not help enough and slows a run alone.

So a run whose threads nobody fixed (0 asked for, no ``OMP_NUM_THREADS``) takes
``max(1, (cores - busy) // n)`` threads (:func:`fair_threads`):

* ``cores``: the cores this process may run on (:func:`machine_cores`);
* ``busy``: the cores other programs keep busy (:class:`MachineLoad`: the machine's CPU time
  over the last few seconds, less that of this machine's training runs, rounded to whole cores);
* ``n``: the training runs of this machine that share what is left, itself included, from a
  register (:class:`CpuShare`): a folder (:data:`SHARE_DIR_ENV`, default
  ``<tmp>/xder-cpu-share``) holding one file per live run, each held under an exclusive ``flock``
  for the run's life. The kernel releases such a lock however the process ends (``kill -9``
  included), so a file whose lock can be taken belongs to no live run and is removed.

Both are read again every :data:`RECHECK_SECONDS` while training (:meth:`ThreadPolicy.poll`), so
a run gives back threads when a second run or another program starts, and takes them again when
it ends. A run whose count is fixed (a count asked for, ``OMP_NUM_THREADS``, a Ray trial's
reservation) keeps it but joins the register too: it holds cores all the same.
``XDER_CPU_LOAD=ignore`` (:data:`LOAD_ENV`) leaves other programs out of the share (the
register still counts): the test suite sets it, so that no check depends on what else the machine
runs.

Changing the thread count changes the order of floating-point sums, so a CPU run's numbers depend
on its thread count (a fact of PyTorch's kernels, not of this module): for numbers that repeat
whatever else runs, fix the count (``OMP_NUM_THREADS``, or the caller's own setting: ``fit(...,
threads=N)``, ``xder-run --threads N``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
import torch

__all__ = [
    "LOAD_ENV",
    "RECHECK_SECONDS",
    "SHARE_DIR_ENV",
    "CpuShare",
    "MachineLoad",
    "ThreadPolicy",
    "fair_threads",
    "fixed_threads",
    "machine_busy_seconds",
    "machine_cores",
    "process_seconds",
    "share_dir",
]

SHARE_DIR_ENV = "XDER_CPU_SHARE_DIR"
"""Environment variable naming the register's folder; runs that share cores must see the same one."""
LOAD_ENV = "XDER_CPU_LOAD"
"""Environment variable: ``ignore`` leaves the load of other programs out of the fair share."""
RECHECK_SECONDS = 2.0
"""How often a training run reads the register and the load again (between steps, host clock)."""
MIN_WINDOW_SECONDS = 0.25
"""A reading of the load spans at least this long (the first one waits for it as a run starts)."""
_SUFFIX = ".run"


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a Slurm or taskset limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def fixed_threads(requested: int) -> int | None:
    """The thread count a run was asked for, or None when it shares the machine fairly.

    ``requested`` > 0 wins; else ``OMP_NUM_THREADS``, which torch has already read, fixes it (a Ray
    worker's reservation sets it too).
    """
    if requested > 0:
        return requested
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not value:
        return None
    try:  # read now: a reused Ray worker may have been given another count since torch started
        return max(1, int(value.split(",")[0]))
    except ValueError:
        return torch.get_num_threads()


def share_dir() -> Path:
    """The register's folder: ``$XDER_CPU_SHARE_DIR``, else ``<tmp>/xder-cpu-share``."""
    return Path(os.environ.get(SHARE_DIR_ENV) or Path(tempfile.gettempdir()) / "xder-cpu-share")


def fair_threads(cores: int, runs: int, busy: int = 0) -> int:
    """Threads for each of ``runs`` training runs sharing the ``cores - busy`` cores other
    programs leave free: ``max(1, (cores - busy) // runs)``.

    >>> [fair_threads(2, n) for n in (1, 2, 3)], [fair_threads(16, n) for n in (1, 3, 4, 5)]
    ([2, 1, 1], [16, 5, 4, 3])
    >>> [fair_threads(2, 1, busy) for busy in (0, 1, 2)], fair_threads(16, 2, busy=4)
    ([2, 1, 1], 6)
    """
    return max(1, (cores - max(busy, 0)) // max(runs, 1))


class CpuShare:
    """This process's place in the machine's register of training runs (a context manager).

    ``with CpuShare() as share: share.threads()`` is this run's fair thread count now (the
    register only; :class:`ThreadPolicy` adds the load of other programs). A register that cannot
    be used (a read-only temporary folder...) is never an error: the run then counts itself alone.

    Args:
        folder: the register (default :func:`share_dir`).
        cores: the cores shared (default :func:`machine_cores`).
    """

    def __init__(self, folder: Path | None = None, cores: int | None = None) -> None:
        self.folder = Path(folder) if folder is not None else share_dir()
        self.cores = cores if cores is not None else machine_cores()
        self._fd: int | None = None
        self._path: Path | None = None
        self.pids: list[int] = []
        """The processes of the live runs at the last :meth:`runs`, this one included."""

    def __enter__(self) -> CpuShare:
        with contextlib.suppress(OSError):
            self._join()
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def _join(self) -> None:
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # shared by every user of the machine, like /tmp
                self.folder.chmod(0o1777)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        # Locked under a hidden name, then renamed: a visible file is always locked by a live run,
        # so another run never takes a fresh one for a dead run's and removes it.
        hidden = self.folder / f".{name}"
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(hidden, self.folder / f"{name}{_SUFFIX}")
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                hidden.unlink()
            raise
        self._fd, self._path = fd, self.folder / f"{name}{_SUFFIX}"

    def leave(self) -> None:
        """Leave the register (idempotent); the kernel does it for a process that dies."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            assert self._path is not None
            self._path.unlink()
        os.close(self._fd)
        self._fd, self._path = None, None

    def runs(self) -> int:
        """Live training runs in the register, this one included; dead runs' files are removed."""
        alive = 1 if self._fd is not None else 0
        self.pids = [os.getpid()]
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return max(alive, 1)
        for entry in entries:
            if not entry.name.endswith(_SUFFIX) or (self._path is not None and entry.path == str(self._path)):
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY)
            except OSError:  # removed meanwhile: its run ended
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                alive += 1  # held: a live run
                self.pids.append(_pid_of(entry.name))
            except OSError:
                alive += 1  # cannot tell: count it, sharing is the safe side
            else:
                with contextlib.suppress(OSError):  # nobody holds it: its run is gone
                    os.unlink(entry.path)
            finally:
                os.close(fd)
        return max(alive, 1)

    def threads(self) -> int:
        """This run's share of the register now: ``max(1, cores // runs)``."""
        return fair_threads(self.cores, self.runs())


def _pid_of(name: str) -> int:
    """The process of a register file ``<pid>-<id>.run`` (0 if the name does not say)."""
    head = name.partition("-")[0]
    return int(head) if head.isdigit() else 0


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy since it booted, all cores together (psutil)."""
    times = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    return float(sum(getattr(times, field, 0.0) for field in fields))


def process_seconds(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds each live process of ``pids`` has spent, its threads together (psutil)."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error, ValueError):
            times = psutil.Process(pid).cpu_times()
            seconds[pid] = times.user + times.system
    return seconds


class MachineLoad:
    """The cores that programs other than the machine's training runs keep busy: the CPU time the
    machine spent between two readings less that of the training runs' processes, over the time
    between them.

    Each :meth:`busy` reads the machine once more and returns the other programs' share of the time
    since the last reading, in whole cores; a reading waits until :data:`MIN_WINDOW_SECONDS` have
    passed since the last (the first, since the object was made).

    Args:
        clock: the host clock.
        sleep: how to wait on it.
        machine: the CPU seconds of the machine (:func:`machine_busy_seconds`).
        processes: those of given processes (:func:`process_seconds`).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        machine: Callable[[], float] = machine_busy_seconds,
        processes: Callable[[Iterable[int]], dict[int, float]] = process_seconds,
    ) -> None:
        self.clock, self.sleep, self.machine, self.processes = clock, sleep, machine, processes
        self._last = self._read(())

    def _read(self, pids: Iterable[int]) -> tuple[float, float, dict[int, float]]:
        return self.clock(), self.machine(), self.processes({os.getpid(), *pids})

    def busy(self, pids: Iterable[int] = ()) -> int:
        """Cores kept busy by other programs since the last reading (the training runs' processes
        ``pids`` and this one left out), rounded to whole cores."""
        wait = MIN_WINDOW_SECONDS - (self.clock() - self._last[0])
        if wait > 0:
            self.sleep(wait)
        (then, busy_then, runs_then), (now, busy_now, runs_now) = self._last, self._read(pids)
        self._last = (now, busy_now, runs_now)
        elapsed = now - then
        if elapsed <= 0:
            return 0
        # A run's process seen for the first time counts from the last reading (its CPU time then
        # is unknown): a run that started meanwhile may count as busy for one reading.
        ours = sum(seconds - runs_then.get(pid, seconds) for pid, seconds in runs_now.items())
        return max(0, round((busy_now - busy_then - ours) / elapsed))


class ThreadPolicy:
    """A run's thread setting applied to torch for a ``with`` block: a fixed count, or the fair
    share (:func:`fair_threads` of the register's runs and the cores other programs keep busy)
    read again every :data:`RECHECK_SECONDS` by :meth:`poll`, which the training loop calls between
    steps (it reads the host clock and, at most that often, the register and the load). Either
    way the run joins the register for the block, so that fair-share runs beside it count it.
    Torch's previous count is restored at the end of the block.

    Args:
        requested: the count asked for (0: the fair share, unless ``OMP_NUM_THREADS`` fixes it).
        share: the register to use (default: a :class:`CpuShare` of :func:`share_dir`).
        load: the cores other programs keep busy, given the training runs' processes (default:
            :meth:`MachineLoad.busy`; none where ``XDER_CPU_LOAD=ignore``).
        clock: the host clock of the rechecks.

    ``used`` lists every thread count the run trained with, in the order first used; ``threads``
    is the count now, ``runs`` the training runs that shared the cores at the last reading of the
    register (this one included; 1 for a fixed count, which reads no share) and ``busy`` the cores
    other programs kept busy then (0 for a fixed count).
    """

    def __init__(
        self,
        requested: int = 0,
        *,
        share: CpuShare | None = None,
        load: Callable[[list[int]], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fixed = fixed_threads(requested)
        self.share = share if share is not None else CpuShare()
        if load is None and self.fixed is None and os.environ.get(LOAD_ENV, "").strip() != "ignore":
            load = MachineLoad().busy
        self.load = load
        self.clock = clock
        self.used: list[int] = []
        self.threads = 0
        self.runs = 1
        self.busy = 0
        self._next = 0.0
        self._before: int | None = None

    @property
    def auto(self) -> bool:
        """Whether the count follows the machine's share (nothing fixed it)."""
        return self.fixed is None

    def __enter__(self) -> ThreadPolicy:
        self._before = torch.get_num_threads()
        self.share.__enter__()  # a fixed run too: others must count the cores it holds
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.share.leave()
        if self._before is not None and torch.get_num_threads() != self._before:
            torch.set_num_threads(self._before)

    def apply(self) -> int:
        """Set torch's thread count now; returns it."""
        if self.fixed is not None:
            threads = self.fixed
        else:
            self.runs = self.share.runs()
            self.busy = self.load(self.share.pids) if self.load is not None else 0
            threads = fair_threads(self.share.cores, self.runs, self.busy)
        self.threads = threads
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        if threads not in self.used:
            self.used.append(threads)
        self._next = self.clock() + RECHECK_SECONDS
        return threads

    def poll(self) -> int | None:
        """Re-read the share if it is time (fair-share runs only); returns the new count if it
        changed, else None."""
        if self.fixed is not None or self.clock() < self._next:
            return None
        before = torch.get_num_threads()
        threads = self.apply()
        return threads if threads != before else None
