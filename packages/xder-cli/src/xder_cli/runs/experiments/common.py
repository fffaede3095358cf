"""What the experiments share: the options of ``xder-run experiment``
(:class:`ExperimentOptions`), the :class:`Experiment` protocol and a planned experiment
(:class:`PlannedExperiment`, whose runs are :class:`~xder_cli.runs.scheduler.PlannedRun`); run
configurations and the settings an experiment owns; running the planned runs (:func:`execute`,
:func:`run_experiment`, through :mod:`xder_cli.runs.scheduler`); and the records, cells, overrides
and number formats of their summaries and tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from xder_cli.runs import rundir
from xder_cli.runs._stats import fmt, fmt_stat, mean_std
from xder_cli.runs.defaults import EXPERIMENT_RUNS
from xder_cli.runs.defaults import EXPERIMENT_SEEDS as DEFAULT_SEEDS
from xder_cli.runs.errors import RunDirError, SettingError, option
from xder_cli.runs.records import Config, Outcome, Results, Settings, own_metric, results_scenario
from xder_cli.runs.scheduler import LogOutput, PlannedRun, outcome_note, run_retries, train_runs
from xder_cli.runs.settings import Notify, RunSettings, build_plan, defines, resolve_config, settings_text
from xder_data import DEFAULT_PROTOCOL, canonical_protocol
from xder_methods import SCENARIO_ACCURACY

__all__ = [
    "DEFAULT_SEEDS",
    "EXPERIMENT_JSON",
    "EXPERIMENT_MD",
    "OWNED_BY_ALL",
    "RUNS",
    "Common",
    "Experiment",
    "ExperimentOptions",
    "Metric",
    "PlannedExperiment",
    "RunRecord",
    "Summary",
    "cell",
    "check_owned",
    "execute",
    "faa_metrics",
    "fmt",
    "fmt_stat",
    "mean_std",
    "not_finished",
    "or_nan",
    "overrides_label",
    "overrides_text",
    "percent_bars_axis",
    "run_config",
    "run_experiment",
    "run_records",
    "with_overrides",
]

EXPERIMENT_JSON, EXPERIMENT_MD, RUNS = "experiment.json", "experiment.md", EXPERIMENT_RUNS


class Common(TypedDict):
    """The start of every experiment's summary: what it is, on what, with which seeds and
    settings (:func:`xder_cli.runs.experiments.plan_experiment`)."""

    experiment: str
    benchmark: str
    protocol: str
    seeds: list[int]
    sets: Settings


Summary = dict[str, Any]
"""An experiment's summary, ``experiment.json``: :class:`Common`'s keys, the experiment's own
(its cells, rows, parameters: each experiment's shape), its ``runs`` (:data:`RunRecord`), then
``files`` and ``retries``."""

RunRecord = dict[str, Any]
"""``experiment.json``'s record of one run (:func:`run_records`): its name, folder, seed and
outcome, with the tags and the metrics of its experiment (each experiment's own keys)."""

Metric = Callable[[Results | None], dict[str, float | None]]
"""The figures an experiment reads from a run's ``results.json`` (None where it has none: each
figure None)."""


@dataclass(frozen=True, kw_only=True)
class ExperimentOptions:
    """What ``xder-run experiment`` asks of an experiment, parsed: the settings every experiment
    takes, then those only some take (:attr:`Experiment.options` names which; unset: None).

    Attributes:
        benchmark: the benchmark of every run.
        protocol: the benchmark's training protocol.
        seeds: the seeds of every setting.
        sets: the settings of every run, dotted keys (``--set``, and the flags that are settings).
        loggers: experiment trackers of every run (``run.loggers``; not an override).
        pairs: flatness: the pairs (k, k+1) to run, by k (None: all).
        methods: class-order: the methods; table: some of the table's rows, or any registered
            methods (None: the default).
        method: sensitivity: the method (None: the default).
        params: sensitivity: ``(section.key, values)`` of each parameter varied.
        buffer_size: table: the buffer size of the published table.
        paper: table: whose table's methods are the rows (``der``, ``x-der``; None: the benchmark's
            published table's paper, else the X-DER paper's).
    """

    benchmark: str
    protocol: str = DEFAULT_PROTOCOL
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    sets: Mapping[str, Any] = field(default_factory=dict)
    loggers: tuple[str, ...] = ()
    pairs: tuple[int, ...] | None = None
    methods: tuple[str, ...] | None = None
    method: str | None = None
    params: tuple[tuple[str, list[Any]], ...] = ()
    buffer_size: int | None = None
    paper: str | None = None

    def run_sets(self) -> Settings:
        """The settings of every run: ``sets``, then ``run.loggers`` where there are loggers."""
        return {**self.sets, **({"run.loggers": list(self.loggers)} if self.loggers else {})}


@dataclass(frozen=True)
class PlannedExperiment:
    """An experiment planned: its runs, and how to summarise, tabulate, plot and describe them.

    Attributes:
        runs: every run, configured and validated.
        summarize: ``(outcomes, runs root)`` -> the summary (experiment.json, less ``files`` and
            ``retries``).
        markdown: the summary -> its Markdown table.
        plot: ``(summary, path)``: writes the PNG plot.
        describe: a finished run's results.json -> its figures on a progress line.
        plot_file: the plot's file name in the experiment's folder.
        markdown_file: the Markdown table's file name.
        extra_files: ``(name, summary -> text)`` of further files (the table's CSV).
        on_ray: its runs go to Ray even when neither ``max_concurrent`` nor an address asks for it.
        qualifier: words the first line of the command adds after the benchmark
            (`` at buffer 500``).
    """

    runs: list[PlannedRun]
    summarize: Callable[[dict[str, Outcome], Path], Summary]
    markdown: Callable[[Summary], str]
    plot: Callable[[Summary, Path], None]
    describe: Callable[[Results | None], str]
    plot_file: str
    markdown_file: str = EXPERIMENT_MD
    extra_files: tuple[tuple[str, Callable[[Summary], str]], ...] = ()
    on_ray: bool = False
    qualifier: str = ""

    @property
    def files(self) -> list[str]:
        """The files the experiment writes into its folder, in order: experiment.json, the
        Markdown table, the extra files, the plot."""
        return [EXPERIMENT_JSON, self.markdown_file, *(name for name, _ in self.extra_files), self.plot_file]


class Experiment(Protocol):
    """An experiment of ``xder-run experiment NAME`` (registered with
    :func:`xder_cli.runs.experiments.register_experiment`).

    Attributes:
        name: its name on the command line.
        options: the fields of :class:`ExperimentOptions` of its own that it reads (of ``pairs``,
            ``methods``, ``method``, ``params``, ``buffer_size``, ``paper``): their flags are mistakes for the
            experiments that do not name them.
    """

    name: str
    options: frozenset[str]

    def plan(self, options: ExperimentOptions, common: Common, notify: Notify) -> PlannedExperiment:
        """Plan every run (nothing trains): ``common`` is the start of its summary (experiment,
        benchmark, protocol, seeds, sets); ``notify`` hears notes for the user.

        Raises:
            SettingError (and the packages' configuration errors): a run that cannot be configured.
        """
        ...


def check_owned(sets: Mapping[str, Any], owned: dict[str, str]) -> None:
    """The overrides may not touch what the protocol sets itself (``owned``: key -> why, what
    instead, its options written as placeholders: :func:`xder_cli.runs.errors.option`).

    Raises:
        SettingError: an override of a key in ``owned``.
    """
    for name in sets:
        if name in owned:
            raise SettingError(f"{option('overrides')} {name}: {owned[name]}")


OWNED_BY_ALL = {
    "run.seed": f"the experiment sets it: use {option('seeds')}",
    "run.method": f"the experiment sets it: use {option('methods')} (class-order) or {option('method')} "
    "(sensitivity)",
    "run.benchmark": f"the experiment sets it: use {option('benchmark')}",
    "run.protocol": f"the experiment sets it: use {option('protocol')}",
    "run.preset": f"runs use their method's default preset: change its values with {option('overrides')}",
}
"""What every experiment sets itself: key -> why, and what to use instead (placeholders of
:func:`xder_cli.runs.errors.option`; :func:`check_owned`)."""


def run_config(
    method: str,
    benchmark: str,
    seed: int,
    sets: Mapping[str, Any],
    protocol: str,
    *,
    preset: str | None = None,
) -> Config:
    """A run's resolved, validated configuration: ``sets`` (dotted keys) over the method's
    ``preset`` (None: its default preset) and the benchmark's ``protocol``."""
    settings = {"run.seed": seed, **sets}
    config = resolve_config(method, benchmark, protocol=protocol, preset=preset, settings=settings)
    return build_plan(config).config


def _normalised(config: Config) -> Config:
    """A configuration as its config.toml reads back (no None values, lists for tuples), less what
    places or observes the run rather than defines it (:func:`xder_cli.runs.settings.defines`: a
    run moved to another device or data folder is the same run) and empty sections."""
    body = {
        s: {k: v for k, v in values.items() if v is not None and defines(f"{s}.{k}")}
        for s, values in config.items()
    }
    if "protocol" in body.get("run", {}):  # recorded under the protocol's former name, perhaps
        body["run"]["protocol"] = canonical_protocol(body["run"]["protocol"])
    if body.get("run", {}).get("scenario") == RunSettings.scenario:  # the default, or a run from
        del body["run"]["scenario"]  # before the setting: either runs the benchmark's own
    normalised: Config = json.loads(json.dumps({s: values for s, values in body.items() if values}))
    return normalised


def _check_existing(run: PlannedRun, run_dir: Path) -> None:
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
                raise RunDirError(
                    f"{run_dir} was trained with {section}.{key} = {json.dumps(old)}, this experiment "
                    f"asks for {json.dumps(new)}: use another {option('out')}, or delete that run directory"
                )
    raise RunDirError(
        f"{run_dir} holds another configuration: use another {option('out')}"
    )  # pragma: no cover


def _ignore(*args: object) -> None:
    """The default callback: does nothing."""


def execute(
    runs: Sequence[PlannedRun],
    root: Path,
    *,
    describe: Callable[[Results | None], str],
    on_change: Callable[[dict[str, Outcome]], object],
    use_ray: bool,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    on_start: Callable[[int, int], None] = _ignore,
    on_done: Callable[[str, Outcome, str], None] = _ignore,
    log_output: LogOutput | None = None,
) -> dict[str, Outcome]:
    """Train every unfinished run into ``root/<name>`` (resuming from a checkpoint where there is
    one) and return each run's outcome (:func:`xder_cli.runs.scheduler.run_outcome`).

    Runs go to Ray with ``use_ray`` (a local instance, or the cluster at ``address``), else they
    run one after the other in this process (:func:`xder_cli.runs.scheduler.train_runs`).
    ``on_change(outcomes)`` is called once the finished runs are known and after each run ends.

    Args:
        on_start: ``(runs, finished)`` once the finished runs are known, before any trains.
        on_done: ``(name, outcome, figures)`` as each run ends: ``figures`` is `` | `` and what
            ``describe`` makes of its results.json when it finished, else empty.
        log_output: what each run shows, into its ``log.txt``
            (:data:`xder_cli.runs.scheduler.LogOutput`).

    Raises:
        RunDirError: a run directory left by an earlier invocation holds another configuration.
    """
    for run in runs:
        _check_existing(run, root / run.name)

    def started(outcomes: dict[str, Outcome], pending: list[PlannedRun]) -> None:
        on_start(len(runs), len(runs) - len(pending))
        on_change(outcomes)

    def done(name: str, outcome: Outcome, outcomes: dict[str, Outcome]) -> None:
        text = describe(rundir.complete_results(root / name)) if outcome["status"] == "finished" else ""
        on_done(name, outcome, f" | {text}" if text else "")
        on_change(outcomes)

    return train_runs(
        runs,
        root,
        use_ray=use_ray,
        on_start=started,
        on_done=done,
        max_concurrent=max_concurrent,
        address=address,
        gpus_per_run=gpus_per_run,
        log_output=log_output,
    )


def run_experiment(
    planned: PlannedExperiment,
    out: Path,
    *,
    use_ray: bool = False,
    max_concurrent: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    on_start: Callable[[int, int], None] = _ignore,
    on_done: Callable[[str, Outcome, str], None] = _ignore,
    log_output: LogOutput | None = None,
) -> tuple[Summary, dict[str, Outcome]]:
    """Train the planned runs not finished yet into ``out/runs`` (:func:`execute`, which takes
    ``use_ray`` and the rest), writing the summary into ``out`` before the first and after each
    (experiment.json with ``files`` and ``retries``, the Markdown table, the extra files), then
    the plot (:attr:`PlannedExperiment.files`).

    Returns:
        The summary and each run's outcome, by name.
    """
    root = out / RUNS
    root.mkdir(parents=True, exist_ok=True)
    texts = ((planned.markdown_file, planned.markdown), *planned.extra_files)

    def write(outcomes: dict[str, Outcome]) -> Summary:
        retried = sum(run_retries(outcome) for outcome in outcomes.values())
        summary = planned.summarize(outcomes, root) | {"files": planned.files, "retries": retried}
        rundir.write_json(out / EXPERIMENT_JSON, summary)
        for name, render in texts:
            rundir.atomic_write_bytes(out / name, render(summary).encode())
        return summary

    outcomes = execute(
        planned.runs,
        root,
        describe=planned.describe,
        on_change=write,
        use_ray=use_ray,
        max_concurrent=max_concurrent,
        address=address,
        gpus_per_run=gpus_per_run,
        on_start=on_start,
        on_done=on_done,
        log_output=log_output,
    )
    summary = write(outcomes)
    planned.plot(summary, out / planned.plot_file)
    return summary, outcomes


def faa_metrics(results: Results | None) -> dict[str, float | None]:
    """``faa`` and ``ff`` of a results.json, of the run's own accuracy
    (:func:`~xder_cli.runs.records.own_metric`: Task-IL's in a Task-IL run); None where it has
    none."""
    if results is None:
        return {"faa": None, "ff": None}
    return {"faa": own_metric(results, "faa"), "ff": own_metric(results, "ff")}


def describe_faa(results: Results | None, label: str | None = None) -> str:
    """A finished run's figures on a progress line: ``Class-IL FAA 12.34, FF 56.78``, the FAA
    named after the run's scenario (``Domain-IL FAA``; a general stream's ``Accuracy 12.34``, one
    task: no FF) unless ``label`` names it (``test FAA`` where no validation split is held out)."""
    m = faa_metrics(results)
    scenario = results_scenario(results or {})
    if scenario == "general" and label is None:
        return f"{SCENARIO_ACCURACY[scenario]} {fmt(m['faa'])}"
    return f"{label or SCENARIO_ACCURACY[scenario] + ' FAA'} {fmt(m['faa'])}, FF {fmt(m['ff'])}"


def run_records(
    runs: Sequence[PlannedRun],
    outcomes: dict[str, Outcome],
    root: Path,
    metrics: Metric,
) -> list[RunRecord]:
    """experiment.json's ``runs``: per run its name, folder, seed, tags, outcome, and the
    ``metrics`` of its results.json (None until it finished)."""
    records = []
    for run in runs:
        outcome: Mapping[str, Any] = outcomes.get(run.name, {"status": "not run"})
        finished = outcome.get("status") == "finished"
        results = rundir.complete_results(root / run.name) if finished else None
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
                "retries": run_retries(outcome),
                **{k: None for k in metrics(None)},
                **(metrics(results) if finished else {}),
            }
        )
    return records


