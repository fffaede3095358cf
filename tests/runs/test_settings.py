"""Settings (xder_cli.runs.settings, their one owner): dotted keys and --set parsing, typed
coercion, the layers, the plan (a protocol's settings and drop_last included), which [run] keys
define a run, and a run's overrides read back from its config.toml."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Literal

import pytest

from xder_cli.runs import rundir
from xder_cli.runs.errors import SettingError
from xder_cli.runs.rundir import read_config, write_config
from xder_cli.runs.settings import (
    RUN_KEYS,
    Role,
    RunSettings,
    build_plan,
    coerce,
    defines,
    parse_assignment,
    resolve_config,
    run_overrides,
    split_key,
    start_notes,
)
from xder_data import BenchmarkDefaults, benchmark_defaults
from xder_methods import MethodConfigError, TrainingProtocol, TrainingSchedule


def test_parse_assignment_reads_toml_values() -> None:
    assert parse_assignment("method.alpha=0.2") == ("method.alpha", 0.2)
    assert parse_assignment("train.milestones=[35, 45]") == ("train.milestones", [35, 45])
    assert parse_assignment("run.class_order=reversed") == ("run.class_order", "reversed")
    assert parse_assignment('backbone.name="resnet18-cifar"') == ("backbone.name", "resnet18-cifar")
    assert parse_assignment("train.momentum = 0") == ("train.momentum", 0)
    for bad in ["alpha=0.2", "model.alpha=1", "method.=1", "method.alpha", "method.a.b=1"]:
        with pytest.raises(SettingError):
            parse_assignment(bad)


def test_one_reader_of_a_dotted_key() -> None:
    assert split_key("method.alpha") == ("method", "alpha")
    assert split_key(" train.lr ") == ("train", "lr")
    for bad in ["alpha", "model.alpha", "method.", ".alpha", "method.a.b"]:
        with pytest.raises(
            SettingError, match=r"is not a setting: write section\.name with section one of run"
        ):
            split_key(bad)


def test_every_run_key_says_what_it_is_to_a_run() -> None:
    fields = {f.name for f in dataclasses.fields(RunSettings)}
    assert set(RUN_KEYS) == fields
    placing = {f"run.{k}" for k, role in RUN_KEYS.items() if role is Role.PLACES}
    assert {"run.device", "run.data_root", "run.data_device", "run.threads"} <= placing
    assert [defines(k) for k in ("run.device", "run.data_root", "run.data_device", "run.loggers")] == [
        False
    ] * 4
    defining = (
        "run.seed",
        "run.class_order",
        "train.lr",
        "method.alpha",
        "backbone.width",
        "benchmark.tasks",
    )
    assert all(defines(k) for k in defining)


def test_the_protocol_gives_every_schedule_field_it_has() -> None:
    """No list of keys mirrors BenchmarkDefaults: each of its fields the schedule shares lands in
    [train] with the protocol's value, for every benchmark's paper protocol."""
    shared = {f.name for f in dataclasses.fields(BenchmarkDefaults)} & {
        f.name for f in dataclasses.fields(TrainingSchedule)
    }
    assert {"epochs", "lr", "milestones", "drop_last", "optimizer"} <= shared
    for benchmark in ("seq-digits", "seq-cifar10", "seq-cifar100"):
        protocol = benchmark_defaults(benchmark)
        config = resolve_config("sgd", benchmark, preset="none")
        for key in shared:
            assert config["train"][key] == getattr(protocol, key), (benchmark, key)


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


def _resolve(method: str = "derpp", benchmark: str = "seq-digits", preset: str | None = None, **settings):
    return resolve_config(method, benchmark, preset=preset, settings=settings)


def test_layers_protocol_flags_then_set() -> None:
    # What train makes of --epochs 3 --buffer-size 50 --set method.alpha=0.9 --set train.epochs=4.
    settings = {"train.epochs": 3, "method.buffer_size": 50} | {"method.alpha": 0.9, "train.epochs": 4}
    plan = build_plan(resolve_config("derpp", "seq-digits", preset="none", settings=settings))
    assert plan.schedule.epochs == 4  # --set beats the flag
    assert plan.schedule.lr == 0.05  # the seq-digits protocol
    assert plan.method_config.buffer_size == 50
    assert plan.method_config.alpha == 0.9
    assert plan.method_config.beta == 0.5  # DER++'s own default
    assert plan.backbone == {"name": "resnet18-cifar", "width": 16, "in_channels": 1}
    assert plan.config["run"]["preset"] == "none"


def test_unknown_and_ill_typed_keys_are_rejected() -> None:
    with pytest.raises(SettingError, match=r"method.gamma is not a setting of method 'derpp'.*alpha"):
        build_plan(_resolve(**{"method.gamma": 0.5}))
    with pytest.raises(SettingError, match=r"train\.lr = 'fast'"):
        build_plan(_resolve(**{"train.lr": "fast"}))
    with pytest.raises(SettingError, match=r"backbone\.depth"):
        build_plan(_resolve(**{"backbone.depth": 3}))
    with pytest.raises(SettingError, match=r"run\.method cannot be set with overrides: use method$"):
        _resolve(**{"run.method": "er"})
    with pytest.raises(SettingError, match=r"'model\.alpha' is not a setting"):
        _resolve(**{"model.alpha": 1})


def test_milestones_take_fractional_epochs_and_integers_stay_integers(tmp_path: Path) -> None:
    dotted, value = parse_assignment("train.milestones=[1.4,1.8]")
    assert (dotted, value) == ("train.milestones", [1.4, 1.8])
    plan = build_plan(_resolve(benchmark="seq-cifar100", **{dotted: value}))
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
        build_plan(_resolve(**{"train.milestones": ["x"]}))


def test_plan_round_trips_through_its_resolved_config() -> None:
    plan = build_plan(_resolve(**{"run.class_order": [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]}))
    again = build_plan(plan.config)
    assert again.config == plan.config
    assert again.settings.class_order == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]


@pytest.mark.parametrize(
    ("method", "key", "value"), [("joint", "mode", "final"), ("gdumb", "fit_after", "last_task")]
)
def test_train_tasks_refuses_methods_that_train_only_at_the_last_task(
    method: str, key: str, value: str
) -> None:
    config = _resolve(method, preset="none", **{"train.tasks": 2, f"method.{key}": value})
    with pytest.raises(MethodConfigError, match=f"train.tasks cannot shorten {method} with method.{key}"):
        build_plan(config)


def test_one_drop_last_default() -> None:
    """The loop's schedule and a benchmark's protocol have one default drop_last; a run takes its
    protocol's (the papers' protocols keep each epoch's last partial batch)."""
    assert (
        TrainingSchedule().drop_last
        is BenchmarkDefaults(epochs=1, batch_size=1, minibatch_size=1, lr=0.1).drop_last
    )
    assert build_plan(_resolve(benchmark="seq-digits")).schedule.drop_last is True  # its documented drop
    assert build_plan(_resolve(benchmark="seq-cifar10")).schedule.drop_last is False


