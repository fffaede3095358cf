"""``xder-run sweep``: a hyperparameter grid x seeds on Ray, selected on the validation split.

A sweep is described by a GRID.toml::

    method = "derpp"
    benchmark = "seq-digits"
    buffer_size = 200            # optional: the protocol's
    protocol = "laptop"          # optional (paper): the benchmark's protocol
    seeds = [0, 1]
    validation = 0.1             # optional (0.1): the held-out fraction selection uses
    preset = "none"              # optional (none): the base the grid varies
    [set]                        # optional: fixed overrides, "section.key" = value
    "train.epochs" = 5
    [grid]                       # "section.key" = [values]; the cartesian product is searched
    "method.alpha" = [0.1, 0.3]
    "method.beta" = [0.5, 1.0]

or taken from a preset with ``--grid paper:BENCH:BUFFER:ENTRY`` (the paper's grid; its chosen
values of keys the grid does not vary, e.g. an X-DER variant's ``future_heads``, stay fixed).
``--protocol NAME`` picks the benchmark's protocol (and, with ``--grid``, the preset's tables kept
for it), overriding the file's.

Every (grid point, seed) is a trial: an ordinary run directory ``DIR/trials/<point>-s<seed>/``
(config.toml, events.jsonl, results.json, checkpoint.pt), trained by a Ray task: on a local Ray
instance started for the sweep, or on the cluster at ``--address``. Selection uses the mean over
seeds of the VALIDATION final average accuracy; the test FAA is reported, never used. DIR gets
``sweep.json`` and ``sweep.md`` (the report). A trial that fails is recorded with its error and
the sweep goes on; running the same sweep again skips finished trials and resumes interrupted
ones from their checkpoints. Each trial holds its run directory's lock while it trains
(:func:`xder_cli.runs.rundir.lock_run_dir`): the same sweep started twice on one DIR never trains a
trial twice; a trial the other one holds is reported as ``running elsewhere`` (not failed, not
selected on) and a later rerun picks it up as finished.

On Ray, a trial whose worker process or node is lost (a Ray system failure) is run again by Ray
(:data:`RAY_MAX_RETRIES` times at most) on a live node, where it resumes from its last checkpoint;
a trial that fails by its own fault (a configuration error, a diverged loss, an exception in the
method) is recorded as failed once, never retried. Every start of a trial is a line of its
``attempts.jsonl`` (:data:`ATTEMPTS`), naming the Ray node that trained it; each trial's record
says that node (``node``) and how many times this sweep started it (``attempts``, ``retries``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import socket
import statistics
import sys
import time
import tomllib
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from xder_cli.errors import UsageError
from xder_cli.progress import on_terminal
from xder_cli.runs import rundir
from xder_cli.runs.errors import RunError
from xder_cli.runs.plan import build_plan, resolve_config
from xder_cli.runs.plugins import load_plugins, loaded_plugins
from xder_cli.runs.presets import PAPER_PROTOCOL, preset_entry, split_dotted
from xder_cli.runs.trackers import check_loggers
from xder_cli.runs.training import run_training

__all__ = [
    "ATTEMPTS",
    "RAY_MAX_RETRIES",
    "RETRY_LOCK_WAIT_S",
    "RUNNING_ELSEWHERE",
    "SWEEP_JSON",
    "SWEEP_MD",
    "SweepSpec",
    "Trial",
    "command_sweep",
    "load_spec",
    "outcome_note",
    "plan_trials",
    "progress_recorder",
    "read_attempts",
    "retry_note",
    "run_on_ray",
    "run_sweep",
    "select",
    "spec_from_preset",
    "split_finished",
    "this_node",
    "train_trial",
    "trial_cpus",
    "trial_finished",
    "trial_outcome",
    "trial_retries",
]

SWEEP_JSON, SWEEP_MD, TRIALS = "sweep.json", "sweep.md", "trials"
RUNNING_ELSEWHERE = "running elsewhere"  # a trial another process holds (the sweep started twice)
ATTEMPTS = "attempts.jsonl"
"""A trial's starts, one JSON line each (written under its lock, before it trains): ``submission``
(one per trial per sweep invocation: Ray's retries of a task share it), ``node`` (:func:`this_node`),
``pid``, ``time`` and ``resume`` (whether it continued from a checkpoint)."""
RAY_MAX_RETRIES = 3
"""How many times Ray runs a trial again after a system failure (its worker process died, its node
was lost); never after the trial's own failure, which :func:`train_trial` returns as an outcome."""
RETRY_LOCK_WAIT_S = 150.0
"""How long a retried trial waits for the run directory's lock still held by its lost attempt: the
kernel frees it when that process dies, but a shared filesystem may keep a dead node's lock until
its lease runs out (NFSv4: about 90 s)."""
_SPEC_KEYS = {
    "method",
    "benchmark",
    "buffer_size",
    "seeds",
    "validation",
    "preset",
    "protocol",
    "set",
    "grid",
}


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep searches (see the module docstring for the TOML form)."""

    method: str
    benchmark: str
    seeds: tuple[int, ...]
    grid: dict[str, list[Any]]
    buffer_size: int | None = None
    validation: float = 0.1
    preset: str = "none"
    fixed: dict[str, Any] = field(default_factory=dict)
    protocol: str = PAPER_PROTOCOL


@dataclass(frozen=True)
class Trial:
    """One (grid point, seed): its name (its run directory under ``DIR/trials``) and config."""

    name: str
    point: dict[str, Any]
    seed: int
    config: dict[str, dict[str, Any]]


def _check_grid(grid: Any, where: str) -> dict[str, list[Any]]:
    if not isinstance(grid, dict) or not grid:
        raise UsageError(f'{where}: [grid] must map "section.key" to a non-empty list of values')
    for key, values in grid.items():
        split_dotted(key)
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}: grid key {key!r} must be a non-empty list, got {values!r}")
    return dict(grid)


def load_spec(path: Path, *, seeds: tuple[int, ...] | None = None, protocol: str | None = None) -> SweepSpec:
    """Read GRID.toml. ``seeds`` (from ``--seeds``) and ``protocol`` (``--protocol``) replace the
    file's.

    Raises:
        UsageError: unreadable file, bad TOML, unknown or missing keys, ill-typed values.
    """
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as error:
        raise UsageError(f"{path}: no such grid file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read it ({error})") from error
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: not valid TOML ({error})") from error
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise UsageError(
            f"{path}: unknown key {unknown[0]!r}; a grid file takes {', '.join(sorted(_SPEC_KEYS))}"
        )
    for required in ("method", "benchmark", "grid"):
        if required not in data:
            raise UsageError(f"{path}: {required!r} is missing")
    file_seeds = data.get("seeds", [0])
    if not isinstance(file_seeds, list) or not file_seeds or not all(isinstance(s, int) for s in file_seeds):
        raise UsageError(f"{path}: seeds must be a non-empty list of integers, e.g. seeds = [0, 1]")
    fixed = data.get("set", {})
    if not isinstance(fixed, dict):
        raise UsageError(f'{path}: [set] must map "section.key" to a value')
    for key in fixed:
        split_dotted(key)
    buffer_size = data.get("buffer_size")
    if buffer_size is not None and (not isinstance(buffer_size, int) or buffer_size < 0):
        raise UsageError(f"{path}: buffer_size must be an integer >= 0, got {buffer_size!r}")
    validation = data.get("validation", 0.1)
    if not isinstance(validation, int | float) or not 0 < validation < 1:
        raise UsageError(f"{path}: validation must be in (0, 1): selection needs a validation split")
    file_protocol = data.get("protocol", PAPER_PROTOCOL)
    if not isinstance(file_protocol, str):
        raise UsageError(f'{path}: protocol must be a name, e.g. protocol = "laptop"')
    return SweepSpec(
        method=str(data["method"]),
        benchmark=str(data["benchmark"]),
        seeds=tuple(seeds or file_seeds),
        grid=_check_grid(data["grid"], str(path)),
        buffer_size=buffer_size,
        validation=float(validation),
        preset=str(data.get("preset", "none")),
        fixed=dict(fixed),
        protocol=protocol or file_protocol,
    )


def spec_from_preset(text: str, seeds: tuple[int, ...] | None, protocol: str = PAPER_PROTOCOL) -> SweepSpec:
    """``PRESET:BENCH:BUFFER:ENTRY`` (BUFFER may be ``-`` for methods without a buffer) -> a spec
    searching that entry's grid (of the preset's tables for ``protocol``), its other chosen values
    fixed."""
    parts = text.split(":")
    if len(parts) != 4:
        raise UsageError(
            f"--grid {text!r}: write PRESET:BENCHMARK:BUFFER:METHOD, e.g. paper:seq-cifar100:500:derpp"
        )
    preset, benchmark, buffer_text, name = parts
    if buffer_text in ("", "-"):
        buffer_size = None
    elif buffer_text.isdigit():
        buffer_size = int(buffer_text)
    else:
        raise UsageError(f"--grid {text!r}: the buffer size {buffer_text!r} is not a number (or -)")
    entry = preset_entry(preset, benchmark, buffer_size, name, protocol=protocol)
    if not entry.grid:
        raise UsageError(f"--grid {text!r}: this preset entry lists no grid")
    fixed = {**entry.fixed, **{k: v for k, v in entry.chosen.items() if k not in entry.grid}}
    if buffer_size is not None:
        fixed["method.buffer_size"] = buffer_size
    return SweepSpec(
        method=entry.method,
        benchmark=benchmark,
        seeds=seeds or (0,),
        grid=entry.grid,
        buffer_size=buffer_size,
        fixed=fixed,
        protocol=protocol,
    )


def _point_name(index: int, point: dict[str, Any]) -> str:
    digest = hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:8]
    return f"p{index:03d}-{digest}"


def plan_trials(spec: SweepSpec) -> list[Trial]:
    """Every (grid point, seed), each with a validated configuration (nothing is trained).

    Raises:
        UsageError (and the packages' config errors): a point that cannot be configured.
    """
    keys = list(spec.grid)
    points = [dict(zip(keys, values, strict=True)) for values in itertools.product(*spec.grid.values())]
    trials = []
    for index, point in enumerate(points):
        sets = [(*split_dotted(k), v) for k, v in {**spec.fixed, **point}.items()]
        for seed in spec.seeds:
            config = resolve_config(
                method=spec.method,
                benchmark=spec.benchmark,
                preset=spec.preset,
                run={"seed": seed, "validation": spec.validation},
                train={},
                method_values={} if spec.buffer_size is None else {"buffer_size": spec.buffer_size},
                sets=sets,
                protocol_name=spec.protocol,
            )
            plan = build_plan(config)
            trials.append(Trial(f"{_point_name(index, point)}-s{seed}", point, seed, plan.config))
    return trials


def _read_results(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / rundir.RESULTS).read_text())
    except (OSError, ValueError):
        return None


def trial_outcome(run_dir: Path, status: str, error: str | None = None) -> dict[str, Any]:
    """A trial's outcome as the sweep records it: ``status``, ``error`` and the metrics of its
    ``results.json`` (None where it has none)."""
    results = _read_results(run_dir) or {}
    attempts = read_attempts(run_dir)
    return {
        "status": status,
        "val_faa": results.get("val_faa"),
        "faa": results.get("faa"),
        "ff": results.get("ff"),
        "wall_time_s": results.get("wall_time_s"),
        "error": error,
        "node": attempts[-1].get("node") if attempts else None,
    }


def this_node() -> dict[str, str | None]:
    """Where this process runs: ``{"id", "ip", "host"}``, the Ray node's id and IP address as Ray
    reports them inside a task (None outside Ray) and the machine's host name."""
    node: dict[str, str | None] = {"id": None, "ip": None, "host": socket.gethostname()}
    ray = sys.modules.get("ray")  # imported by a Ray worker; never imported here for this
    if ray is not None and ray.is_initialized():
        with contextlib.suppress(Exception):
            node["id"] = ray.get_runtime_context().get_node_id()
            node["ip"] = ray.util.get_node_ip_address()
    return node


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of ``run_dir/attempts.jsonl`` (:data:`ATTEMPTS`), oldest first; none if it has none."""
    try:
        text = (Path(run_dir) / ATTEMPTS).read_text()
    except OSError:
        return []
    attempts = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                attempts.append(record)
    return attempts


def _attempts_of(run_dir: Path, submission: str) -> int:
    return sum(a.get("submission") == submission for a in read_attempts(run_dir))


def train_trial(
    run_dir: str,
    config: dict[str, dict[str, Any]],
    plugins: Sequence[str] = (),
    submission: str | None = None,
) -> dict[str, Any]:
    """Train one trial into ``run_dir`` (resuming from its checkpoint if it has one); never raises.

    Runs inside a Ray worker (or in-process), holding the run directory's lock
    (:func:`rundir.lock_run_dir`) throughout. A trial whose lock another process holds (the same
    sweep started twice) is left alone: its outcome is ``running elsewhere``, with ``held_by``
    naming that process. A trial that another process finished meanwhile is not trained again.
    The trial's printed output goes to ``run_dir/log.txt``. ``plugins`` (the driver's
    ``--plugin`` specs) are loaded first, with the installed entry points, so that a worker knows
    the names the driver's plugins registered.

    Each start appends a line to ``run_dir/attempts.jsonl`` (:data:`ATTEMPTS`) naming
    ``submission`` (None: a new one) and this node. Ray runs the same submission again after a
    system failure: a retry whose lost attempt still holds the lock (a dead node's lock on a shared
    filesystem lasts until its lease runs out) waits for it, :data:`RETRY_LOCK_WAIT_S` at most,
    instead of calling it ``running elsewhere``.

    Returns:
        ``{"status": "finished" | "failed" | "running elsewhere", "val_faa", "faa", "ff",
        "wall_time_s", "error", "node", "attempts"}`` (and ``held_by``, ``skipped`` where they
        apply): ``node`` the node that trained it (:func:`this_node`), ``attempts`` how many
        times ``submission`` started it.
    """
    path = Path(run_dir)
    submission = submission or uuid.uuid4().hex
    try:
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as lock:
            _lock_trial(lock, path, submission)
            return _train_locked(path, config, plugins, submission)
    except rundir.RunDirBusyError as busy:  # its metrics are those of a run in progress: none
        metrics = dict.fromkeys(("val_faa", "faa", "ff", "wall_time_s"))
        return {
            "status": RUNNING_ELSEWHERE,
            **metrics,
            "error": None,
            "held_by": busy.holder,
            "node": None,
            "attempts": _attempts_of(path, submission),
        }
    except (OSError, UsageError, RunError) as error:  # the folder cannot be created or locked
        outcome = trial_outcome(path, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
        return outcome | {"attempts": _attempts_of(path, submission)}


def _lock_trial(stack: contextlib.ExitStack, path: Path, submission: str) -> None:
    """Take the trial's lock into ``stack``; a retry of ``submission`` (an earlier attempt of it
    started, then was lost) waits up to :data:`RETRY_LOCK_WAIT_S` for that attempt's lock to go."""
    deadline = time.monotonic() + RETRY_LOCK_WAIT_S
    while True:
        try:
            stack.enter_context(rundir.lock_run_dir(path, then="run the sweep again"))
            return
        except rundir.RunDirBusyError:
            if _attempts_of(path, submission) == 0 or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _train_locked(
    path: Path, config: dict[str, dict[str, Any]], plugins: Sequence[str], submission: str
) -> dict[str, Any]:
    earlier = _attempts_of(path, submission)
    if trial_finished(path):  # finished since this sweep looked: by another process, or by a lost attempt
        return trial_outcome(path, "finished") | ({"attempts": earlier} if earlier else {"skipped": True})
    resume = (path / rundir.CHECKPOINT).exists()
    start = {
        "submission": submission,
        "node": this_node(),
        "pid": os.getpid(),
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
        "resume": resume,
    }
    rundir.EventLog(path / ATTEMPTS).append(start)
    return _train_logged(path, config, plugins, resume) | {"attempts": earlier + 1}


