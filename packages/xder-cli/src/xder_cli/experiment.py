"""``xder-run experiment NAME``: experiments the X-DER paper runs as protocols.

Each protocol plans a set of ordinary runs (one run directory each, ``OUT/runs/<name>/``),
trains those not finished yet, and tabulates them: ``OUT/experiment.json`` (every number, per
run and aggregated), ``OUT/experiment.md`` (a Markdown table) and a PNG plot. Rerunning the same
command skips finished runs and resumes interrupted ones from their checkpoints; a run directory
trained with other settings is an error, never silently reused. Each run holds its run
directory's lock while it trains (:func:`xder_cli.sweep.train_trial`): a run that another
invocation is training is reported as ``running elsewhere`` and left to it. On Ray, a run whose
worker or node is lost is run again from its last checkpoint (:func:`xder_cli.sweep.run_on_ray`);
each run's record in experiment.json names the node that trained it (``node``) and counts its
starts (``attempts``, ``retries``).

* ``flatness`` (paper Sec. 6.2, the "stable regime" study): for each pair of adjacent tasks
  (k, k+1), a two-task sequence (``train.tasks = 2``, ``run.class_order`` a permutation putting
  task k's classes first and task k+1's second) trained with ``er_flat`` for each regulariser:
  ``none`` (the plastic regime, the baseline), ``lfr``, ``llr``. The figure of merit is the final
  Class-IL test accuracy on the FIRST task of the pair (the paper's radar plot, one axis per
  pair), with that task's forgetting.
* ``class-order`` (paper App. A, forward vs backward order): every method in natural and
  reversed class order; FAA and FF per method x order.
* ``sensitivity`` (paper App. "Sensitivity analysis of hyperparameters"): one-at-a-time, each
  value of each ``--param`` varied alone around the run's resolved values (its default preset
  plus ``--set``); test FAA against the value. Its runs are planned as one-key grids by
  :func:`xder_cli.sweep.plan_trials` and trained on Ray by :func:`xder_cli.sweep.run_on_ray`.
* ``table`` (reproduction): every row of a paper's published table for one benchmark and buffer
  size (:mod:`xder_cli.runs.published`: the X-DER paper's Table 1, the DER paper's Table 2 on
  ``seq-cifar10``), each entry with its default preset (a variant, e.g. ``xder-rpc``, with its
  preset entry, ``paper:xder-rpc``), over the seeds; methods without a buffer train once (their
  run directories, ``<entry>-s<seed>``, carry no buffer size, so tables of several buffer sizes
  in one ``--out`` share them). ``table.md`` / ``table.csv``: per entry our FAA and FF, the
  published value, the difference and whether it exceeds two standard errors
  (:func:`xder_eval.compare_to_published`), then the papers' claims about the table
  (``presets/claims.toml``, e.g. "X-DER's FAA is above DER++'s"), each checked on our rows as
  holds / does not hold / not separated (:mod:`xder_cli.runs.claims`). On a protocol other than
  ``paper`` (``--protocol laptop``) the table is a quick one: the published values are shown for
  orientation only and no difference with them is judged; the claims are checked all the same.
  A benchmark with no published results at all (``seq-digits``) trains and tabulates every method
  of the X-DER paper's Table 1 (:func:`xder_cli.runs.published.xder_table_methods`: ``joint``, ``sgd``,
  ``lwf_mc``, ``er``, ``gdumb``, ``er_ace``, ``rpc``, ``bic``, ``icarl``, ``lucir``, ``der``,
  ``derpp``, ``xder``; not the X-DER variants, which are ``paper`` preset entries of the paper's
  benchmarks only), ours alone.

Statistics are over seeds: the mean and the sample standard deviation (None below two seeds).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import statistics
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xder_cli.errors import UsageError
from xder_cli.runs import rundir
from xder_cli.runs.claims import check_table_claims, claims_markdown
from xder_cli.runs.config import SECTIONS
from xder_cli.runs.plan import build_plan, resolve_config, settings_text
from xder_cli.runs.presets import DEFAULT_ORDER, PAPER_PROTOCOL, list_presets, preset_entry
from xder_cli.runs.published import published_table, xder_table_methods
from xder_cli.runs.scheduler import (
    RUNNING_ELSEWHERE,
    Job,
    outcome_note,
    retry_note,
    run_jobs,
    trial_retries,
)
from xder_cli.runs.sweep import SweepSpec, plan_trials
from xder_cli.runs.trackers import check_loggers
from xder_data import list_benchmarks
from xder_eval import PublishedResult, compare_to_published
from xder_eval.plots import legend_outside, new_figure, save_figure, set_percent_axis
from xder_methods import method_config_class

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_SEEDS",
    "DEFAULT_SENSITIVITY_METHOD",
    "EXPERIMENTS",
    "EXPERIMENT_JSON",
    "EXPERIMENT_MD",
    "TABLE_CSV",
    "TABLE_CSV_COLUMNS",
    "TABLE_MD",
    "ExperimentRun",
    "TableEntry",
    "command_experiment",
    "execute",
    "flatness_metrics",
    "pair_class_order",
    "parse_param",
    "plan_class_order",
    "plan_flatness",
    "plan_sensitivity",
    "plan_table",
    "summarize_table",
    "table_csv",
    "table_entries",
    "table_markdown",
]

EXPERIMENTS = ("flatness", "class-order", "sensitivity", "table")
EXPERIMENT_JSON, EXPERIMENT_MD, RUNS = "experiment.json", "experiment.md", "runs"
TABLE_MD, TABLE_CSV = "table.md", "table.csv"
PLOT = {
    "flatness": "flatness.png",
    "class-order": "class_order.png",
    "sensitivity": "sensitivity.png",
    "table": "table.png",
}
REGULARISERS = ("none", "lfr", "llr")
REGULARISER_LABELS = {"none": "none (plastic)", "lfr": "LFR", "llr": "LLR"}
ORDERS = ("natural", "reversed")
DEFAULT_METHODS = ("xder", "derpp", "er")
DEFAULT_SENSITIVITY_METHOD = "xder"
DEFAULT_SEEDS = (0, 1, 2)
FLATNESS_METHOD = "er_flat"


@dataclass(frozen=True)
class ExperimentRun:
    """One planned run: its directory name under ``OUT/runs``, seed, resolved configuration, and
    what the protocol varies in it (``tags``, e.g. ``{"pair": 0, "regulariser": "lfr"}``)."""

    name: str
    seed: int
    config: dict[str, dict[str, Any]]
    tags: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Parsing


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as error:
        raise UsageError(f"{flag} {text!r}: give comma-separated integers, e.g. 0,1,2") from error
    if not values:
        raise UsageError(f"{flag} needs at least one value, e.g. 0,1,2")
    if len(set(values)) != len(values):
        raise UsageError(f"{flag} {text!r} repeats a value")
    return values


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise UsageError(f"{flag} needs at least one name, e.g. xder,derpp,er")
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} {text!r} repeats a name")
    return names


def _toml_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_param(text: str) -> tuple[str, list[Any]]:
    """``section.key=V1,V2,...`` -> ``("section.key", [V1, V2, ...])``; each value read as a TOML
    value (``0.1``, ``true``, ``"text"``, else a bare string). Values that hold commas (lists) are
    given as one TOML array: ``train.milestones=[[35, 45], [20, 40]]``.

    Raises:
        UsageError: no ``=``, a key that is not ``section.name``, no value, a repeated value.
    """
    hint = "e.g. --param method.alpha=0.1,0.3,0.6"
    if "=" not in text:
        raise UsageError(f"--param {text!r} needs the form section.key=V1,V2,...: {hint}")
    dotted, raw = (part.strip() for part in text.split("=", 1))
    section, _, key = dotted.partition(".")
    if section not in SECTIONS or not key or "." in key:
        raise UsageError(
            f"--param {text!r}: the key must be section.name with section one of {', '.join(SECTIONS)}"
        )
    if raw.startswith("["):
        values = _toml_value(raw)
        if not isinstance(values, list):
            raise UsageError(f"--param {text!r}: {raw!r} is not a TOML array of values")
    else:
        items = [item.strip() for item in raw.split(",")]
        if any(not item for item in items):
            raise UsageError(f"--param {text!r}: give one or more comma-separated values, {hint}")
        values = [_toml_value(item) for item in items]
    if not values:
        raise UsageError(f"--param {text!r}: give one or more values, {hint}")
    tokens = [json.dumps(v, sort_keys=True) for v in values]
    if len(set(tokens)) != len(tokens):
        raise UsageError(f"--param {text!r} repeats a value")
    return dotted, values


def _dotted(sets: Sequence[tuple[str, str, Any]]) -> dict[str, Any]:
    return {f"{section}.{key}": value for section, key, value in sets}


def _check_owned(sets: Sequence[tuple[str, str, Any]], owned: dict[str, str]) -> None:
    """``--set`` may not touch what the protocol sets itself (``owned``: key -> why, what instead)."""
    for section, key, _ in sets:
        dotted = f"{section}.{key}"
        if dotted in owned:
            raise UsageError(f"--set {dotted}: {owned[dotted]}")


_OWNED_BY_ALL = {
    "run.seed": "the experiment sets it: use --seeds",
    "run.method": "the experiment sets it: use --methods (class-order) or --method (sensitivity)",
    "run.benchmark": "the experiment sets it: use --benchmark",
    "run.protocol": "the experiment sets it: use --protocol",
    "run.preset": "runs use their method's default preset: change its values with --set",
}


# ---------------------------------------------------------------------------------------------
# Planning


def _config(
    method: str,
    benchmark: str,
    seed: int,
    sets: Sequence[tuple[str, str, Any]],
    protocol: str,
    *,
    preset: str | None = None,
    method_values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's resolved, validated configuration; ``preset`` None: the method's default preset."""
    config = resolve_config(
        method=method,
        benchmark=benchmark,
        preset=preset,
        run={"seed": seed},
        train={},
        method_values=dict(method_values or {}),
        sets=list(sets),
        protocol_name=protocol,
    )
    return build_plan(config).config


