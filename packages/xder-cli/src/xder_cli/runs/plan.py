"""A run's plan: its configuration resolved in layers (method defaults, the benchmark's protocol,
a preset, the caller's values, the overrides), checked and typed (:class:`RunPlan`), and where it runs
(the device, where its data live)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from xder_cli.runs import rundir
from xder_cli.runs.config import SECTIONS, RunSettings, benchmark_settings, validate_section
from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.presets import default_preset, preset_values
from xder_data import DEFAULT_PROTOCOL, Benchmark, benchmark_defaults
from xder_methods import (
    TrainingSchedule,
    method_config_class,
)
from xder_models import backbone_factory, backbone_options

Notify = Callable[[str], None]
"""Hears the lines a run has for its user (``note: ...``, ``warning: ...``): the command line
prints them; a library caller may log them, or ignore them (the default)."""


def ignore(message: str) -> None:
    """The default :data:`Notify`: says nothing."""


__all__ = [
    "PROTOCOL_TRAIN_KEYS",
    "Notify",
    "RunPlan",
    "build_plan",
    "ignore",
    "place_data",
    "resolve_config",
    "resolve_device",
    "run_buffer_size",
    "run_overrides",
    "settings_text",
]

PROTOCOL_TRAIN_KEYS = (
    "epochs",
    "batch_size",
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "lr_schedule",
    "milestones",
    "lr_gamma",
    "warmup_epochs",
    "drop_last",
)


@dataclass(frozen=True)
class RunPlan:
    """A run's validated configuration, as typed objects and as the TOML sections.

    ``benchmark`` holds the benchmark's options (the ``[benchmark]`` section, its defaults
    included), passed to :func:`xder_data.load_benchmark`.
    """

    settings: RunSettings
    schedule: TrainingSchedule
    method_config: Any
    backbone: dict[str, Any]
    config: dict[str, dict[str, Any]]
    benchmark: dict[str, Any] = field(default_factory=dict)

    @property
    def buffer_size(self) -> int:
        return int(getattr(self.method_config, "buffer_size", 0))


def run_buffer_size(
    protocol_size: int,
    fields: set[str],
    method_values: dict[str, Any],
    sets: list[tuple[str, str, Any]],
) -> int | None:
    """The buffer size a run will use (None for a method without a buffer): the protocol's, then
    ``method_values``' ``buffer_size``, then an override of ``method.buffer_size``; it picks the
    preset's entry."""
    if "buffer_size" not in fields:
        return None
    size: Any = method_values.get("buffer_size", protocol_size)
    for section, key, value in sets:
        if (section, key) == ("method", "buffer_size"):
            size = value
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def resolve_config(
    *,
    method: str,
    benchmark: str,
    preset: str | None,
    run: dict[str, Any],
    train: dict[str, Any],
    method_values: dict[str, Any],
    sets: list[tuple[str, str, Any]],
    protocol_name: str = DEFAULT_PROTOCOL,
) -> dict[str, dict[str, Any]]:
    """Layer the configuration: method defaults < benchmark protocol < preset < the caller's values
    < overrides.

    Args:
        run: [run] values the caller gives.
        train: [train] values the caller gives.
        method_values: [method] values the caller gives.
        sets: overrides, ``(section, key, value)``, applied last.
        protocol_name: the benchmark's protocol: its settings, and the preset tables kept for it.

    Raises:
        SettingError: an override of the [run] settings given as arguments (method, benchmark,
            preset, protocol), an unknown section, an unknown preset or entry.
        UnknownProtocolError: the benchmark has no such protocol.
    """
    config_cls = method_config_class(method)
    protocol = benchmark_defaults(benchmark, protocol_name)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    buffer_size = run_buffer_size(protocol.buffer_size, fields, method_values, sets)
    preset = preset or default_preset(benchmark, method, buffer_size, protocol_name)
    config: dict[str, dict[str, Any]] = {
        "run": {"method": method, "benchmark": benchmark, "preset": preset, "protocol": protocol_name},
        "train": {k: getattr(protocol, k) for k in PROTOCOL_TRAIN_KEYS},
        "backbone": {"name": protocol.backbone, **protocol.backbone_options},
        "method": {k: getattr(protocol, k) for k in ("buffer_size", "minibatch_size") if k in fields},
        "benchmark": {},
    }
    chosen_backbone: dict[str, Any] = {}
    layers: list[tuple[str, str, Any]] = [
        (section, key, value)
        for section, values in preset_values(preset, benchmark, method, buffer_size, protocol_name).items()
        for key, value in values.items()
        if section != "method" or key in fields  # the protocol's replay batch: replay methods only
    ]
    layers += [("run", k, v) for k, v in run.items()]
    layers += [("train", k, v) for k, v in train.items()]
    layers += [("method", k, v) for k, v in method_values.items()]
    layers += sets
    for section, key, value in layers:
        if section == "run" and key in ("method", "benchmark", "preset", "protocol"):
            raise SettingError(f"run.{key} cannot be set with {option('overrides')}: use {option(key)}")
        if section not in config:
            raise SettingError(f"unknown section {section!r}: use {', '.join(SECTIONS)}")
        config[section][key] = value
        if section == "backbone":
            chosen_backbone[key] = value
    if config["backbone"]["name"] != protocol.backbone:  # the protocol's options fit its own net
        config["backbone"] = {"name": protocol.backbone, **chosen_backbone}
    return config


