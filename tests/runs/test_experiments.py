"""The paper's experiments as a library (xder_cli.runs.experiments): the flatness experiment's task
pairs and radar plot, --param's values, and the table experiment's plan when nothing is
published."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from xder_cli.runs.errors import SettingError
from xder_cli.runs.experiments import ExperimentOptions, plan_experiment
from xder_cli.runs.experiments.flatness import REGULARISERS, pair_class_order, plot_flatness
from xder_cli.runs.experiments.table import plan_table, table_entries
from xder_cli.runs.settings import parse_values

PNG = b"\x89PNG\r\n\x1a\n"


def test_pair_class_order_and_param_parsing() -> None:
    assert pair_class_order((2, 2, 2), 0) == [0, 1, 2, 3, 4, 5]
    assert pair_class_order((2, 2, 2), 1) == [2, 3, 4, 5, 0, 1]
    with pytest.raises(SettingError, match=r"k in 0\.\.1"):
        pair_class_order((2, 2, 2), 2)
    with pytest.raises(SettingError, match="hold 3 and 2 classes"):
        pair_class_order((2, 2, 3, 2), 2)
    assert parse_values("method.alpha=0.1, 0.3,1") == ("method.alpha", [0.1, 0.3, 1])
    assert parse_values("run.class_order=natural,reversed") == ("run.class_order", ["natural", "reversed"])
    assert parse_values("train.milestones=[[35, 45], [20]]") == ("train.milestones", [[35, 45], [20]])
    for bad, message in [
        ("method.alpha", "section.key=V1,V2"),
        ("alpha=0.1", "section.name"),
        ("model.alpha=0.1", "section.name"),
        ("method.alpha=0.1,,0.3", "comma-separated"),
        ("method.alpha=", "comma-separated"),
        ("method.alpha=0.1,0.1", "repeats"),
    ]:
        with pytest.raises(SettingError, match=message):
            parse_values(bad)


def test_flatness_radar_plot_from_three_pairs(tmp_path: Path) -> None:
    cells = {
        r: {"first_task_accuracy_mean": 50.0 + i, "first_task_accuracy_std": None}
        for i, r in enumerate(REGULARISERS)
    }
    rows = [{"pair": k, "cells": cells} for k in range(4)]
    rows[1] = {
        "pair": 1,
        "cells": {**cells, "lfr": {"first_task_accuracy_mean": None, "first_task_accuracy_std": None}},
    }
    plot_flatness({"rows": rows, "benchmark": "seq-digits"}, tmp_path / "radar.png")
    assert (tmp_path / "radar.png").read_bytes().startswith(PNG)


def test_table_with_nothing_published_plans_every_method_of_the_x_der_table() -> None:
    entries = table_entries("seq-digits", 200)
    names = [e.name for e in entries]
    assert names == [
        "joint",
        "sgd",
        "lwf_mc",
        "er",
        "gdumb",
        "er_ace",
        "rpc",
        "bic",
        "icarl",
        "lucir",
        "der",
        "derpp",
        "xder",
    ]
    assert all(e.published is None and e.preset is None and e.name == e.method for e in entries)
    runs = plan_table("seq-digits", 200, entries, [0], {})  # every configuration builds
    presets = {r.name: r.config["run"]["preset"] for r in runs}
    assert presets["xder-m200-s0"] == presets["derpp-m200-s0"] == "tuned"
    assert presets["er-m200-s0"] == presets["lwf_mc-s0"] == "none"
    assert [r.name for r in runs if "-m200-" not in r.name] == ["joint-s0", "sgd-s0", "lwf_mc-s0"]


def test_an_experiment_refuses_a_seed_given_twice() -> None:
    """Each (setting, seed) is one run directory named after its seed: seeds (0, 1, 0) would count
    seed 0's run twice in every mean."""
    options = ExperimentOptions(benchmark="seq-digits", seeds=(0, 1, 0), methods=("er",), buffer_size=200)
    with pytest.raises(SettingError, match=r"^seeds 0,1,0: seed 0 is given more than once"):
        plan_experiment("table", options)
    assert len(plan_experiment("table", dataclasses.replace(options, seeds=(0, 1))).runs) == 2


def test_one_runs_time_reads_in_seconds_under_a_minute() -> None:
    from xder_cli.runs.experiments.table import _minutes

    assert [_minutes(s) for s in (None, 0.4, 14.2, 59.4, 59.6, 90.0, 738.0)] == [
        "-", "0 s", "14 s", "59 s", "1.0 min", "1.5 min", "12.3 min",
    ]  # fmt: skip