def _train_logged(
    path: Path, config: dict[str, dict[str, Any]], plugins: Sequence[str], resume: bool
) -> dict[str, Any]:
    with open(path / "log.txt", "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            (path / rundir.PLOTS).mkdir(exist_ok=True)
            load_plugins(plugins)
            plan = build_plan(config)
            if not resume:
                rundir.write_config(path / rundir.CONFIG, plan.config)
            run_training(plan, path, resume=resume, **on_terminal())
        except Exception as error:  # a failed trial is recorded, never fatal to the sweep
            traceback.print_exc(file=log)
            return trial_outcome(path, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
    return trial_outcome(path, "finished")


def trial_finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a complete run (its results.json says so)."""
    return rundir.complete_results(run_dir) is not None


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def select(spec: SweepSpec, trials: list[Trial], outcomes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The sweep's summary: per point the mean +- std over seeds of validation and test FAA, and
    the best point by mean VALIDATION FAA among points whose every seed finished (ties: the
    earlier point)."""
    points: dict[str, dict[str, Any]] = {}
    for trial in trials:
        key = trial.name.rsplit("-s", 1)[0]
        entry = points.setdefault(key, {"point": trial.point, "trials": [], "val": [], "test": []})
        outcome = outcomes.get(trial.name, {"status": "not run"})
        entry["trials"].append(trial.name)
        if outcome.get("status") == "finished" and outcome.get("val_faa") is not None:
            entry["val"].append(float(outcome["val_faa"]))
            entry["test"].append(float(outcome["faa"]))
    rows = []
    for key, entry in points.items():
        val_mean, val_std = _mean_std(entry["val"])
        test_mean, test_std = _mean_std(entry["test"])
        rows.append(
            {
                "name": key,
                "point": entry["point"],
                "val_faa_mean": val_mean,
                "val_faa_std": val_std,
                "test_faa_mean": test_mean,
                "test_faa_std": test_std,
                "seeds_finished": len(entry["val"]),
                "seeds": len(entry["trials"]),
            }
        )
    eligible = [r for r in rows if r["seeds_finished"] == r["seeds"] and r["val_faa_mean"] is not None]
    best = max(eligible, key=lambda r: r["val_faa_mean"], default=None)
    return {
        "method": spec.method,
        "benchmark": spec.benchmark,
        "protocol": spec.protocol,
        "buffer_size": spec.buffer_size,
        "seeds": list(spec.seeds),
        "validation": spec.validation,
        "grid": spec.grid,
        "fixed": spec.fixed,
        "selected_on": "validation",
        "best": best,
        "points": rows,
        "retries": sum(trial_retries(outcomes.get(t.name, {})) for t in trials),
        "trials": [
            {
                "name": t.name,
                "run_dir": f"{TRIALS}/{t.name}",
                "point": t.point,
                "seed": t.seed,
                "node": None,
                "attempts": 0,
                **outcomes.get(t.name, {"status": "not run"}),
                "retries": trial_retries(outcomes.get(t.name, {})),
            }
            for t in trials
        ],
    }


def trial_retries(outcome: dict[str, Any]) -> int:
    """How many times Ray ran a trial again after losing its worker or node: its ``attempts``
    (starts in this invocation) less one."""
    return max(0, int(outcome.get("attempts") or 0) - 1)


def retry_note(count: int, unit: str = "trial") -> str:
    """``retries: N (...)``, how many times Ray ran a sweep's trials (or an experiment's runs,
    ``unit``) again after losing their worker or node ("" if none)."""
    if not count:
        return ""
    return (
        f"retries: {count} (a {unit} run again after a lost Ray worker or node resumes from its last "
        "checkpoint)"
    )


def _fmt(mean: float | None, std: float | None) -> str:
    if mean is None or not math.isfinite(mean):
        return "-"
    return f"{mean:.2f} ± {std:.2f}"


def sweep_markdown(summary: dict[str, Any]) -> str:
    """The sweep report: points ranked by validation FAA, the best first, then failed trials."""
    keys = list(summary["grid"])
    lines = [
        f"# Sweep: {summary['method']} on {summary['benchmark']}"
        + (
            ""
            if summary.get("protocol", PAPER_PROTOCOL) == PAPER_PROTOCOL
            else f", protocol {summary['protocol']}"
        )
        + (f" (buffer {summary['buffer_size']})" if summary["buffer_size"] is not None else ""),
        "",
        f"Seeds {', '.join(map(str, summary['seeds']))}; selected on the validation split "
        f"({summary['validation']:.0%} of train), mean over seeds; the test FAA is reported, not used.",
        "",
    ]
    best = summary["best"]
    if best is None:
        lines += ["**No point has finished on every seed: nothing is selected yet.**", ""]
    else:
        chosen = ", ".join(f"{k} = {json.dumps(v)}" for k, v in best["point"].items())
        lines += [
            f"**Best: {chosen}**: validation FAA {_fmt(best['val_faa_mean'], best['val_faa_std'])}, "
            f"test FAA {_fmt(best['test_faa_mean'], best['test_faa_std'])}.",
            "",
        ]
    lines += [
        "| rank | " + " | ".join(keys) + " | val FAA | test FAA | seeds |",
        "|---:|" + "---|" * len(keys) + "---:|---:|---:|",
    ]
    ranked = sorted(
        summary["points"], key=lambda r: -(r["val_faa_mean"] if r["val_faa_mean"] is not None else -1e9)
    )
    for rank, row in enumerate(ranked, 1):
        values = " | ".join(json.dumps(row["point"][k]) for k in keys)
        lines.append(
            f"| {rank} | {values} | {_fmt(row['val_faa_mean'], row['val_faa_std'])} | "
            f"{_fmt(row['test_faa_mean'], row['test_faa_std'])} | {row['seeds_finished']}/{row['seeds']} |"
        )
    failed = [t for t in summary["trials"] if t["status"] != "finished"]
    if failed:
        lines += ["", "Trials not finished:", ""]
        lines += [f"- {t['run_dir']}: {t['status']}{outcome_note(t)}" for t in failed]
    retried = [t for t in summary["trials"] if t.get("retries")]
    if retried:
        lines += ["", f"R{retry_note(summary.get('retries', 0))[1:]}:", ""]
        lines += [f"- {t['run_dir']}: {t['status']}, {t['attempts']} attempts" for t in retried]
    return "\n".join(lines) + "\n"


def _write_summary(out: Path, summary: dict[str, Any]) -> None:
    rundir.write_json(out / SWEEP_JSON, summary)
    rundir.atomic_write_bytes(out / SWEEP_MD, sweep_markdown(summary).encode())


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_trial: float = 0.0,
    cpus_per_trial: float | None = None,
) -> dict[str, Any]:
    """Run every unfinished trial on Ray and write ``sweep.json`` and ``sweep.md`` into ``out``
    (after each finished trial, so a killed sweep leaves a current summary).

    Args:
        max_concurrent: trials in flight at once (None: as many as Ray schedules).
        address: a running Ray cluster (``ray://host:10001`` or ``host:6379``); None starts a local
            instance for the sweep. On a cluster, ``out`` must be on a filesystem every node sees.
        gpus_per_trial, cpus_per_trial: the resources Ray reserves for each trial
            (:func:`run_on_ray`; None: the fair share of ``max_concurrent``).
    """
    trials = plan_trials(spec)
    trial_root = out / TRIALS
    trial_root.mkdir(parents=True, exist_ok=True)
    outcomes, pending_names = split_finished([(t.name, trial_root / t.name) for t in trials])
    pending = [t for t in trials if t.name in pending_names]
    print(
        f"sweep: {len(trials)} trials ({len(trials) // len(spec.seeds)} points x "
        f"{len(spec.seeds)} seeds), {len(trials) - len(pending)} already finished -> {out}",
        flush=True,
    )
    _write_summary(out, select(spec, trials, outcomes))
    if not pending:
        return select(spec, trials, outcomes)

    def val_faa(name: str, outcome: dict[str, Any]) -> str:
        return " val FAA " + ("-" if outcome.get("val_faa") is None else f"{outcome['val_faa']:.2f}")

    record = progress_recorder(
        outcomes, len(trials), val_faa, lambda: _write_summary(out, select(spec, trials, outcomes))
    )
    run_on_ray(
        [(t.name, trial_root / t.name, t.config) for t in pending],
        record,
        max_concurrent=max_concurrent,
        address=address,
        gpus_per_trial=gpus_per_trial,
        cpus_per_trial=cpus_per_trial,
    )
    return select(spec, trials, outcomes)


def split_finished(jobs: Sequence[tuple[str, Path]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``(outcomes, pending)`` of named run directories: the outcome of each one already finished
    (marked ``skipped``), and the names of the others, in order."""
    outcomes: dict[str, dict[str, Any]] = {}
    pending = []
    for name, run_dir in jobs:
        if trial_finished(run_dir):
            outcomes[name] = trial_outcome(run_dir, "finished") | {"skipped": True}
        else:
            pending.append(name)
    return outcomes, pending


def outcome_note(outcome: dict[str, Any]) -> str:
    """`` (the error)`` of a failed run, `` (held by <process>)`` of one running elsewhere,
    `` (finished by another process)`` of one found finished when its turn came, else ``""``;
    then `` (retried N x after a lost worker or node)`` of one Ray ran again."""
    note = ""
    if outcome.get("error"):
        note = f" ({outcome['error']})"
    elif outcome.get("held_by"):
        note = f" (held by {outcome['held_by']})"
    elif outcome.get("skipped"):  # split_finished's skipped runs never reach a progress line
        note = " (finished by another process)"
    count = trial_retries(outcome)
    return note + (f" (retried {count} x after a lost worker or node)" if count else "")


def progress_recorder(
    outcomes: dict[str, dict[str, Any]],
    total: int,
    figures: Callable[[str, dict[str, Any]], str],
    after: Callable[[], None],
) -> Callable[[str, dict[str, Any]], None]:
    """The ``on_done`` of :func:`run_on_ray`: stores each outcome in ``outcomes``, prints
    ``[done/total] name status<figures(name, outcome)><outcome_note(outcome)> | seconds``, then
    calls ``after``."""
    begin = time.perf_counter()
    done = len(outcomes)

    def record(name: str, outcome: dict[str, Any]) -> None:
        nonlocal done
        outcomes[name] = outcome
        done += 1
        print(
            f"[{done}/{total}] {name} {outcome['status']}{figures(name, outcome)}{outcome_note(outcome)}"
            f" | {time.perf_counter() - begin:.0f} s",
            flush=True,
        )
        after()

    return record


def trial_cpus(node_cpus: Sequence[float], max_concurrent: int | None) -> int:
    """CPUs (and so threads) for each trial: the fair share ``cores // max_concurrent`` of the
    smallest node, at least 1; 1 when ``max_concurrent`` is None (a trial per core).

    >>> [trial_cpus([2], k) for k in (1, 2, 3)], trial_cpus([16, 8], 2), trial_cpus([16], None)
    ([2, 1, 1], 4, 1)
    """
    if not max_concurrent or not node_cpus:
        return 1
    return max(1, int(min(node_cpus)) // max_concurrent)


def _node_cpus(ray: Any) -> list[float]:
    return [
        n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU")
    ]


def run_on_ray(
    jobs: Sequence[tuple[str, Path, dict[str, dict[str, Any]]]],
    on_done: Callable[[str, dict[str, Any]], None],
    *,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_trial: float = 0.0,
    cpus_per_trial: float | None = None,
) -> None:
    """Train each ``(name, run_dir, config)`` with :func:`train_trial` as a Ray task, at most
    ``max_concurrent`` at once (None: as many as Ray schedules); ``on_done(name, outcome)`` runs
    here, in the driver, as each ends. Workers load the plugins this process loaded
    (:func:`xder_cli.runs.plugins.loaded_plugins`).

    A task whose worker process dies or whose node is lost (a Ray system failure) is run again by
    Ray, :data:`RAY_MAX_RETRIES` times at most, on any live node: it resumes from the trial's last
    checkpoint. A trial's own failure is an outcome (:func:`train_trial` never raises), so it is
    never retried. ``outcome["attempts"]`` counts the task's starts (its ``attempts.jsonl`` lines);
    a task that is still lost after its retries is a failed trial with Ray's error.

    Args:
        address: a running Ray cluster (``ray://host:10001`` or ``host:6379``); None starts a local
            instance for these jobs (and stops it after). On a cluster, every ``run_dir`` must be on
            a filesystem every node sees.
        gpus_per_trial, cpus_per_trial: the resources Ray reserves for each trial. Ray runs a
            trial's kernels on as many threads as it reserves CPUs for it (``OMP_NUM_THREADS``),
            so its thread count is fixed and its figures repeat. None: with ``max_concurrent``
            K, a fair share of the cores, ``cores // K`` (cores of the smallest node); without
            it, one CPU per trial, so that as many trials run as there are cores.
    """
    if not jobs:
        return
    # Ray's `uv run` hook would ship the working tree to every worker and build a fresh environment
    # there (minutes per worker): workers use this interpreter's environment instead (opt back in
    # with RAY_ENABLE_UV_RUN_RUNTIME_ENV=1). Set before ray is imported.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray  # a heavy import: only work sent to Ray needs it

    started = not ray.is_initialized()
    if started:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}},
        )
    try:
        if cpus_per_trial is None:
            cpus_per_trial = trial_cpus(_node_cpus(ray), max_concurrent)
        # Retried on system failures only (retry_exceptions=False): a trial's own errors come back
        # as outcomes, and a retry resumes from the trial's checkpoint.
        remote = ray.remote(
            num_cpus=cpus_per_trial,
            num_gpus=gpus_per_trial,
            max_retries=RAY_MAX_RETRIES,
            retry_exceptions=False,
        )(train_trial)
        plugins = loaded_plugins()
        limit = max_concurrent or len(jobs)
        queue = list(jobs)
        running: dict[Any, tuple[str, Path, str]] = {}
        while queue or running:
            while queue and len(running) < limit:
                name, run_dir, config = queue.pop(0)
                submission = uuid.uuid4().hex  # one per task; Ray's retries of it share it
                ref = remote.remote(str(Path(run_dir).resolve()), config, plugins, submission)
                running[ref] = (name, Path(run_dir), submission)
            ready, _ = ray.wait(list(running), num_returns=1)
            name, run_dir, submission = running.pop(ready[0])
            try:
                outcome = ray.get(ready[0])
            except Exception as error:  # lost RAY_MAX_RETRIES + 1 times (worker or node died, OOM...)
                outcome = trial_outcome(run_dir, "failed", f"{type(error).__name__}: {error}".splitlines()[0])
                outcome["attempts"] = _attempts_of(run_dir, submission)
            on_done(name, outcome)
    finally:
        if started:
            ray.shutdown()


def _seeds(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as error:
        raise UsageError(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from error
    if not seeds:
        raise UsageError("--seeds needs at least one seed")
    return seeds


def command_sweep(args: Any) -> int:
    """Entry point of ``xder-run sweep``."""
    if (args.grid_file is None) == (args.grid is None):
        raise UsageError("give a GRID.toml or --grid PRESET:BENCHMARK:BUFFER:METHOD (one of them)")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise UsageError(f"--max-concurrent must be >= 1, got {args.max_concurrent}")
    if args.gpus_per_trial < 0:
        raise UsageError(f"--gpus-per-trial must be >= 0, got {args.gpus_per_trial}")
    seeds = _seeds(args.seeds)
    spec = (
        load_spec(Path(args.grid_file), seeds=seeds, protocol=args.protocol)
        if args.grid_file
        else spec_from_preset(args.grid, seeds, args.protocol or PAPER_PROTOCOL)
    )
    if args.logger:
        check_loggers(args.logger)
        spec = dataclasses.replace(spec, fixed={**spec.fixed, "run.loggers": list(args.logger)})
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output folder {out}: {error.strerror}") from error
    summary = run_sweep(
        spec,
        out,
        max_concurrent=args.max_concurrent,
        address=args.address,
        gpus_per_trial=args.gpus_per_trial,
    )
    sys.stdout.write(sweep_markdown(summary))
    print(f"summary: {out / SWEEP_JSON}  report: {out / SWEEP_MD}")
    if summary["retries"]:
        print(retry_note(summary["retries"]))
    elsewhere = sum(t["status"] == RUNNING_ELSEWHERE for t in summary["trials"])
    if elsewhere:
        print(
            f"note: {elsewhere} trial(s) are being trained by another process (this sweep started "
            "twice?): run the sweep again after it ends to include them"
        )
    failed = sum(t["status"] == "failed" for t in summary["trials"])
    return 1 if failed == len(summary["trials"]) else 0
