"""Evaluation and what a fit records: accuracies per task (Class-IL and Task-IL) with the heads
Class-IL mistakes went to, the accuracy matrices, and the records of an epoch and a task."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from xder_methods.core.protocols import (
    ContinualMethod,
    ContinualSetting,
    Transform,
)

__all__ = ["EpochRecord", "Evaluation", "History", "TaskRecord", "evaluate"]


class Evaluation(NamedTuple):
    """Accuracies (%) per task, and where the Class-IL mistakes went.

    ``head_counts[i][j]``: test rows of task i (seen) misclassified in Class-IL as a class of
    task j (the paper's analysis of the bias towards the newest head, Fig. "derpperrors").
    """

    class_il: list[float]
    task_il: list[float]
    head_counts: list[list[int]]


def evaluate(
    method: ContinualMethod,
    x: Tensor,
    y: Tensor,
    setting: ContinualSetting,
    *,
    seen_tasks: int,
    transform: Transform,
    batch_size: int = 512,
    class_il_outputs: Literal["seen", "all"] = "seen",
    tasks: Tensor | None = None,
) -> Evaluation:
    """Accuracy (%) per task of ``method.predict`` on ``(x, y)``.

    Args:
        seen_tasks: tasks trained so far; Class-IL is reported for tasks ``0..seen_tasks-1``.
        class_il_outputs: argmax over the seen classes or over all outputs.
        tasks: (N,) the task of each row, where the labels do not tell it (``domain-il``, whose
            rows are grouped by it); None: the task that owns the row's label.

    Returns:
        ``(class_il, task_il, head_counts)``: Class-IL accuracy of each seen task (in
        ``domain-il`` and ``general``, the scenario's accuracy: the argmax over the classes seen),
        Task-IL accuracy (argmax inside the task's own classes) of every task, seen or not, and
        the (seen_tasks, n_tasks) counts of Class-IL mistakes by the task of the predicted class.
        Where the setting reports no Task-IL (:attr:`ContinualSetting.reports_task_il`), task_il
        and head_counts are empty: every class is the task's own.
    """
    with torch.no_grad():
        n_tasks = setting.n_tasks
        device = next(iter(method.parameters()), y).device if isinstance(method, nn.Module) else y.device
        task_of_class = setting.task_of_class(device)
        if setting.scenario == "domain-il" and tasks is None:
            raise ValueError("a domain-il evaluation needs the task of each row")
        seen_end = setting.class_range(seen_tasks - 1)[1] if seen_tasks else setting.num_classes
        if class_il_outputs == "all":
            seen_end = setting.num_classes
        correct_cil = torch.zeros(n_tasks, dtype=torch.int64, device=device)
        correct_til = torch.zeros(n_tasks, dtype=torch.int64, device=device)
        counts = torch.zeros(n_tasks, dtype=torch.int64, device=device)
        heads = torch.zeros(n_tasks * n_tasks, dtype=torch.int64, device=device)
        for start in range(0, y.shape[0], batch_size):
            xb = transform(x[start : start + batch_size].to(device, non_blocking=True))
            yb = y[start : start + batch_size].to(device, non_blocking=True)
            logits = method.predict(xb).float()
            if tasks is None:
                row_tasks = task_of_class[yb]
            else:
                row_tasks = tasks[start : start + batch_size].to(device, non_blocking=True)
            pred_cil = logits[:, :seen_end].argmax(dim=1)
            counts.index_add_(0, row_tasks, torch.ones_like(yb))
            correct_cil.index_add_(0, row_tasks, (pred_cil == yb).long())
            if setting.reports_task_il:
                own = task_of_class[None, : logits.shape[1]] == row_tasks[:, None]
                pred_til = logits.masked_fill(~own, -math.inf).argmax(dim=1)
                correct_til.index_add_(0, row_tasks, (pred_til == yb).long())
                wrong = (pred_cil != yb).long()
                heads.index_add_(0, row_tasks * n_tasks + task_of_class[pred_cil], wrong)
        # One read-back; percentages from exact counts (a task without rows gives NaN).
        n_cil, n_til, n = torch.stack([correct_cil, correct_til, counts]).tolist()
        cil = [100.0 * c / m if m else math.nan for c, m in zip(n_cil, n, strict=True)]
        if not setting.reports_task_il:
            return Evaluation(cil[:seen_tasks], [], [])
        head_counts = heads.view(n_tasks, n_tasks)[:seen_tasks].tolist()
        til = [100.0 * c / m if m else math.nan for c, m in zip(n_til, n, strict=True)]
        return Evaluation(cil[:seen_tasks], til, head_counts)


@dataclass
class History:
    """Accuracy matrices in %, one row appended after each task.

    ``class_il[t]`` holds tasks 0..t after training task t (a lower-triangular list of rows);
    ``task_il[t]`` holds every task (those after t are unseen: forward transfer reads them).
    ``random_init_task_il`` is the Task-IL accuracy of the untrained model (FWT's baseline).
    ``head_counts[t]`` is :class:`Evaluation`'s ``head_counts`` after task t (test split).
    The ``val_*`` fields mirror these on the validation split, when there is one.
    """

    class_il: list[list[float]] = field(default_factory=list)
    task_il: list[list[float]] = field(default_factory=list)
    random_init_task_il: list[float] | None = None
    val_class_il: list[list[float]] = field(default_factory=list)
    val_task_il: list[list[float]] = field(default_factory=list)
    val_random_init_task_il: list[float] | None = None
    head_counts: list[list[list[int]]] = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> History:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in known})


@dataclass(frozen=True)
class EpochRecord:
    """One finished epoch: mean of each loss term over the epoch's steps, and the mean gradient
    norm of each loss group over the epoch's sampled steps (``record_every``).

    ``lr`` is the learning rate of the epoch's first step, ``last_lr`` that of its last step. They
    differ only where a fractional milestone falls inside the epoch (the lr changes at that step,
    :func:`learning_rate`); with integer milestones, ``cosine`` or ``none`` every step of the
    epoch has ``lr``.
    """

    task: int
    epoch: int
    lr: float
    steps: int
    seconds: float
    losses: dict[str, float]
    grad_norms: dict[str, float] = field(default_factory=dict)
    last_lr: float | None = None


@dataclass(frozen=True)
class TaskRecord:
    """One finished task and its evaluation (accuracies in %)."""

    task: int
    class_il: list[float]
    task_il: list[float]
    val_class_il: list[float] | None
    val_task_il: list[float] | None
    seconds: float
    head_counts: list[list[int]] = field(default_factory=list)
