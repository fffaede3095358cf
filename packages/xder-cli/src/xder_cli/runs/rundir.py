"""The run directory: crash-safe files (atomic replace, fsync), its one-writer lock and the
checkpoint format.

Layout (docs/reliability.md, "What a run writes")::

    <out>/<date>-<method>-<benchmark>-m<buffer>-s<seed>/
      config.toml     every setting, resolved
      events.jsonl    one JSON object per epoch and per task
      results.json    accuracy matrices and metrics (rewritten after every task; written last,
                      with ``complete: true``, when the run ends)
      checkpoint.pt   the whole training state, rewritten after every epoch and task
      plots/          PNG figures
      .lock           the writers' lock (:func:`lock_run_dir`); names the holder while held

A trial of ``sweep`` or ``experiment`` also has ``log.txt`` (its printed output) and
``attempts.jsonl`` (one line per start, naming the Ray node: :data:`xder_cli.runs.scheduler.ATTEMPTS`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import math
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import tomli_w
import torch

from xder_cli.runs.errors import (
    ResultsUnreadableError,
    RunDirBusyError,
    RunDirError,
    RunDirWriteError,
    option,
)
from xder_cli.runs.records import Checkpoint, Config, Event, Results

__all__ = [
    "CHECKPOINT",
    "CONFIG",
    "EVENTS",
    "LOCK",
    "PLOTS",
    "RESULTS",
    "EventLog",
    "ResultsUnreadableError",
    "RunDirBusyError",
    "RunDirError",
    "RunDirWriteError",
    "atomic_write_bytes",
    "check_run_dir",
    "complete_results",
    "json_safe",
    "load_checkpoint",
    "lock_run_dir",
    "new_run_dir",
    "read_config",
    "read_events",
    "read_results",
    "resume_hint",
    "save_checkpoint",
    "write_config",
    "write_errors",
    "write_json",
]

CONFIG, EVENTS, RESULTS, CHECKPOINT, PLOTS, LOCK = (
    "config.toml",
    "events.jsonl",
    "results.json",
    "checkpoint.pt",
    "plots",
    ".lock",
)


def resume_hint(run_dir: Path) -> str:
    """How to continue ``run_dir``, for the messages of a write that failed (``train_run`` with
    ``resume``; a template of :mod:`~xder_cli.runs.errors`)."""
    return f"continue with {option('train_run')} {option('resume')} {run_dir}"


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new file whole:
    a temporary file in the same folder, fsync, rename over the target, fsync the folder."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (e.g. the accuracy of a task without test rows)
    replaced by None, so that the file is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(path: Path, payload: Any) -> None:
    """Atomically write strict JSON (non-finite floats become null)."""
    atomic_write_bytes(path, (json.dumps(json_safe(payload), indent=2, allow_nan=False) + "\n").encode())


def write_config(path: Path, config: Config) -> None:
    """Write a run's ``config.toml`` (the one writer of that file): ``config``'s sections with their
    None values left out (TOML has none) and tuples as arrays.

    Raises:
        RunDirWriteError: the file could not be written (the previous one, if any, is intact).
    """

    def clean(value: object) -> object:
        if isinstance(value, tuple):
            return [clean(v) for v in value]
        return value

    body = {s: {k: clean(v) for k, v in values.items() if v is not None} for s, values in config.items()}
    with write_errors(path, then=f"train again (and delete {path.parent})"):
        atomic_write_bytes(path, tomli_w.dumps(body).encode())


def read_config(path: Path) -> Config:
    """A run's ``config.toml``, as TOML reads it.

    Raises:
        RunDirError: the file cannot be read or is not TOML.
    """
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RunDirError(f"cannot read {path}: {error}") from error


def save_checkpoint(path: Path, state: Checkpoint) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path, device: torch.device) -> Checkpoint:
    """Load a checkpoint with ``weights_only=True`` (tensors and plain containers only).

    Raises:
        RunDirError: a corrupt or foreign file; the message says what to do (move it aside: the
            run then starts again from its first task).
    """
    try:
        state: Checkpoint = torch.load(path, map_location=device, weights_only=True)
        return state
    except Exception as error:  # corrupt or foreign file: the user's to fix
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if len(cause) > 120:
            cause = cause[:117] + "..."
        raise RunDirError(
            f"cannot load checkpoint {path}: it is damaged or not an xder checkpoint ({cause}); "
            f"move it aside (mv {path} {path}.damaged) and run the same command again: the run "
            "restarts from its first task"
        ) from error


class EventLog:
    """``events.jsonl``: appended one fsync'ed line at a time; trimmed to the checkpoint's count
    on resume, so that no event is recorded twice."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.count = 0
        if self.path.exists():
            self.count = sum(1 for line in self.path.read_text().splitlines() if line.strip())

    def append(self, event: Mapping[str, object]) -> None:
        """Append one line and fsync it; if that fails (e.g. the disk is full), the log is cut back
        to its previous length, so that no partial line is left, and the error propagates."""
        line = (json.dumps(json_safe(event), allow_nan=False) + "\n").encode()
        with open(self.path, "ab", buffering=0) as handle:
            size = handle.seek(0, os.SEEK_END)
            try:
                view = memoryview(line)
                while view:
                    view = view[handle.write(view) :]
                os.fsync(handle.fileno())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(handle.fileno(), size)
                raise
        self.count += 1

    def truncate(self, count: int) -> None:
        lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()] if self.path.exists() else []
        atomic_write_bytes(self.path, "".join(line + "\n" for line in lines[:count]).encode())
        self.count = min(count, len(lines))


