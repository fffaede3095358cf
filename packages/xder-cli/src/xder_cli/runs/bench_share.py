"""``xder-run bench --concurrent N,...``: do runs side by side share the machine fairly?
(:func:`run_share_bench`, with the step-time benchmark's
:class:`~xder_cli.runs.bench.BenchOptions`; the command, :mod:`xder_cli.commands.bench`, prints the
figures.)

The step-time benchmark's terms (docs/development.md, "How it is fast"), at the level of
processes: for each method, the same fixed work (the timed training steps of ``xder-run bench``,
warm-up excluded) is run by one process alone, then by N processes at once, each a separate
process measuring with the caller's options (:func:`child_main`; it takes its threads as a
training run does: :mod:`xder_methods.core.threads`). Processes wait for each other after their
warm-up (:func:`xder_cli.runs.bench.wait_for_start`) and start their timed steps together. Rounds
interleave methods and group sizes, so that drift on the machine hits all of them alike.

Figures, per method and group size N (medians over rounds):

* ``alone_seconds``: the work's wall time in a process alone;
* ``group_seconds``: the slowest of the N processes' wall times for the same work;
* ``fair_share_ratio`` = ``group_seconds / (N x alone_seconds)``: 1 is a fair share of the machine
  (N runs at once take as long as one after the other), below 1 running them at once gains, above
  1 they slow each other down more than sharing explains. The target is <= 1.25.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xder_cli.runs.errors import BenchError

if TYPE_CHECKING:  # only a type: the children import torch, this process need not
    from xder_cli.runs.bench import BenchOptions

__all__ = ["FAIR_SHARE_TARGET", "child_main", "run_share_bench", "share_ratio"]

FAIR_SHARE_TARGET = 1.25
_CHILD = (
    "import sys; from xder_cli.runs.bench_share import child_main; raise SystemExit(child_main(sys.argv[1]))"
)
"""A child process: the library's entry point :func:`child_main`, given its request file."""


def share_ratio(group_seconds: float, processes: int, alone_seconds: float) -> float:
    """``group_seconds / (processes x alone_seconds)``: the time N runs at once take against the
    time they would take one after the other.

    >>> share_ratio(2.0, 2, 1.0), share_ratio(1.5, 2, 1.0), share_ratio(5.0, 2, 1.0)
    (1.0, 0.75, 2.5)
    """
    return group_seconds / (processes * alone_seconds)


def child_main(request: str) -> int:
    """A fair-share child process (:data:`_CHILD`): measure with the options of the JSON file
    ``request`` (``{"options": BenchOptions fields, "out": path}``), write the figures to its
    ``out``; a library error is written to the file beside it (:func:`_error_file`), in one line,
    and the exit status is 2: its parent raises it as a :class:`BenchError`. It prints nothing."""
    from xder_cli.runs.bench import BenchOptions, run_bench
    from xder_cli.runs.errors import RunError
    from xder_cli.runs.plugins import load_plugins
    from xder_cli.runs.rundir import write_json

    data = json.loads(Path(request).read_text())
    out = Path(data["out"])
    fields = data["options"] | {
        "methods": tuple(data["options"]["methods"]),
        "plugins": tuple(data["options"]["plugins"]),
        "start_after": Path(data["options"]["start_after"]),
        "settings": tuple((key, value) for key, value in data["options"]["settings"]),
    }
    try:
        load_plugins(fields["plugins"])
        write_json(out, run_bench(BenchOptions(**fields)))
    except RunError as error:  # its template, so that the parent's caller spells its options
        _error_file(out).write_text(" ".join(error.template.split()))
        return 2
    return 0


def _error_file(out: Path) -> Path:
    """Where the child writing its figures to ``out`` writes its error, if it fails."""
    return out.with_suffix(".error")


