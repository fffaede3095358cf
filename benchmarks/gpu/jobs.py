"""The queue of GPU jobs (``jobs.toml``): what the next lent GPU machine runs.

    python3 benchmarks/gpu/jobs.py status                  # each job: done (where) or pending
    python3 benchmarks/gpu/jobs.py run [--seconds 585]     # on the GPU machine: the next jobs that fit
    python3 benchmarks/gpu/results.py add FOLDER           # here: a call's files into its run's archive

``run`` takes the pending jobs in the queue's order and runs each that fits the seconds left (a
job that does not fit is passed over for a later one that does, and stays first for the next
call): ``run.sh /tmp/xder-gpu/<name> --budget <its minutes> <its args>``, all jobs on one prepared
copy of the data; each job's figures, logs and small run files go to ``$OUT/gpu/<name>.tar.gz``
(the lent machine's tool brings back a few files only), with ``$OUT/gpu/queue.json`` saying what
ran. ``results.py add`` files them as the folders ``<name>/`` of the run's archive,
``archive/<card>-<date>.tar.xz``, and updates the index, ``index.json``. A job is done when a run
of the index holds a job of its name marked ``done``: a ``summary.json`` with every phase ok, on a
CUDA device and, for a full run, at its protocol's every epoch and task (``results.is_done``): a
result, not a mark made by hand.

The command for a lent machine (with ``benchmarks/gpu/data`` and ``benchmarks/gpu/vendor`` carried;
docs/development.md)::

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu/jobs.py run --seconds 585
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path
from typing import Any

import results  # benchmarks/gpu/results.py: on sys.path, the folder of the script that runs

HERE = Path(__file__).resolve().parent
QUEUE = HERE / "jobs.toml"
WORK = Path("/tmp/xder-gpu-queue")
# the files of a job's folder that come back (not the data, not checkpoints)
KEPT = (".json", ".txt", ".log", ".csv", ".xml", ".toml", ".jsonl")


def jobs(path: Path = QUEUE) -> list[dict[str, Any]]:
    """The queue's jobs, in order."""
    return tomllib.loads(path.read_text())["job"]


def done(job: dict[str, Any], index: dict[str, Any] | None = None) -> str | None:
    """Where the index (by default ``index.json``) shows ``job`` done, ``<run>/<job>``, or None:
    the first run, by name, that holds a job of its name marked ``done``."""
    runs = (results.load_index() if index is None else index)["runs"]
    for run in sorted(runs):
        record = runs[run]["jobs"].get(job["name"])
        if record is not None and record["done"]:
            return f"{run}/{job['name']}"
    return None


def plan(
    queue: list[dict[str, Any]], seconds: float, index: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The pending jobs that fit in ``seconds``, in the queue's order (one that does not fit in
    what is left is passed over for a later one that does)."""
    index = results.load_index() if index is None else index
    chosen = []
    for job in queue:
        if done(job, index) is None and job["minutes"] * 60 <= seconds:
            chosen.append(job)
            seconds -= job["minutes"] * 60
    return chosen


def run(seconds: float, out: Path, extra: list[str]) -> int:
    """On the GPU machine: the jobs :func:`plan` picks, one after another (see the module
    docstring); ``extra``: options given to every job (``--smoke --device cpu`` to try it here)."""
    started = time.monotonic()
    chosen = plan(jobs(), seconds)
    (out / "gpu").mkdir(parents=True, exist_ok=True)
    data = WORK / "data"
    data.mkdir(parents=True, exist_ok=True)
    report = []
    for job in chosen:
        left = seconds - (time.monotonic() - started)
        if job["minutes"] * 60 > left + 30:  # an earlier job ran long
            report.append({"name": job["name"], "status": "not started", "seconds_left": left})
            continue
        folder = WORK / job["name"]
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "data").exists():
            (folder / "data").symlink_to(data)  # one import of each data set for all jobs
        budget = min(job["minutes"] * 60, left) - 15
        command = [
            "bash",
            str(HERE / "run.sh"),
            str(folder),
            "--budget",
            str(int(budget)),
            *job["args"],
            *extra,
        ]
        print(f"[queue] {job['name']}: {' '.join(command)}", flush=True)
        job_started = time.monotonic()
        rc = subprocess.run(command, check=False).returncode
        if _has("nvidia-smi"):  # the card as found: its clocks and power limit
            query = "--query-gpu=name,memory.total,driver_version,clocks.sm,power.limit"
            smi = subprocess.run(
                ["nvidia-smi", query, "--format=csv"], capture_output=True, text=True, check=False
            )
            (folder / "nvidia-smi.csv").write_text(smi.stdout)
        with tarfile.open(out / "gpu" / f"{job['name']}.tar.gz", "w:gz") as archive:
            for path in sorted(folder.rglob("*")):
                inside = path.relative_to(folder)
                if (
                    path.is_file()
                    and path.suffix in KEPT
                    and inside.parts[0] not in ("data", "smoke-cifar10")
                ):
                    archive.add(path, arcname=str(inside))
        report.append({"name": job["name"], "rc": rc, "seconds": round(time.monotonic() - job_started, 1)})
    (out / "gpu" / "queue.json").write_text(json.dumps({"seconds": seconds, "jobs": report}, indent=2) + "\n")
    for line in report:
        print(f"[queue] {line}", flush=True)
    return 0 if all(line.get("rc") == 0 for line in report) else 1


def _has(program: str) -> bool:
    return any((Path(folder) / program).exists() for folder in os.environ.get("PATH", "").split(os.pathsep))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="each job: done (where) or pending")
    running = commands.add_parser("run", help="on the GPU machine: the next jobs that fit")
    running.add_argument(
        "--seconds", type=float, default=585, help="the call's time for jobs (585: a call runs at most 600 s)"
    )
    running.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")), help="$OUT")
    running.add_argument("extra", nargs=argparse.REMAINDER, help="-- options given to every job")
    args = parser.parse_args()
    if args.command == "status":
        index = results.load_index()
        for job in jobs():
            where = done(job, index)
            state = f"done: {where}" if where else "pending"
            print(f"{job['name']:22} {job['minutes']:3} min  {state}")
        return 0
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    return run(args.seconds, args.out, extra)


if __name__ == "__main__":
    sys.exit(main())
