"""The one owner of a run's settings: their dotted keys, the layers they meet in, the typed plan
they become, and which ``[run]`` keys define a run.

A run's configuration has five sections, as its ``config.toml`` holds them:

* ``[run]``: what to run (method, benchmark, protocol, preset, seed, class order, validation
  fraction), where (device, data root, threads) and what watches it (trackers): :class:`RunSettings`;
* ``[train]``: the loop's :class:`xder_methods.TrainingSchedule`;
* ``[backbone]``: ``name`` plus the backbone's keyword options;
* ``[method]``: the method's config dataclass;
* ``[benchmark]``: the benchmark's options (:func:`xder_data.benchmark_options`, e.g. the
  ``folder`` benchmark's ``tasks`` and ``image_size``), passed to :func:`xder_data.load_benchmark`.

A setting on its way in is a dotted key and a value, ``{"train.lr": 0.1}``: a front end turns its
flags and ``--set`` into such keys (:func:`parse_assignment` reads ``section.key=value``,
:func:`split_key` is the one reader of a dotted key). :func:`resolve_config` layers them, lowest
first: the method's dataclass defaults, the benchmark's protocol, the preset, then the given
settings in their order; :func:`build_plan` checks every section against its target's types and
builds the typed :class:`RunPlan` the run is trained from. So ``--set train.lr=0.1`` goes:

1. the command: ``{"train.lr": 0.1}`` (:func:`parse_assignment`);
2. :func:`resolve_config`: ``config["train"]["lr"] = 0.1``, above the protocol and the preset;
3. :func:`build_plan`: ``RunPlan.schedule.lr == 0.1`` (:class:`xder_methods.TrainingSchedule`),
   and ``config.toml``'s ``[train] lr = 0.1``;
4. :func:`xder_methods.fit`: each task's optimiser is built with ``schedule.lr``.

:data:`RUN_KEYS` says, for every ``[run]`` key, whether it defines a run (what is trained), places
it (where it trains) or observes it (what watches it): reports group runs, experiments compare a
run directory with their plan, and overrides are named by the keys that define a run only
(:func:`defines`).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from xder_cli.runs import rundir
from xder_cli.runs._dotted import (
    SECTIONS,
    parse_assignment,
    parse_value,
    parse_values,
    sections,
    settings_text,
    split_key,
)
from xder_cli.runs._typed import coerce, validate_section
from xder_cli.runs.defaults import LOGGERS
from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.plugins import load_recorded
from xder_cli.runs.presets import choose_preset
from xder_cli.runs.records import Config, Section
from xder_data import (
    DEFAULT_PROTOCOL,
    BenchmarkDefaults,
    benchmark_defaults,
    benchmark_option_types,
    benchmark_scenario,
    canonical_protocol,
    check_scenario,
)
from xder_data import benchmark_options as benchmark_option_defaults
from xder_methods import (
    MethodBase,
    TrainingProtocol,
    TrainingSchedule,
    check_schedule,
    list_methods,
    method_class,
    method_config_class,
    protocol_fields,
    protocol_values,
)
from xder_models import backbone_factory, backbone_options

__all__ = [
    "LAYER_KEYS",
    "LOGGERS",
    "NOT_DEFINING",
    "RUN_KEYS",
    "SECTIONS",
    "Notify",
    "Role",
    "RunPlan",
    "RunSettings",
    "benchmark_section",
    "benchmark_settings",
    "build_plan",
    "coerce",
    "defines",
    "ignore",
    "load_plan",
    "parse_assignment",
    "parse_value",
    "parse_values",
    "resolve_config",
    "resolve_run",
    "run_overrides",
    "sections",
    "settings_text",
    "split_key",
    "start_notes",
    "takes_buffer",
    "validate_section",
]

"""Experiment trackers a run can log to (``run.loggers``)."""

Notify = Callable[[str], None]
"""Hears the lines a run has for its user (``note: ...``, ``warning: ...``): the command line
prints them; a library caller may log them, or ignore them (the default)."""


def ignore(message: str) -> None:
    """The default :data:`Notify`: says nothing."""


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The ``[run]`` section (:data:`RUN_KEYS` says what each key is to a run).

    Attributes:
        method: registered method name.
        benchmark: registered benchmark name.
        seed: seeds the network's initialisation and the run's generator.
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:N``.
        class_order: ``natural``, ``reversed``, ``random`` (drawn from the seed) or a permutation.
        data_root: folder the benchmark's files sit under.
        preset: the preset applied (``none``: protocol + method defaults).
        protocol: the benchmark's training protocol (``full``, the paper's, or a variant the
            benchmark defines, e.g. ``laptop`` on ``seq-cifar10`` and ``seq-cifar100``): its
            settings are the ``[train]``, ``[backbone]`` and buffer defaults, and the presets are
            looked up under it. ``paper``, its name before, reads as ``full``.
        validation: fraction of train held out for model selection (0: none).
        scenario: the scenario the benchmark runs in: ``benchmark`` (its own, the default), or
            ``task-il`` for a class-il benchmark (the task given at test time: Task-IL accuracy
            only; what PNN needs): :func:`xder_data.with_scenario`.
        data_device: where the data live while training: ``device`` (the training device),
            ``host`` (page-locked host memory, each batch copied over), or ``auto`` (the device
            when the data take less than half of its free memory, else the host).
        loggers: experiment trackers the run also logs to (``tensorboard``, ``wandb``), under
            the run directory; ``events.jsonl`` stays the record.
        threads: CPU threads of the run's kernels. 0 (default): a fair share of the cores that
            other programs leave free, among the training runs on this machine (all of them on
            an idle machine, ``(cores - busy) // n`` beside n-1 other runs and programs keeping
            ``busy`` cores busy, followed as they start and end: :mod:`xder_methods.core.threads`),
            unless ``OMP_NUM_THREADS`` fixes it. A count fixes it. CPU results depend on the count
            (``results.json`` ``environment.threads`` lists those used): fix it for numbers that
            repeat whatever else the machine runs.
        record_analyses: also record, while training, what ``xder-run analyze``'s
            ``grad_norms`` and ``future_fewshot_auc`` read: stream and buffer gradient norms every
            ``train.record_every`` steps, and after every task the few-shot curves of the future
            heads and the buffer's mean logits per class. Off by default: they cost a few percent
            of a run (docs/performance.md, "On a shared machine") and change none of its results.
        plugins: the plugin modules and files (:func:`~xder_cli.runs.plugins.load_plugin`, files as
            absolute paths) loaded when the run was started: resuming it loads them again. Where
            the code lives, not what is trained (the method's name is).
    """

    method: str
    benchmark: str
    seed: int = 0
    device: str = "auto"
    class_order: str | list[int] = "natural"
    data_root: str = "data"
    preset: str = "none"
    protocol: str = DEFAULT_PROTOCOL
    validation: float = 0.0
    scenario: Literal["benchmark", "class-il", "task-il", "domain-il", "general"] = "benchmark"
    data_device: Literal["auto", "device", "host"] = "auto"
    loggers: list[Literal["tensorboard", "wandb"]] = dataclasses.field(default_factory=list)
    threads: int = 0
    record_analyses: bool = False
    plugins: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0.0 <= self.validation < 1.0:
            raise SettingError(f"run.validation must be in [0, 1), got {self.validation}")
        if len(set(self.loggers)) != len(self.loggers):
            raise SettingError(f"run.loggers names a logger twice: {self.loggers}")
        if self.threads < 0:
            raise SettingError(f"run.threads must be >= 0 (0: a fair share of the cores), got {self.threads}")