_OVERRIDABLE_RUN_KEYS = ("class_order", "validation")
"""The [run] settings that change what a run trains (the others place it or watch it)."""


def _comparable(value: Any) -> Any:
    """A setting as TOML reads it back, numbers as floats: ``(35, 45)`` equals ``[35.0, 45.0]``."""
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def settings_text(values: Mapping[str, Any]) -> str:
    """Dotted settings as ``key=value`` pairs, values as JSON (as
    :func:`~xder_cli.runs.config.parse_assignment` reads them), e.g. ``train.epochs=1,
    backbone.width=4``: how overrides are named wherever results are shown."""
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items())


def run_overrides(config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The settings of a run's ``config.toml`` that its preset and protocol do not give, as they
    stand now (what overrides, epochs or class order changed): dotted key -> the run's
    value. The buffer size is the run's own choice, not an override.

    Raises:
        RunError, DataError, MethodError: the run's method, benchmark, preset or protocol is
            unknown here (e.g. a plugin not loaded).
    """
    run = config.get("run", {})
    method = config.get("method", {})
    values = {"buffer_size": method["buffer_size"]} if "buffer_size" in method else {}
    reference = build_plan(
        resolve_config(
            method=run["method"],
            benchmark=run["benchmark"],
            preset=run.get("preset"),
            run={},
            train={},
            method_values=values,
            sets=[],
            protocol_name=run.get("protocol", DEFAULT_PROTOCOL),
        )
    ).config
    keys = [("run", key) for key in _OVERRIDABLE_RUN_KEYS]
    for section in ("train", "backbone", "method", "benchmark"):
        keys += [(section, key) for key in {*config.get(section, {}), *reference.get(section, {})}]
    overrides = {}
    for section, key in sorted(keys, key=lambda k: (SECTIONS.index(k[0]), k[1])):
        if (section, key) == ("method", "buffer_size"):
            continue
        mine = config.get(section, {}).get(key)
        if _comparable(mine) != _comparable(reference.get(section, {}).get(key)):
            overrides[f"{section}.{key}"] = mine
    return overrides


def build_plan(config: dict[str, dict[str, Any]]) -> RunPlan:
    """Validate every section of a configuration and build the typed objects.

    Raises:
        SettingError: unknown section or key, ill-typed value.
        MethodConfigError, UnknownMethodError, UnknownBackboneError, DataError: from the packages.
    """
    unknown = sorted(set(config) - set(SECTIONS))
    if unknown:
        raise SettingError(f"unknown section {unknown[0]!r}: use {', '.join(SECTIONS)}")
    run = validate_section("run", config.get("run", {}), RunSettings, what="[run]")
    for required in ("method", "benchmark"):
        if required not in run:
            raise SettingError(f"the configuration has no run.{required}")
    settings = RunSettings(**run)
    benchmark_defaults(settings.benchmark, settings.protocol)  # an unknown one is the user's to fix
    benchmark = benchmark_settings(settings.benchmark, config.get("benchmark", {}))
    schedule = TrainingSchedule(
        **validate_section("train", config.get("train", {}), TrainingSchedule, what="[train]")
    )
    config_cls = method_config_class(settings.method)
    method_config = config_cls(
        **validate_section("method", config.get("method", {}), config_cls, what=f"method {settings.method!r}")
    )
    last_task_only = {"joint": ("mode", "final"), "gdumb": ("fit_after", "last_task")}.get(settings.method)
    if schedule.tasks is not None and last_task_only is not None:
        key, value = last_task_only
        if getattr(method_config, key) == value:
            raise SettingError(
                f"train.tasks cannot shorten {settings.method} with method.{key} = {value!r}: it trains "
                f"only at the benchmark's last task; pick another method.{key} or drop train.tasks"
            )
    backbone_values = dict(config.get("backbone", {}))
    name = backbone_values.pop("name", None)
    if not isinstance(name, str):
        raise SettingError("backbone.name must be the name of a registered backbone")
    options = validate_section("backbone", backbone_values, backbone_factory(name), what=f"backbone {name!r}")
    defaults = {k: v for k, v in backbone_options(name).items() if v is not inspect.Parameter.empty}
    backbone = {"name": name, **defaults, **options}
    resolved = {
        "run": dataclasses.asdict(settings),
        "train": dataclasses.asdict(schedule),
        "backbone": backbone,
        "method": dataclasses.asdict(method_config),
        "benchmark": benchmark,
    }
    return RunPlan(settings, schedule, method_config, backbone, resolved, benchmark)


def resolve_device(spec: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else is checked.

    Raises:
        SettingError: not a device, or not one this machine has.
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as error:
        raise SettingError(f"run.device {spec!r} is not a device: use auto, cpu, cuda or cuda:N") from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError(
                f"run.device {spec!r}: no CUDA device is available here; use {option('run.device')} cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SettingError(f"run.device {spec!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise SettingError(f"run.device {spec!r} is not supported: use auto, cpu, cuda or cuda:N")
    return device


def place_data(bench: Benchmark, device: torch.device, where: str, notify: Notify = ignore) -> Benchmark:
    """Put the benchmark's tensors where ``run.data_device`` says (see :class:`RunSettings`);
    ``notify`` hears why the data stay in host memory when ``auto`` keeps them there."""
    if device.type != "cuda" or where == "device":
        return bench.to(device)
    if where == "auto":
        free, _ = torch.cuda.mem_get_info(device)
        if bench.nbytes < free / 2:
            return bench.to(device)
        notify(
            f"note: the data ({bench.nbytes / 2**30:.1f} GiB) stay in host memory: less than twice their "
            f"size is free on {device}"
        )
    return bench.pin_memory()


# ---------------------------------------------------------------------------------------------
# Results


def resolve_run(
    method: str,
    benchmark: str,
    *,
    preset: str | None = None,
    protocol: str = DEFAULT_PROTOCOL,
    seed: int = 0,
    buffer_size: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    **run: Any,
) -> RunPlan:
    """The plan of a run, as ``xder-run train`` resolves it: the method's defaults, the
    benchmark's ``protocol``, the ``preset`` (default: the method's, ``tuned`` else ``paper``
    else ``none``), then ``buffer_size`` and ``overrides`` (dotted keys:
    ``{"train.epochs": 2, "backbone.width": 8}``). ``run`` holds further ``[run]``
    settings (``loggers=["tensorboard"]``, ``data_root="data"``, ``threads=1``, ...).

    Raises:
        SettingError: an unknown preset, entry or setting, or a value out of its range (the
            message names the setting).
        UnknownMethodError, DataError, UnknownBackboneError: an unknown method, benchmark or
            protocol, or backbone.
    """
    sets = []
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or not key:
            raise SettingError(
                f"{dotted!r}: a setting is section.name with section one of {', '.join(SECTIONS)}"
            )
        sets.append((section, key, value))
    config = resolve_config(
        method=method,
        benchmark=benchmark,
        preset=preset,
        run={"seed": seed, **run},
        train={},
        method_values={} if buffer_size is None else {"buffer_size": buffer_size},
        sets=sets,
        protocol_name=protocol,
    )
    return build_plan(config)


def load_plan(run_dir: Path) -> RunPlan:
    """The plan a run directory was trained with (its ``config.toml``)."""
    return build_plan(rundir.read_config(Path(run_dir) / rundir.CONFIG))