def _config(method: str, benchmark: str, protocol: str = "full", **settings) -> dict:
    return resolve_config(method, benchmark, protocol=protocol, settings=settings)


def test_the_protocol_sets_drop_last_and_is_recorded() -> None:
    digits = build_plan(_config(method="er", benchmark="seq-digits"))
    assert digits.settings.protocol == "full"
    # A run recorded under the full protocol's former name reads as it (and writes it so).
    legacy = _config(method="er", benchmark="seq-digits")
    legacy["run"]["protocol"] = "paper"
    assert build_plan(legacy).settings.protocol == "full"
    assert build_plan(legacy).config["run"]["protocol"] == "full"
    assert digits.schedule.drop_last is True  # seq-digits keeps its documented drop
    for benchmark in ("seq-cifar10", "seq-cifar100", "seq-miniimg", "seq-ntu60", "seq-cub200"):
        plan = build_plan(_config(method="er", benchmark=benchmark))
        assert plan.schedule.drop_last is False, benchmark  # the papers' protocols keep the last batch
    laptop = build_plan(_config(method="er", benchmark="seq-cifar10", protocol="laptop"))
    assert laptop.config["run"]["protocol"] == "laptop"
    assert (laptop.schedule.epochs, laptop.backbone["width"], laptop.buffer_size) == (2, 8, 200)
    override = _config(method="er", benchmark="seq-cifar10", protocol="laptop", **{"train.epochs": 3})
    assert build_plan(override).schedule.epochs == 3  # flags and --set still override the protocol


