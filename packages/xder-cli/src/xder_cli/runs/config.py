"""Run configuration: layered resolution, typed validation, and the TOML form of a run.

A run's configuration has five sections:

* ``[run]``: what to run (method, benchmark, protocol, seed, device, class order, data root,
  preset, validation fraction) and the experiment trackers it logs to;
* ``[train]``: the loop's :class:`xder_methods.TrainingSchedule`;
* ``[backbone]``: ``name`` plus the backbone's keyword options;
* ``[method]``: the method's config dataclass;
* ``[benchmark]``: the benchmark's options (:func:`xder_data.benchmark_options`, e.g. the
  ``folder`` benchmark's ``tasks`` and ``image_size``), passed to :func:`xder_data.load_benchmark`.

Layers, lowest first: the method's dataclass defaults, the benchmark's protocol, the preset,
the caller's values, then the overrides (``section.key=value``). Unknown keys and ill-typed values
are errors (:class:`~xder_cli.runs.errors.SettingError`).
"""

from __future__ import annotations

import dataclasses
import inspect
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from xder_cli.runs.errors import SettingError, option
from xder_data import benchmark_option_types, benchmark_options

__all__ = [
    "LOGGERS",
    "SECTIONS",
    "RunSettings",
    "benchmark_settings",
    "coerce",
    "parse_assignment",
    "validate_section",
]

SECTIONS = ("run", "train", "backbone", "method", "benchmark")
LOGGERS = ("tensorboard", "wandb")
"""Experiment trackers a run can log to (``run.loggers``)."""


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The ``[run]`` section.

    Attributes:
        method: registered method name.
        benchmark: registered benchmark name.
        seed: seeds the network's initialisation and the run's generator.
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:N``.
        class_order: ``natural``, ``reversed``, ``random`` (drawn from the seed) or a permutation.
        data_root: folder the benchmark's files sit under.
        preset: the preset applied (``none``: protocol + method defaults).
        protocol: the benchmark's training protocol (``paper``, or a variant the benchmark
            defines, e.g. ``laptop`` on ``seq-cifar10`` and ``seq-cifar100``): its settings are the
            ``[train]``, ``[backbone]`` and buffer defaults, and the presets are looked up under it.
        validation: fraction of train held out for model selection (0: none).
        data_device: where the data live while training: ``device`` (the training device),
            ``host`` (page-locked host memory, each batch copied over), or ``auto`` (the device
            when the data take less than half of its free memory, else the host).
        loggers: experiment trackers the run also logs to (``tensorboard``, ``wandb``), under
            the run directory; ``events.jsonl`` stays the record. They observe the run and do
            not configure it: reports and experiments never compare them.
        threads: CPU threads of the run's kernels. 0 (default): a fair share of this machine's
            cores among the training runs on it (all of them alone, ``cores // n`` beside n-1
            others, followed as runs start and end: :mod:`xder_cli.runs.cpushare`), unless
            ``OMP_NUM_THREADS`` fixes it. A count fixes it. CPU results depend on the count
            (``results.json`` ``environment.threads`` lists those used): fix it for numbers that
            repeat whatever else the machine runs. Not compared by reports and experiments.
        record_analyses: also record, while training, what ``xder-run analyze``'s
            ``grad_norms`` and ``future_fewshot_auc`` read: stream and buffer gradient norms every
            ``train.record_every`` steps, and after every task the few-shot curves of the future
            heads and the buffer's mean logits per class. Off by default: they cost a few percent
            of a run (docs/performance.md, "On a shared machine") and change none of its results.
        plugins: the plugin modules and files (:func:`~xder_cli.runs.plugins.load_plugin`, files as
            absolute paths) loaded when the run was started: resuming it loads them again. Where
            the code lives, not what is trained (the method's name is): not compared by reports
            and experiments.
    """

    method: str
    benchmark: str
    seed: int = 0
    device: str = "auto"
    class_order: str | list[int] = "natural"
    data_root: str = "data"
    preset: str = "none"
    protocol: str = "paper"
    validation: float = 0.0
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


def parse_assignment(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as a TOML value (``0.2``, ``true``,
    ``[35, 45]``, ``"text"``), or taken as a bare string when it is not one."""
    if "=" not in text:
        overrides = option("overrides")
        raise SettingError(
            f"{overrides} {text!r} needs the form section.key=value, e.g. {overrides} method.alpha=0.2"
        )
    dotted, raw = text.split("=", 1)
    section, _, key = dotted.strip().partition(".")
    if section not in SECTIONS or not key:
        raise SettingError(
            f"{option('overrides')} {text!r}: the key must be section.name with section one of "
            f"{', '.join(SECTIONS)}"
        )
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string (in quotes)"}
_PLURALS = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}