class Role(enum.Enum):
    """What a ``[run]`` key is to a run."""

    DEFINES = "defines"
    """What is trained: two runs that differ in it are different runs."""
    PLACES = "places"
    """Where it trains or where its code and data are: a run moved elsewhere is the same run."""
    OBSERVES = "observes"
    """What watches it (trackers, records for the analyses): it changes no result."""


RUN_KEYS: dict[str, Role] = {
    "method": Role.DEFINES,
    "benchmark": Role.DEFINES,
    "protocol": Role.DEFINES,
    "preset": Role.DEFINES,
    "seed": Role.DEFINES,
    "class_order": Role.DEFINES,
    "validation": Role.DEFINES,
    "scenario": Role.DEFINES,
    "device": Role.PLACES,
    "data_root": Role.PLACES,
    "data_device": Role.PLACES,
    "threads": Role.PLACES,
    "plugins": Role.PLACES,
    "loggers": Role.OBSERVES,
    "record_analyses": Role.OBSERVES,
}
"""Every key of :class:`RunSettings` and what it is to a run. The keys of the other sections all
define it."""

NOT_DEFINING = frozenset(f"run.{key}" for key, role in RUN_KEYS.items() if role is not Role.DEFINES)
"""The dotted keys that place or observe a run: never compared to tell runs apart."""

