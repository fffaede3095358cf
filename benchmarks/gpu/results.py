"""The GPU runs' results: one archive per run, and the index that the queue and the docs read.

    python3 benchmarks/gpu/results.py add FOLDER [--run NAME] [--date DAY] [--job NAME]
    python3 benchmarks/gpu/results.py index                  # index.json again, from the archives
    python3 benchmarks/gpu/results.py unpack RUN DEST        # a run's raw files, to read them

A *run* is one lent machine: ``archive/<card>-<date>[-tag].tar.xz`` holds its raw files, one
folder per job or call (``<job>/summary.json``, ``env.json``, each phase's JSON and log, each
training run's ``config.toml``, ``results.json`` and ``events.jsonl``), and ``archive/<run>.md``
beside it, written by hand, says what was run and what it showed (``archive/README.md`` is the
history of every measurement). An archive is deterministic: its members sorted, each with mtime
0, owner root and mode 0644, the whole compressed by xz at preset 9, so the same files give the
same bytes.

``add FOLDER`` files what a call brought back (``FOLDER/gpu/<job>.tar.gz``, as ``jobs.py run``
and ``device_call.sh`` leave them, or ``FOLDER/<job>.tar.gz``): each archive becomes the folder
``<job>/`` of the run ``<card>-<date>`` (the card from the job's ``env.json``, the date today's in
UTC unless ``--date``; ``--run`` names the run instead). Where that run's archive exists (a second
call on the same machine) the jobs are added to it; a job it holds already is refused. Then the
index is updated. ``--job`` names the job of a call that brought back one archive
(``device_call.sh``'s ``figures.tar.gz``: a second call's would clash with the first's name).

``index.json`` is built from the archives alone (``index`` builds it again; a test checks that it
equals the committed one): for each run its archive's SHA-256, and for each job what the queue
needs (``done``: :func:`is_done`) and the figures the docs quote (:func:`job_record`).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import re
import statistics
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ARCHIVE = HERE / "archive"
INDEX = HERE / "index.json"
SUFFIX = ".tar.xz"


class UsageError(Exception):
    """A mistake of the command's user: one line, exit status 2."""


# ---------------------------------------------------------------------------------------------
# archives


def pack(files: Mapping[str, bytes], archive: Path) -> None:
    """``files`` (path inside the archive -> bytes) written to ``archive`` as a deterministic
    ``.tar.xz``: members sorted by path, regular files only, mtime 0, uid and gid 0, no owner
    names, mode 0644, xz preset 9."""
    import lzma  # only to pack: jobs.py imports this module on the GPU machine to read the index

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(lzma.compress(buffer.getvalue(), format=lzma.FORMAT_XZ, preset=9))


def read_archive(archive: Path) -> dict[str, bytes]:
    """Every regular file of ``archive`` (a ``.tar.xz``, ``.tar.gz`` or plain tar), by path."""
    files = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                files[member.name.removeprefix("./")] = extracted.read()
    return files