def pair_class_order(classes_per_task: Sequence[int], pair: int) -> list[int]:
    """The class order of the two-task sequence of tasks ``(pair, pair + 1)``: task ``pair``'s
    classes (natural numbering), then task ``pair + 1``'s, then every other class in order.

    Raises:
        UsageError: ``pair`` is not in ``0..T-2``, or the two tasks' sizes differ from those of
            the benchmark's first two tasks (the slots they take in the sequence).
    """
    n_tasks = len(classes_per_task)
    if n_tasks < 2:
        raise UsageError(f"the benchmark has {n_tasks} task: the flatness study needs two or more")
    if not 0 <= pair <= n_tasks - 2:
        raise UsageError(
            f"--pairs: {pair} is not a pair of adjacent tasks; pair k is tasks (k, k+1) "
            f"with k in 0..{n_tasks - 2}"
        )
    sizes = (classes_per_task[pair], classes_per_task[pair + 1])
    if sizes != (classes_per_task[0], classes_per_task[1]):
        raise UsageError(
            f"--pairs: tasks {pair} and {pair + 1} hold {sizes[0]} and {sizes[1]} classes, but the two "
            f"tasks of a sequence hold {classes_per_task[0]} and {classes_per_task[1]}: pick other pairs"
        )
    start = sum(classes_per_task[:pair])
    first_two = list(range(start, start + sizes[0] + sizes[1]))
    rest = [c for c in range(sum(classes_per_task)) if c not in first_two]
    return first_two + rest


def plan_flatness(
    benchmark: str,
    classes_per_task: Sequence[int],
    pairs: Sequence[int],
    seeds: Sequence[int],
    sets: Sequence[tuple[str, str, Any]],
    protocol: str = PAPER_PROTOCOL,
) -> list[ExperimentRun]:
    """Every (pair, regulariser, seed) of the stable-regime study, configured and validated."""
    runs = []
    for pair in pairs:
        order = pair_class_order(classes_per_task, pair)
        for regulariser in REGULARISERS:
            study = [
                ("run", "class_order", order),
                ("train", "tasks", 2),
                ("method", "regulariser", regulariser),
            ]
            for seed in seeds:
                runs.append(
                    ExperimentRun(
                        f"pair{pair}-{regulariser}-s{seed}",
                        seed,
                        _config(FLATNESS_METHOD, benchmark, seed, [*sets, *study], protocol),
                        {"pair": pair, "regulariser": regulariser},
                    )
                )
    return runs


def plan_class_order(
    benchmark: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    sets: Sequence[tuple[str, str, Any]],
    protocol: str = PAPER_PROTOCOL,
) -> list[ExperimentRun]:
    """Every (method, natural | reversed, seed), configured and validated."""
    return [
        ExperimentRun(
            f"{method}-{order}-s{seed}",
            seed,
            _config(method, benchmark, seed, [*sets, ("run", "class_order", order)], protocol),
            {"method": method, "order": order},
        )
        for method in methods
        for order in ORDERS
        for seed in seeds
    ]


def plan_sensitivity(
    method: str,
    benchmark: str,
    params: Sequence[tuple[str, list[Any]]],
    seeds: Sequence[int],
    sets: Sequence[tuple[str, str, Any]],
    protocol: str = PAPER_PROTOCOL,
) -> tuple[list[ExperimentRun], dict[str, Any], str]:
    """Every (parameter, value, seed), each parameter's values planned as a one-key sweep grid
    around the base configuration (the method's default preset + ``sets``), with no validation
    split (the test FAA is what this study reports).

    Returns:
        The runs, the base (resolved) value of each parameter, and the base preset's name.
    """
    base = _config(method, benchmark, seeds[0], sets, protocol)
    preset = base["run"]["preset"]
    runs = []
    for key, values in params:
        spec = SweepSpec(
            method=method,
            benchmark=benchmark,
            seeds=tuple(seeds),
            grid={key: list(values)},
            validation=0.0,
            preset=preset,
            fixed=_dotted(sets),
            protocol=protocol,
        )
        for trial in plan_trials(spec):
            runs.append(
                ExperimentRun(
                    f"{key}-{trial.name}", trial.seed, trial.config, {"param": key, "value": trial.point[key]}
                )
            )
    base_values = {}
    for key, _ in params:
        section, name = key.split(".", 1)
        base_values[key] = base.get(section, {}).get(name)
    return runs, base_values, preset


@dataclass(frozen=True)
class TableEntry:
    """One row of ``experiment table``: a method, or a variant of one (an entry of a preset).

    Attributes:
        name: the entry's name (``derpp``, ``xder-rpc``): its run directories' prefix.
        method: the registered method it runs.
        preset: the preset its runs name (``paper:xder-rpc`` for a variant); None: the method's
            default preset (tuned, else paper, where it has an entry, else none).
        buffered: whether the method keeps a buffer (else it trains once for every buffer size).
        published: its published cell; None where nothing is published.
    """

    name: str
    method: str
    preset: str | None
    buffered: bool
    published: PublishedResult | None = None

    def run_name(self, buffer_size: int, seed: int) -> str:
        """``<entry>-m<buffer>-s<seed>``; ``<entry>-s<seed>`` for a method without a buffer."""
        return f"{self.name}-m{buffer_size}-s{seed}" if self.buffered else f"{self.name}-s{seed}"