LAYER_KEYS = ("method", "benchmark", "protocol", "preset")
"""The ``[run]`` keys that choose the layers (the method's defaults, the protocol, the preset):
given as arguments of :func:`resolve_config`, never as settings."""


def defines(dotted: str) -> bool:
    """Whether the setting ``dotted`` (``run.device``, ``train.lr``) defines what a run trains
    (:data:`RUN_KEYS`; every key outside ``[run]`` does)."""
    return dotted not in NOT_DEFINING


# ---------------------------------------------------------------------------------------------
# The layers


def takes_buffer(method: str) -> bool:
    """Whether ``method`` keeps a replay buffer: the protocol fills its ``buffer_size``, as its
    config declares (:func:`xder_methods.protocol_fields`).

    Raises:
        UnknownMethodError: no method of that name.
    """
    return "buffer_size" in protocol_fields(method_config_class(method))


PROTOCOL_KEYS = tuple(f.name for f in dataclasses.fields(TrainingProtocol))
"""The training protocol's fields (:class:`xder_methods.TrainingProtocol`), which every
:class:`xder_data.BenchmarkDefaults` carries too."""


def _protocol_layer(protocol: BenchmarkDefaults, filled: tuple[str, ...]) -> dict[str, Any]:
    """The settings a benchmark's protocol gives a run: the training protocol's fields
    (:data:`PROTOCOL_KEYS`) of its :class:`xder_data.BenchmarkDefaults`, its backbone, and the
    method fields it fills (``filled``, as the method's config declares them:
    :func:`xder_methods.protocol_fields`; e.g. the buffer and replay batch sizes)."""
    layer = {f"train.{key}": getattr(protocol, key) for key in PROTOCOL_KEYS}
    layer |= {"backbone.name": protocol.backbone}
    layer |= {f"backbone.{k}": v for k, v in protocol.backbone_options.items()}
    layer |= {f"method.{k}": getattr(protocol, k) for k in filled}
    return layer