def read_folder(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path relative to it."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def unpack(archive: Path, dest: Path) -> list[Path]:
    """The files of ``archive`` written under ``dest``; returns their paths."""
    written = []
    for name, data in read_archive(archive).items():
        path = dest / name
        if dest.resolve() not in path.resolve().parents:
            raise UsageError(f"{archive.name}: {name} lies outside the archive's folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def jobs_of(files: Mapping[str, bytes]) -> dict[str, dict[str, bytes]]:
    """A run's files split into its jobs: the top folders, each with paths relative to it."""
    jobs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        job, _, inside = name.partition("/")
        if not inside:
            raise UsageError(f"{name}: a run's files lie in one folder per job, not at its top")
        jobs.setdefault(job, {})[inside] = data
    return jobs


# ---------------------------------------------------------------------------------------------
# the index


def is_done(record: Mapping[str, Any]) -> bool:
    """Whether a job's record (:func:`job_record`) shows the job done, the queue's test: a
    ``summary.json`` with every phase ok, on a CUDA device (``env.json``; not a smoke run on a
    CPU) and, where it made a full run, the run complete at its protocol's every epoch."""
    phases = record["phases"]
    if not str(record["device"]).startswith("cuda") or not phases:
        return False
    if any(phase["status"] != "ok" for phase in phases.values()):
        return False
    full = record.get("full_run")
    return full is None or bool(full["complete"] and full["epochs_per_task"] == full["epochs"])


def job_record(files: Mapping[str, bytes]) -> dict[str, Any]:
    """What the index keeps of one job's files (paths relative to its folder): the card, each
    phase's status and seconds, ``done``, and the figures of each kind of file it holds
    (rounded; absent where the job made none):

    * ``bench``: per ``bench-<benchmark>-<mode>.json``, its settings and per method the step
      and floor (ms), the peak memory (MiB), the projected protocol (min), host syncs, ops;
    * ``runs``: per training run (its ``results.json``, with the ``events.jsonl`` beside it):
      FAA, Task-IL FAA, tasks done, wall time, the epochs' median and mean after the first
      (seconds), the peak memory (MB);
    * ``full_run``, ``step_graph``, ``pack``, ``correctness``, ``syncs``, ``resume``, ``tests``:
      the figures of the GPU script's phase of that name.
    """
    doc = {name: json.loads(data) for name, data in files.items() if name.endswith(".json")}
    env = doc.get("env.json", {})
    record: dict[str, Any] = {
        "card": env.get("card"),
        "device": env.get("device", "unknown"),
        "torch": env.get("torch"),
        "phases": {
            name: {"status": phase["status"], "seconds": _round(phase.get("seconds"), 2)}
            for name, phase in doc.get("summary.json", {}).get("phases", {}).items()
        },
    }
    bench = {
        name.removeprefix("bench-").removesuffix(".json"): _bench(payload)
        for name, payload in sorted(doc.items())
        if name.startswith("bench-") and "/" not in name
    }
    runs = {
        name: _training_run(payload, files.get(name.removesuffix("results.json") + "events.jsonl"))
        for name, payload in sorted(doc.items())
        if name.endswith("results.json") and "accuracy_matrix" in payload
    }
    phases = {
        "full_run": _full_run,
        "step_graph": _step_graph,
        "pack": _pack,
        "correctness": _correctness,
        "syncs": _syncs,
        "resume": _resume,
        "tests": _tests,
    }
    record.update({"bench": bench} if bench else {})
    record.update({"runs": runs} if runs else {})
    for phase, figures in phases.items():
        if f"{phase}.json" in doc:
            record[phase] = figures(doc[f"{phase}.json"])
    record["done"] = is_done(record)
    return record


def run_record(archive: Path) -> dict[str, Any]:
    """The index's entry of one run: its archive's SHA-256 and file count, and each job's record."""
    files = read_archive(archive)
    return {
        "archive": archive.name,
        "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "files": len(files),
        "jobs": {job: job_record(inside) for job, inside in sorted(jobs_of(files).items())},
    }


def build_index(folder: Path = ARCHIVE) -> dict[str, Any]:
    """The index of every run archived in ``folder``, by run name."""
    runs = sorted(folder.glob(f"*{SUFFIX}"))
    return {"runs": {path.name.removesuffix(SUFFIX): run_record(path) for path in runs}}


def dumps(index: Mapping[str, Any]) -> str:
    """The index as written to ``index.json`` (keys sorted, one value a line)."""
    return json.dumps(index, indent=1, sort_keys=True) + "\n"


def load_index(path: Path = INDEX) -> dict[str, Any]:
    """The committed index (no runs where there is none yet)."""
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def figure(index: Mapping[str, Any], address: str) -> Any:
    """One value of the index by its address, ``run/job/key/key...`` (``h200-2026-11-27/call2/
    full_run/faa``); a key with a slash in it (a training run's ``results.json`` path) is written
    between brackets: ``h200-2026-11-27/call2/runs/[full-run/seed-0/.../results.json]/faa``."""
    run, job, rest = address.split("/", 2)
    value: Any = index["runs"][run]["jobs"][job]
    while rest:
        if rest.startswith("["):
            key, _, rest = rest[1:].partition("]")
            rest = rest.removeprefix("/")
        else:
            key, _, rest = rest.partition("/")
        value = value[key]
    return value


# ---------------------------------------------------------------------------------------------
# filing a call's files


def card_name(files: Mapping[str, bytes]) -> str:
    """``h200``, ``h100``, ... from a job's ``env.json`` (``cpu`` where it ran on none)."""
    env = json.loads(files["env.json"]) if "env.json" in files else {}
    card = str(env.get("card", "cpu")).lower()
    return next((word for word in card.replace("nvidia", "").split() if word), "cpu")


def add(
    fetched: Path,
    run: str | None = None,
    date: str | None = None,
    folder: Path = ARCHIVE,
    index: Path = INDEX,
    job: str | None = None,
) -> tuple[str, list[str]]:
    """A call's job archives (``fetched/gpu/<job>.tar.gz``, or ``fetched/<job>.tar.gz``) filed as
    the jobs of the run ``run`` (by default ``<card>-<date>``, today in UTC), its archive written
    or extended, and ``index`` updated; ``job`` names the one job of a call with one archive.
    Returns the run's name and the jobs added."""
    sources = sorted((fetched / "gpu").glob("*.tar.gz")) or sorted(fetched.glob("*.tar.gz"))
    if not sources:
        raise UsageError(f"{fetched}: no <job>.tar.gz in it or in its gpu/ folder")
    if job is not None and len(sources) > 1:
        raise UsageError(f"--job {job}: {fetched} holds {len(sources)} job archives, not one")
    jobs = {job or path.name.removesuffix(".tar.gz"): read_archive(path) for path in sources}
    for name in [*jobs, run or "run"]:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise UsageError(f"{name}: a run's or a job's name is letters, digits, '.', '_' and '-'")
    date = date or datetime.datetime.now(datetime.UTC).date().isoformat()
    run = run or f"{card_name(next(iter(jobs.values())))}-{date}"
    target = folder / f"{run}{SUFFIX}"
    files = read_archive(target) if target.exists() else {}
    held = jobs_of(files)
    for job, inside in jobs.items():
        if job in held:
            raise UsageError(f"{target.name} holds a job {job} already: name another run with --run")
        files.update({f"{job}/{name}": data for name, data in inside.items()})
    pack(files, target)
    current = load_index(index)
    current["runs"][run] = run_record(target)
    current["runs"] = dict(sorted(current["runs"].items()))
    index.write_text(dumps(current))
    return run, sorted(jobs)


# ---------------------------------------------------------------------------------------------
# the figures of each kind of file


def _round(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def _bench(payload: Mapping[str, Any]) -> dict[str, Any]:
    settings = payload.get("settings", {})
    keys = ("precision", "channels_last", "compile", "compile_mode", "step_graph")
    methods = {}
    for row in payload.get("methods", []):
        methods[row["method"]] = {
            "step_ms": _round(row["seconds_per_step"] * 1000, 3),
            "floor_ms": _round(row.get("floor_seconds") and row["floor_seconds"] * 1000, 3),
            "peak_mib": _round(row.get("peak_memory_bytes") and row["peak_memory_bytes"] / 2**20, 1),
            "protocol_min": _round(
                row.get("projected_protocol_seconds") and row["projected_protocol_seconds"] / 60, 2
            ),
            "host_syncs": row.get("host_syncs_per_step"),
            "ops": row.get("ops_per_step"),
            "replayed_steps": row.get("replayed_steps"),
        }
    return {**{key: settings.get(key) for key in keys}, "methods": methods}


def _training_run(results: Mapping[str, Any], events: bytes | None) -> dict[str, Any]:
    lines = [json.loads(line) for line in (events or b"").decode().splitlines() if line.strip()]
    epochs = [line["seconds"] for line in lines if line.get("event") == "epoch"]
    peaks = [line["peak_memory_mb"] for line in lines if "peak_memory_mb" in line]
    keys = ("method", "benchmark", "seed", "buffer_size", "complete", "tasks_done")
    return {
        **{key: results.get(key) for key in keys},
        "faa": _round(results.get("faa")),
        "task_il_faa": _round(results.get("task_il_faa")),
        "wall_s": _round(results.get("wall_time_s"), 2),
        "epochs": len(epochs),
        "epoch_s_median": _round(statistics.median(epochs)) if epochs else None,
        "epoch_s_mean_after_first": _round(statistics.fmean(epochs[1:])) if len(epochs) > 1 else None,
        "peak_memory_mb": _round(max(peaks), 1) if peaks else None,
    }


def _full_run(payload: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("method", "benchmark", "buffer_size", "tasks", "epochs", "epochs_per_task", "mode")
    return {
        **{key: payload.get(key) for key in keys},
        "complete": payload.get("complete"),
        "seeds": payload.get("seeds"),
        "tasks_done": payload.get("tasks_done"),
        "faa": _round(payload.get("faa")),
        "faa_std": _round(payload.get("faa_std")),
        "published_faa": payload.get("published_faa"),
        "wall_s": _round(payload.get("wall_seconds"), 2),
    }


def _step_graph(payload: Mapping[str, Any]) -> dict[str, Any]:
    faa = payload.get("faa", {})
    return {
        "identical": payload.get("identical"),
        "faa_eager": _round(faa.get("eager")),
        "faa_replayed": _round(faa.get("replayed")),
        "eager_epoch_s": _round(payload.get("eager_epoch_seconds")),
        "replayed_epoch_s": _round(payload.get("replayed_epoch_seconds")),
    }


def _pack(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {
        str(row["k"]): {
            "status": row.get("status"),
            "mean_epoch_s": _round(row.get("mean_epoch_seconds")),
            "epochs_per_hour": _round(row.get("epochs_per_hour"), 1),
        }
        for row in payload.get("rows", [])
    }


def _correctness(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {
        f"{row['method']}-{row['mode']}": {
            "loss_rel": float(f"{row['loss_rel']:.2e}"),
            "grad_rel": float(f"{row['grad_rel']:.2e}"),
            "grad_cosine": _round(row.get("grad_cosine")),
            "ok": row.get("ok"),
        }
        for row in payload.get("rows", [])
    }


def _syncs(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {
        row["method"]: {"op_counter": row.get("op_counter_host_syncs"), "cuda": row.get("cuda_sync_warnings")}
        for row in payload.get("rows", [])
    }


def _resume(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"identical": payload.get("identical"), "killed_at": payload.get("killed_at")}


def _tests(payload: Mapping[str, Any]) -> dict[str, Any]:
    outcomes = list(payload.get("tests", {}).values())
    return {outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}


# ---------------------------------------------------------------------------------------------
# the command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser(
        "add", help="file a call's job archives into a run's archive, update the index"
    )
    adding.add_argument("folder", type=Path, help="the folder the call's files came back to")
    adding.add_argument("--run", help="the run's name (default: <card>-<date>)")
    adding.add_argument("--date", help="the run's date, YYYY-MM-DD (default: today, UTC)")
    adding.add_argument("--job", help="the job's name, where the call brought back one archive")
    commands.add_parser("index", help="index.json again, from the archives")
    unpacking = commands.add_parser("unpack", help="a run's raw files into a folder")
    unpacking.add_argument("run", help="the run's name (archive/<run>.tar.xz)")
    unpacking.add_argument("dest", type=Path, help="the folder to write them into")
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            if args.date is not None:
                try:
                    datetime.date.fromisoformat(args.date)
                except ValueError:
                    raise UsageError(f"--date {args.date}: not a date (YYYY-MM-DD)") from None
            run, added = add(args.folder, args.run, args.date, job=args.job)
            print(f"{(ARCHIVE / (run + SUFFIX)).relative_to(HERE)}: {', '.join(added)}")
            print(f"write what the run did and showed into archive/{run}.md")
        elif args.command == "index":
            INDEX.write_text(dumps(build_index()))
            print(INDEX.relative_to(HERE))
        else:
            archive = ARCHIVE / f"{args.run}{SUFFIX}"
            if not archive.exists():
                raise UsageError(f"no run {args.run} (archive/{archive.name})")
            print(f"{len(unpack(archive, args.dest))} files into {args.dest}")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