def _variant_preset(benchmark: str, buffer_size: int, entry: str, method: str, protocol: str) -> str:
    """``NAME:ENTRY`` of the first preset (tuned, then paper) holding the variant ``entry``."""
    for name in DEFAULT_ORDER:
        if name not in list_presets():
            continue
        try:
            preset_entry(name, benchmark, buffer_size, entry, method=method, protocol=protocol)
        except UsageError:
            continue
        return f"{name}:{entry}"
    on = benchmark if protocol == PAPER_PROTOCOL else f"{benchmark} (protocol {protocol})"
    raise UsageError(
        f"no preset holds the variant {entry!r} for {on} at buffer {buffer_size}: leave it out of --methods"
    )


def table_entries(
    benchmark: str,
    buffer_size: int,
    protocol: str = PAPER_PROTOCOL,
    methods: Sequence[str] | None = None,
) -> list[TableEntry]:
    """The rows ``experiment table`` trains, in the paper's order: every entry of the benchmark's
    published table at ``buffer_size`` (:func:`xder_cli.runs.published.published_table`), or, for a
    benchmark with no published results, every method of the X-DER paper's Table 1; only those
    named in ``methods`` when given.

    Raises:
        UsageError: an unknown benchmark, a buffer size below 1 or with no published table, a name
            in ``methods`` that the table lacks.
    """
    if benchmark not in list_benchmarks():
        raise UsageError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(list_benchmarks())}")
    if buffer_size < 1:
        raise UsageError(f"--buffer-size must be >= 1, got {buffer_size}")
    published = published_table(benchmark, buffer_size)
    if published:
        candidates = [(p.entry, p.method, p) for p in published]
        what = f"the published table of {benchmark} at buffer {buffer_size}"
    else:
        candidates = [(m, m, None) for m in xder_table_methods()]
        what = f"{benchmark} has no published table, and the X-DER paper's Table 1 trained in its place"
    names = [name for name, _, _ in candidates]
    for name in methods or ():
        if name not in names:
            raise UsageError(f"--methods: {what} has no {name!r}; its rows are {', '.join(names)}")
    entries = []
    for name, method, cell in candidates:
        if methods is not None and name not in methods:
            continue
        fields = {f.name for f in dataclasses.fields(method_config_class(method))}
        preset = None if name == method else _variant_preset(benchmark, buffer_size, name, method, protocol)
        entries.append(TableEntry(name, method, preset, "buffer_size" in fields, cell))
    return entries


def plan_table(
    benchmark: str,
    buffer_size: int,
    entries: Sequence[TableEntry],
    seeds: Sequence[int],
    sets: Sequence[tuple[str, str, Any]],
    protocol: str = PAPER_PROTOCOL,
) -> list[ExperimentRun]:
    """Every (entry, seed) of a table, configured and validated: the entry's preset, the buffer
    size for methods that keep a buffer, then ``sets``."""
    runs = []
    for entry in entries:
        values = {"buffer_size": buffer_size} if entry.buffered else {}
        for seed in seeds:
            config = _config(
                entry.method, benchmark, seed, sets, protocol, preset=entry.preset, method_values=values
            )
            runs.append(
                ExperimentRun(
                    entry.run_name(buffer_size, seed),
                    seed,
                    config,
                    {"entry": entry.name, "method": entry.method},
                )
            )
    return runs


# ---------------------------------------------------------------------------------------------
# Running


OBSERVING_KEYS = frozenset({"run.loggers", "run.threads", "run.record_analyses", "run.plugins"})
"""Settings that observe a run (trackers, recorded analyses) or place it (threads) without changing
what it trains: an earlier invocation's run may differ in them."""


