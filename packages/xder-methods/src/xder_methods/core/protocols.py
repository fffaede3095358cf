"""The seams between xder-methods and the rest: typed protocols and the small value types.

xder-methods imports no sibling package: it talks to backbones through :class:`Backbone`, to
data through plain tensors (:class:`TaskStream`) and to augmentation through :class:`Transform`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from xder_methods.core.schedule import TrainingSchedule

__all__ = [
    "Backbone",
    "Batch",
    "ContinualMethod",
    "ContinualSetting",
    "StepOutput",
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


@dataclass(frozen=True)
class ContinualSetting:
    """The shape of a class-incremental problem, as a method sees it.

    Task t owns the contiguous labels ``class_range(t) = [start_t, end_t)``.
    """

    classes_per_task: tuple[int, ...]
    input_shape: tuple[int, ...]
    input_dtype: torch.dtype = torch.uint8

    @property
    def n_tasks(self) -> int:
        return len(self.classes_per_task)

    @property
    def num_classes(self) -> int:
        return sum(self.classes_per_task)

    def class_range(self, task: int) -> tuple[int, int]:
        """Labels ``[start, end)`` of ``task``."""
        if not 0 <= task < self.n_tasks:
            raise IndexError(f"task {task} out of range for {self.n_tasks} tasks")
        start = sum(self.classes_per_task[:task])
        return start, start + self.classes_per_task[task]

    def task_of_class(self, device: torch.device | str | None = None) -> Tensor:
        """(num_classes,) int64: the task each label belongs to."""
        counts = torch.tensor(self.classes_per_task)
        return torch.repeat_interleave(torch.arange(self.n_tasks), counts).to(device)


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


@dataclass
class StepOutput:
    """What ``observe`` returns.

    Attributes:
        loss: the loss to back-propagate (None: nothing to optimise this step).
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

    def task(self, t: int) -> TaskView: ...


@runtime_checkable
class ContinualMethod(Protocol):
    """A continual learner, driven by :func:`xder_methods.fit`.

    The loop calls ``begin_task(t)``, then ``prepare_task(t, data, schedule)`` with the task's
    training rows, then ``observe(batch)`` for every stream batch (and
    back-propagates ``StepOutput.loss`` itself), then ``end_task(t, data)``, then evaluates
    ``predict``. Around the optimiser step it calls ``after_backward()`` (gradients in place)
    and ``after_step(optimizer)``. ``training_data`` says whether a task's batches come from that task only
    (``"task"``) or from every task so far (``"cumulative"``, joint training).
    """

    training_data: Literal["task", "cumulative"]
    transforms: Transforms

    def begin_task(self, task: int) -> None: ...

    def prepare_task(self, task: int, data: TaskData, schedule: TrainingSchedule) -> None: ...

    def observe(self, batch: Batch) -> StepOutput: ...

    def after_backward(self) -> None: ...

    def after_step(self, optimizer: torch.optim.Optimizer) -> None: ...

    def end_task(self, task: int, data: TaskData) -> None: ...

    def predict(self, x: Tensor) -> Tensor: ...

    def optimizer_parameters(self) -> Iterator[nn.Parameter]: ...

    def train(self, mode: bool = True) -> Any: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...
