"""What every phase of the GPU script shares: where the repository is, the methods it measures,
the deadline and output folder (:class:`Script`), ``xder-run`` through ``launch.py``
(:func:`xder_run`, :func:`train_runs`), and a run directory's results and epoch times as the
library reads them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ROOT = HERE.parent.parent
LAUNCH = [sys.executable, str(HERE / "launch.py")]
METHODS = ("sgd", "er", "derpp", "xder")  # sgd is FT: fine-tuning, the lower bound


class Script:
    """The deadline and the output folder; ``phase`` runs one phase and records its outcome."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.phases: dict[str, Any] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self, name: str, payload: Any) -> None:
        (self.out / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")

    def phase(self, name: str, fn: Callable[[], Any], *, needs: float = 0.0) -> Any:
        if self.left() < needs:
            self.phases[name] = {
                "status": "skipped",
                "reason": f"{self.left():.0f} s left, needs {needs:.0f}",
            }
            print(f"[{name}] skipped: {self.phases[name]['reason']}", flush=True)
            return None
        print(f"[{name}] ({self.left():.0f} s left)", flush=True)
        started = time.monotonic()
        try:
            payload = fn()
        except Exception as error:  # record it and go on: one GPU call must bring back all it can
            self.phases[name] = {
                "status": "error",
                "error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - started,
            }
            (self.out / f"{name}.error.txt").write_text(traceback.format_exc())
            print(f"[{name}] ERROR {self.phases[name]['error']}", flush=True)
            return None
        seconds = time.monotonic() - started
        self.phases[name] = {"status": "ok", "seconds": round(seconds, 2)}
        self.write(name, payload)
        print(f"[{name}] done in {seconds:.1f} s", flush=True)
        return payload


def xder_run(
    args: list[str],
    log: Path,
    *,
    timeout: float,
    launch: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``xder-run ARGS`` through ``launch.py``, ``env`` added to the environment; stdout and stderr
    appended to ``log``."""
    command = [*LAUNCH, *launch, "--", *args]
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=max(timeout, 1),
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as expired:
        with log.open("a") as file:
            file.write(f"$ {' '.join(command)}\n(timed out after {timeout:.0f} s)\n{expired.stdout or ''}\n")
        raise
    with log.open("a") as file:
        file.write(f"$ {' '.join(command)}\n(rc {result.returncode}, {time.monotonic() - started:.1f} s)\n")
        file.write(result.stdout + result.stderr + "\n")
    return result


def checked(result: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed (rc {result.returncode}): {' | '.join(tail)}")
    return result


def train_runs(
    runs: dict[str, list[str]], log: Path, *, timeout: float, env: dict[str, str] | None = None
) -> dict[str, float | None]:
    """``xder-run`` runs all at once, one process each (``runs``: name -> its arguments), each
    one's output into ``log`` with the name's suffix; waits for all, up to ``timeout`` seconds from
    the start, then kills those left. Returns each run's wall seconds (None: killed at the
    timeout); a run that fails raises, after all have ended."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    procs = {}
    with contextlib.ExitStack() as logs:
        for name, args in runs.items():
            file = logs.enter_context(log.with_suffix(f".{name}.log").open("a"))
            file.write(f"$ {' '.join([*LAUNCH, '--', *args])}\n")
            file.flush()
            procs[name] = subprocess.Popen(
                [*LAUNCH, "--", *args],
                stdout=file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        walls: dict[str, float | None] = {}
        failed = []
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
                walls[name] = time.monotonic() - started
                if proc.returncode != 0:
                    failed.append(f"{name} (rc {proc.returncode})")
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                walls[name] = None
    if failed:
        raise RuntimeError(f"runs failed: {', '.join(failed)} (see {log.stem}.*.log)")
    return walls


def run_results(run_dir: Path) -> dict[str, Any]:
    """A run's ``results.json`` (read by its one reader, ``xder_cli.runs.rundir``)."""
    from xder_cli.runs import rundir

    results = rundir.read_results(run_dir)
    if results is None:
        raise RuntimeError(f"no {rundir.RESULTS} in {run_dir}")
    return results


def epoch_seconds(run_dir: Path) -> dict[int, list[float]]:
    """Each task's epoch times of a run (its ``events.jsonl``, read by ``xder_cli.runs.rundir``)."""
    from xder_cli.runs import rundir

    times: dict[int, list[float]] = {}
    for event in rundir.read_events(run_dir):
        if event["event"] == "epoch":
            times.setdefault(event["task"], []).append(event["seconds"])
    return times