def cell(records: Sequence[RunRecord], keys: dict[str, str]) -> dict[str, float | int | None]:
    """Mean and std over the finished records of each metric; ``keys``: metric -> output name."""
    done = [r for r in records if r["status"] == "finished"]
    out: dict[str, float | int | None] = {}
    for metric, name in keys.items():
        mean, std = mean_std([float(r[metric]) for r in done if r[metric] is not None])
        out[f"{name}_mean"], out[f"{name}_std"] = mean, std
    out["seeds_finished"] = len(done)
    out["seeds"] = len(records)
    return out


def overrides_text(sets: Mapping[str, Any]) -> str:
    """``--set`` overrides that change what is trained, as ``key=value`` pairs (JSON values), e.g.
    ``train.epochs=1, backbone.width=4``; empty when there are none (those that only place or
    observe a run left out: :func:`xder_cli.runs.settings.defines`)."""
    return settings_text({key: value for key, value in sets.items() if defines(key)})


def with_overrides(lines: list[str], summary: Summary) -> list[str]:
    """An experiment's Markdown lines, its heading marked and its overrides named when ``--set``
    changed every run (the table is then not the protocol's own)."""
    if not overrides_text(summary.get("sets", {})):
        return lines
    note = (
        f"**Overrides** (`--set`, every run): `{overrides_text(summary['sets'])}`: these runs are not the "
        "protocol's own settings."
    )
    return [f"{lines[0]}, with overrides", "", note, *lines[1:]]


