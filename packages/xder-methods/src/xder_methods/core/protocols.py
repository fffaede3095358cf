"""The seams between xder-methods and the rest: typed protocols and the small value types.

xder-methods imports no sibling package: it talks to backbones through :class:`Backbone`, to
data through plain tensors (:class:`TaskStream`) and to augmentation through :class:`Transform`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError

if TYPE_CHECKING:
    from xder_methods.core.schedule import TrainingSchedule
    from xder_methods.parts.buffer import Buffer

__all__ = [
    "SCENARIOS",
    "SCENARIO_ACCURACY",
    "Backbone",
    "Batch",
    "ContinualMethod",
    "ContinualSetting",
    "MethodConfig",
    "Scenario",
    "StepOutput",
    "StepPolicy",
    "TaskBudget",
    "TaskData",
    "TaskStream",
    "TaskView",
    "Transform",
    "Transforms",
]


@runtime_checkable
class Backbone(Protocol):
    """What a method needs of a network: logits, features, head, feature size."""

    num_features: int

    def __call__(self, x: Tensor) -> Tensor: ...

    def forward_features(self, x: Tensor) -> Tensor: ...

    def forward_head(self, features: Tensor) -> Tensor: ...


class Transform(Protocol):
    """A batched transform with per-sample random parameters: ``(x (B, ...), generator)``."""

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor: ...


@dataclass(frozen=True)
class Transforms:
    """The transforms a method applies to raw (unaugmented) examples.

    Attributes:
        train: weak augmentation + normalisation (stream and buffer batches).
        test: normalisation only (evaluation, and the unaugmented views some methods need).
        strong: SimCLR-style strong augmentation + normalisation (X-DER's future preparation).
    """

    train: Transform
    test: Transform
    strong: Transform | None = None


Scenario = Literal["class-il", "task-il", "domain-il", "general"]
"""How a benchmark's tasks relate to its labels and what a learner is told (van de Ven and Tolias'
three scenarios, plus the DER paper's general continual learning):

* ``class-il``: task t brings new classes ``class_range(t)``; one head over every class seen;
  Class-IL accuracy (argmax over the classes seen so far) and, beside it, Task-IL accuracy
  (argmax inside the example's own task's classes: the task is given at test time).
* ``task-il``: the same tasks, with the task given at test time: Task-IL accuracy only (PNN).
* ``domain-il``: every task has the same label set (``classes_per_task[t]`` equal for all t, one
  head) and a new input distribution; the accuracy is the argmax over every class (Domain-IL);
  no Task-IL (a task's own classes are all the classes).
* ``general``: one stream with no task boundaries (one task to the learner: ``begin_task``,
  ``prepare_task`` and ``end_task`` run once), cut into segments the learner is not told of; the
  accuracy at the stream's end over every class.
"""

SCENARIOS: tuple[Scenario, ...] = ("class-il", "task-il", "domain-il", "general")
"""Every :data:`Scenario`."""

SCENARIO_ACCURACY: dict[Scenario, str] = {
    "class-il": "Class-IL",
    "task-il": "Task-IL",
    "domain-il": "Domain-IL",
    "general": "Accuracy",
}
"""What each scenario calls its own accuracy (the argmax over the classes seen; Task-IL's, the
argmax inside the task's classes): the name reports and tables give it."""


def reports_class_il(scenario: Scenario) -> bool:
    """Whether the argmax over the classes seen is an accuracy of ``scenario`` (Class-IL,
    Domain-IL, the general stream's): all but ``task-il``."""
    return scenario != "task-il"


def reports_task_il(scenario: Scenario) -> bool:
    """Whether Task-IL accuracy means something in ``scenario``: ``class-il`` (beside Class-IL)
    and ``task-il``; in ``domain-il`` and ``general`` a task's classes are all the classes."""
    return scenario in ("class-il", "task-il")


@dataclass(frozen=True)
class ContinualSetting:
    """The shape of a continual problem, as a method sees it.

    In ``class-il``, ``task-il`` and ``general`` (one task) task t owns the contiguous labels
    ``class_range(t) = [start_t, end_t)``; in ``domain-il`` every task owns every label
    (``class_range(t) = [0, num_classes)``), so "the classes seen so far" are all of them from
    the first task on.
    """

    classes_per_task: tuple[int, ...]
    input_shape: tuple[int, ...]
    input_dtype: torch.dtype = torch.uint8
    scenario: Scenario = "class-il"

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}: one of {', '.join(SCENARIOS)}")
        if self.scenario == "domain-il" and len(set(self.classes_per_task)) > 1:
            raise ValueError("a domain-il setting has the same classes in every task")
        if self.scenario == "general" and len(self.classes_per_task) != 1:
            raise ValueError("a general stream is one task to the learner")

    @property
    def n_tasks(self) -> int:
        return len(self.classes_per_task)

    @property
    def num_classes(self) -> int:
        if self.scenario == "domain-il":
            return self.classes_per_task[0]
        return sum(self.classes_per_task)

    @property
    def reports_class_il(self) -> bool:
        """:func:`reports_class_il` of the setting's scenario."""
        return reports_class_il(self.scenario)

    @property
    def reports_task_il(self) -> bool:
        """:func:`reports_task_il` of the setting's scenario."""
        return reports_task_il(self.scenario)

    def class_range(self, task: int) -> tuple[int, int]:
        """Labels ``[start, end)`` of ``task``."""
        if not 0 <= task < self.n_tasks:
            raise IndexError(f"task {task} out of range for {self.n_tasks} tasks")
        if self.scenario == "domain-il":
            return 0, self.num_classes
        start = sum(self.classes_per_task[:task])
        return start, start + self.classes_per_task[task]

    def task_of_class(self, device: torch.device | str | None = None) -> Tensor:
        """(num_classes,) int64: the task each label belongs to (0 for every label in
        ``domain-il``, where a label belongs to every task)."""
        if self.scenario == "domain-il":
            return torch.zeros(self.num_classes, dtype=torch.int64, device=device)
        counts = torch.tensor(self.classes_per_task)
        return torch.repeat_interleave(torch.arange(self.n_tasks), counts).to(device)

    def require(self, method: str, allowed: tuple[Scenario, ...], why: str) -> None:
        """Refuse a scenario ``method`` cannot run in (a method calls it when it is built):
        :func:`require_scenario` of ``self.scenario``."""
        require_scenario(method, self.scenario, allowed, why)


def require_scenario(method: str, scenario: Scenario, allowed: tuple[Scenario, ...], why: str) -> None:
    """Raise :class:`~xder_methods.MethodConfigError` naming the scenario, the method and ``why``
    unless ``scenario`` is in ``allowed``: the one line a method refusing a benchmark gives."""
    if scenario not in allowed:
        runs = ", ".join(allowed)
        raise MethodConfigError(f"{method} cannot run a {scenario} benchmark: {why} (it runs {runs})")


@dataclass(frozen=True)
class Batch:
    """One stream batch of the current task.

    Attributes:
        x: (B, ...) float, augmented and normalised (``Transforms.train`` of ``x_raw``).
        y: (B,) int64 labels.
        x_raw: (B, ...) the unaugmented examples as stored (uint8 images).
        task: index of the current task.
    """

    x: Tensor
    y: Tensor
    x_raw: Tensor
    task: int


@dataclass(frozen=True)
class TaskData:
    """All training rows of one task, handed to ``end_task`` (buffer insertion, herding, ...)."""

    x_raw: Tensor
    y: Tensor
    task: int


@dataclass(frozen=True)
class TaskBudget:
    """What a task's training gets, as :meth:`ContinualMethod.prepare_task` sees it: the loop's
    epochs, stream batch size, learning rate and whether each epoch drops its last partial batch
    (a method that trains on the task's rows before the loop, or plans its replay over the
    task's epoch, sizes its work with these)."""

    epochs: int
    batch_size: int
    lr: float
    drop_last: bool = True


@dataclass(frozen=True)
class StepPolicy:
    """How the loop runs a training step, which a method's own training passes follow too
    (:func:`~xder_methods.core.passes.train_passes`): ``precision`` (``fp32``, or ``bf16``: the
    forward passes under autocast) and ``cuda_graphs`` (the network is compiled into CUDA graphs,
    so each step's start is marked). The loop sets :attr:`ContinualMethod.step_policy` to the
    schedule's before the first task."""

    precision: Literal["fp32", "bf16"] = "fp32"
    cuda_graphs: bool = False


class MethodConfig:
    """What a method's config may declare besides its fields (a config is a dataclass; subclassing
    this is optional and adds no field): the fields a benchmark's protocol fills
    (:attr:`FILLED_BY_PROTOCOL`, read by :func:`~xder_methods.protocol_fields`) and its rules on
    the training schedule (:meth:`check_schedule`, applied by :func:`~xder_methods.check_schedule`).
    A config that does not subclass it takes nothing from the protocol and accepts every
    schedule."""

    FILLED_BY_PROTOCOL: ClassVar[tuple[str, ...]] = ()
    """Names of :data:`~xder_methods.core.schedule.PROTOCOL_METHOD_FIELDS` that are fields of the
    config: a run gives each the benchmark protocol's value (``--buffer-size`` too); subclasses
    inherit the declaration."""

    def check_schedule(self, schedule: TrainingSchedule) -> None:
        """Raise :class:`~xder_methods.MethodConfigError` for a schedule the method cannot train
        with (e.g. JT in ``final`` mode with a stream shortened by ``tasks``); every schedule is
        accepted by default."""


@dataclass
class StepOutput:
    """What ``observe`` returns.

    Attributes:
        loss: the loss to back-propagate (None: nothing to optimise this step); for a method with
            ``manual_optimization``, which took its steps itself, the step's loss detached (logged).
        terms: detached scalar terms the loop logs (averaged per epoch, read once per epoch).
        groups: optional graph-attached parts of ``loss`` by data source, ``"stream"`` and
            ``"buffer"`` (they need not cover every term): the loop back-propagates each alone at
            sampled steps to record the gradient norm of stream vs replay data (X-DER paper
            Fig. "derppgradients").
    """

    loss: Tensor | None
    terms: dict[str, Tensor] = field(default_factory=dict)
    groups: dict[str, Tensor] = field(default_factory=dict)


class TaskView(Protocol):
    """Index views of one task (``xder_data.TaskSplit`` satisfies it). Read-only attributes, so
    that a frozen dataclass satisfies it."""

    @property
    def class_start(self) -> int: ...

    @property
    def class_end(self) -> int: ...

    @property
    def train(self) -> Tensor: ...

    @property
    def test(self) -> Tensor: ...

    @property
    def val(self) -> Tensor | None: ...


class TaskStream(Protocol):
    """What the loop needs of a benchmark (``xder_data.Benchmark`` satisfies it). Read-only
    attributes, so that a frozen dataclass satisfies it."""

    @property
    def n_tasks(self) -> int: ...

    @property
    def classes_per_task(self) -> tuple[int, ...]: ...

    @property
    def train_x(self) -> Tensor: ...

    @property
    def train_y(self) -> Tensor: ...

    @property
    def test_x(self) -> Tensor: ...

    @property
    def test_y(self) -> Tensor: ...

    @property
    def val_x(self) -> Tensor | None: ...

    @property
    def val_y(self) -> Tensor | None: ...

    @property
    def test_task(self) -> Tensor | None:
        """(N_test,) int64: the task of each test row where the labels do not tell it
        (``domain-il``); None where they do."""
        ...

    @property
    def val_task(self) -> Tensor | None:
        """The same for the validation rows."""
        ...

    @property
    def train_segment(self) -> Tensor | None:
        """(N_train,) int64: the segment of each training row of a ``general`` stream, whose rows
        are in stream order (a batch never spans two segments); None otherwise."""
        ...

    @property
    def scenario(self) -> Scenario: ...

    def task(self, t: int) -> TaskView: ...


@runtime_checkable
class ContinualMethod(Protocol):
    """A continual learner, driven by :func:`xder_methods.fit`: the contract, whole. Every member
    below is what the loop, the step graphs, ``xder-run bench``, the run's recorder and the
    analyses use of a method; :class:`~xder_methods.MethodBase` gives each a default, and the
    documentation's Plugins page lists them (a test holds the list).

    For each task ``t`` the loop calls ``begin_task(t)``, then ``prepare_task(t, data, budget)``
    with the task's training rows (it returns the positions of rows to leave out of the task's
    epochs, or None), then ``observe(batch)`` for every stream batch, then ``end_task(t, data)``,
    then evaluates ``predict``. ``observe`` returns the step's loss and its detached terms
    (:class:`StepOutput`); the loop zeroes the gradients, back-propagates the loss, calls
    ``after_backward()`` (gradients in place), steps its optimiser and calls
    ``after_step(optimizer)``, whose returned terms (or None) it logs with the step's. A method
    with ``manual_optimization`` takes its own steps inside ``observe`` with the loop's optimiser,
    which the loop sets as ``optimizer`` first, and the loop does nothing around it.
    ``prefill(t, data)`` brings the method to the end of task ``t`` without training (a benchmark
    of a later task's step). ``training_data`` says whether a task's batches come from that task
    only (``"task"``), from every task so far (``"cumulative"``, joint training) or from none
    (``"none"``). ``step_policy`` is the run's (set by the loop before the first task), which a
    method's own training passes follow. ``graph_key()`` declares a step replayable as a CUDA
    graph (None: not). ``replay_memory()`` is the memory the method replays from (None: none),
    ``forgetting_defined`` whether forgetting means anything for its accuracy matrix.
    """

    training_data: Literal["task", "cumulative", "none"]
    manual_optimization: bool
    optimizer: torch.optim.Optimizer | None
    step_policy: StepPolicy
    transforms: Transforms
    net: nn.Module
    training: bool

    @property
    def device(self) -> torch.device: ...

    @property
    def forgetting_defined(self) -> bool: ...

    def begin_task(self, task: int) -> None: ...

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> Tensor | None: ...

    def observe(self, batch: Batch) -> StepOutput: ...

    def after_backward(self) -> None: ...

    def after_step(self, optimizer: torch.optim.Optimizer) -> dict[str, Tensor] | None: ...

    def end_task(self, task: int, data: TaskData) -> None: ...

    def prefill(self, task: int, data: TaskData) -> None: ...

    def predict(self, x: Tensor) -> Tensor: ...

    def optimizer_parameters(self) -> Iterator[nn.Parameter]: ...

    def graph_key(self) -> Hashable | None: ...

    def replay_memory(self) -> Buffer | None: ...

    def train(self, mode: bool = True) -> Any: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...