@pytest.mark.parametrize("method", ["xder", "er", "derpp", "sgd", "bic"])
def test_seq_cifar100_laptop_plan(method: str) -> None:
    """The resolved run: the laptop protocol (2 epochs, milestones 1.4 and 1.8, width 8, buffer
    500) under the tuned entry where the method was selected on this protocol (X-DER, ER, DER++),
    else the paper preset's carried-over entry; neither sets an epoch or milestone of its own."""
    plan = build_plan(_config(method=method, benchmark="seq-cifar100", protocol="laptop"))
    schedule = plan.schedule
    selected = method in ("xder", "er", "derpp")
    assert (plan.settings.protocol, plan.settings.preset) == ("laptop", "tuned" if selected else "paper")
    assert (schedule.epochs, schedule.lr_schedule, schedule.milestones) == (2, "multistep", (1.4, 1.8))
    assert (schedule.batch_size, schedule.optimizer, schedule.lr_gamma) == (32, "sgd", 0.1)
    assert plan.backbone["width"] == 8
    assert plan.buffer_size == (0 if method == "sgd" else 500)
    paper = build_plan(_config(method=method, benchmark="seq-cifar100"))
    chosen = {"xder": 0.1, "er": 0.03, "derpp": 0.1}  # tuned.toml, "seq-cifar100:laptop"
    assert schedule.lr == chosen.get(method, paper.schedule.lr)  # else the paper's, e.g. BiC's 0.03
    if not selected:
        assert plan.config["method"] == paper.config["method"]  # and its chosen method values


@pytest.mark.parametrize(
    ("method", "benchmark", "preset", "protocol"),
    [
        ("xder", "seq-digits", None, "paper"),
        ("derpp", "seq-cifar10", "tuned", "laptop"),
        ("xder", "seq-cifar100", "paper:xder-rpc", "paper"),
        ("sgd", "seq-cifar100", None, "laptop"),
    ],
)
def test_a_run_without_overrides_has_none(method, benchmark, preset, protocol, tmp_path: Path) -> None:
    """A configuration as config.toml holds it (written, read back) differs from its preset and
    protocol in nothing; each change made on top of it is found, and only it."""

    def written(sets: dict) -> dict:
        settings = {"run.seed": 3, **sets}
        plan = build_plan(
            resolve_config(method, benchmark, protocol=protocol, preset=preset, settings=settings)
        )
        path = tmp_path / f"config-{len(sets)}.toml"
        rundir.write_config(path, plan.config)
        return tomllib.loads(path.read_text())

    assert run_overrides(written({})) == {}
    changed = {"train.lr": 0.123, "run.class_order": "reversed", "backbone.width": 3}
    assert run_overrides(written(changed)) == {
        "run.class_order": "reversed",
        "train.lr": 0.123,
        "backbone.width": 3,
    }


def test_start_notes_say_an_empty_buffer_and_a_preset_that_fell_back() -> None:
    def notes(method: str, buffer: int | None, preset: str | None = None) -> list[str]:
        settings = {} if buffer is None else {"method.buffer_size": buffer}
        plan = build_plan(resolve_config(method, "seq-digits", preset=preset, settings=settings))
        return start_notes(plan, preset_named=preset is not None)

    assert notes("xder", 0) == [
        "note: buffer 0: xder keeps nothing to replay",
        "note: preset none (the method's own defaults): the tuned preset has no entry for buffer 0, "
        "only for the protocol's 200",
    ]
    assert notes("xder", None) == []  # the protocol's buffer: the tuned preset
    assert notes("xder", 0, preset="none") == ["note: buffer 0: xder keeps nothing to replay"]
    assert notes("sgd", None) == []  # no buffer to speak of


@pytest.mark.parametrize("record", [False, True])
def test_a_run_probes_gradient_norms_only_when_it_records_its_analyses(record: bool) -> None:
    from xder_cli.runs.settings import resolve_run

    overrides = {"run.record_analyses": record, "train.record_every": 7}
    plan = resolve_run("derpp", "seq-digits", overrides=overrides)
    assert plan.schedule.record_every == 7
    assert plan.fit_schedule.record_every == (7 if record else 0)
    assert dataclasses.replace(plan.fit_schedule, record_every=7) == plan.schedule


def test_every_benchmark_protocol_carries_the_training_protocol_s_fields() -> None:
    """``xder_data.BenchmarkDefaults`` carries each field of ``xder_methods.TrainingProtocol``
    under the same name, with the same type and default (where it has one: epochs, batch size and
    lr are each benchmark's to state): xder-data cannot import xder-methods, so this holds the two
    equal, and the protocol layer takes exactly these fields (``PROTOCOL_KEYS``)."""
    import typing

    from xder_cli.runs.settings import PROTOCOL_KEYS

    protocol = {f.name: f for f in dataclasses.fields(TrainingProtocol)}
    carried = {f.name: f for f in dataclasses.fields(BenchmarkDefaults)}
    protocol_types, carried_types = (
        typing.get_type_hints(TrainingProtocol),
        typing.get_type_hints(BenchmarkDefaults),
    )
    assert list(PROTOCOL_KEYS) == list(protocol)
    for name, field in protocol.items():
        assert name in carried, f"BenchmarkDefaults lacks the protocol field {name}"
        assert carried_types[name] == protocol_types[name], name
        if carried[name].default is not dataclasses.MISSING:
            assert carried[name].default == field.default, name
