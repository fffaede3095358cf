"""The sweep: a hyperparameter grid x seeds, selected on the validation split.

A sweep is described by a GRID.toml (:func:`load_spec`)::

    method = "derpp"
    benchmark = "seq-digits"
    buffer_size = 200            # optional: the protocol's
    protocol = "laptop"          # optional (full): the benchmark's protocol
    seeds = [0, 1]
    validation = 0.1             # optional (0.1): the held-out fraction selection uses
    preset = "none"              # optional (none): the base the grid varies
    [set]                        # optional: fixed overrides, "section.key" = value
    "train.epochs" = 5
    [grid]                       # "section.key" = [values]; the cartesian product is searched
    "method.alpha" = [0.1, 0.3]
    "method.beta" = [0.5, 1.0]

or taken from a preset with ``PRESET:BENCH:BUFFER:ENTRY`` (:func:`spec_from_preset`: the paper's
grid; its chosen values of keys the grid does not vary, e.g. an X-DER variant's ``future_heads``,
stay fixed). A ``protocol`` given to either picks the benchmark's protocol (and, from a preset, the
preset's tables kept for it), overriding the file's.

Every (grid point, seed) is a trial (:func:`plan_trials`): an ordinary run directory
``DIR/trials/<point>-s<seed>/`` (config.toml, events.jsonl, results.json, checkpoint.pt), trained
by a Ray task (:func:`run_sweep`, through :mod:`xder_cli.runs.scheduler`): on a local Ray instance
started for the sweep, or on the cluster at ``address``. Selection (:func:`select`) uses the mean
over seeds of the VALIDATION final average accuracy; the test FAA is reported, never used. DIR gets
``sweep.json`` and ``sweep.md`` (the report, :func:`sweep_markdown`). A trial that fails is
recorded with its error and the sweep goes on; running the same sweep again skips finished trials
and resumes interrupted ones from their checkpoints. A trial another process holds (the same sweep
started twice on one DIR) is reported as ``running elsewhere`` (not failed, not selected on) and a
later rerun picks it up as finished; a trial whose Ray worker or node is lost is run again on a
live node (:data:`xder_cli.runs.scheduler.RAY_MAX_RETRIES` times at most), and each trial's record
says the node that trained it (``node``) and how many times this sweep started it (``attempts``,
``retries``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xder_cli.runs import rundir
from xder_cli.runs._stats import check_distinct_seeds, fmt_stat, mean_std
from xder_cli.runs.errors import RunDirError, SettingError, option
from xder_cli.runs.presets import preset_entry
from xder_cli.runs.scheduler import (
    LogOutput,
    PlannedRun,
    outcome_note,
    retry_note,
    run_retries,
    train_runs,
)
from xder_cli.runs.settings import build_plan, resolve_config, split_key
from xder_data import DEFAULT_PROTOCOL, canonical_protocol

__all__ = [
    "SWEEP_JSON",
    "SWEEP_MD",
    "TRIALS",
    "SweepSpec",
    "load_spec",
    "plan_trials",
    "run_sweep",
    "select",
    "spec_from_preset",
    "sweep_markdown",
    "with_settings",
    "write_summary",
]

SWEEP_JSON, SWEEP_MD, TRIALS = "sweep.json", "sweep.md", "trials"
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
    protocol: str = DEFAULT_PROTOCOL


def _check_quoted(table: dict[str, Any], section: str, where: str) -> None:
    """A dotted key written without quotes (``method.alpha = ...``) is a nested table in TOML: say
    to quote it."""
    for key, value in table.items():
        if isinstance(value, dict) and value:
            inner = next(iter(value))
            raise SettingError(
                f'{where}: [{section}] {key}.{inner}: quote the dotted key, "{key}.{inner}" = ...; '
                f"unquoted, TOML reads {key} as a table of its own"
            )


def _check_grid(grid: Any, where: str) -> dict[str, list[Any]]:
    if not isinstance(grid, dict) or not grid:
        raise SettingError(f'{where}: [grid] must map "section.key" to a non-empty list of values')
    _check_quoted(grid, "grid", where)
    for key, values in grid.items():
        split_key(key)
        if not isinstance(values, list) or not values:
            raise SettingError(f"{where}: grid key {key!r} must be a non-empty list, got {values!r}")
    return dict(grid)


def load_spec(path: Path, *, seeds: tuple[int, ...] | None = None, protocol: str | None = None) -> SweepSpec:
    """Read GRID.toml. ``seeds`` and ``protocol``, where given, replace the file's.

    Raises:
        SettingError: unreadable file, bad TOML, unknown or missing keys, ill-typed values.
    """
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as error:
        raise SettingError(f"{path}: no such grid file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError(f"{path}: cannot read it ({error})") from error
    except tomllib.TOMLDecodeError as error:
        raise SettingError(f"{path}: not valid TOML ({error})") from error
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise SettingError(
            f"{path}: unknown key {unknown[0]!r}; a grid file takes {', '.join(sorted(_SPEC_KEYS))}"
        )
    for required in ("method", "benchmark", "grid"):
        if required not in data:
            raise SettingError(f"{path}: {required!r} is missing")
    file_seeds = data.get("seeds", [0])
    if not isinstance(file_seeds, list) or not file_seeds or not all(isinstance(s, int) for s in file_seeds):
        raise SettingError(f"{path}: seeds must be a non-empty list of integers, e.g. seeds = [0, 1]")
    check_distinct_seeds(file_seeds, f"{path}: seeds")
    fixed = data.get("set", {})
    if not isinstance(fixed, dict):
        raise SettingError(f'{path}: [set] must map "section.key" to a value')
    _check_quoted(fixed, "set", str(path))
    for key in fixed:
        split_key(key)
    buffer_size = data.get("buffer_size")
    if buffer_size is not None and (isinstance(buffer_size, bool) or not isinstance(buffer_size, int)):
        # its range is the method config's to check, when the trials are planned
        raise SettingError(f"{path}: buffer_size must be an integer, got {buffer_size!r}")
    validation = data.get("validation", 0.1)
    if not isinstance(validation, int | float) or not 0 < validation < 1:
        raise SettingError(f"{path}: validation must be in (0, 1): selection needs a validation split")
    file_protocol = data.get("protocol", DEFAULT_PROTOCOL)
    if not isinstance(file_protocol, str):
        raise SettingError(f'{path}: protocol must be a name, e.g. protocol = "laptop"')
    return SweepSpec(
        method=str(data["method"]),
        benchmark=str(data["benchmark"]),
        seeds=tuple(seeds or file_seeds),
        grid=_check_grid(data["grid"], str(path)),
        buffer_size=buffer_size,
        validation=float(validation),
        preset=str(data.get("preset", "none")),
        fixed=dict(fixed),
        protocol=canonical_protocol(protocol or file_protocol),
    )


def spec_from_preset(text: str, seeds: tuple[int, ...] | None, protocol: str = DEFAULT_PROTOCOL) -> SweepSpec:
    """``PRESET:BENCH:BUFFER:ENTRY`` (BUFFER may be ``-`` for methods without a buffer) -> a spec
    searching that entry's grid (of the preset's tables for ``protocol``), its other chosen values
    fixed.

    Raises:
        SettingError: ``text`` is not of that form, or names no preset entry with a grid.
    """
    parts = text.split(":")
    if len(parts) != 4:
        raise SettingError(
            f"{option('grid')} {text!r}: write PRESET:BENCHMARK:BUFFER:METHOD, "
            "e.g. paper:seq-cifar100:500:derpp"
        )
    preset, benchmark, buffer_text, name = parts
    if buffer_text in ("", "-"):
        buffer_size = None
    elif buffer_text.isdigit():
        buffer_size = int(buffer_text)
    else:
        raise SettingError(
            f"{option('grid')} {text!r}: the buffer size {buffer_text!r} is not a number (or -)"
        )
    entry = preset_entry(preset, benchmark, buffer_size, name, protocol=protocol)
    if not entry.grid:
        raise SettingError(f"{option('grid')} {text!r}: this preset entry lists no grid")
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


def with_settings(spec: SweepSpec, settings: dict[str, Any], buffer_size: int | None = None) -> SweepSpec:
    """``spec`` with ``settings`` (dotted keys: the command's flags) fixed for every trial, and
    ``buffer_size`` for every trial where given.

    Raises:
        SettingError: a key the grid searches, or a buffer size the spec already fixes (a preset's
            grid names its own).
    """
    clash = [
        key
        for key in (*settings, *(["method.buffer_size"] if buffer_size is not None else []))
        if key in spec.grid
    ]
    if clash:
        raise SettingError(
            f"{clash[0]} is searched by the grid: leave it to the grid, or take it out of the grid"
        )
    if buffer_size is not None and "method.buffer_size" in spec.fixed:
        raise SettingError(f"the grid fixes method.buffer_size already: drop {option('buffer_size')}")
    fixed = {**spec.fixed, **settings}
    return dataclasses.replace(
        spec, fixed=fixed, buffer_size=spec.buffer_size if buffer_size is None else buffer_size
    )


def plan_trials(spec: SweepSpec) -> list[PlannedRun]:
    """Every (grid point, seed), a trial: a :class:`~xder_cli.runs.scheduler.PlannedRun` named
    ``<point>-s<seed>`` (its run directory under ``DIR/trials``), tagged with its grid point, with a
    validated configuration (nothing is trained).

    Raises:
        SettingError (and the packages' config errors): a seed given twice
            (:func:`xder_cli.runs._stats.check_distinct_seeds`), a point that cannot be configured.
    """
    check_distinct_seeds(spec.seeds)
    keys = list(spec.grid)
    points = [dict(zip(keys, values, strict=True)) for values in itertools.product(*spec.grid.values())]
    trials = []
    for index, point in enumerate(points):
        for seed in spec.seeds:
            settings = {"run.seed": seed, "run.validation": spec.validation}
            if spec.buffer_size is not None:
                settings["method.buffer_size"] = spec.buffer_size
            settings |= {**spec.fixed, **point}
            config = resolve_config(
                spec.method, spec.benchmark, protocol=spec.protocol, preset=spec.preset, settings=settings
            )
            plan = build_plan(config)
            trials.append(PlannedRun(f"{_point_name(index, point)}-s{seed}", seed, plan.config, point))
    return trials


UNFINISHED = {"status": "unfinished: resumes from its checkpoint when the sweep runs again"}
"""A trial with no outcome yet whose run directory holds a checkpoint (training, or interrupted)."""


def select(
    spec: SweepSpec, trials: list[PlannedRun], outcomes: dict[str, dict[str, Any]], out: Path | None = None
) -> dict[str, Any]:
    """The sweep's summary: per point the mean +- std over seeds of validation and test FAA, and
    the best point by mean VALIDATION FAA among points whose every seed finished (ties: the
    earlier point). A trial without an outcome is ``not run``, or :data:`UNFINISHED` where its
    run directory under ``out`` holds a checkpoint."""
    if out is not None:
        started = {t.name for t in trials if (out / TRIALS / t.name / rundir.CHECKPOINT).exists()}
        outcomes = {name: dict(UNFINISHED) for name in started - set(outcomes)} | outcomes
    points: dict[str, dict[str, Any]] = {}
    for trial in trials:
        key = trial.name.rsplit("-s", 1)[0]
        entry = points.setdefault(key, {"point": trial.tags, "trials": [], "val": [], "test": []})
        outcome = outcomes.get(trial.name, {"status": "not run"})
        entry["trials"].append(trial.name)
        if outcome.get("status") == "finished" and outcome.get("val_faa") is not None:
            entry["val"].append(float(outcome["val_faa"]))
            entry["test"].append(float(outcome["faa"]))
    rows = []
    for key, entry in points.items():
        val_mean, val_std = mean_std(entry["val"])
        test_mean, test_std = mean_std(entry["test"])
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
        "retries": sum(run_retries(outcomes.get(t.name, {})) for t in trials),
        "trials": [
            {
                "name": t.name,
                "run_dir": f"{TRIALS}/{t.name}",
                "point": t.tags,
                "seed": t.seed,
                "node": None,
                "attempts": 0,
                **outcomes.get(t.name, {"status": "not run"}),
                "retries": run_retries(outcomes.get(t.name, {})),
            }
            for t in trials
        ],
    }


def sweep_markdown(summary: dict[str, Any]) -> str:
    """The sweep report: points ranked by validation FAA, the best first, then failed trials."""
    keys = list(summary["grid"])
    lines = [
        f"# Sweep: {summary['method']} on {summary['benchmark']}"
        + (
            ""
            if canonical_protocol(summary.get("protocol", DEFAULT_PROTOCOL)) == DEFAULT_PROTOCOL
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
            f"**Best: {chosen}**: validation FAA {fmt_stat(best['val_faa_mean'], best['val_faa_std'])}, "
            f"test FAA {fmt_stat(best['test_faa_mean'], best['test_faa_std'])}.",
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
            f"| {rank} | {values} | {fmt_stat(row['val_faa_mean'], row['val_faa_std'])} | "
            f"{fmt_stat(row['test_faa_mean'], row['test_faa_std'])} | "
            f"{row['seeds_finished']}/{row['seeds']} |"
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


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """Write a sweep's summary (:func:`select`) into ``out``: ``sweep.json`` and ``sweep.md``."""
    rundir.write_json(out / SWEEP_JSON, summary)
    rundir.atomic_write_bytes(out / SWEEP_MD, sweep_markdown(summary).encode())


def _val_faa(outcome: dict[str, Any]) -> str:
    return " val FAA " + ("-" if outcome.get("val_faa") is None else f"{outcome['val_faa']:.2f}")


def _ignore(*args: Any) -> None:
    """The default callback: does nothing."""


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    cpus_per_run: float | None = None,
    on_start: Callable[[int, int], None] = _ignore,
    on_done: Callable[[str, dict[str, Any], str], None] = _ignore,
    log_output: LogOutput | None = None,
) -> dict[str, Any]:
    """Run every unfinished trial on Ray and write ``sweep.json`` and ``sweep.md`` into ``out``
    (before the first trial and after each, so a killed sweep leaves a current summary); returns
    the summary (:func:`select`).

    Args:
        max_concurrent: trials in flight at once (None: as many as Ray schedules).
        address: a running Ray cluster (``ray://host:10001`` or ``host:6379``); None starts a local
            instance for the sweep. On a cluster, ``out`` must be on a filesystem every node sees.
        gpus_per_run: the GPUs Ray reserves for each trial (0: none).
        cpus_per_run: the CPUs Ray reserves for each trial
            (:func:`xder_cli.runs.scheduler.train_on_ray`; None: the fair share of ``max_concurrent``).
        on_start: ``(trials, finished)`` once the finished trials are known, before any trains.
        on_done: ``(name, outcome, figures)`` as each trial ends; ``figures`` is its validation
            FAA as a progress line shows it (`` val FAA 61.25``).
        log_output: what each trial shows, into its ``log.txt``
            (:data:`xder_cli.runs.scheduler.LogOutput`).

    Raises:
        SettingError (and the packages' configuration errors): a trial that cannot be configured,
            before ``out`` is made.
        RunDirError: ``out`` cannot be made.
    """
    trials = plan_trials(spec)  # every mistake in the grid first: nothing made before it
    trial_root = out / TRIALS
    try:
        trial_root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot create the output folder {out}: {error.strerror}") from error

    def started(outcomes: dict[str, dict[str, Any]], pending: list[PlannedRun]) -> None:
        on_start(len(trials), len(trials) - len(pending))
        write_summary(out, select(spec, trials, outcomes, out))

    def done(name: str, outcome: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> None:
        on_done(name, outcome, _val_faa(outcome))
        write_summary(out, select(spec, trials, outcomes, out))

    outcomes = train_runs(
        trials,
        trial_root,
        use_ray=True,
        on_start=started,
        on_done=done,
        max_concurrent=max_concurrent,
        address=address,
        gpus_per_run=gpus_per_run,
        cpus_per_run=cpus_per_run,
        log_output=log_output,
    )
    return select(spec, trials, outcomes, out)
