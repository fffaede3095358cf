"""The class-incremental training loop: tasks, epochs, evaluation, callbacks, resume.

``fit`` follows the paper's protocol (Sec. 5.1): tasks arrive one at a time; for each, the method's
``begin_task`` and ``prepare_task`` run, a fresh SGD optimizer is built (the per-task lr schedule
restarts), the method observes shuffled stream batches for the benchmark's number of epochs,
``end_task`` runs, and every task is evaluated:
Class-IL (argmax over the classes seen so far; optionally over all outputs) and Task-IL (argmax
inside the task's own classes). Batches are drawn by index from device-resident tensors and
augmented on the device; loss terms are read back once per epoch, never per step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from xder_methods.errors import MethodConfigError, NonFiniteLossError, check_settings
from xder_methods.graphs import StepGraphs, StepResult
from xder_methods.protocols import (
    Batch,
    ContinualMethod,
    ContinualSetting,
    TaskData,
    TaskStream,
    Transform,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "Callback",
    "EpochRecord",
    "Evaluation",
    "History",
    "Loop",
    "TaskRecord",
    "TrainingSchedule",
    "apply_step",
    "autocast",
    "batch_bounds",
    "begin_step",
    "evaluate",
    "fit",
    "learning_rate",
    "run_epoch",
    "run_step",
    "shuffled_batches",
    "train_step",
]

CHECKPOINT_FORMAT = "xder-checkpoint-v1"


@dataclass(frozen=True, kw_only=True)
class TrainingSchedule:
    """How each task is trained (the benchmark's protocol; identical for every method).

    Attributes:
        epochs: epochs per task.
        batch_size: stream batch size.
        optimizer: ``sgd`` (the paper's, default) or ``radam`` (Split CUB-200); a fresh one per task.
        lr, momentum, weight_decay: optimizer settings (``momentum`` is SGD's only).
        lr_schedule: ``none``; ``multistep`` (lr times ``lr_gamma`` at each of ``milestones``);
            ``cosine`` (linear warm-up over ``warmup_epochs``, then cosine decay to 0 over the
            remaining epochs).
        milestones: positions within the task, counted in epochs, > 0 and increasing: an integer
            m takes effect at the start of epoch m (as the papers' schedules do), a fractional
            one inside an epoch (1.4: from the first step at or past 40% of the second epoch's
            steps; :func:`learning_rate`). A milestone at or after ``epochs`` never takes effect,
            so that ``epochs`` alone can shorten a protocol (the protocols themselves keep their
            milestones inside their epochs: ``xder_data.BenchmarkDefaults``). Integers stay
            ints (a configuration written with them reads back the same).
        drop_last: drop each epoch's last partial batch (default, as
            :class:`xder_data.BenchmarkDefaults`'), so that every step sees ``batch_size``
            examples: BatchNorm on a few examples with small feature maps (e.g. ``seq-digits``,
            1x1 at the last stage) destabilises training, and fixed shapes suit compiled steps; a
            fresh shuffle per epoch still shows every example. Off: the partial batch is kept (a
            DataLoader's ``drop_last=False``, the authors' code), as the papers' protocols say.
        eval_batch_size: batch size of evaluation passes.
        precision: ``fp32`` or ``bf16`` (autocast of every forward pass of the training step and of
            evaluation; the backward pass and the optimiser stay in float32).
        channels_last, compile, compile_mode: network options applied when it is built
            (``xder-run train`` converts it to the channels-last memory format /
            ``nn.Module.compile``s it in ``torch.compile``'s ``compile_mode``: ``default``, or
            ``reduce-overhead``, which replays the compiled forward and backward passes as CUDA
            graphs, one launch where eager runs hundreds; on a CPU it compiles as ``default``).
            The loop reads only ``compile_mode``: with ``reduce-overhead`` it marks each training
            step's start (:func:`begin_step`).
        step_graph: record each whole training step (augmentation, buffer draws and writes,
            losses, backward pass, optimiser step) as one CUDA graph and replay it while the
            method declares its step unchanged (:meth:`~xder_methods.MethodBase.graph_key`;
            :mod:`xder_methods.graphs`); steps it does not declare run eagerly. On a CPU each
            would-be replay runs eagerly and is checked against the recorded step instead (a
            test of the method, slower than a plain run). SGD only, without ``compile``.
            In float32 the numbers are meant to be a plain run's (a replay draws the same
            random numbers; the GPU script's ``step_graph`` phase checks it); under bf16,
            autocast keeps no cache of cast weights (a capture cannot), so the gradients of a
            step's several forward passes add up in float32, not in bf16.
        record_every: every this many steps of a task, back-propagate each of the step's loss
            groups (stream, buffer) alone and record its gradient norm (0: never). Costs one
            extra backward pass per group on those steps only (about 2% of a DER++ run at 50);
            changes no result. ``xder-run train`` passes it on only for a run that records its
            analyses (``run.record_analyses``), else 0.
        class_il_outputs: Class-IL argmax over the ``seen`` classes (default) or ``all`` outputs
            (the authors' code of 2022).
        tasks: train and evaluate only the first ``tasks`` tasks of the stream (None: all of
            them); e.g. the X-DER paper's two-task "stable regime" study (Sec. 6.2). The accuracy
            matrices then have ``tasks`` columns; the network keeps the benchmark's output space.
            :func:`fit` checks ``1 <= tasks <= stream.n_tasks``.
    """

    epochs: int = 1
    batch_size: int = 32
    optimizer: Literal["sgd", "radam"] = "sgd"
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_schedule: Literal["none", "multistep", "cosine"] = "none"
    milestones: tuple[int | float, ...] = ()
    lr_gamma: float = 0.1
    warmup_epochs: int = 0
    drop_last: bool = True
    eval_batch_size: int = 512
    class_il_outputs: Literal["seen", "all"] = "seen"
    precision: Literal["fp32", "bf16"] = "fp32"
    channels_last: bool = False
    compile: bool = False
    compile_mode: Literal["default", "reduce-overhead"] = "default"
    step_graph: bool = False
    record_every: int = 50
    tasks: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.epochs >= 1, "epochs must be >= 1 (with none, a task trains nothing)"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.eval_batch_size >= 1, "eval_batch_size must be >= 1"),
            (self.record_every >= 0, "record_every must be >= 0"),
            (self.precision in ("fp32", "bf16"), "precision must be fp32 or bf16"),
            (self.lr > 0, "lr must be > 0"),
            (self.momentum >= 0, "momentum must be >= 0"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (self.warmup_epochs >= 0, "warmup_epochs must be >= 0"),
            (
                self.lr_schedule in ("none", "multistep", "cosine"),
                "lr_schedule must be none, multistep or cosine",
            ),
            (self.class_il_outputs in ("seen", "all"), "class_il_outputs must be seen or all"),
            (
                self.compile_mode in ("default", "reduce-overhead"),
                "compile_mode must be default or reduce-overhead",
            ),
            (self.optimizer in ("sgd", "radam"), "optimizer must be sgd or radam"),
            (
                not (self.step_graph and self.compile),
                "step_graph records eager steps: leave compile off with it",
            ),
            (
                not (self.step_graph and self.optimizer != "sgd"),
                "step_graph records SGD's step only (radam keeps a step count on the host)",
            ),
            (
                all(math.isfinite(m) and m > 0 for m in self.milestones),
                "milestones must be > 0 (positions within the task, in epochs)",
            ),
            (list(self.milestones) == sorted(self.milestones), "milestones must be increasing"),
            (self.tasks is None or self.tasks >= 1, "tasks must be >= 1 (or unset: every task)"),
        ]
        check_settings(checks, prefix="train: ")

    @property
    def cuda_graphs(self) -> bool:
        """Whether the network is compiled into CUDA graphs (``compile`` in ``reduce-overhead``
        mode; on a CPU that mode compiles as ``default``)."""
        return self.compile and self.compile_mode == "reduce-overhead"


def learning_rate(schedule: TrainingSchedule, epoch: int, step: int = 0, steps_per_epoch: int = 1) -> float:
    """The learning rate of step ``step`` (0-based) of 0-based ``epoch`` within a task, an epoch
    having ``steps_per_epoch`` steps (the schedule restarts every task).

    A pure function of the position, so a run resumed from a checkpoint sets the same lrs.
    ``multistep``: ``lr * lr_gamma ** n``, n the number of milestones m with
    ``m <= epoch + step / steps_per_epoch``, compared exactly, a float milestone read as the
    decimal it is written as (1.4 is 7/5: at 10 steps per epoch it takes effect at step 4 of epoch
    1, whatever the float rounding). For an integer m, ``m <= e + s/S`` with ``0 <= s < S`` iff
    ``m <= e``: integer milestones change the lr only at epoch starts, to exactly the lr of the
    per-epoch rule (``torch.optim.lr_scheduler.MultiStepLR`` stepped once per epoch).
    ``cosine`` and ``none`` depend on the epoch only: ``cosine`` is
    ``lr * (epoch + 1) / warmup_epochs`` during warm-up, then
    ``lr * (1 + cos(pi * (epoch - warmup) / (epochs - warmup))) / 2``.
    """
    lr = schedule.lr
    if schedule.lr_schedule == "multistep":
        passed = sum(1 for m in schedule.milestones if _reached(m, epoch, step, steps_per_epoch))
        return lr * schedule.lr_gamma**passed
    if schedule.lr_schedule == "cosine":
        warmup = schedule.warmup_epochs
        if epoch < warmup:
            return lr * (epoch + 1) / warmup
        span = max(schedule.epochs - warmup, 1)
        return lr * 0.5 * (1.0 + math.cos(math.pi * (epoch - warmup) / span))
    return lr


def _written(milestone: int | float) -> Fraction:
    """A milestone as the number it is written as: an int exactly, a float as its shortest decimal
    (``repr``), so that 1.4 is 7/5 rather than the binary 1.399999999999999911..., and a
    milestone that falls on a step (1.4 at 10 steps per epoch: step 4 of epoch 1) takes effect at
    that step whatever the float rounding."""
    return Fraction(milestone) if isinstance(milestone, int) else Fraction(repr(float(milestone)))


def _reached(milestone: int | float, epoch: int, step: int, steps_per_epoch: int) -> bool:
    """``milestone <= epoch + step / steps_per_epoch``, exactly (``0 <= step < steps_per_epoch``).

    Outside ``(epoch, epoch + 1)`` the step cannot change the answer: an integer milestone is
    decided by ``milestone <= epoch`` alone, as the per-epoch rule decides it.
    """
    if milestone <= epoch:
        return True
    if milestone >= epoch + 1:
        return False
    return _written(milestone) * steps_per_epoch <= epoch * steps_per_epoch + step


def _lr_changes(schedule: TrainingSchedule, epoch: int, steps_per_epoch: int) -> dict[int, float]:
    """The steps of ``epoch`` after its first at which :func:`learning_rate` changes, with the lr
    from there: where a fractional milestone falls inside the epoch. Empty for integer
    milestones, ``cosine`` and ``none`` (the lr of the epoch's first step holds throughout)."""
    if schedule.lr_schedule != "multistep":
        return {}
    changes = {}
    for milestone in schedule.milestones:
        if epoch < milestone < epoch + 1:
            # the first step s with milestone <= epoch + s / steps_per_epoch (s >= 1: milestone > epoch)
            first = math.ceil((_written(milestone) - epoch) * steps_per_epoch)
            if first < steps_per_epoch:
                changes[first] = learning_rate(schedule, epoch, first, steps_per_epoch)
    return changes


def autocast(
    precision: str, device: torch.device, *, cache: bool = True
) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on ``device`` for ``precision == "bf16"``, else nothing. ``cache``: keep
    the weights' casts for the block (off for a step recorded as a CUDA graph)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


def begin_step(schedule: TrainingSchedule) -> None:
    """Mark the start of a training step for a network compiled into CUDA graphs
    (``compile_mode = "reduce-overhead"``): torch may then reuse the previous step's graph outputs'
    memory. Nothing (no tensor op, no host sync) otherwise."""
    if schedule.cuda_graphs:
        torch.compiler.cudagraph_mark_step_begin()


def batch_bounds(n: int, batch_size: int, *, drop_last: bool) -> list[tuple[int, int]]:
    """``[start, end)`` of each batch over n shuffled rows (``drop_last``: the schedule's
    :attr:`TrainingSchedule.drop_last`, or the caller's own choice).

    With ``drop_last`` the last partial batch is dropped, unless it is the only batch (fewer
    rows than ``batch_size``). Without it the partial batch is kept, except that a final batch
    of ONE row joins the previous batch: BatchNorm cannot normalise a single example whose
    feature map is 1x1.
    """
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    if drop_last and len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < batch_size:
        bounds.pop()
    elif len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] == 1:
        bounds[-2] = (bounds[-2][0], n)
        bounds.pop()
    return bounds


def shuffled_batches(
    n: int,
    batch_size: int,
    *,
    drop_last: bool,
    generator: torch.Generator | None,
    device: torch.device,
) -> Iterator[Tensor]:
    """The row indices of each batch of one epoch over n rows: a fresh permutation drawn from
    ``generator`` (None: torch's global one) on ``device``, cut by :func:`batch_bounds`.

    The permutation is drawn when the first batch is asked for, so a caller that draws from the
    same generator inside its loop (augmentation) keeps the order of draws: permutation, then
    the batches' own. Used by the methods' extra passes over a task or a buffer (LwF's warm-up,
    GDumb's and LUCIR's fitting); the main loop keeps its own (it indexes rows held elsewhere).
    """
    order = torch.randperm(n, generator=generator, device=device)
    for start, end in batch_bounds(n, batch_size, drop_last=drop_last):
        yield order[start:end]


class Evaluation(NamedTuple):
    """Accuracies (%) per task, and where the Class-IL mistakes went.

    ``head_counts[i][j]``: test rows of task i (seen) misclassified in Class-IL as a class of
    task j (the paper's analysis of the bias towards the newest head, Fig. "derpperrors").
    """

    class_il: list[float]
    task_il: list[float]
    head_counts: list[list[int]]


@torch.no_grad()
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
) -> Evaluation:
    """Accuracy (%) per task of ``method.predict`` on ``(x, y)``.

    Args:
        seen_tasks: tasks trained so far; Class-IL is reported for tasks ``0..seen_tasks-1``.
        class_il_outputs: argmax over the seen classes or over all outputs.

    Returns:
        ``(class_il, task_il, head_counts)``: Class-IL accuracy of each seen task, Task-IL
        accuracy (argmax inside the task's own classes) of every task, seen or not, and the
        (seen_tasks, n_tasks) counts of Class-IL mistakes by the task of the predicted class.
    """
    n_tasks = setting.n_tasks
    device = next(iter(method.parameters()), y).device if isinstance(method, nn.Module) else y.device
    task_of_class = setting.task_of_class(device)
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
        tasks = task_of_class[yb]
        pred_cil = logits[:, :seen_end].argmax(dim=1)
        own = task_of_class[None, : logits.shape[1]] == tasks[:, None]
        pred_til = logits.masked_fill(~own, -math.inf).argmax(dim=1)
        counts.index_add_(0, tasks, torch.ones_like(yb))
        correct_cil.index_add_(0, tasks, (pred_cil == yb).long())
        correct_til.index_add_(0, tasks, (pred_til == yb).long())
        wrong = (pred_cil != yb).long()
        heads.index_add_(0, tasks * n_tasks + task_of_class[pred_cil], wrong)
    # One read-back; percentages from exact counts (a task without rows gives NaN).
    n_cil, n_til, n = torch.stack([correct_cil, correct_til, counts]).tolist()
    head_counts = heads.view(n_tasks, n_tasks)[:seen_tasks].tolist()
    cil = [100.0 * c / m if m else math.nan for c, m in zip(n_cil, n, strict=True)]
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


class Callback:
    """Hooks the loop calls; override what you need. Each receives the running :class:`Loop`."""

    def on_fit_start(self, loop: Loop) -> None: ...

    def on_task_start(self, loop: Loop) -> None: ...

    def on_step(self, loop: Loop) -> None: ...

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None: ...

    def on_task_end(self, loop: Loop, record: TaskRecord) -> None: ...

    def on_fit_end(self, loop: Loop) -> None: ...


class Loop:
    """The state of a running :func:`fit`, as callbacks see it.

    ``task``/``epoch`` give the position: the next thing to run is epoch ``epoch`` of task
    ``task`` (``epoch == schedule.epochs``: only ``end_task`` and evaluation are left).
    """

    def __init__(
        self,
        method: ContinualMethod,
        stream: TaskStream,
        schedule: TrainingSchedule,
        generator: torch.Generator,
    ) -> None:
        self.method = method
        self.stream = stream
        self.schedule = schedule
        self.generator = generator
        self.setting = ContinualSetting(tuple(stream.classes_per_task), tuple(stream.train_x.shape[1:]))
        self.history = History()
        self.task = 0
        self.epoch = 0
        self.steps_per_epoch = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self.graphs: StepGraphs | None = None
        """The task's recorded steps (``step_graph``), made by :func:`run_step`."""

    @property
    def n_tasks(self) -> int:
        """The tasks this fit trains (``schedule.tasks``, else every task of the stream)."""
        return self.stream.n_tasks if self.schedule.tasks is None else self.schedule.tasks

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue exactly from the current position (weights-only safe)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "position": {"task": self.task, "epoch": self.epoch},
            "method": self.method.state_dict(),
            "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
            "history": self.history.state_dict(),
        }

    def restore_rng(self, state: dict[str, Any]) -> None:
        """Set the generators to the states of a :meth:`snapshot`. Every RNG state is a CPU byte
        tensor, whichever device the generator draws on; a checkpoint loaded onto a GPU
        (``map_location``) carries them there, so they are brought back first."""
        self.generator.set_state(state["generator"].cpu())
        torch.set_rng_state(state["torch_rng"].cpu())
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])


def _training_rows(stream: TaskStream, task: int, mode: str) -> Tensor:
    if mode == "cumulative":
        return torch.cat([stream.task(t).train for t in range(task + 1)])
    rows = stream.task(task).train
    return rows[:0] if mode == "none" else rows


def _make_optimizer(method: ContinualMethod, schedule: TrainingSchedule) -> torch.optim.Optimizer:
    parameters = list(method.optimizer_parameters())
    if schedule.optimizer == "radam":
        return torch.optim.RAdam(parameters, lr=schedule.lr, weight_decay=schedule.weight_decay)
    return torch.optim.SGD(
        parameters, lr=schedule.lr, momentum=schedule.momentum, weight_decay=schedule.weight_decay
    )


def _first_tasks(evaluation: Evaluation, n_tasks: int) -> Evaluation:
    """``evaluation`` restricted to tasks ``0..n_tasks-1`` (a fit with ``schedule.tasks``)."""
    return Evaluation(
        evaluation.class_il[:n_tasks],
        evaluation.task_il[:n_tasks],
        [row[:n_tasks] for row in evaluation.head_counts[:n_tasks]],
    )


def _evaluate_all(loop: Loop, seen_tasks: int) -> tuple[Evaluation, Evaluation | None]:
    stream, schedule, method = loop.stream, loop.schedule, loop.method
    kwargs: dict[str, Any] = {
        "seen_tasks": seen_tasks,
        "transform": method.transforms.test,
        "batch_size": schedule.eval_batch_size,
        "class_il_outputs": schedule.class_il_outputs,
    }
    splits = [(stream.test_x, stream.test_y)]
    if stream.val_x is not None and stream.val_y is not None:
        splits.append((stream.val_x, stream.val_y))
    n_tasks = loop.n_tasks
    if n_tasks < stream.n_tasks:
        # Only the rows of the tasks this fit trains (labels are contiguous per task); the
        # Class-IL argmax spans the seen classes, so no mistake can go to a later task's head.
        end = loop.setting.class_range(n_tasks - 1)[1]
        splits = [(x[(y < end).to(x.device)], y[y < end]) for x, y in splits]
    method.train(False)
    with autocast(schedule.precision, loop.generator.device):
        results = [evaluate(method, x, y, loop.setting, **kwargs) for x, y in splits]
    method.train(True)
    if n_tasks < stream.n_tasks:
        results = [_first_tasks(r, n_tasks) for r in results]
    return results[0], (results[1] if len(results) > 1 else None)


def fit(
    method: ContinualMethod,
    stream: TaskStream,
    schedule: TrainingSchedule,
    *,
    generator: torch.Generator,
    callbacks: Sequence[Callback] = (),
    resume: dict[str, Any] | None = None,
) -> History:
    """Train ``method`` on every task of ``stream`` (the first ``schedule.tasks`` of them, when
    set) in order and evaluate after each task.

    Args:
        method: the learner (its network already on the stream's device).
        stream: the benchmark (tensors on the training device).
        schedule: epochs, batch size, optimizer and lr schedule, evaluation settings.
        generator: the one source of randomness of the run (batch order, augmentation, buffer
            draws), on the training device.
        callbacks: logging, progress and checkpoint hooks.
        resume: a :meth:`Loop.snapshot`; the run continues from its position and, on the same
            device, ends with the same results as an uninterrupted run.

    Returns:
        The accuracy matrices (:class:`History`).

    Raises:
        NonFiniteLossError: a loss term was NaN or infinite at the end of an epoch. Callbacks do
            not see that epoch's end, so a checkpoint callback's last checkpoint (if it took one)
            is the last good state.
        MethodConfigError: ``schedule.tasks`` is more than the stream's tasks.
    """
    if schedule.tasks is not None and not 1 <= schedule.tasks <= stream.n_tasks:
        raise MethodConfigError(
            f"train.tasks = {schedule.tasks} is out of range: the benchmark has {stream.n_tasks} tasks; "
            f"give 1..{stream.n_tasks}, or leave it unset for all of them"
        )
    loop = Loop(method, stream, schedule, generator)
    calls: Iterable[Callback] = tuple(callbacks)
    start_task, start_epoch = 0, 0
    if resume is not None:
        if resume.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("not an xder checkpoint")
        start_task, start_epoch = resume["position"]["task"], resume["position"]["epoch"]
        if start_epoch > 0:
            method.begin_task(start_task)  # set up the task as the original run did, then restore
        method.load_state_dict(resume["method"])
        loop.history = History.from_state_dict(resume["history"])
        loop.restore_rng(resume)
        loop.task, loop.epoch = start_task, start_epoch
    else:
        test, val = _evaluate_all(loop, 0)
        loop.history.random_init_task_il = test.task_il
        loop.history.val_random_init_task_il = None if val is None else val.task_il

    for callback in calls:
        callback.on_fit_start(loop)
    for task in range(start_task, loop.n_tasks):
        task_started = time.perf_counter()
        resumed_mid_task = resume is not None and task == start_task and start_epoch > 0
        task_rows = stream.task(task).train
        data = TaskData(
            stream.train_x[task_rows].to(generator.device),
            stream.train_y[task_rows].to(generator.device),
            task,
        )
        if not resumed_mid_task:
            method.begin_task(task)
            method.prepare_task(task, data, schedule)
            loop.task, loop.epoch = task, 0
        loop.optimizer = _make_optimizer(method, schedule)
        if resumed_mid_task and resume is not None and resume["optimizer"] is not None:
            loop.optimizer.load_state_dict(resume["optimizer"])
        rows = _training_rows(stream, task, method.training_data)
        withheld_rows = getattr(method, "withheld_rows", None)  # MethodBase's; plugins may lack it
        withheld = withheld_rows(task) if withheld_rows is not None else None
        if withheld is not None and method.training_data == "task":
            keep = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
            keep[withheld.to(rows.device)] = False
            rows = rows[keep]
        bounds = batch_bounds(rows.shape[0], schedule.batch_size, drop_last=schedule.drop_last)
        loop.steps_per_epoch = len(bounds)
        for callback in calls:
            callback.on_task_start(loop)
        for epoch in range(loop.epoch, schedule.epochs):
            epoch_record = run_epoch(loop, task, epoch, rows, bounds, calls)
            loop.epoch = epoch + 1
            for callback in calls:
                callback.on_epoch_end(loop, epoch_record)
        if loop.graphs is not None:
            loop.graphs.close()  # free the recorded steps' memory before end_task
            loop.graphs = None
        method.end_task(task, data)
        test, val = _evaluate_all(loop, task + 1)
        history = loop.history
        history.class_il.append(test.class_il)
        history.task_il.append(test.task_il)
        history.head_counts.append(test.head_counts)
        if val is not None:
            history.val_class_il.append(val.class_il)
            history.val_task_il.append(val.task_il)
        loop.task, loop.epoch, loop.optimizer = task + 1, 0, None
        seconds = time.perf_counter() - task_started
        record = TaskRecord(
            task,
            test.class_il,
            test.task_il,
            None if val is None else val.class_il,
            None if val is None else val.task_il,
            seconds,
            test.head_counts,
        )
        for callback in calls:
            callback.on_task_end(loop, record)
    for callback in calls:
        callback.on_fit_end(loop)
    return loop.history


def apply_step(method: ContinualMethod, loss: Tensor, optimizer: torch.optim.Optimizer) -> None:
    """The optimisation half of a training step, after ``method.observe`` returned ``loss``:
    zero the gradients, back-propagate, ``method.after_backward()``, step the optimiser,
    ``method.after_step(optimizer)``. The one owner of that order (the loop's and bench's)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    method.after_backward()
    optimizer.step()
    method.after_step(optimizer)


def train_step(loop: Loop, x_raw: Tensor, y: Tensor, *, task: int, probe: bool = False) -> StepResult:
    """One training step on the stream batch ``(x_raw, y)`` of ``task`` (the one owner of a
    step's order): :func:`begin_step`, the stream augmentation and ``observe`` under
    :func:`autocast`, the gradient-norm probes of the step's loss groups when ``probe``,
    :func:`apply_step`. The terms are read after the optimiser step (``after_step`` may add its
    own). ``loop.optimizer`` must be set."""
    method, schedule, generator, optimizer = loop.method, loop.schedule, loop.generator, loop.optimizer
    assert optimizer is not None
    begin_step(schedule)
    with autocast(schedule.precision, generator.device, cache=not schedule.step_graph):
        out = method.observe(Batch(method.transforms.train(x_raw, generator), y, x_raw, task))
    norms = _group_grad_norms(out.groups, optimizer) if probe and out.groups else {}
    if out.loss is not None:
        apply_step(method, out.loss, optimizer)
    loss = None if out.loss is None else out.loss.detach()
    return StepResult(loss, {name: value.detach() for name, value in out.terms.items()}, norms)


def run_step(loop: Loop, x_raw: Tensor, y: Tensor, *, task: int, probe: bool = False) -> StepResult:
    """A training step as :func:`run_epoch` runs it: :func:`train_step`, or with ``step_graph``
    (and no ``probe``) the same step recorded and replayed by ``loop.graphs`` (a
    :class:`~xder_methods.graphs.StepGraphs`, made for ``loop.optimizer`` when first needed).
    ``xder-run bench`` times its steps with it."""
    if not loop.schedule.step_graph or probe:
        return train_step(loop, x_raw, y, task=task, probe=probe)
    if loop.graphs is None or loop.graphs.optimizer is not loop.optimizer:
        assert loop.optimizer is not None
        if loop.graphs is not None:
            loop.graphs.close()  # recorded with another optimiser's step
        loop.graphs = StepGraphs(loop.method, loop.optimizer, loop.generator)
    return loop.graphs.step(functools.partial(train_step, loop, task=task), x_raw, y, task)


def run_epoch(
    loop: Loop,
    task: int,
    epoch: int,
    rows: Tensor,
    bounds: list[tuple[int, int]],
    calls: Iterable[Callback] = (),
) -> EpochRecord:
    """One training epoch of ``task`` as :func:`fit` runs it (the one owner of an epoch's order):
    the lr of ``epoch`` and its in-epoch changes, ``rows`` of the stream (indices into
    ``loop.stream.train_x``) shuffled on the generator's device and cut at ``bounds``, and for
    each batch: :func:`run_step` (with the gradient-norm probes every ``record_every`` steps),
    then the callbacks' ``on_step``; then the epoch's one read-back of its loss sums.
    ``loop.optimizer`` must be set. ``xder-run bench`` times its synthetic epoch with it.

    Raises:
        NonFiniteLossError: a loss term of the epoch is NaN or infinite.
    """
    method, stream, generator = loop.method, loop.stream, loop.generator
    optimizer = loop.optimizer
    assert optimizer is not None
    steps = len(bounds)
    lr = last_lr = learning_rate(loop.schedule, epoch)  # step 0: no fractional milestone reached yet
    for group in optimizer.param_groups:
        group["lr"] = lr
    # Python floats set between steps: no tensor op, no host synchronisation.
    changes = _lr_changes(loop.schedule, epoch, steps)
    started = time.perf_counter()
    method.train(True)
    # The permutation is drawn on the training device; data kept in host memory (too large for the
    # device) are indexed there and each batch is copied over (one read-back per epoch).
    device = generator.device
    order = rows[torch.randperm(rows.shape[0], generator=generator, device=device).to(rows.device)]
    sums: dict[str, Tensor] = {}
    norm_sums: dict[str, Tensor] = {}
    norm_counts: dict[str, int] = {}
    every = loop.schedule.record_every
    for step, (start, end) in enumerate(bounds):
        if step in changes:
            last_lr = changes[step]
            for group in optimizer.param_groups:
                group["lr"] = last_lr
        index = order[start:end]
        x_raw = stream.train_x[index].to(device, non_blocking=True)
        y = stream.train_y[index].to(device, non_blocking=True)
        probe = bool(every) and (epoch * len(bounds) + step) % every == 0
        result = run_step(loop, x_raw, y, task=task, probe=probe)
        for name, norm in result.norms.items():
            norm_sums[name] = norm_sums.get(name, 0) + norm
            norm_counts[name] = norm_counts.get(name, 0) + 1
        if result.loss is not None:
            sums["loss"] = sums.get("loss", 0) + result.loss
        for name, value in result.terms.items():
            sums[name] = sums.get(name, 0) + value
        for callback in calls:
            callback.on_step(loop)
    names = list(sums) + [f"norm/{n}" for n in norm_sums]
    stacked = [sums[n].float() / max(steps, 1) for n in sums]
    stacked += [norm_sums[n].float() / norm_counts[n] for n in norm_sums]
    values = torch.stack(stacked).tolist() if stacked else []  # the epoch's one read-back
    read = dict(zip(names, values, strict=True))
    losses = {n: v for n, v in read.items() if not n.startswith("norm/")}
    grad_norms = {n.removeprefix("norm/"): v for n, v in read.items() if n.startswith("norm/")}
    bad = [n for n, v in losses.items() if not math.isfinite(v)]
    if bad:
        raise NonFiniteLossError(
            f"loss term {bad[0]!r} became {losses[bad[0]]} in task {task} epoch {epoch}: "
            "lower the learning rate or the loss weights"
        )
    seconds = time.perf_counter() - started
    return EpochRecord(task, epoch, lr, steps, seconds, losses, grad_norms, last_lr)


def _group_grad_norms(groups: dict[str, Tensor], optimizer: torch.optim.Optimizer) -> dict[str, Tensor]:
    """L2 norm of the gradient of each loss group alone w.r.t. the optimised parameters (device
    tensors: read once per epoch). The graphs are kept for the step's own backward pass."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    norms = {}
    for name, part in groups.items():
        if not part.requires_grad:
            continue
        grads = torch.autograd.grad(part, params, retain_graph=True, allow_unused=True)
        squares = [g.pow(2).sum() for g in grads if g is not None]
        if squares:
            norms[name] = torch.stack(squares).sum().sqrt()
    return norms