def new_run_dir(out: Path, method: str, benchmark: str, buffer_size: int, seed: int) -> Path:
    """Create ``out/<date>-<method>-<benchmark>-m<buffer>-s<seed>`` (suffixed if it exists).

    Raises:
        RunDirError: ``out`` cannot be created.
    """
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{method}-{benchmark}-m{buffer_size}-s{seed}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot create the output folder {out}: {error.strerror}") from error
    for suffix in range(1000):
        path = out / (base if suffix == 0 else f"{base}-{suffix}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / PLOTS).mkdir()
        return path
    raise RunDirError(f"too many runs named {base} in {out}")  # pragma: no cover


def check_run_dir(path: Path, *, named_by: str | None = None) -> Path:
    """``path``, if it is a run directory (it holds config.toml).

    Args:
        named_by: the option (of :data:`~xder_cli.runs.errors.OPTIONS`, e.g. ``resume``) that
            named ``path``, for the message; None: ``path`` was named on its own.

    Raises:
        RunDirError: ``path`` is not a folder, or holds no ``config.toml``.
    """
    path = Path(path)
    named = f"{option(named_by)} {path}" if named_by else str(path)
    if not path.is_dir():
        raise RunDirError(f"{named}: no such directory; give a folder that xder-run train created")
    if not (path / CONFIG).is_file():
        raise RunDirError(
            f"{named}: not a run directory (no {CONFIG}); give a folder that xder-run train created"
        )
    return path


def read_events(run_dir: Path) -> list[Event]:
    """The events of ``run_dir``'s ``events.jsonl`` in order (the one reader of that file; [] where
    there is none)."""
    path = Path(run_dir) / EVENTS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_results(run_dir: Path) -> Results | None:
    """The ``results.json`` of ``run_dir`` (the one reader of that file); None where there is none.
    Safe without the lock: the file is replaced atomically.

    Raises:
        ResultsUnreadableError: the file exists but cannot be read, is not JSON, or is not an object.
    """
    path = Path(run_dir) / RESULTS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsUnreadableError(f"unreadable {RESULTS}: {_first_line(error)}") from error
    try:
        results = json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultsUnreadableError(f"unreadable {RESULTS}: {_first_line(error)}") from error
    if not isinstance(results, dict):
        raise ResultsUnreadableError(f"{RESULTS} is not a JSON object")
    return cast(Results, results)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def complete_results(run_dir: Path) -> Results | None:
    """The ``results.json`` of ``run_dir`` if it records a complete run, else None (no file, an
    unreadable one, or ``complete: false``)."""
    try:
        results = read_results(run_dir)
    except ResultsUnreadableError:
        return None
    return results if results is not None and results.get("complete") is True else None


# ---------------------------------------------------------------------------------------------
# One writer per run directory


def _holder(fd: int) -> str:
    """Who holds the lock, as the holder wrote it into the lock file just after taking it.

    A name left by a holder that was killed (``kill -9`` cannot clear it) stays in the file until
    the next holder overwrites it, a moment after it takes the lock: a name on this host whose
    process no longer exists is that stale one, so it is read again until the new name is there.
    """
    for _ in range(40):
        try:
            info = json.loads(os.pread(fd, 4096, 0).decode())
            pid, host = int(info["pid"]), str(info["host"])
            if host != socket.gethostname() or _alive(pid):
                return f"process {pid} on host {host} (since {info['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.05)
    return "another process (it has not written its name into the lock file)"


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 checks without sending anything)."""
    if pid <= 0:  # 0 and negatives name process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


@contextlib.contextmanager
def lock_run_dir(run_dir: Path, *, then: str) -> Iterator[None]:
    """Hold the exclusive lock of ``run_dir`` (the file ``RUN_DIR/.lock``) for the ``with`` block.

    Every writer of a run directory (``train``, ``train --resume``, a sweep or experiment trial,
    ``analyze``) holds it for its whole life, so that a run is never written by two processes at
    once. It is a kernel advisory lock (``flock``) on the open file: the kernel releases it when
    the process ends in any way, ``kill -9`` included, so no stale lock is ever left. The holder
    writes its host, process id and start time into the file (in place: the lock file is never
    replaced, as a new inode would be a second lock) and clears them when it releases the lock.

    Args:
        then: what to do once the holder is gone, for the error (e.g. the command to rerun).

    Raises:
        RunDirBusyError: another process holds the lock; nothing was written.
        RunDirError: the lock cannot be taken (a filesystem without locks, no permission...).
    """
    path = Path(run_dir) / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, _FILE_MODE)  # no O_TRUNC: the holder's name stays
    except OSError as error:
        raise RunDirError(f"cannot open the lock file {path}: {_reason(error)}") from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusyError(Path(run_dir), _holder(fd), then) from None
        except OSError as error:
            raise RunDirError(
                f"cannot lock {run_dir}: {_reason(error)}; the filesystem must support file locks "
                "(on NFS: a server with locking)"
            ) from error
        since = datetime.now().isoformat(timespec="seconds")
        info = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": since})
        with contextlib.suppress(OSError):  # the name is a courtesy to the next contender: the lock holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, (info + "\n").encode(), 0)
            os.fsync(fd)  # where the lock is shared over NFS, other nodes read the name from the server
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------
# Write errors


def _reason(error: OSError) -> str:
    if error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error)


@contextlib.contextmanager
def write_errors(path: Path, *, then: str) -> Iterator[None]:
    """Turn an :class:`OSError` raised while writing ``path`` into a one-line
    :class:`RunDirWriteError` that names the file, the cause, and what to do (``then``: e.g. the
    command that continues the run). The writes are atomic, so the previous file is intact."""
    try:
        yield
    except OSError as error:
        fix = "free some space" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "fix that"
        raise RunDirWriteError(f"cannot write {path}: {_reason(error)}; {fix}, then {then}") from error
