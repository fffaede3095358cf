"""Experiments the X-DER paper runs as protocols (``xder-run experiment NAME``), in a registry.

Each experiment (an :class:`Experiment`, registered by name with :func:`register_experiment`)
plans a set of ordinary runs (:func:`plan_experiment`: each a :class:`PlannedRun`, one run
directory each, ``OUT/runs/<name>/``); :func:`run_experiment` trains those not finished yet
(:mod:`xder_cli.runs.scheduler`) and tabulates them: ``OUT/experiment.json`` (every number, per
run and aggregated), ``OUT/experiment.md`` (a Markdown table) and a PNG plot. Running it again
skips finished runs and resumes interrupted ones from their checkpoints; a run directory trained
with other settings is an error, never silently reused. Each run holds its run directory's lock
while it trains: a run that another invocation is training is reported as ``running elsewhere``
and left to it. On Ray, a run whose worker or node is lost is run again from its last checkpoint;
each run's record in experiment.json names the node that trained it (``node``) and counts its
starts (``attempts``, ``retries``).

The experiments, in the order ``xder-run experiment --help`` lists them:

* ``flatness`` (:mod:`~xder_cli.runs.experiments.flatness`, paper Sec. 6.2): two-task sequences
  of adjacent tasks trained with ``er_flat`` for each regulariser; the first task's final accuracy.
* ``class-order`` (:mod:`~xder_cli.runs.experiments.class_order`, paper App. A): every method in
  natural and reversed class order.
* ``sensitivity`` (:mod:`~xder_cli.runs.experiments.sensitivity`, paper App. "Sensitivity
  analysis of hyperparameters"): each parameter's values varied alone, on Ray.
* ``table`` (:mod:`~xder_cli.runs.experiments.table`): a paper's published table reproduced and
  set beside its numbers, with the papers' claims about it checked.

A plugin (``--plugin``) adds one by calling :func:`register_experiment` with an object that has
the :class:`Experiment` protocol's ``name``, ``options`` and ``plan``.

Statistics are over seeds: the mean and the sample standard deviation (None below two seeds).
"""

from __future__ import annotations

import dataclasses

from xder_cli.runs._stats import check_distinct_seeds
from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.experiments.class_order import ClassOrder
from xder_cli.runs.experiments.common import (
    DEFAULT_SEEDS,
    EXPERIMENT_JSON,
    EXPERIMENT_MD,
    RUNS,
    Common,
    Experiment,
    ExperimentOptions,
    PlannedExperiment,
    execute,
    run_experiment,
)
from xder_cli.runs.experiments.flatness import Flatness
from xder_cli.runs.experiments.sensitivity import Sensitivity
from xder_cli.runs.experiments.table import Table
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import Notify, ignore
from xder_data import canonical_protocol

__all__ = [
    "DEFAULT_SEEDS",
    "EXPERIMENT_JSON",
    "EXPERIMENT_MD",
    "RUNS",
    "Experiment",
    "ExperimentOptions",
    "PlannedExperiment",
    "PlannedRun",
    "execute",
    "get_experiment",
    "list_experiments",
    "plan_experiment",
    "register_experiment",
    "run_experiment",
]

_EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(experiment: Experiment) -> Experiment:
    """Register ``experiment`` under its ``name`` (``xder-run experiment NAME``); returns it.

    Raises:
        ValueError: the name is registered already.
    """
    if experiment.name in _EXPERIMENTS:
        raise ValueError(f"experiment {experiment.name!r} is already registered")
    _EXPERIMENTS[experiment.name] = experiment
    return experiment


def list_experiments() -> list[str]:
    """Registered experiment names, in the order they were registered (the paper's four first)."""
    return list(_EXPERIMENTS)


def get_experiment(name: str) -> Experiment:
    """The experiment registered under ``name``.

    Raises:
        SettingError: no experiment has that name.
    """
    if name not in _EXPERIMENTS:
        raise SettingError(f"unknown experiment {name!r}: choose one of {', '.join(list_experiments())}")
    return _EXPERIMENTS[name]


OWN_OPTIONS = ("pairs", "methods", "method", "params", "buffer_size", "paper")
"""The fields of :class:`ExperimentOptions` that only some experiments take (each experiment's
``options`` names its own)."""


def plan_experiment(name: str, options: ExperimentOptions, *, notify: Notify = ignore) -> PlannedExperiment:
    """Plan every run of experiment ``name`` (nothing trains; any configuration mistake is raised
    here); ``notify`` hears the experiment's notes for the user.

    Raises:
        SettingError (and the packages' configuration errors): an unknown experiment, an option
            of another experiment only, a seed given twice
            (:func:`xder_cli.runs._stats.check_distinct_seeds`), or a run that cannot be configured.
    """
    experiment = get_experiment(name)
    check_distinct_seeds(options.seeds)
    for field in OWN_OPTIONS:  # an option of another experiment only
        if getattr(options, field) not in (None, ()) and field not in experiment.options:
            owners = [other for other in list_experiments() if field in get_experiment(other).options]
            raise SettingError(
                f"{option(field)} is an option of experiment {' and '.join(owners)}, not of {name}"
            )
    options = dataclasses.replace(options, protocol=canonical_protocol(options.protocol))
    common: Common = {
        "experiment": name,
        "benchmark": options.benchmark,
        "protocol": options.protocol,
        "seeds": list(options.seeds),
        "sets": dict(options.sets),
    }
    return experiment.plan(options, common, notify)


for _experiment in (Flatness(), ClassOrder(), Sensitivity(), Table()):
    register_experiment(_experiment)