def _normalised(config: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A configuration as its config.toml reads back (no None values, lists for tuples), less what
    observes the run or places it rather than configures it (:data:`OBSERVING_KEYS`) and empty
    sections."""
    body = {
        s: {k: v for k, v in values.items() if v is not None and f"{s}.{k}" not in OBSERVING_KEYS}
        for s, values in config.items()
    }
    return json.loads(json.dumps({s: values for s, values in body.items() if values}))


def _check_existing(run: ExperimentRun, run_dir: Path) -> None:
    """A run directory left by an earlier invocation must hold this run's configuration."""
    path = run_dir / rundir.CONFIG
    if not path.is_file():
        return
    stored, planned = _normalised(rundir.read_config(path)), _normalised(run.config)
    if stored == planned:
        return
    for section in sorted(set(stored) | set(planned)):
        for key in sorted(set(stored.get(section, {})) | set(planned.get(section, {}))):
            old, new = stored.get(section, {}).get(key), planned.get(section, {}).get(key)
            if old != new:
                raise UsageError(
                    f"{run_dir} was trained with {section}.{key} = {json.dumps(old)}, this experiment "
                    f"asks for {json.dumps(new)}: use another --out, or delete that run directory"
                )
    raise UsageError(f"{run_dir} holds another configuration: use another --out")  # pragma: no cover


def _results(run_dir: Path) -> dict[str, Any] | None:
    try:
        results = json.loads((run_dir / rundir.RESULTS).read_text())
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def execute(
    runs: Sequence[ExperimentRun],
    root: Path,
    *,
    describe: Callable[[dict[str, Any] | None], str],
    on_change: Callable[[dict[str, dict[str, Any]]], None],
    use_ray: bool,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Train every unfinished run into ``root/<name>`` (resuming from a checkpoint where there is
    one) and return each run's outcome (:func:`xder_cli.sweep.trial_outcome`).

    Runs go to Ray with ``use_ray`` (a local instance, or the cluster at ``address``), else they
    run one after the other in this process. A progress line is printed per finished run
    (``describe`` turns its results.json into the line's figures) and ``on_change(outcomes)``
    is called after each.
    """
    from xder_cli.progress import OutcomeLines, on_terminal

    for run in runs:
        _check_existing(run, root / run.name)
    where = "on Ray" if use_ray else "in this process"
    lines = OutcomeLines(
        lambda total, finished: (
            f"{total} runs, {finished} already finished; training {total - finished} {where}"
        )
    )

    def started(outcomes: dict[str, dict[str, Any]], pending: list[Job]) -> None:
        lines.on_start(len(runs), len(runs) - len(pending))
        on_change(outcomes)

    def done(name: str, outcome: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> None:
        text = describe(_results(root / name)) if outcome["status"] == "finished" else ""
        lines.on_done(name, outcome, f" | {text}" if text else "")
        on_change(outcomes)

    return run_jobs(
        [Job(run.name, root / run.name, run.config) for run in runs],
        use_ray=use_ray,
        on_start=started,
        on_done=done,
        max_concurrent=max_concurrent,
        address=address,
        gpus_per_trial=gpus_per_run,
        log_output=on_terminal,
    )


# ---------------------------------------------------------------------------------------------
# Figures and summaries


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def flatness_metrics(results: dict[str, Any] | None) -> dict[str, float | None]:
    """From a two-task run's results.json: the final Class-IL accuracy (%) on its first task, and
    that task's forgetting (its best accuracy before the last task minus the final one)."""
    matrix = (results or {}).get("accuracy_matrix") or []
    if len(matrix) < 2 or not matrix[-1] or matrix[-1][0] is None:
        return {"first_task_accuracy": None, "first_task_forgetting": None}
    final = float(matrix[-1][0])
    before = [float(row[0]) for row in matrix[:-1] if row and row[0] is not None]
    return {
        "first_task_accuracy": final,
        "first_task_forgetting": max(before) - final if before else None,
    }


def _faa_metrics(results: dict[str, Any] | None) -> dict[str, float | None]:
    results = results or {}
    return {"faa": results.get("faa"), "ff": results.get("ff")}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _fmt_stat(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return _fmt(mean) if std is None else f"{_fmt(mean)} ± {_fmt(std)}"


def _run_records(
    runs: Sequence[ExperimentRun],
    outcomes: dict[str, dict[str, Any]],
    root: Path,
    metrics: Callable[[dict[str, Any] | None], dict[str, Any]],
) -> list[dict[str, Any]]:
    records = []
    for run in runs:
        outcome = outcomes.get(run.name, {"status": "not run"})
        finished = outcome.get("status") == "finished"
        results = _results(root / run.name) if finished else None
        records.append(
            {
                "name": run.name,
                "run_dir": f"{RUNS}/{run.name}",
                "seed": run.seed,
                **run.tags,
                "status": outcome.get("status", "not run"),
                "error": outcome.get("error"),
                "held_by": outcome.get("held_by"),
                "skipped": bool(outcome.get("skipped")),
                "node": outcome.get("node"),
                "attempts": int(outcome.get("attempts") or 0),
                "retries": trial_retries(outcome),
                **{k: None for k in metrics(None)},
                **(metrics(results) if finished else {}),
            }
        )
    return records


def _cell(records: Sequence[dict[str, Any]], keys: dict[str, str]) -> dict[str, Any]:
    """Mean and std over the finished records of each metric; ``keys``: metric -> output name."""
    done = [r for r in records if r["status"] == "finished"]
    cell: dict[str, Any] = {}
    for metric, name in keys.items():
        mean, std = _mean_std([float(r[metric]) for r in done if r[metric] is not None])
        cell[f"{name}_mean"], cell[f"{name}_std"] = mean, std
    cell["seeds_finished"] = len(done)
    cell["seeds"] = len(records)
    return cell


PLACING_KEYS = OBSERVING_KEYS | {"run.device", "run.data_root", "run.data_device"}
"""Settings that say where a run trains or what watches it, not what it trains: not overrides."""


def overrides_text(sets: dict[str, Any]) -> str:
    """``--set`` overrides that change what is trained, as ``key=value`` pairs (JSON values), e.g.
    ``train.epochs=1, backbone.width=4``; empty when there are none (:data:`PLACING_KEYS` left out)."""
    return settings_text({key: value for key, value in sets.items() if key not in PLACING_KEYS})


def _with_overrides(lines: list[str], summary: dict[str, Any]) -> list[str]:
    """An experiment's Markdown lines, its heading marked and its overrides named when ``--set``
    changed every run (the table is then not the protocol's own)."""
    if not overrides_text(summary.get("sets", {})):
        return lines
    note = (
        f"**Overrides** (`--set`, every run): `{overrides_text(summary['sets'])}`: these runs are not the "
        "protocol's own settings."
    )
    return [f"{lines[0]}, with overrides", "", note, *lines[1:]]


def _overrides_label(summary: dict[str, Any]) -> str | None:
    """The line a plot carries above its title when ``--set`` changed every run (else None)."""
    text = overrides_text(summary.get("sets", {}))
    return f"with overrides: {text}" if text else None


def _not_finished(records: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        f"- {r['run_dir']}: {r['status']}{outcome_note(r)}" for r in records if r["status"] != "finished"
    ]
    return ["", "Runs not finished:", "", *lines] if lines else []


def summarize_flatness(
    runs: Sequence[ExperimentRun], outcomes: dict[str, dict[str, Any]], root: Path, common: dict[str, Any]
) -> dict[str, Any]:
    """experiment.json of ``flatness``: per pair and regulariser, the first task's final accuracy
    and forgetting (mean, std over the finished seeds), their means over pairs, and every run."""
    records = _run_records(runs, outcomes, root, flatness_metrics)
    pairs = list(dict.fromkeys(r["pair"] for r in records))
    orders = {r.tags["pair"]: r.config["run"]["class_order"] for r in runs}
    keys = {"first_task_accuracy": "first_task_accuracy", "first_task_forgetting": "forgetting"}
    rows = []
    for pair in pairs:
        cells = {
            reg: _cell([r for r in records if r["pair"] == pair and r["regulariser"] == reg], keys)
            for reg in REGULARISERS
        }
        rows.append({"pair": pair, "tasks": [pair, pair + 1], "class_order": orders[pair], "cells": cells})
    mean_over_pairs = {}
    for reg in REGULARISERS:
        accuracy = [row["cells"][reg]["first_task_accuracy_mean"] for row in rows]
        forgetting = [row["cells"][reg]["forgetting_mean"] for row in rows]
        mean_over_pairs[reg] = {
            "first_task_accuracy": _mean_std([a for a in accuracy if a is not None])[0],
            "forgetting": _mean_std([f for f in forgetting if f is not None])[0],
            "pairs": sum(a is not None for a in accuracy),
        }
    return {
        **common,
        "method": FLATNESS_METHOD,
        "pairs": pairs,
        "regularisers": list(REGULARISERS),
        "metric": "final Class-IL test accuracy (%) on the first task of each two-task sequence",
        "rows": rows,
        "mean_over_pairs": mean_over_pairs,
        "runs": records,
    }


def flatness_markdown(summary: dict[str, Any]) -> str:
    """The table of ``flatness``: one row per pair, one column per regulariser."""
    lines = [
        f"# Flatness: the stable-regime study on {summary['benchmark']} (X-DER paper Sec. 6.2)",
        "",
        "Two-task sequences of adjacent tasks (k, k+1), trained with er_flat: the first task with "
        "cross-entropy plus the regulariser (none: the plastic regime), the second with ER. Each cell: "
        "the final Class-IL test accuracy (%) on the FIRST task of the pair, mean ± std over seeds "
        f"{', '.join(map(str, summary['seeds']))}; in brackets, its forgetting (its accuracy after its "
        "own task minus the final one).",
        "",
        "| pair | " + " | ".join(REGULARISER_LABELS[r] for r in REGULARISERS) + " |",
        "|---|" + "---:|" * len(REGULARISERS),
    ]
    for row in summary["rows"]:
        cells = []
        for reg in REGULARISERS:
            c = row["cells"][reg]
            cells.append(
                f"{_fmt_stat(c['first_task_accuracy_mean'], c['first_task_accuracy_std'])} "
                f"({_fmt_stat(c['forgetting_mean'], c['forgetting_std'])})"
                if c["seeds_finished"]
                else "-"
            )
        lines.append(f"| {row['pair']} (tasks {row['pair']}→{row['pair'] + 1}) | " + " | ".join(cells) + " |")
    means = summary["mean_over_pairs"]
    lines.append(
        "| mean over pairs | "
        + " | ".join(
            f"{_fmt(means[r]['first_task_accuracy'])} ({_fmt(means[r]['forgetting'])})" for r in REGULARISERS
        )
        + " |"
    )
    return "\n".join(_with_overrides(lines, summary) + _not_finished(summary["runs"])) + "\n"


def summarize_class_order(
    runs: Sequence[ExperimentRun], outcomes: dict[str, dict[str, Any]], root: Path, common: dict[str, Any]
) -> dict[str, Any]:
    """experiment.json of ``class-order``: per method and order, FAA and FF (mean, std over the
    finished seeds), the FAA difference reversed minus natural, and every run."""
    records = _run_records(runs, outcomes, root, _faa_metrics)
    methods = list(dict.fromkeys(r["method"] for r in records))
    rows = []
    for method in methods:
        cells = {
            order: _cell(
                [r for r in records if r["method"] == method and r["order"] == order],
                {"faa": "faa", "ff": "ff"},
            )
            for order in ORDERS
        }
        natural, reverse = cells["natural"]["faa_mean"], cells["reversed"]["faa_mean"]
        difference = None if natural is None or reverse is None else reverse - natural
        rows.append({"method": method, "cells": cells, "faa_reversed_minus_natural": difference})
    return {
        **common,
        "methods": methods,
        "orders": list(ORDERS),
        "metric": "FAA and FF (%, Class-IL, test)",
        "rows": rows,
        "runs": records,
    }


def class_order_markdown(summary: dict[str, Any]) -> str:
    """The table of ``class-order``: one row per method, one column per order."""
    lines = [
        f"# Class order: forward vs backward on {summary['benchmark']} (X-DER paper App. A)",
        "",
        "FAA (FF) in %, Class-IL on the test split, mean ± std over seeds "
        f"{', '.join(map(str, summary['seeds']))}; natural: the benchmark's class order (forward), "
        "reversed: the backward order; Δ: reversed minus natural FAA.",
        "",
        "| method | natural | reversed | Δ FAA |",
        "|---|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        cells = [
            f"{_fmt_stat(c['faa_mean'], c['faa_std'])} ({_fmt_stat(c['ff_mean'], c['ff_std'])})"
            if c["seeds_finished"]
            else "-"
            for c in (row["cells"][order] for order in ORDERS)
        ]
        difference = row["faa_reversed_minus_natural"]
        delta = "-" if difference is None else f"{difference:+.2f}"
        lines.append(f"| {row['method']} | {' | '.join(cells)} | {delta} |")
    return "\n".join(_with_overrides(lines, summary) + _not_finished(summary["runs"])) + "\n"


def summarize_sensitivity(
    runs: Sequence[ExperimentRun],
    outcomes: dict[str, dict[str, Any]],
    root: Path,
    common: dict[str, Any],
    *,
    method: str,
    preset: str,
    params: Sequence[tuple[str, list[Any]]],
    base_values: dict[str, Any],
) -> dict[str, Any]:
    """experiment.json of ``sensitivity``: per parameter, its base value and per value the test
    FAA and FF (mean, std over the finished seeds), and every run."""
    records = _run_records(runs, outcomes, root, _faa_metrics)
    out = []
    for key, values in params:
        rows = []
        for value in values:
            token = json.dumps(value, sort_keys=True)
            chosen = [
                r for r in records if r["param"] == key and json.dumps(r["value"], sort_keys=True) == token
            ]
            rows.append(
                {
                    "value": value,
                    "is_base": value == base_values.get(key),
                    **_cell(chosen, {"faa": "faa", "ff": "ff"}),
                    "runs": [r["name"] for r in chosen],
                }
            )
        out.append({"key": key, "base_value": base_values.get(key), "rows": rows})
    return {
        **common,
        "method": method,
        "preset": preset,
        "metric": "test FAA (%), Class-IL: selection is not the point, no validation split is held out",
        "params": out,
        "runs": records,
    }


def sensitivity_markdown(summary: dict[str, Any]) -> str:
    """The table of ``sensitivity``: one row per (parameter, value)."""
    lines = [
        f"# Sensitivity of {summary['method']} on {summary['benchmark']} "
        '(X-DER paper App. "Sensitivity analysis of hyperparameters")',
        "",
        "Each parameter varied alone, every other setting at the run's resolved value (preset "
        f"{summary['preset']!r} plus --set). Test FAA (FF) in %, Class-IL, mean ± std over seeds "
        f"{', '.join(map(str, summary['seeds']))}: selection is not the point here, so the test split is "
        "reported and no validation split is held out. Base values (what the runs use otherwise): "
        + ", ".join(f"{p['key']} = {json.dumps(p['base_value'])}" for p in summary["params"])
        + ".",
        "",
        "| parameter | value | test FAA | FF | seeds |",
        "|---|---:|---:|---:|---:|",
    ]
    for param in summary["params"]:
        for row in param["rows"]:
            value = json.dumps(row["value"]) + (" (base)" if row["is_base"] else "")
            lines.append(
                f"| {param['key']} | {value} | {_fmt_stat(row['faa_mean'], row['faa_std'])} | "
                f"{_fmt_stat(row['ff_mean'], row['ff_std'])} | {row['seeds_finished']}/{row['seeds']} |"
            )
    return "\n".join(_with_overrides(lines, summary) + _not_finished(summary["runs"])) + "\n"


TABLE_MODES = ("judged", "orientation", "ours only")
TWO_SE_RULE = (
    "> 2 SE: whether |Δ| exceeds two standard errors of the difference, SE = σ·√(1/n + 1/n_p), with σ "
    "the published std where the paper gives one, else our sample std; n our seeds; n_p the paper's "
    "run count where it states one, else the published value counts as exact (1/n_p left out); "
    "- where undefined (one seed of ours and no published std)"
)
TABLE_CSV_COLUMNS = (
    "entry",
    "method",
    "row",
    "preset",
    "buffer_size",
    "n",
    "seeds",
    *(
        f"{metric}_{part}"
        for metric in ("faa", "ff")
        for part in (
            "mean",
            "std",
            "published",
            "published_std",
            "difference",
            "standard_error",
            "sigma_from",
            "exceeds_two_se",
        )
    ),
    "published_seeds",
    "source",
    "mode",
    "overrides",
)
"""The header of ``table.csv``: one line per entry (empty cells where a value is undefined)."""


def _metric_cell(
    values: Sequence[float], published: PublishedResult | None, metric: str, judged: bool
) -> dict:
    """Ours over seeds for one metric; the published value where there is one; the difference
    and the 2-SE judgement (:func:`xder_eval.compare_to_published`) when ``judged``."""
    mean, std = _mean_std(values)
    cell: dict[str, Any] = {"mean": mean, "std": std, "n": len(values), "values": list(values)}
    cell |= dict.fromkeys(
        ("published", "published_std", "difference", "standard_error", "sigma_from", "exceeds_two_se")
    )
    value = None if published is None else getattr(published, metric)
    if value is None:
        return cell
    cell |= {"published": value, "published_std": getattr(published, f"{metric}_std")}
    if judged:
        c = compare_to_published(
            values, value, published_std=cell["published_std"], published_seeds=published.seeds
        )
        cell |= {
            "difference": c.difference,
            "standard_error": c.standard_error,
            "sigma_from": c.sigma_from,
            "exceeds_two_se": c.exceeds_two_se,
        }
    return cell


def summarize_table(
    runs: Sequence[ExperimentRun],
    outcomes: dict[str, dict[str, Any]],
    root: Path,
    common: dict[str, Any],
    *,
    entries: Sequence[TableEntry],
    buffer_size: int,
) -> dict[str, Any]:
    """experiment.json of ``table``: per entry our FAA and FF (mean, std over the finished seeds),
    the published values, the differences and their 2-SE judgement, the papers' claims about the
    table checked on our rows (:func:`xder_cli.runs.claims.check_table_claims`, whatever the mode: they
    compare our rows with each other), and every run.

    ``mode``: ``judged`` (paper protocol, published values), ``orientation`` (another protocol:
    published values shown, nothing judged) or ``ours only`` (nothing published).
    """
    records = _run_records(runs, outcomes, root, _faa_metrics)
    published = [e.published for e in entries if e.published is not None]
    if not published:
        mode = "ours only"
    else:
        mode = "judged" if common["protocol"] == PAPER_PROTOCOL else "orientation"
    presets = {run.tags["entry"]: run.config["run"]["preset"] for run in runs}
    rows = []
    per_seed: dict[str, dict[str, list[float]]] = {"faa": {}, "ff": {}}
    # the claims are about the published table's rows (all of them, even where --methods trains some)
    table_rows = [p.entry for p in published_table(common["benchmark"], buffer_size)]
    for entry in entries:
        chosen = [r for r in records if r["entry"] == entry.name]
        done = [r for r in chosen if r["status"] == "finished"]
        row: dict[str, Any] = {
            "entry": entry.name,
            "method": entry.method,
            "row": entry.published.row if entry.published else entry.name,
            "preset": presets.get(entry.name),
            "buffered": entry.buffered,
            "seeds_finished": len(done),
            "seeds": len(chosen),
            "published_seeds": entry.published.seeds if entry.published else None,
            "source": entry.published.source if entry.published else None,
        }
        for metric in ("faa", "ff"):
            values = [float(r[metric]) for r in done if r[metric] is not None]
            row[metric] = _metric_cell(values, entry.published, metric, judged=mode == "judged")
            per_seed[metric][entry.name] = values
        rows.append(row)
    return {
        **common,
        "buffer_size": buffer_size,
        "mode": mode,
        "sources": list(dict.fromkeys(p.source for p in published)),
        "metric": "FAA and FF (%, Class-IL, test); published: the paper protocol's",
        "rule": TWO_SE_RULE if mode == "judged" else None,
        "rows": rows,
        "claims": check_table_claims(common["benchmark"], buffer_size, table_rows, per_seed),
        "runs": records,
    }


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def table_markdown(summary: dict[str, Any]) -> str:
    """``table.md``: one row per entry; which columns depends on the summary's ``mode``."""
    mode, benchmark, protocol = summary["mode"], summary["benchmark"], summary["protocol"]
    on = benchmark if protocol == PAPER_PROTOCOL else f"{benchmark}, protocol {protocol} (a quick table)"
    seeds = ", ".join(map(str, summary["seeds"]))
    lines = [
        f"# Table: {on}, buffer {summary['buffer_size']}",
        "",
        "Ours: final average accuracy FAA and final forgetting FF (Class-IL, test split, %), mean ± sample "
        f"std over the finished seeds of {seeds} (n); each method with its preset (the preset column).",
    ]
    sources = "; ".join(summary["sources"])
    if mode == "ours only":
        lines.append(
            f"No published results for {benchmark}: ours alone, for the methods of the X-DER paper's Table 1."
        )
        header = ["method", "preset", "FAA", "FF", "n"]
    elif mode == "orientation":
        lines.append(
            f"Published: {sources}, on the paper protocol: shown for orientation only, since protocol "
            f"{protocol} differs from the paper's; no difference is judged."
        )
        header = ["method", "preset", "FAA", "FAA published", "FF", "FF published", "n"]
    else:
        lines.append(f"Published: {sources}. Δ = ours − published; {TWO_SE_RULE}.")
        header = ["method", "preset", "FAA", "FAA published", "Δ FAA", "> 2 SE"]
        header += ["FF", "FF published", "Δ FF", "> 2 SE", "n"]
    lines += ["", "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for row in summary["rows"]:
        cells = [row["entry"], row["preset"] or "-"]
        for metric in ("faa", "ff"):
            c = row[metric]
            cells.append(_fmt_stat(c["mean"], c["std"]))
            if mode != "ours only":
                cells.append(_fmt_stat(c["published"], c["published_std"]))
            if mode == "judged":
                cells += [_signed(c["difference"]), _flag(c["exceeds_two_se"])]
        cells.append(f"{row['seeds_finished']}/{row['seeds']}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += claims_markdown(summary.get("claims", []))
    return "\n".join(_with_overrides(lines, summary) + _not_finished(summary["runs"])) + "\n"


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def table_csv(summary: dict[str, Any]) -> str:
    """``table.csv`` under :data:`TABLE_CSV_COLUMNS`: numbers to 4 decimals, ``yes``/``no`` for
    the 2-SE judgement, empty where undefined."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_CSV_COLUMNS)
    parts = ("mean", "std", "published", "published_std", "difference", "standard_error")
    parts += ("sigma_from", "exceeds_two_se")
    for row in summary["rows"]:
        line = [row["entry"], row["method"], row["row"], row["preset"], summary["buffer_size"]]
        line += [row["seeds_finished"], ";".join(map(str, summary["seeds"]))]
        line += [row[metric][part] for metric in ("faa", "ff") for part in parts]
        line += [row["published_seeds"], row["source"], summary["mode"], overrides_text(summary["sets"])]
        writer.writerow([_csv_value(v) for v in line])
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Plots (xder_eval.plots' figure helper: matplotlib's object API, titles fitted to the figure)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _percent_bars_axis(ax: Any, cells: Sequence[dict[str, Any]], metric: str) -> None:
    """A 0-100% axis for bars of ``cells``' ``<metric>_mean`` (± ``_std``), room left for the
    tallest error bar; ticks to 100."""
    tops = [
        _nan(c[f"{metric}_mean"]) + (_nan(c[f"{metric}_std"]) if c[f"{metric}_std"] else 0.0) for c in cells
    ]
    top = max([100.0, *(t for t in tops if math.isfinite(t))])
    ax.set_ylim(0, top + 3)
    ax.set_yticks(range(0, 101, 20))
    ax.grid(axis="y", alpha=0.3)


def plot_flatness(summary: dict[str, Any], path: Path) -> None:
    """First-task accuracy per pair, one series per regulariser (plain SGD greyed out, as in the
    paper): a radar plot, the paper's, with three pairs or more; grouped bars with fewer."""
    rows = summary["rows"]
    labels = [f"{row['pair']}→{row['pair'] + 1}" for row in rows]
    colours = {"none": "0.55", "lfr": "tab:blue", "llr": "tab:orange"}
    radar = len(rows) >= 3
    if radar:
        fig = new_figure(6, 6.3)
        ax = fig.add_subplot(projection="polar")
        angles = [2 * math.pi * i / len(rows) for i in range(len(rows))]
        for reg in REGULARISERS:
            values = [_nan(row["cells"][reg]["first_task_accuracy_mean"]) for row in rows]
            ax.plot([*angles, angles[0]], [*values, values[0]], marker="o", color=colours[reg], label=reg)
            ax.fill([*angles, angles[0]], [*values, values[0]], color=colours[reg], alpha=0.08)
        ax.set_xticks(angles, [f"tasks {label}" for label in labels])
        ax.set_ylim(0, 100)
        ax.set_rlabel_position(90 + 180 / len(rows))  # the radial scale between two pairs' spokes
        ax.legend(
            title="regulariser", loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize="small"
        )
    else:
        fig = new_figure(max(5.5, 1.8 + 1.6 * len(rows)), 4)
        ax = fig.add_subplot()
        width = 0.8 / len(REGULARISERS)
        for i, reg in enumerate(REGULARISERS):
            cells = [row["cells"][reg] for row in rows]
            ax.bar(
                [p + (i - 1) * width for p in range(len(rows))],
                [_nan(c["first_task_accuracy_mean"]) for c in cells],
                width,
                yerr=[_nan(c["first_task_accuracy_std"]) for c in cells],
                color=colours[reg],
                capsize=3,
                label=reg,
            )
        ax.set_xticks(range(len(rows)), [f"tasks {label}" for label in labels])
        ax.set_xlabel("pair of adjacent tasks (first → second)")
        ax.set_ylabel("first-task accuracy (%)")
        _percent_bars_axis(
            ax, [row["cells"][reg] for row in rows for reg in REGULARISERS], "first_task_accuracy"
        )
        legend_outside(ax, title="regulariser")
    title = f"{summary['benchmark']}: final accuracy (%) on each pair's first task"
    ax.set_title(title, fontsize="medium", pad=32 if radar else None)  # clear of the top spoke's label
    save_figure(fig, path, run=_overrides_label(summary))


def plot_class_order(summary: dict[str, Any], path: Path) -> None:
    """Grouped bars of FAA (± std) per method, one bar per class order."""
    rows = summary["rows"]
    fig = new_figure(max(5.0, 1.8 + 1.4 * len(rows)), 4)
    ax = fig.add_subplot()
    width = 0.38
    for i, order in enumerate(ORDERS):
        cells = [row["cells"][order] for row in rows]
        ax.bar(
            [p + (i - 0.5) * width for p in range(len(rows))],
            [_nan(c["faa_mean"]) for c in cells],
            width,
            yerr=[_nan(c["faa_std"]) for c in cells],
            capsize=3,
            label=order,
        )
    ax.set_xticks(range(len(rows)), [row["method"] for row in rows])
    ax.set_xlabel("method")
    ax.set_ylabel("FAA (%)")
    _percent_bars_axis(ax, [row["cells"][order] for row in rows for order in ORDERS], "faa")
    legend_outside(ax, title="class order")
    ax.set_title(f"{summary['benchmark']}: forward vs backward class order", fontsize="medium")
    save_figure(fig, path, run=_overrides_label(summary))


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_sensitivity(summary: dict[str, Any], path: Path) -> None:
    """One panel per parameter: test FAA (mean ± std over seeds) against its value, the base
    value dashed (named "(base)" on a categorical axis); a log axis for positive values spanning
    a factor of 10 or more. The panels share one FAA range, chosen from the data."""
    params = summary["params"]
    fig = new_figure(4.2 * len(params), 3.8)
    drawn = [
        _nan(row["faa_mean"]) + sign * (_nan(row["faa_std"]) if row["faa_std"] else 0.0)
        for param in params
        for row in param["rows"]
        for sign in (-1, 1)
    ]
    for i, param in enumerate(params):
        ax = fig.add_subplot(1, len(params), i + 1)
        values = [row["value"] for row in param["rows"]]
        numeric = _numeric(values)
        xs = [float(v) for v in values] if numeric else list(range(len(values)))
        ax.errorbar(
            xs,
            [_nan(row["faa_mean"]) for row in param["rows"]],
            yerr=[_nan(row["faa_std"]) for row in param["rows"]],
            marker="o",
            capsize=3,
        )
        base = param["base_value"]
        if numeric:
            if min(xs) > 0 and max(xs) >= 10 * min(xs):
                ax.set_xscale("log")
            if _numeric([base]) and base is not None:
                ax.axvline(float(base), color="0.5", linestyle="--", label=f"base {base}")
                ax.legend(fontsize="small")
        else:
            names = [json.dumps(v) + (" (base)" if v == base else "") for v in values]
            crowded = sum(len(name) for name in names) > 30
            ax.set_xticks(xs, names, rotation=30 if crowded else 0, ha="right" if crowded else "center")
            ax.set_xlim(-0.5, len(xs) - 0.5)
        set_percent_axis(ax, drawn)
        ax.set_xlabel(param["key"])
        ax.set_ylabel("test FAA (%)")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{summary['method']} on {summary['benchmark']}: one-at-a-time sensitivity (test FAA)",
        fontsize="medium",
    )
    save_figure(fig, path, run=_overrides_label(summary))


def plot_table(summary: dict[str, Any], path: Path) -> None:
    """Ours against published, one point per entry: our mean ± std over seeds (vertical bars)
    against the published value (± its std where given), the diagonal where they agree; one panel
    per metric that has published values. With nothing published: our FAA per entry as bars."""
    rows = summary["rows"]
    where = f"{summary['benchmark']} m{summary['buffer_size']}"
    if summary["mode"] == "ours only":
        fig = new_figure(max(5.0, 1.0 + 0.6 * len(rows)), 4)
        ax = fig.add_subplot()
        ax.bar(
            range(len(rows)),
            [_nan(r["faa"]["mean"]) for r in rows],
            yerr=[_nan(r["faa"]["std"]) for r in rows],
            capsize=3,
        )
        ax.set_xticks(range(len(rows)), [r["entry"] for r in rows], rotation=45, ha="right")
        ax.set_xlabel("method (table entry)")
        ax.set_ylabel("FAA (%)")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{where}: ours (no published results)", fontsize="medium")
        save_figure(fig, path, run=_overrides_label(summary))
        return
    metrics = [m for m in ("faa", "ff") if any(r[m]["published"] is not None for r in rows)]
    fig = new_figure(5.0 * len(metrics), 5.0)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        for index, r in enumerate(rows):  # one colour per entry, the same in both panels
            c = r[metric]
            if c["published"] is None:
                continue
            ax.errorbar(
                c["published"],
                _nan(c["mean"]),
                yerr=_nan(c["std"]),
                xerr=_nan(c["published_std"]),
                marker="o",
                capsize=3,
                linestyle="none",
                color=f"C{index % 10}",
            )
            ax.annotate(
                r["entry"],
                (c["published"], _nan(c["mean"])),
                fontsize="x-small",
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.plot([0, 100], [0, 100], color="0.6", linestyle="--", linewidth=1)
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"{metric.upper()} published (%)")
        ax.set_ylabel(f"{metric.upper()} ours (%)")
        ax.grid(alpha=0.3)
    title = f"{where}: ours against published"
    if summary["mode"] == "orientation":
        title += f"\n(protocol {summary['protocol']}: published values for orientation only)"
    fig.suptitle(title, fontsize="medium")
    save_figure(fig, path, run=_overrides_label(summary))


# ---------------------------------------------------------------------------------------------
# The command


def _flag_checks(args: Any) -> None:
    specific = {"--pairs": ("flatness", args.pairs), "--methods": ("class-order", args.methods)}
    specific |= {"--method": ("sensitivity", args.method), "--param": ("sensitivity", args.param)}
    specific |= {"--buffer-size": ("table", args.buffer_size)}
    for flag, (owner, value) in specific.items():
        owners = ("class-order", "table") if flag == "--methods" else (owner,)
        if value is not None and args.name not in owners:
            raise UsageError(f"{flag} is an option of experiment {' and '.join(owners)}, not of {args.name}")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise UsageError(f"--max-concurrent must be >= 1, got {args.max_concurrent}")
    if args.gpus_per_run < 0:
        raise UsageError(f"--gpus-per-run must be >= 0, got {args.gpus_per_run}")


@dataclass(frozen=True)
class _Protocol:
    """A planned experiment: its runs, and how to summarise, tabulate, plot and report them."""

    runs: list[ExperimentRun]
    summarize: Callable[[dict[str, dict[str, Any]], Path], dict[str, Any]]  # (outcomes, runs root)
    markdown: Callable[[dict[str, Any]], str]
    plot: Callable[[dict[str, Any], Path], None]
    describe: Callable[[dict[str, Any] | None], str]  # a finished run's results.json -> its figures
    markdown_file: str = EXPERIMENT_MD
    extra_files: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = ()  # (name, summary -> text)


def _flatness_protocol(
    args: Any, seeds: tuple[int, ...], sets: list[tuple[str, str, Any]], common: dict[str, Any]
) -> _Protocol:
    from xder_data import load_benchmark

    owned = {
        "run.class_order": "the experiment sets it: each pair's order",
        "train.tasks": "the experiment sets it: 2, the pair",
        "method.regulariser": "the experiment sets it: none, lfr and llr",
    }
    _check_owned(sets, _OWNED_BY_ALL | owned)
    base = _config(FLATNESS_METHOD, args.benchmark, seeds[0], sets, args.protocol)
    classes_per_task = load_benchmark(
        args.benchmark, base["run"]["data_root"], **base.get("benchmark", {})
    ).classes_per_task
    n_tasks = len(classes_per_task)
    if n_tasks < 2:
        raise UsageError(f"{args.benchmark} has {n_tasks} task: the flatness study needs two or more")
    pairs = _int_list(args.pairs, "--pairs") if args.pairs is not None else tuple(range(n_tasks - 1))
    runs = plan_flatness(args.benchmark, classes_per_task, pairs, seeds, sets, args.protocol)

    def describe(results: dict[str, Any] | None) -> str:
        m = flatness_metrics(results)
        return (
            f"first-task accuracy {_fmt(m['first_task_accuracy'])}, "
            f"forgetting {_fmt(m['first_task_forgetting'])}"
        )

    return _Protocol(
        runs,
        lambda outcomes, root: summarize_flatness(runs, outcomes, root, common),
        flatness_markdown,
        plot_flatness,
        describe,
    )


def _class_order_protocol(
    args: Any, seeds: tuple[int, ...], sets: list[tuple[str, str, Any]], common: dict[str, Any]
) -> _Protocol:
    _check_owned(sets, _OWNED_BY_ALL | {"run.class_order": "the experiment sets it: natural and reversed"})
    methods = _names(args.methods, "--methods") if args.methods is not None else DEFAULT_METHODS
    runs = plan_class_order(args.benchmark, methods, seeds, sets, args.protocol)

    def describe(results: dict[str, Any] | None) -> str:
        m = _faa_metrics(results)
        return f"FAA {_fmt(m['faa'])}, FF {_fmt(m['ff'])}"

    return _Protocol(
        runs,
        lambda outcomes, root: summarize_class_order(runs, outcomes, root, common),
        class_order_markdown,
        plot_class_order,
        describe,
    )


def _sensitivity_protocol(
    args: Any, seeds: tuple[int, ...], sets: list[tuple[str, str, Any]], common: dict[str, Any]
) -> _Protocol:
    if not args.param:
        raise UsageError("sensitivity needs one --param KEY=V1,V2,... or more, e.g. method.alpha=0.1,0.3")
    params = [parse_param(text) for text in args.param]
    keys = [key for key, _ in params]
    if len(set(keys)) != len(keys):
        raise UsageError(f"--param {next(k for k in keys if keys.count(k) > 1)} is given twice")
    for key in keys:
        if key in _OWNED_BY_ALL:
            raise UsageError(f"--param {key}: {_OWNED_BY_ALL[key]}")
    _check_owned(sets, _OWNED_BY_ALL | {key: "it is varied by --param: give it one way" for key in keys})
    method = args.method or DEFAULT_SENSITIVITY_METHOD
    runs, base_values, preset = plan_sensitivity(method, args.benchmark, params, seeds, sets, args.protocol)

    def describe(results: dict[str, Any] | None) -> str:
        m = _faa_metrics(results)
        return f"test FAA {_fmt(m['faa'])}, FF {_fmt(m['ff'])}"

    return _Protocol(
        runs,
        lambda outcomes, root: summarize_sensitivity(
            runs,
            outcomes,
            root,
            common,
            method=method,
            preset=preset,
            params=params,
            base_values=base_values,
        ),
        sensitivity_markdown,
        plot_sensitivity,
        describe,
    )


def _table_protocol(
    args: Any, seeds: tuple[int, ...], sets: list[tuple[str, str, Any]], common: dict[str, Any]
) -> _Protocol:
    if args.buffer_size is None:
        raise UsageError("experiment table needs --buffer-size M, the buffer size of the published table")
    _check_owned(sets, _OWNED_BY_ALL | {"method.buffer_size": "the experiment sets it: use --buffer-size"})
    methods = _names(args.methods, "--methods") if args.methods is not None else None
    entries = table_entries(args.benchmark, args.buffer_size, args.protocol, methods)
    if not any(e.published for e in entries):
        print(
            f"note: no published results for {args.benchmark}: training the X-DER paper's Table 1 methods "
            f"({', '.join(e.name for e in entries)}) and tabulating ours alone",
            flush=True,
        )
    elif args.protocol != PAPER_PROTOCOL:
        print(
            f"note: protocol {args.protocol} is not the paper's: a quick table, the published values shown "
            "for orientation only (no difference judged)",
            flush=True,
        )
    runs = plan_table(args.benchmark, args.buffer_size, entries, seeds, sets, args.protocol)

    def describe(results: dict[str, Any] | None) -> str:
        m = _faa_metrics(results)
        return f"FAA {_fmt(m['faa'])}, FF {_fmt(m['ff'])}"

    return _Protocol(
        runs,
        lambda outcomes, root: summarize_table(
            runs, outcomes, root, common, entries=entries, buffer_size=args.buffer_size
        ),
        table_markdown,
        plot_table,
        describe,
        markdown_file=TABLE_MD,
        extra_files=((TABLE_CSV, table_csv),),
    )


_PROTOCOLS = {
    "flatness": _flatness_protocol,
    "class-order": _class_order_protocol,
    "sensitivity": _sensitivity_protocol,
    "table": _table_protocol,
}


def command_experiment(args: Any) -> int:
    """Entry point of ``xder-run experiment NAME`` (``args`` from the argument parser): plan
    every run (any configuration mistake is a usage error before anything trains), train the
    unfinished ones, write the summary after each, then the plot; print the table."""
    _flag_checks(args)
    args.protocol = args.protocol or PAPER_PROTOCOL
    seeds = _int_list(args.seeds, "--seeds")
    sets = list(args.set or [])
    common: dict[str, Any] = {
        "experiment": args.name,
        "benchmark": args.benchmark,
        "protocol": args.protocol,
        "seeds": list(seeds),
        "sets": _dotted(sets),
    }
    if args.logger:
        check_loggers(args.logger)
        sets.append(("run", "loggers", list(args.logger)))
    protocol = _PROTOCOLS[args.name](args, seeds, sets, common)
    out = Path(args.out)
    root = out / RUNS
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output folder {out}: {error.strerror}") from error
    texts = ((protocol.markdown_file, protocol.markdown), *protocol.extra_files)
    files = [EXPERIMENT_JSON, *(name for name, _ in texts), PLOT[args.name]]

    def write(outcomes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        retried = sum(trial_retries(outcome) for outcome in outcomes.values())
        summary = protocol.summarize(outcomes, root) | {"files": files, "retries": retried}
        rundir.write_json(out / EXPERIMENT_JSON, summary)
        for name, render in texts:
            rundir.atomic_write_bytes(out / name, render(summary).encode())
        return summary

    where = f" at buffer {args.buffer_size}" if args.name == "table" else ""
    print(f"experiment {args.name} on {args.benchmark}{where} -> {out}", flush=True)
    outcomes = execute(
        protocol.runs,
        root,
        describe=protocol.describe,
        on_change=write,
        use_ray=args.name == "sensitivity" or args.address is not None or args.max_concurrent is not None,
        max_concurrent=args.max_concurrent,
        address=args.address,
        gpus_per_run=args.gpus_per_run,
    )
    summary = write(outcomes)
    protocol.plot(summary, out / PLOT[args.name])
    sys.stdout.write("\n" + protocol.markdown(summary))
    print(f"\nwrote {', '.join(files)} to {out}")
    elsewhere = sum(outcome["status"] == RUNNING_ELSEWHERE for outcome in outcomes.values())
    if elsewhere:
        print(
            f"note: {elsewhere} run(s) are being trained by another process (this experiment started "
            "twice?): run it again after that process ends to include them"
        )
    if summary["retries"]:
        print(retry_note(summary["retries"], "run"))
    failed = sum(outcome["status"] == "failed" for outcome in outcomes.values())
    return 1 if failed == len(protocol.runs) else 0