def _describe(hint: Any, *, plural: bool = False) -> str:
    """A type hint in words: ``int | None`` -> "an integer, or unset"."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if int in options and float in options:  # an integer is a number
            options = tuple(a for a in options if a is not int)
        words = " or ".join(_describe(a, plural=plural) for a in options if a is not type(None))
        return f"{words}, or unset" if type(None) in options else words
    if origin in (tuple, list):
        (item, *_) = typing.get_args(hint) or (Any,)
        return f"a list of {_describe(item, plural=True)}"
    if hint in _WORDS:
        return _PLURALS[hint] if plural else _WORDS[hint]
    return getattr(hint, "__name__", str(hint))


def coerce(value: Any, hint: Any, name: str) -> Any:
    """Check ``value`` against the type ``hint`` and convert it (int -> float, list -> tuple).

    Raises:
        SettingError: naming ``name``, the value and the expected type.
    """
    origin = typing.get_origin(hint)
    fail = SettingError(f"{name} = {value!r} is not valid: expected {_describe(hint)}")
    if hint is Any:
        return value
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise fail
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        for option in typing.get_args(hint):
            if option is type(None):
                continue
            try:
                return coerce(value, option, name)
            except SettingError:
                continue
        raise fail
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise fail
        (item,) = typing.get_args(hint)[:1] or (Any,)
        items = [coerce(v, item, name) for v in value]
        return tuple(items) if origin is tuple else items
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise fail
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise fail
    if hint is str:
        if isinstance(value, str):
            return value
        raise fail
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise fail


def _field_hints(target: Any) -> dict[str, Any]:
    """Field name -> type hint, for a dataclass, a factory's keyword-only parameters, or a
    mapping that is already name -> type hint."""
    if isinstance(target, Mapping):
        return dict(target)
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        return {f.name: hints[f.name] for f in dataclasses.fields(target) if f.init}
    hints = typing.get_type_hints(target)
    params = inspect.signature(target).parameters
    return {p.name: hints.get(p.name, Any) for p in params.values() if p.kind is p.KEYWORD_ONLY}


def validate_section(section: str, values: Mapping[str, Any], target: Any, *, what: str) -> dict[str, Any]:
    """Check every key of ``values`` against ``target``'s fields and coerce its value.

    Args:
        section: the section name, for messages.
        values: the section's resolved key/values.
        target: a dataclass (run/train/method), a backbone factory, or a mapping of option
            name -> type hint (a benchmark's :func:`xder_data.benchmark_option_types`).
        what: how to name the target in messages (e.g. "method 'derpp'").
    """
    hints = _field_hints(target)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints:
            known = ", ".join(sorted(hints)) or "no settings"
            raise SettingError(f"{section}.{key} is not a setting of {what}: it takes {known}")
        out[key] = coerce(value, hints[key], f"{section}.{key}")
    return out


def benchmark_settings(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """The ``[benchmark]`` section checked against benchmark ``name``'s options (their types), with
    the defaults of the options not given: every option the benchmark is loaded with.

    Raises:
        SettingError: an option the benchmark does not take, an ill-typed value, or a required
            option left out.
    """
    given = validate_section("benchmark", values, benchmark_option_types(name), what=f"benchmark {name!r}")
    defaults = benchmark_options(name)
    empty = inspect.Parameter.empty
    missing = [key for key, default in defaults.items() if default is empty and key not in given]
    if missing:
        key = missing[0]
        raise SettingError(
            f"benchmark {name!r} needs benchmark.{key}: pass {option('overrides')} benchmark.{key}=..."
        )
    return {**{k: v for k, v in defaults.items() if v is not empty}, **given}