def resolve_config(
    method: str,
    benchmark: str,
    *,
    protocol: str = DEFAULT_PROTOCOL,
    preset: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Layer a run's configuration, lowest first: the method's defaults (left to its config
    dataclass), the benchmark's ``protocol``, the ``preset`` (None: the default for this method,
    benchmark, protocol and buffer size), then ``settings`` (dotted keys, each over the ones
    before it). The buffer size the settings give (``method.buffer_size``, else the protocol's)
    picks the preset's entry. A backbone other than the protocol's takes none of the protocol's
    backbone options.

    Returns:
        The configuration's sections, unchecked (:func:`build_plan` checks them).

    Raises:
        SettingError: a setting of :data:`LAYER_KEYS` (they are arguments), a key that is not a
            setting, an unknown preset or entry.
        UnknownMethodError, DataError (UnknownProtocolError): an unknown method, benchmark or
            protocol.
    """
    settings = dict(settings or {})
    protocol = canonical_protocol(protocol)
    config_cls = method_config_class(method)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    filled = protocol_fields(config_cls)
    defaults = benchmark_defaults(benchmark, protocol)
    for dotted in settings:
        section, key = split_key(dotted)
        if section == "run" and key in LAYER_KEYS:
            raise SettingError(f"run.{key} cannot be set with {option('overrides')}: use {option(key)}")
    buffer_size: int | None = None
    if "buffer_size" in filled:
        size = settings.get("method.buffer_size", defaults.buffer_size)
        buffer_size = size if isinstance(size, int) and not isinstance(size, bool) else None
    preset, values = choose_preset(preset or None, benchmark, method, buffer_size, protocol)
    chosen = {
        dotted: value
        for dotted, value in values.items()
        # the protocol's replay batch, in a preset's protocol table: replay methods only
        if not dotted.startswith("method.") or split_key(dotted)[1] in fields
    }
    layers = {**_protocol_layer(defaults, filled), **chosen, **settings}
    config: dict[str, dict[str, Any]] = {
        "run": {"method": method, "benchmark": benchmark, "preset": preset, "protocol": protocol},
        **{section: {} for section in SECTIONS if section != "run"},
    }
    for section, values in sections(layers).items():
        config[section].update(values)
    if config["backbone"]["name"] != defaults.backbone:  # the protocol's options fit its own net
        chosen_backbone = {k: v for k, v in {**chosen, **settings}.items() if k.startswith("backbone.")}
        config["backbone"] = sections({"backbone.name": config["backbone"]["name"], **chosen_backbone})[
            "backbone"
        ]
    return config


# ---------------------------------------------------------------------------------------------
# The plan


MethodConfigT = TypeVar("MethodConfigT")
"""The config class of a plan's method (:func:`xder_methods.method_config_class`)."""


@dataclass(frozen=True)
class RunPlan(Generic[MethodConfigT]):
    """A run's validated configuration, as typed objects and as the TOML sections.

    ``benchmark`` holds the benchmark's options (the ``[benchmark]`` section, its defaults
    included), passed to :func:`xder_data.load_benchmark`.
    """

    settings: RunSettings
    schedule: TrainingSchedule
    method_config: MethodConfigT
    backbone: Section
    config: Config
    benchmark: Section = field(default_factory=dict)

    @property
    def buffer_size(self) -> int:
        """The method's buffer size (0 for a method that keeps none: :func:`takes_buffer`)."""
        return protocol_values(self.method_config).get("buffer_size", 0)

    @property
    def fit_schedule(self) -> TrainingSchedule:
        """The schedule a run trains with: ``schedule`` with its gradient-norm probes
        (``record_every``) off unless the run records its analyses (``run.record_analyses``),
        as they are analyses too."""
        if self.settings.record_analyses:
            return self.schedule
        return dataclasses.replace(self.schedule, record_every=0)


def start_notes(plan: RunPlan[Any], *, preset_named: bool) -> list[str]:
    """What a new run's first lines say beyond its settings: a replay method with an empty buffer,
    and a default preset that fell back to ``none`` for want of an entry at this buffer size
    (``preset_named``: the user named the preset)."""
    s, notes = plan.settings, []
    if takes_buffer(s.method) and plan.buffer_size == 0:
        notes.append(f"note: buffer 0: {s.method} keeps nothing to replay")
    usual_buffer = benchmark_defaults(s.benchmark, s.protocol).buffer_size
    if not preset_named and s.preset == "none" and plan.buffer_size != usual_buffer:
        usual = choose_preset(None, s.benchmark, s.method, usual_buffer, s.protocol)[0]
        if usual != "none":
            notes.append(
                f"note: preset none (the method's own defaults): the {usual} preset has no entry for "
                f"buffer {plan.buffer_size}, only for the protocol's {usual_buffer}"
            )
    return notes


def benchmark_section(assignments: Iterable[tuple[str, Any]], where: str) -> dict[str, Any]:
    """The ``[benchmark]`` section that ``assignments`` (``(dotted key, value)`` pairs, as
    :func:`parse_assignment` gives them) make, for ``where`` (e.g. ``data info``) that takes the
    benchmark's options only.

    Raises:
        SettingError: a key of another section.
    """
    section: dict[str, Any] = {}
    for dotted, value in assignments:
        part, key = split_key(dotted)
        if part != "benchmark":
            raise SettingError(
                f"{option('overrides')} {dotted}: {where} takes the benchmark's options only "
                f"({option('overrides')} benchmark.KEY=VALUE, e.g. benchmark.tasks=3)"
            )
        section[key] = value
    return section


def benchmark_settings(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[benchmark]`` section checked against benchmark ``name``'s options (their types), with
    the defaults of the options not given: every option the benchmark is loaded with.

    Raises:
        SettingError: an option the benchmark does not take, an ill-typed value, or a required
            option left out.
    """
    given = validate_section("benchmark", values, benchmark_option_types(name), what=f"benchmark {name!r}")
    defaults = benchmark_option_defaults(name)
    empty = inspect.Parameter.empty
    missing = [key for key, default in defaults.items() if default is empty and key not in given]
    if missing:
        key = missing[0]
        raise SettingError(
            f"benchmark {name!r} needs benchmark.{key}: pass {option('overrides')} benchmark.{key}=..."
        )
    return {**{k: v for k, v in defaults.items() if v is not empty}, **given}


def build_plan(config: Mapping[str, Mapping[str, Any]]) -> RunPlan[Any]:
    """Validate every section of a configuration and build the typed objects.

    Raises:
        SettingError: unknown section or key, ill-typed value.
        MethodConfigError: a method's value out of range, or a schedule the method cannot train
            with (:func:`xder_methods.check_schedule`).
        UnknownMethodError, UnknownBackboneError, DataError: from the packages.
    """
    unknown = sorted(set(config) - set(SECTIONS))
    if unknown:
        raise SettingError(f"unknown section {unknown[0]!r}: use {', '.join(SECTIONS)}")
    run = validate_section("run", config.get("run", {}), RunSettings, what="[run]")
    if "protocol" in run:  # a run recorded under a protocol's former name
        run["protocol"] = canonical_protocol(run["protocol"])
    for required in ("method", "benchmark"):
        if required not in run:
            raise SettingError(f"the configuration has no run.{required}")
    settings = RunSettings(**run)
    benchmark_defaults(settings.benchmark, settings.protocol)  # an unknown one is the user's to fix
    scenario = benchmark_scenario(settings.benchmark)
    if settings.scenario != "benchmark":  # said before any data is read (load_data applies it)
        check_scenario(settings.benchmark, scenario, settings.scenario)
        scenario = settings.scenario
    method_cls = method_class(settings.method)
    if issubclass(method_cls, MethodBase):  # a method that refuses it, before any data is read
        method_cls.check_scenario(scenario)
    benchmark = benchmark_settings(settings.benchmark, config.get("benchmark", {}))
    schedule = TrainingSchedule(
        **validate_section("train", config.get("train", {}), TrainingSchedule, what="[train]")
    )
    config_cls = method_config_class(settings.method)
    method_config = config_cls(
        **validate_section("method", config.get("method", {}), config_cls, what=f"method {settings.method!r}")
    )
    check_schedule(method_config, schedule)  # the method's own rules on the schedule
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
) -> RunPlan[Any]:
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
    settings = {"run.seed": seed, **{f"run.{key}": value for key, value in run.items()}}
    if buffer_size is not None:
        settings["method.buffer_size"] = buffer_size
    settings |= dict(overrides or {})
    return build_plan(resolve_config(method, benchmark, protocol=protocol, preset=preset, settings=settings))


def load_plan(run_dir: str | Path) -> RunPlan[Any]:
    """The plan a run directory was trained with (its ``config.toml``), the plugins it records
    (``run.plugins``) loaded first.

    Raises:
        RunDirError: no readable ``config.toml``.
        PluginError: a recorded plugin that does not load now.
        SettingError: its method is registered by nothing loaded here (a plugin it does not
            record), or its configuration does not build (as :func:`build_plan`).
    """
    run_dir = Path(run_dir)
    config = rundir.read_config(run_dir / rundir.CONFIG)
    load_recorded(config.get("run", {}).get("plugins", []), run_dir)
    method = config.get("run", {}).get("method")
    if method is not None and method not in list_methods():
        raise SettingError(
            f"{run_dir} trains method {method!r}, which nothing registers here: it comes from a plugin "
            f"not recorded in its config.toml; pass {option('plugin')} MODULE_OR_FILE naming it"
        )
    return build_plan(config)


# ---------------------------------------------------------------------------------------------
# What a run changed


def _comparable(value: Any) -> Any:
    """A setting as TOML reads it back, numbers as floats: ``(35, 45)`` equals ``[35.0, 45.0]``."""
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def run_overrides(config: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The settings of a run's ``config.toml`` that its preset and protocol do not give, as they
    stand now (what overrides, epochs or class order changed), among those that define a run
    (:func:`defines`; the seed and the layers' own keys left out): dotted key -> the run's
    value. The buffer size is the run's own choice, not an override.

    Raises:
        RunError, DataError, MethodError: the run's method, benchmark, preset or protocol is
            unknown here (e.g. a plugin not loaded).
    """
    run = config.get("run", {})
    method = config.get("method", {})
    buffer = {"method.buffer_size": method["buffer_size"]} if "buffer_size" in method else {}
    reference = build_plan(
        resolve_config(
            run["method"],
            run["benchmark"],
            protocol=run.get("protocol", DEFAULT_PROTOCOL),
            preset=run.get("preset"),
            settings=buffer,
        )
    ).config
    keys = [("run", key) for key, role in RUN_KEYS.items() if role is Role.DEFINES]
    keys = [k for k in keys if k[1] not in (*LAYER_KEYS, "seed")]
    for section in SECTIONS[1:]:
        keys += [(section, key) for key in {*config.get(section, {}), *reference.get(section, {})}]
    overrides = {}
    for section, key in sorted(keys, key=lambda k: (SECTIONS.index(k[0]), k[1])):
        if (section, key) == ("method", "buffer_size"):
            continue
        mine = config.get(section, {}).get(key)
        if _comparable(mine) != _comparable(reference.get(section, {}).get(key)):
            overrides[f"{section}.{key}"] = mine
    return overrides
