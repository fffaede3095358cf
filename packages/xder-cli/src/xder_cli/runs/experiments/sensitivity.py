"""``sensitivity`` (X-DER paper App. "Sensitivity analysis of hyperparameters"): one-at-a-time, each
value of each parameter varied alone around the run's resolved values (its method's default preset
plus ``--set``); test FAA against the value. Its runs are planned as one-key grids by
:func:`xder_cli.runs.sweep.plan_trials` and trained on Ray, like a sweep's trials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xder_cli.runs.defaults import SENSITIVITY_METHOD as DEFAULT_METHOD
from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.experiments.common import (
    OWNED_BY_ALL,
    Common,
    ExperimentOptions,
    PlannedExperiment,
    Summary,
    cell,
    check_owned,
    describe_faa,
    faa_metrics,
    fmt_stat,
    not_finished,
    or_nan,
    overrides_label,
    run_config,
    run_records,
    with_overrides,
)
from xder_cli.runs.records import Outcome, Settings
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import Notify, ignore
from xder_cli.runs.sweep import SweepSpec, plan_trials
from xder_data import DEFAULT_PROTOCOL
from xder_eval.plots import new_figure, save_figure, set_percent_axis

__all__ = [
    "DEFAULT_METHOD",
    "Sensitivity",
    "plan_sensitivity",
    "plot_sensitivity",
    "sensitivity_markdown",
    "summarize_sensitivity",
]

PLOT = "sensitivity.png"


def plan_sensitivity(
    method: str,
    benchmark: str,
    params: Sequence[tuple[str, list[Any]]],
    seeds: Sequence[int],
    sets: Mapping[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
) -> tuple[list[PlannedRun], Settings, str]:
    """Every (parameter, value, seed), each parameter's values planned as a one-key sweep grid
    around the base configuration (the method's default preset + ``sets``), with no validation
    split (the test FAA is what this study reports).

    Returns:
        The runs, the base (resolved) value of each parameter, and the base preset's name.
    """
    base = run_config(method, benchmark, seeds[0], sets, protocol)
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
            fixed=dict(sets),
            protocol=protocol,
        )
        for trial in plan_trials(spec):
            runs.append(
                PlannedRun(
                    f"{key}-{trial.name}", trial.seed, trial.config, {"param": key, "value": trial.tags[key]}
                )
            )
    base_values = {}
    for key, _ in params:
        section, name = key.split(".", 1)
        base_values[key] = base.get(section, {}).get(name)
    return runs, base_values, preset


def summarize_sensitivity(
    runs: Sequence[PlannedRun],
    outcomes: dict[str, Outcome],
    root: Path,
    common: Common,
    *,
    method: str,
    preset: str,
    params: Sequence[tuple[str, list[Any]]],
    base_values: Settings,
) -> Summary:
    """experiment.json of ``sensitivity``: per parameter, its base value and per value the test
    FAA and FF (mean, std over the finished seeds), and every run."""
    records = run_records(runs, outcomes, root, faa_metrics)
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
                    **cell(chosen, {"faa": "faa", "ff": "ff"}),
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


def sensitivity_markdown(summary: Summary) -> str:
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
                f"| {param['key']} | {value} | {fmt_stat(row['faa_mean'], row['faa_std'])} | "
                f"{fmt_stat(row['ff_mean'], row['ff_std'])} | {row['seeds_finished']}/{row['seeds']} |"
            )
    return "\n".join(with_overrides(lines, summary) + not_finished(summary["runs"])) + "\n"


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_sensitivity(summary: Summary, path: Path) -> None:
    """One panel per parameter: test FAA (mean ± std over seeds) against its value, the base
    value dashed (named "(base)" on a categorical axis); a log axis for positive values spanning
    a factor of 10 or more. The panels share one FAA range, chosen from the data."""
    params = summary["params"]
    fig = new_figure(4.2 * len(params), 3.8)
    drawn = [
        or_nan(row["faa_mean"]) + sign * (or_nan(row["faa_std"]) if row["faa_std"] else 0.0)
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
            [or_nan(row["faa_mean"]) for row in param["rows"]],
            yerr=[or_nan(row["faa_std"]) for row in param["rows"]],
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
    save_figure(fig, path, run=overrides_label(summary))


class Sensitivity:
    """``sensitivity`` (an :class:`~xder_cli.runs.experiments.common.Experiment`): each value of
    each parameter (``options.params``) x seed, for one method (``options.method``, default
    :data:`DEFAULT_METHOD`); on Ray, like a sweep."""

    name = "sensitivity"
    options = frozenset({"method", "params"})

    def plan(self, options: ExperimentOptions, common: Common, notify: Notify = ignore) -> PlannedExperiment:
        """Plan every run (see :class:`~xder_cli.runs.experiments.common.Experiment`).

        Raises:
            SettingError: no parameter, one given twice, or one the experiment or the overrides set.
        """
        sets = options.run_sets()
        if not options.params:
            raise SettingError(
                f"sensitivity needs one {option('params')} KEY=V1,V2,... or more, e.g. method.alpha=0.1,0.3"
            )
        params = list(options.params)
        keys = [key for key, _ in params]
        if len(set(keys)) != len(keys):
            raise SettingError(
                f"{option('params')} {next(k for k in keys if keys.count(k) > 1)} is given twice"
            )
        for key in keys:
            if key in OWNED_BY_ALL:
                raise SettingError(f"{option('params')} {key}: {OWNED_BY_ALL[key]}")
        check_owned(
            sets, OWNED_BY_ALL | {key: f"it is varied by {option('params')}: give it one way" for key in keys}
        )
        method = options.method or DEFAULT_METHOD
        runs, base_values, preset = plan_sensitivity(
            method, options.benchmark, params, options.seeds, sets, options.protocol
        )

        return PlannedExperiment(
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
            lambda results: describe_faa(results, "test FAA"),
            plot_file=PLOT,
            on_ray=True,
        )