def overrides_label(summary: Summary) -> str | None:
    """The line a plot carries above its title when ``--set`` changed every run (else None)."""
    text = overrides_text(summary.get("sets", {}))
    return f"with overrides: {text}" if text else None


def not_finished(records: Sequence[RunRecord]) -> list[str]:
    """The Markdown lines listing the runs not finished, each with its note; none if all did."""
    lines = [
        f"- {r['run_dir']}: {r['status']}{outcome_note(r)}" for r in records if r["status"] != "finished"
    ]
    return ["", "Runs not finished:", "", *lines] if lines else []


def or_nan(value: float | None) -> float:
    """A value to plot: NaN (drawn as nothing) for None."""
    return math.nan if value is None else float(value)


def percent_bars_axis(ax: Any, cells: Sequence[Mapping[str, Any]], metric: str) -> None:
    """A 0-100% axis for bars of ``cells``' ``<metric>_mean`` (± ``_std``), room left for the
    tallest error bar; ticks to 100."""
    tops = [
        or_nan(c[f"{metric}_mean"]) + (or_nan(c[f"{metric}_std"]) if c[f"{metric}_std"] else 0.0)
        for c in cells
    ]
    top = max([100.0, *(t for t in tops if math.isfinite(t))])
    ax.set_ylim(0, top + 3)
    ax.set_yticks(range(0, 101, 20))
    ax.grid(axis="y", alpha=0.3)
