"""Configuration: --set parsing, typed coercion, layering and validation."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from xder_cli.runs.config import coerce, parse_assignment
from xder_cli.runs.errors import SettingError
from xder_cli.runs.plan import build_plan, resolve_config
from xder_cli.runs.rundir import read_config, write_config


def test_parse_assignment_reads_toml_values() -> None:
    assert parse_assignment("method.alpha=0.2") == ("method", "alpha", 0.2)
    assert parse_assignment("train.milestones=[35, 45]") == ("train", "milestones", [35, 45])
    assert parse_assignment("run.class_order=reversed") == ("run", "class_order", "reversed")
    assert parse_assignment('backbone.name="resnet18-cifar"') == (
        "backbone",
        "name",
        "resnet18-cifar",
    )
    assert parse_assignment("train.momentum = 0") == ("train", "momentum", 0)
    for bad in ["alpha=0.2", "model.alpha=1", "method.=1", "method.alpha"]:
        with pytest.raises(SettingError):
            parse_assignment(bad)


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        (1, float, 1.0),
        (2, int, 2),
        (True, bool, True),
        ([35, 45], tuple[int, ...], (35, 45)),
        ([1.4, 2], tuple[int | float, ...], (1.4, 2)),
        ("seen", Literal["seen", "all"], "seen"),
        ("natural", str | list[int], "natural"),
        ([2, 0, 1], str | list[int], [2, 0, 1]),
        (None, int | None, None),
    ],
)
def test_coerce_accepts(value, hint, expected) -> None:
    assert coerce(value, hint, "x") == expected


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("0.2", float),
        (1.5, int),
        (True, int),
        (1, bool),
        (["a"], tuple[int, ...]),
        ("some", Literal["seen", "all"]),
    ],
)
def test_coerce_rejects(value, hint) -> None:
    with pytest.raises(SettingError, match="x = "):
        coerce(value, hint, "x")


def _resolve(**kwargs):
    base = {
        "method": "derpp",
        "benchmark": "seq-digits",
        "preset": None,
        "run": {},
        "train": {},
        "method_values": {},
        "sets": [],
    }
    return resolve_config(**(base | kwargs))


def test_layers_protocol_flags_then_set() -> None:
    config = _resolve(
        preset="none",
        train={"epochs": 3},
        method_values={"buffer_size": 50},
        sets=[("method", "alpha", 0.9), ("train", "epochs", 4)],
    )
    plan = build_plan(config)
    assert plan.schedule.epochs == 4  # --set beats the flag
    assert plan.schedule.lr == 0.05  # the seq-digits protocol
    assert plan.method_config.buffer_size == 50
    assert plan.method_config.alpha == 0.9
    assert plan.method_config.beta == 0.5  # DER++'s own default
    assert plan.backbone == {"name": "resnet18-cifar", "width": 16, "in_channels": 1}
    assert plan.config["run"]["preset"] == "none"


def test_unknown_and_ill_typed_keys_are_rejected() -> None:
    with pytest.raises(SettingError, match=r"method.gamma is not a setting of method 'derpp'.*alpha"):
        build_plan(_resolve(sets=[("method", "gamma", 0.5)]))
    with pytest.raises(SettingError, match=r"train\.lr = 'fast'"):
        build_plan(_resolve(sets=[("train", "lr", "fast")]))
    with pytest.raises(SettingError, match=r"backbone\.depth"):
        build_plan(_resolve(sets=[("backbone", "depth", 3)]))
    with pytest.raises(SettingError, match=r"run\.method cannot be set with overrides: use method$"):
        _resolve(sets=[("run", "method", "er")])


def test_milestones_take_fractional_epochs_and_integers_stay_integers(tmp_path: Path) -> None:
    sets = [parse_assignment("train.milestones=[1.4,1.8]")]
    assert sets == [("train", "milestones", [1.4, 1.8])]
    plan = build_plan(_resolve(benchmark="seq-cifar100", sets=sets))
    assert plan.schedule.milestones == (1.4, 1.8)
    paper = build_plan(_resolve(benchmark="seq-cifar100"))
    assert paper.schedule.milestones == (35, 45)
    assert all(type(m) is int for m in paper.config["train"]["milestones"])  # written as before
    # config.toml, as runs wrote it before fractional milestones and as they write it now, reads
    # back (what --resume rebuilds a run from) to the same schedule.
    for run, expected in ((paper, (35, 45)), (plan, (1.4, 1.8))):
        path = tmp_path / "config.toml"
        write_config(path, run.config)
        written = read_config(path)
        assert [(type(m), m) for m in written["train"]["milestones"]] == [(type(m), m) for m in expected]
        again = build_plan(written)
        assert again.schedule.milestones == expected
        assert [type(m) for m in again.schedule.milestones] == [type(m) for m in expected]
    with pytest.raises(SettingError, match=r"train\.milestones = 'x' is not valid"):
        build_plan(_resolve(sets=[("train", "milestones", ["x"])]))


def test_plan_round_trips_through_its_resolved_config() -> None:
    plan = build_plan(_resolve(sets=[("run", "class_order", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0])]))
    again = build_plan(plan.config)
    assert again.config == plan.config
    assert again.settings.class_order == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]


@pytest.mark.parametrize(
    ("method", "key", "value"), [("joint", "mode", "final"), ("gdumb", "fit_after", "last_task")]
)
def test_train_tasks_refuses_methods_that_train_only_at_the_last_task(
    method: str, key: str, value: str
) -> None:
    config = resolve_config(
        method=method,
        benchmark="seq-digits",
        preset="none",
        run={},
        train={},
        method_values={},
        sets=[("train", "tasks", 2), ("method", key, value)],
    )
    with pytest.raises(SettingError, match=f"train.tasks cannot shorten {method} with method.{key}"):
        build_plan(config)