def _request(options: BenchOptions, method: str, out: Path, start: Path) -> Path:
    """The request file of a child measuring ``method`` with ``options``: its timed steps only
    (no epoch), its figures to ``out``, started by the signal in ``start``."""
    child = dataclasses.replace(options, methods=(method,), epoch=False, start_after=start)
    path = out.with_suffix(".request.json")
    fields = dataclasses.asdict(child) | {"start_after": str(start)}
    path.write_text(json.dumps({"options": fields, "out": str(out)}))
    return path


def _run_group(options: BenchOptions, method: str, processes: int, scratch: Path) -> list[dict[str, Any]]:
    """``processes`` children at once; returns each one's JSON payload."""
    folder = Path(tempfile.mkdtemp(prefix=f"{method}-{processes}-", dir=scratch))
    outputs = [folder / f"child-{i}.json" for i in range(processes)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(_request(options, method, out, folder))],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outputs
    ]
    try:
        deadline = time.monotonic() + 600
        while len(list(folder.glob("ready-*"))) < processes:
            failed = [(c, out) for c, out in zip(children, outputs, strict=True) if c.poll() not in (None, 0)]
            if failed:
                raise BenchError(f"bench: a process for {method} failed: {_why(*failed[0])}")
            if time.monotonic() > deadline:
                raise BenchError(f"bench: the processes for {method} did not get ready in 600 s")
            time.sleep(0.01)
        (folder / "go").touch()
        for child in children:
            child.wait()
        failed = [(c, out) for c, out in zip(children, outputs, strict=True) if c.returncode != 0]
        if failed:
            raise BenchError(f"bench: a process for {method} failed: {_why(*failed[0])}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return [json.loads(out.read_text()) for out in outputs]


def _why(child: subprocess.Popen[str], out: Path) -> str:
    """Why ``child`` (writing to ``out``) failed, in one line: the error it wrote
    (:func:`child_main`), else the last line of its stderr (an exception it did not expect: its
    traceback's last line), else its exit status."""
    error = _error_file(out)
    if error.is_file():
        return error.read_text()
    lines = child.stderr.read().strip().splitlines() if child.stderr is not None else []
    return lines[-1] if lines else f"exit status {child.returncode}"


def run_share_bench(options: BenchOptions, groups: list[int]) -> dict[str, Any]:
    """The fair-share benchmark (module docstring) of ``options.methods``, each child process
    measuring with ``options`` (``options.rounds`` rounds), in groups of 1 and of each size of
    ``groups``; returns the JSON payload.

    Raises:
        BenchError: a process failed, or the processes did not get ready.
    """
    names = list(options.methods)
    sizes = sorted({1, *groups})
    samples: dict[str, dict[int, list[dict[str, Any]]]] = {m: {n: [] for n in sizes} for m in names}
    with tempfile.TemporaryDirectory(prefix="xder-bench-share-") as scratch:
        for _ in range(options.rounds):
            for method in names:
                for size in sizes:
                    payloads = _run_group(options, method, size, Path(scratch))
                    samples[method][size].append(
                        {
                            "seconds": [p["methods"][0]["timed_seconds"] for p in payloads],
                            "threads": [p["threads"] for p in payloads],
                        }
                    )
    rows = []
    for method in names:
        alone = statistics.median(max(s["seconds"]) for s in samples[method][1])
        for size in sizes:
            if size == 1:
                continue
            group = statistics.median(max(s["seconds"]) for s in samples[method][size])
            rows.append(
                {
                    "method": method,
                    "processes": size,
                    "alone_seconds": alone,
                    "group_seconds": group,
                    "fair_share_ratio": share_ratio(group, size, alone),
                    "alone_threads": samples[method][1][0]["threads"],
                    "group_threads": samples[method][size][0]["threads"],
                    "rounds": {str(n): samples[method][n] for n in (1, size)},
                }
            )
    return {"target": FAIR_SHARE_TARGET, "steps": options.steps, "rounds": options.rounds, "groups": rows}
