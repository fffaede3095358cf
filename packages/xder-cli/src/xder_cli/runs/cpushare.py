"""CPU threads shared fairly among the training runs of one machine.

Why: PyTorch's CPU kernels run on an OpenMP team of as many threads as the machine has cores, and
its OpenMP (GNU libgomp in the PyPI wheels) spin-waits at every barrier before it sleeps. Two runs
of two threads each on two cores then burn their time slices spinning for threads the other run
holds: measured on a 2-core machine, a ``seq-cifar10`` laptop DER++ step took 0.077 s alone and
0.38-8.6 s (not 0.15) beside a second such run. One thread each, the same pair ran 0.128 s per step
each: the cores are simply shared. Waiting passively (``OMP_WAIT_POLICY=PASSIVE``) or spinning less
(``GOMP_SPINCOUNT``) does not help enough and slows a run alone (0.13 s and 0.10-0.11 s per step).

So a run whose threads nobody fixed (``run.threads = 0`` and no ``OMP_NUM_THREADS``) takes a fair
share of the cores it may use: ``max(1, cores // n)`` threads, with ``n`` the training runs of this
machine that share them, itself included. It learns ``n`` from a register: a folder
(:data:`SHARE_DIR_ENV`, default ``<tmp>/xder-cpu-share``) holding one file per live run, each
held under an exclusive ``flock`` for the run's life. The kernel releases such a lock however the
process ends (``kill -9`` included), so a file whose lock can be taken belongs to no live run and
is removed. The share is read again every :data:`RECHECK_SECONDS` while training, so a run that
started alone gives back threads when a second one starts, and takes them again when it ends.
A run whose count is fixed (``run.threads``, ``OMP_NUM_THREADS``, a Ray trial's reservation) keeps
its count but joins the register too: it holds cores all the same. Measured on the 2-core machine,
a one-thread Ray trial of ``seq-cifar100`` laptop X-DER beside a fair-share run that did not see it
(and so took both cores) trained one epoch in 666 s, against 63-76 s for its epochs before and
after, when the cores were shared.

Changing the thread count changes the order of floating-point sums, so a CPU run's numbers
depend on its thread count (a fact of PyTorch's kernels, not of this module): a run alone keeps
every core for its whole life and repeats the numbers of a run alone; for numbers that repeat
whatever else runs, fix the count (``--set run.threads=N`` or ``OMP_NUM_THREADS``). Each run
records the counts it used (``results.json``, ``environment.threads``) and tells its display the
count it starts with, each change and, at the end, the counts used
(:class:`xder_cli.runs.recorder.ThreadNews`), which ``xder-run`` prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = [
    "RECHECK_SECONDS",
    "SHARE_DIR_ENV",
    "CpuShare",
    "ThreadPolicy",
    "fair_threads",
    "fixed_threads",
    "machine_cores",
    "share_dir",
]

SHARE_DIR_ENV = "XDER_CPU_SHARE_DIR"
"""Environment variable naming the register's folder; runs that share cores must see the same one."""
RECHECK_SECONDS = 2.0
"""How often a training run reads the register again (checked between steps, on the host clock)."""
_SUFFIX = ".run"


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a Slurm or taskset limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def fixed_threads(requested: int) -> int | None:
    """The thread count a run was asked for, or None when it shares the machine fairly.

    ``requested`` > 0 (``run.threads``) wins; else ``OMP_NUM_THREADS``, which torch has already read,
    fixes it (a Ray worker's reservation sets it too).
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


class CpuShare:
    """This process's place in the machine's register of training runs (a context manager).

    ``with CpuShare() as share: share.threads()`` is this run's fair thread count now. A register
    that cannot be used (a read-only temporary folder...) is never an error: the run then counts
    itself alone.

    Args:
        folder: the register (default :func:`share_dir`).
        cores: the cores shared (default :func:`machine_cores`).
    """

    def __init__(self, folder: Path | None = None, cores: int | None = None) -> None:
        self.folder = Path(folder) if folder is not None else share_dir()
        self.cores = cores if cores is not None else machine_cores()
        self._fd: int | None = None
        self._path: Path | None = None

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
            except OSError:
                alive += 1  # cannot tell: count it, sharing is the safe side
            else:
                with contextlib.suppress(OSError):  # nobody holds it: its run is gone
                    os.unlink(entry.path)
            finally:
                os.close(fd)
        return max(alive, 1)

    def threads(self) -> int:
        """This run's fair share now: ``max(1, cores // runs)``."""
        return fair_threads(self.cores, self.runs())


def fair_threads(cores: int, runs: int) -> int:
    """Threads for each of ``runs`` runs sharing ``cores`` cores: ``max(1, cores // runs)``.

    >>> [fair_threads(2, n) for n in (1, 2, 3)], [fair_threads(16, n) for n in (1, 3, 4, 5)]
    ([2, 1, 1], [16, 5, 4, 3])
    """
    return max(1, cores // max(runs, 1))


class ThreadPolicy:
    """A run's thread setting applied to torch for a ``with`` block: a fixed count, or the fair
    share (:class:`CpuShare`) re-read every :data:`RECHECK_SECONDS` by :meth:`poll`, which the
    training loop calls between steps (it reads the host clock and, at most that often, the
    register). Either way the run joins the register for the block, so that fair-share runs beside
    it count it. Torch's previous count is restored at the end of the block.

    Args:
        requested: ``run.threads`` (0: the fair share, unless ``OMP_NUM_THREADS`` fixes it).
        share: the register to use (default: a :class:`CpuShare` of :func:`share_dir`).

    ``used`` lists every thread count the run trained with, in the order first used; ``threads``
    is the count now and ``runs`` the training runs that shared the cores at the last reading of
    the register, this one included (1 for a fixed count, which reads no share).
    """

    def __init__(
        self,
        requested: int = 0,
        *,
        share: CpuShare | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fixed = fixed_threads(requested)
        self.share = share if share is not None else CpuShare()
        self.clock = clock
        self.used: list[int] = []
        self.threads = 0
        self.runs = 1
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
            threads = fair_threads(self.share.cores, self.runs)
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
