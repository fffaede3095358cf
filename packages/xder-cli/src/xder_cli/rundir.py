"""The run directory: crash-safe files (atomic replace, fsync) and the checkpoint format.

Layout (DESIGN.md, "The run directory")::

    <out>/<date>-<method>-<benchmark>-m<buffer>-s<seed>/
      config.toml     every setting, resolved
      events.jsonl    one JSON object per epoch and per task
      results.json    accuracy matrices and metrics (rewritten after every task)
      checkpoint.pt   the whole training state, rewritten after every epoch and task
      plots/          PNG figures
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import tomli_w
import torch

from xder_cli.errors import UsageError

__all__ = [
    "CHECKPOINT",
    "CONFIG",
    "EVENTS",
    "PLOTS",
    "RESULTS",
    "EventLog",
    "atomic_write_bytes",
    "check_run_dir",
    "json_safe",
    "load_checkpoint",
    "new_run_dir",
    "read_config",
    "save_checkpoint",
    "write_config",
    "write_json",
]

CONFIG, EVENTS, RESULTS, CHECKPOINT, PLOTS = (
    "config.toml",
    "events.jsonl",
    "results.json",
    "checkpoint.pt",
    "plots",
)


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


def write_config(path: Path, config: dict[str, dict[str, Any]]) -> None:
    def clean(value: Any) -> Any:
        if isinstance(value, tuple):
            return [clean(v) for v in value]
        return value

    body = {s: {k: clean(v) for k, v in values.items() if v is not None} for s, values in config.items()}
    atomic_write_bytes(path, tomli_w.dumps(body).encode())


def read_config(path: Path) -> dict[str, dict[str, Any]]:
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True`` (tensors and plain containers only)."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # corrupt or foreign file: the user's to fix
        raise UsageError(f"cannot load checkpoint {path}: {error}".splitlines()[0]) from error


class EventLog:
    """``events.jsonl``: appended one fsync'ed line at a time; trimmed to the checkpoint's count
    on resume, so that no event is recorded twice."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.count = 0
        if self.path.exists():
            self.count = sum(1 for line in self.path.read_text().splitlines() if line.strip())

    def append(self, event: dict[str, Any]) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(json_safe(event), allow_nan=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.count += 1

    def truncate(self, count: int) -> None:
        lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()] if self.path.exists() else []
        atomic_write_bytes(self.path, "".join(line + "\n" for line in lines[:count]).encode())
        self.count = min(count, len(lines))


def new_run_dir(out: Path, method: str, benchmark: str, buffer_size: int, seed: int) -> Path:
    """Create ``out/<date>-<method>-<benchmark>-m<buffer>-s<seed>`` (suffixed if it exists)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{method}-{benchmark}-m{buffer_size}-s{seed}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output folder {out}: {error.strerror}") from error
    for suffix in range(1000):
        path = out / (base if suffix == 0 else f"{base}-{suffix}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / PLOTS).mkdir()
        return path
    raise UsageError(f"too many runs named {base} in {out}")  # pragma: no cover


def check_run_dir(path: Path, *, flag: str | None = "--resume") -> Path:
    """Raise :class:`UsageError` unless ``path`` is a run directory (it holds config.toml).

    Args:
        flag: the option that named ``path``, for the message (None: a positional argument).
    """
    path = Path(path)
    named = f"{flag} {path}" if flag else str(path)
    if not path.is_dir():
        raise UsageError(f"{named}: no such directory; give a folder that xder-run train created")
    if not (path / CONFIG).is_file():
        raise UsageError(
            f"{named}: not a run directory (no {CONFIG}); give a folder that xder-run train created"
        )
    return path
