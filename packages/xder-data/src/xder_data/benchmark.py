"""The benchmark type, its registry, and the pure functions that shape a benchmark (those live in
:mod:`xder_data._shaping` and are re-exported here).

A :class:`Benchmark` holds a whole class-incremental benchmark as tensors (images stay uint8,
labels already mapped through the class order) plus the protocol the paper trains it with.
Tasks are index views (:meth:`Benchmark.task`); nothing rewrites the data in place.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from xder_data._shaping import (
    VALIDATION_SEED,
    ClassOrderSpec,
    check_scenario,
    remap_labels,
    resolve_class_order,
    task_indices,
    validation_split,
    with_class_order,
    with_scenario,
    with_validation,
)
from xder_data.augment import Transform
from xder_data.errors import (
    BenchmarkOptionError,
    UnknownBenchmarkError,
    UnknownProtocolError,
)

__all__ = [
    "DEFAULT_PROTOCOL",
    "PROTOCOL_ALIASES",
    "VALIDATION_SEED",
    "Benchmark",
    "BenchmarkDefaults",
    "ClassOrderSpec",
    "Progress",
    "Scenario",
    "TaskSplit",
    "benchmark_defaults",
    "benchmark_info",
    "benchmark_option_types",
    "benchmark_options",
    "benchmark_scenario",
    "canonical_protocol",
    "check_scenario",
    "list_benchmarks",
    "list_protocols",
    "load_benchmark",
    "register_benchmark",
    "remap_labels",
    "resolve_class_order",
    "task_indices",
    "validation_split",
    "with_class_order",
    "with_scenario",
    "with_validation",
]
DEFAULT_PROTOCOL = "full"
"""The protocol a benchmark is run with unless another is named: its full protocol, the one its
paper (or, for a benchmark without one, its fixed definition) prescribes; its variants are sized
otherwise (e.g. ``laptop``)."""
PROTOCOL_ALIASES = {"paper": DEFAULT_PROTOCOL}
"""Former names of protocols: ``paper`` is what :data:`DEFAULT_PROTOCOL` was called until it
became ``full`` (a preset is called ``paper`` too). Runs recorded under it read as ``full``."""
Progress = Callable[[Iterable[Any]], Iterable[Any]]
"""Wraps the iterable a reader walks through (e.g. ``tqdm``) to show its progress."""


def no_progress(items: Iterable[Any]) -> Iterable[Any]:
    """The :data:`Progress` that shows nothing: ``items`` as they are (readers' default)."""
    return items


_PROGRESS = "progress"
"""A loader's keyword-only parameter that takes a :data:`Progress`, not a benchmark option."""


@dataclass(frozen=True, kw_only=True)
class BenchmarkDefaults:
    """The training protocol a benchmark is run with (the paper's, or the one fixed for it).

    The CLI turns these into the loop's schedule and the methods' buffer settings; presets and
    ``--set`` override them. ``drop_last``: drop each epoch's last partial batch (the loop's
    ``TrainingSchedule.drop_last``, whose default, True, it shares); the papers' protocols keep
    it, as the authors' code does (a DataLoader's default), and say so (``drop_last=False``).
    ``milestones``: where the ``multistep``
    schedule multiplies the lr by ``lr_gamma``, as positions within a task counted in epochs, integer
    (at the start of that epoch) or fractional (1.4: 40% into the second epoch); each lies strictly
    between 0 and ``epochs`` and they increase, so that every one takes effect.

    Raises:
        ValueError: milestones out of ``(0, epochs)`` or not increasing.
    """

    epochs: int
    batch_size: int
    minibatch_size: int
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_schedule: Literal["none", "multistep", "cosine"] = "none"
    milestones: tuple[int | float, ...] = ()
    lr_gamma: float = 0.1
    warmup_epochs: int = 0
    buffer_size: int = 0
    optimizer: Literal["sgd", "radam"] = "sgd"
    backbone: str = "resnet18-cifar"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    drop_last: bool = True

    def __post_init__(self) -> None:
        if not all(0 < m < self.epochs for m in self.milestones):
            raise ValueError(
                f"milestones {list(self.milestones)} must lie within the epochs: each > 0 and < "
                f"epochs ({self.epochs})"
            )
        if list(self.milestones) != sorted(self.milestones):
            raise ValueError(f"milestones {list(self.milestones)} must be increasing")


@dataclass(frozen=True)
class TaskSplit:
    """Index views of one task. ``train``/``test``/``val`` index the benchmark's tensors.

    Attributes:
        task: the task index t.
        class_start, class_end: the task's classes are ``[class_start, class_end)``.
        train, test: (N,) int64 row indices into ``train_x``/``test_x``.
        val: (N,) row indices into ``val_x``, or None without a validation split.
    """

    task: int
    class_start: int
    class_end: int
    train: Tensor
    test: Tensor
    val: Tensor | None = None


Scenario = Literal["class-il", "task-il", "domain-il", "general"]
"""How a benchmark's tasks relate to its labels (``xder_methods.Scenario`` holds the meaning of
each): ``class-il`` (new classes per task), ``task-il`` (the same, task given at test time),
``domain-il`` (the same classes in every task, a new input distribution) or ``general`` (one
stream without boundaries)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Benchmark:
    r"""A continual benchmark, held as tensors.

    Attributes:
        name: registry name, e.g. ``"seq-digits"``.
        scenario: :data:`Scenario`. In ``domain-il`` each row's task is ``train_task`` /
            ``test_task`` / ``val_task``; in ``general`` the training rows are the stream in its
            order, one task, cut into ``train_segment``\ s.
        n_tasks: number of tasks T.
        classes_per_task: classes of each task; task t holds the labels
            ``[sum(classes_per_task[:t]), sum(classes_per_task[:t+1]))`` (in ``domain-il`` every
            task holds all ``classes_per_task[0]`` labels).
        class_order: ``class_order[i]`` is the class, in the data's original ids, that label i
            stands for (0-based; e.g. the official NTU action id - 1).
        input_shape: shape of one example, e.g. ``(3, 32, 32)``.
        mean, std: per-channel normalisation constants (of [0, 1]-scaled inputs).
        train_x, train_y, test_x, test_y: examples (uint8 images) and mapped labels (int64).
        val_x, val_y: the held-out validation split, when one was requested.
        coarse_labels: (num_classes,) super-class of each mapped class, where the data has them.
        coarse_names: super-class names, indexed by the values of ``coarse_labels`` (a class
            order never renumbers super-classes).
        test_masks: (N_test, H, W) bool, the object's pixels in the test geometry of each test
            image (segmentation masks for the pointing game), where the data has them.
        train_secondary_y, test_secondary_y, val_secondary_y: (N,) label of a secondary object in
            each image (COCO-stitched secondary targets), in the same label space as ``*_y``.
        class_names: names in mapped label order, where the data has them.
        defaults: the training protocol.
        train_transform: augmentation + normalisation for training batches.
        test_transform: normalisation for evaluation.
        strong_transform: SimCLR-style strong augmentation + normalisation (X-DER's future
            preparation), where the benchmark defines one.
        train_task, test_task, val_task: (N,) int64 task of each row (``domain-il``).
        train_segment: (N_train,) int64 segment of each training row (``general``): the loop
            cuts each segment into batches on its own.
        notes: what the reader decided for the user that the user should be told (the folder
            benchmark's test set split off from a tree without ``test/``); printed by
            ``xder-run train`` and ``xder-run data info``.
    """

    name: str
    n_tasks: int
    classes_per_task: tuple[int, ...]
    class_order: tuple[int, ...]
    input_shape: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    defaults: BenchmarkDefaults
    train_transform: Transform
    test_transform: Transform
    strong_transform: Transform | None = None
    val_x: Tensor | None = None
    val_y: Tensor | None = None
    coarse_labels: Tensor | None = None
    class_names: tuple[str, ...] | None = None
    coarse_names: tuple[str, ...] | None = None
    test_masks: Tensor | None = None
    train_secondary_y: Tensor | None = None
    test_secondary_y: Tensor | None = None
    val_secondary_y: Tensor | None = None
    notes: tuple[str, ...] = ()
    scenario: Scenario = "class-il"
    train_task: Tensor | None = None
    test_task: Tensor | None = None
    val_task: Tensor | None = None
    train_segment: Tensor | None = None

    def __post_init__(self) -> None:
        if len(self.classes_per_task) != self.n_tasks:
            raise ValueError("classes_per_task needs one entry per task")
        if sorted(self.class_order) != list(range(self.num_classes)):
            raise ValueError("class_order must be a permutation of range(num_classes)")
        if self.scenario == "domain-il":
            if len(set(self.classes_per_task)) != 1:
                raise ValueError("a domain-il benchmark has the same classes in every task")
            if self.train_task is None or self.test_task is None:
                raise ValueError("a domain-il benchmark gives the task of each train and test row")
            if self.val_x is not None and self.val_task is None:
                raise ValueError("a domain-il benchmark gives the task of each validation row")
        if self.scenario == "general" and self.n_tasks != 1:
            raise ValueError("a general stream is one task")

    @property
    def num_classes(self) -> int:
        if self.scenario == "domain-il":
            return self.classes_per_task[0]
        return sum(self.classes_per_task)

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    def class_range(self, t: int) -> tuple[int, int]:
        """The labels ``[start, end)`` of task t (every label in ``domain-il``)."""
        if not 0 <= t < self.n_tasks:
            raise IndexError(f"task {t} out of range for {self.n_tasks} tasks")
        if self.scenario == "domain-il":
            return 0, self.num_classes
        start = sum(self.classes_per_task[:t])
        return start, start + self.classes_per_task[t]

    def task(self, t: int) -> TaskSplit:
        """Index views of task t's train, test and (if any) validation rows."""
        start, end = self.class_range(t)

        def rows(labels: Tensor, tasks: Tensor | None) -> Tensor:
            if tasks is None:
                return task_indices(labels, start, end)
            return torch.nonzero(tasks == t).flatten()

        val = None if self.val_y is None else rows(self.val_y, self.val_task)
        return TaskSplit(
            task=t,
            class_start=start,
            class_end=end,
            train=rows(self.train_y, self.train_task),
            test=rows(self.test_y, self.test_task),
            val=val,
        )

    def _tensors(self) -> dict[str, Tensor]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }

    @property
    def nbytes(self) -> int:
        """Memory held by the benchmark's tensors."""
        return sum(t.numel() * t.element_size() for t in self._tensors().values())

    def to(self, device: torch.device | str) -> Benchmark:
        """The same benchmark with every tensor on ``device``."""
        # Typed Any: mypy checks a ** mapping's value type against every field of the dataclass.
        moved: dict[str, Any] = {k: t.to(device) for k, t in self._tensors().items()}
        return dataclasses.replace(self, **moved)

    def with_standard_strides(self) -> Benchmark:
        """The same benchmark with every tensor in row-major (NCHW) strides, copied only where a
        tensor is not: a one-channel image tensor whose channel stride is 1 (as NumPy leaves a
        size-1 axis) is also channels-last by its strides, and torch then runs its convolutions
        through oneDNN's channels-last kernels, whose backward pass corrupts the heap on some
        CPUs for small images (seen with 8x8 digits on an AMD EPYC without AVX-512)."""
        fixed: dict[str, Any] = {
            k: t.clone(memory_format=torch.contiguous_format)
            for k, t in self._tensors().items()
            if t.stride() != _row_major_strides(t.shape)
        }
        return dataclasses.replace(self, **fixed) if fixed else self

    def pin_memory(self) -> Benchmark:
        """The same benchmark in page-locked host memory, for data too large for the training
        device: the loop then copies each batch over (needs CUDA)."""
        pinned: dict[str, Any] = {k: t.cpu().pin_memory() for k, t in self._tensors().items()}
        return dataclasses.replace(self, **pinned)


def _row_major_strides(shape: torch.Size) -> tuple[int, ...]:
    """The strides of a freshly allocated row-major tensor of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


# ---------------------------------------------------------------------------------------------
# Registry

BenchmarkLoader = Callable[..., Benchmark]
_REGISTRY: dict[str, tuple[BenchmarkLoader, dict[str, BenchmarkDefaults]]] = {}
_SCENARIOS: dict[str, Scenario] = {}


def register_benchmark(
    name: str,
    *,
    defaults: BenchmarkDefaults,
    protocols: Mapping[str, BenchmarkDefaults] | None = None,
    scenario: Scenario = "class-il",
) -> Callable[[BenchmarkLoader], BenchmarkLoader]:
    """Register ``loader(root: Path | None, **options) -> Benchmark`` (natural class order).

        ``defaults`` is the benchmark's training protocol (:data:`DEFAULT_PROTOCOL`, ``"full"``),
        readable without loading any data (:func:`benchmark_defaults`); the loader must put the same
        object in ``Benchmark.defaults``. ``protocols`` adds named variants beside it (e.g. a
        ``"laptop"`` protocol sized for a CPU), selected with ``load_benchmark(..., protocol=NAME)``.
    ``scenario`` (:data:`Scenario`, readable without data: :func:`benchmark_scenario`) must be the
    loaded ``Benchmark.scenario``.

        The loader's keyword-only parameters are the benchmark's options (:func:`benchmark_options`;
        the ``[benchmark]`` section of a run's ``config.toml``), typed by their annotations; one named
        ``progress`` instead receives :func:`load_benchmark`'s progress wrapper.

        Raises:
            ValueError: ``name`` is already registered (by this package or a plugin).
    """
    named = {DEFAULT_PROTOCOL: defaults, **(protocols or {})}
    if protocols and DEFAULT_PROTOCOL in protocols:
        raise ValueError(f"protocol {DEFAULT_PROTOCOL!r} is the benchmark's defaults: pass it as defaults")

    def decorator(loader: BenchmarkLoader) -> BenchmarkLoader:
        if name in _REGISTRY:
            raise ValueError(f"benchmark {name!r} is already registered")
        _REGISTRY[name] = (loader, named)
        _SCENARIOS[name] = scenario
        return loader

    return decorator


def list_benchmarks() -> list[str]:
    """Registered benchmark names, sorted."""
    return sorted(_REGISTRY)


def _lookup(name: str) -> tuple[BenchmarkLoader, dict[str, BenchmarkDefaults]]:
    if name not in _REGISTRY:
        raise UnknownBenchmarkError(
            f"unknown benchmark {name!r}: choose one of {', '.join(list_benchmarks())}"
        )
    return _REGISTRY[name]


def list_protocols(name: str) -> list[str]:
    """The protocols benchmark ``name`` defines: ``"full"`` first, then its variants, sorted."""
    protocols = _lookup(name)[1]
    return [DEFAULT_PROTOCOL, *sorted(p for p in protocols if p != DEFAULT_PROTOCOL)]


def benchmark_scenario(name: str) -> Scenario:
    """The :data:`Scenario` of benchmark ``name``, without loading its data.

    Raises:
        UnknownBenchmarkError: no such benchmark.
    """
    _lookup(name)
    return _SCENARIOS[name]


def _option_parameters(name: str) -> dict[str, inspect.Parameter]:
    params = inspect.signature(_lookup(name)[0]).parameters.values()
    return {p.name: p for p in params if p.kind is p.KEYWORD_ONLY and p.name != _PROGRESS}


def benchmark_options(name: str) -> dict[str, Any]:
    """The options benchmark ``name`` takes (its loader's keyword-only parameters) with their
    defaults (``inspect.Parameter.empty`` where there is none), without loading any data.

    Raises:
        UnknownBenchmarkError: no such benchmark.
    """
    return {key: p.default for key, p in _option_parameters(name).items()}


def benchmark_option_types(name: str) -> dict[str, Any]:
    """The type annotation of each option of benchmark ``name`` (``typing.Any`` where it has
    none, or where the annotations cannot be resolved, e.g. names imported only for type
    checking), e.g. ``{"tasks": int | None, ...}`` for ``folder``.

    Raises:
        UnknownBenchmarkError: no such benchmark.
    """
    loader = _lookup(name)[0]
    try:
        hints = typing.get_type_hints(loader)
    except (NameError, TypeError):  # a plugin's annotation that does not resolve at run time
        hints = {}
    return {key: hints.get(key, Any) for key in _option_parameters(name)}


def canonical_protocol(protocol: str) -> str:
    """A protocol's name as it is now (:data:`PROTOCOL_ALIASES`): ``"paper"`` -> ``"full"``;
    any other name as it is."""
    return PROTOCOL_ALIASES.get(protocol, protocol)


def benchmark_defaults(name: str, protocol: str = DEFAULT_PROTOCOL) -> BenchmarkDefaults:
    """The training protocol ``protocol`` of benchmark ``name`` (a former name read as the
    current one: :func:`canonical_protocol`), without loading its data.

    Raises:
        UnknownBenchmarkError: no such benchmark.
        UnknownProtocolError: the benchmark defines no such protocol.
    """
    protocol = canonical_protocol(protocol)
    protocols = _lookup(name)[1]
    if protocol not in protocols:
        others = ", ".join(list_protocols(name))
        raise UnknownProtocolError(
            f"benchmark {name!r} has no protocol {protocol!r}: it has {others} (run.protocol NAME)"
        )
    return protocols[protocol]


def load_benchmark(
    name: str,
    root: str | Path | None = None,
    *,
    class_order: ClassOrderSpec = "natural",
    seed: int = 0,
    validation: float = 0.0,
    device: torch.device | str = "cpu",
    protocol: str = DEFAULT_PROTOCOL,
    progress: Progress | None = None,
    **options: Any,
) -> Benchmark:
    """Read a registered benchmark and prepare it for a run.

    Args:
        name: registry name (see :func:`list_benchmarks`).
        root: the data root the benchmark's files sit under (unused by ``seq-digits``).
        class_order: see :func:`resolve_class_order`; ``"random"`` draws from ``seed``.
        seed: the run's seed.
        validation: if > 0, hold out this stratified fraction of train as the validation split
            (for model selection; the test set is never used to select).
        device: where the tensors live during training.
        protocol: the training protocol the benchmark's ``defaults`` hold (see
            :func:`list_protocols`); the data are the same under every protocol.
        progress: wraps the reader's slow loop (e.g. decoding images) where it has one.
        **options: the benchmark's options (:func:`benchmark_options`), passed to its reader.

    Raises:
        UnknownBenchmarkError, UnknownProtocolError: no such benchmark or protocol.
        BenchmarkOptionError: an option the benchmark does not take, or a value it rejects.
        DataNotFoundError, BenchmarkFormatError: from the reader.
    """
    loader, _ = _lookup(name)
    defaults = benchmark_defaults(name, protocol)
    known = _option_parameters(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = ", ".join(sorted(known)) or "no options"
        raise BenchmarkOptionError(f"benchmark {name!r} has no option {unknown[0]!r}: it takes {takes}")
    if progress is not None and _PROGRESS in inspect.signature(loader).parameters:
        options[_PROGRESS] = progress
    bench = loader(None if root is None else Path(root), **options).with_standard_strides()
    if bench.scenario != _SCENARIOS[name]:
        raise ValueError(f"benchmark {name!r} registered as {_SCENARIOS[name]} loaded as {bench.scenario}")
    if canonical_protocol(protocol) != DEFAULT_PROTOCOL:
        bench = dataclasses.replace(bench, defaults=defaults)
    if validation:
        bench = with_validation(bench, validation)
    bench = with_class_order(bench, class_order, seed)
    return bench.to(device)


def _layout(bench: Benchmark) -> str:
    """The tasks and their classes in words (``data info``'s first line)."""
    if bench.scenario == "general":
        return f"one stream of {bench.num_classes} classes, no task boundaries"
    if bench.scenario == "domain-il":
        return f"{bench.n_tasks} tasks, each of the same {bench.num_classes} classes"
    if len(set(bench.classes_per_task)) == 1:
        return f"{bench.n_tasks} tasks x {bench.classes_per_task[0]} classes"
    return f"{bench.n_tasks} tasks, classes per task {list(bench.classes_per_task)}"


def benchmark_info(
    bench: Benchmark, protocol: str = DEFAULT_PROTOCOL, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a loaded benchmark holds, as plain JSON-ready data (``xder-run data info --json``).

    Args:
        bench: the benchmark, as :func:`load_benchmark` returned it (its class order applied).
        protocol: the protocol whose settings ``"protocol"`` shows (``"protocols"`` lists them all).
        options: the benchmark options it was loaded with, shown as ``"options"``.

    Returns:
        ``name``, ``scenario``, ``layout`` (the tasks and classes in words), ``n_tasks``,
        ``classes_per_task``, ``num_classes``, ``class_order``, ``train_size``, ``test_size``,
        ``input_shape``, ``dtype``, ``mean``, ``std``,
        ``class_names`` (None without names), ``options``, ``notes``, ``tasks`` (per task: ``task``,
        ``classes`` (mapped labels), ``original_classes``, ``train_size``, ``test_size``, and
        ``val_size`` with a validation split), ``val_size`` with a validation split,
        ``protocols`` and ``protocol`` (``name``, ``epochs``, ``batch_size``, ``minibatch_size``,
        ``lr``, ``lr_schedule``, ``milestones``, ``buffer_size``, ``backbone``,
        ``backbone_options``, ``drop_last``).

    Raises:
        UnknownProtocolError: the benchmark defines no such protocol.
    """
    info: dict[str, Any] = {
        "name": bench.name,
        "scenario": bench.scenario,
        "layout": _layout(bench),
        "n_tasks": bench.n_tasks,
        "classes_per_task": list(bench.classes_per_task),
        "num_classes": bench.num_classes,
        "class_order": list(bench.class_order),
        "train_size": int(bench.train_y.shape[0]),
        "test_size": int(bench.test_y.shape[0]),
        "input_shape": list(bench.input_shape),
        "dtype": str(bench.train_x.dtype).removeprefix("torch."),
        "mean": list(bench.mean),
        "std": list(bench.std),
        "class_names": list(bench.class_names) if bench.class_names is not None else None,
        "options": dict(options or {}),
        "notes": list(bench.notes),
        "tasks": [],
    }
    if bench.val_y is not None:
        info["val_size"] = int(bench.val_y.shape[0])
    for t in range(bench.n_tasks):
        split = bench.task(t)
        task: dict[str, Any] = {
            "task": t,
            "classes": list(range(split.class_start, split.class_end)),
            "original_classes": [bench.class_order[c] for c in range(split.class_start, split.class_end)],
            "train_size": int(split.train.shape[0]),
            "test_size": int(split.test.shape[0]),
        }
        if split.val is not None:
            task["val_size"] = int(split.val.shape[0])
        info["tasks"].append(task)
    defaults = benchmark_defaults(bench.name, protocol)
    info["protocols"] = list_protocols(bench.name)
    info["protocol"] = {
        "name": canonical_protocol(protocol),
        "epochs": defaults.epochs,
        "batch_size": defaults.batch_size,
        "minibatch_size": defaults.minibatch_size,
        "lr": defaults.lr,
        "lr_schedule": defaults.lr_schedule,
        "milestones": list(defaults.milestones),
        "buffer_size": defaults.buffer_size,
        "backbone": defaults.backbone,
        "backbone_options": dict(defaults.backbone_options),
        "drop_last": defaults.drop_last,
    }
    return info
