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

import functools
import math
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError, NonFiniteLossError
from xder_methods.core.evaluation import EpochRecord, Evaluation, History, TaskRecord, evaluate
from xder_methods.core.graphs import StepGraphs, StepResult
from xder_methods.core.protocols import (
    Batch,
    ContinualMethod,
    ContinualSetting,
    TaskData,
    TaskStream,
)
from xder_methods.core.schedule import (
    TrainingSchedule,
    _lr_changes,
    autocast,
    batch_bounds,
    begin_step,
    learning_rate,
)
from xder_methods.core.threads import ThreadPolicy

__all__ = [
    "CHECKPOINT_FORMAT",
    "Callback",
    "FitState",
    "apply_step",
    "fit",
    "make_optimizer",
    "run_epoch",
    "run_step",
    "train_step",
]

CHECKPOINT_FORMAT = "xder-checkpoint-v1"


class Callback:
    """Hooks the loop calls; override what you need. Each receives the running :class:`FitState`."""

    def on_fit_start(self, loop: FitState) -> None: ...

    def on_task_start(self, loop: FitState) -> None: ...

    def on_step(self, loop: FitState) -> None: ...

    def on_epoch_end(self, loop: FitState, record: EpochRecord) -> None: ...

    def on_task_end(self, loop: FitState, record: TaskRecord) -> None: ...

    def on_fit_end(self, loop: FitState) -> None: ...


class FitState:
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
        self.setting = ContinualSetting(
            tuple(stream.classes_per_task), tuple(stream.train_x.shape[1:]), scenario=stream.scenario
        )
        self.history = History()
        self.task = 0
        self.epoch = 0
        self.steps_per_epoch = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self.graphs: StepGraphs | None = None
        """The task's recorded steps (``step_graph``), made by :func:`run_step`."""
        self.withheld: Tensor | None = None
        """The current task's rows left out of its epochs (what ``prepare_task`` returned)."""

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
            "withheld": self.withheld,
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


def make_optimizer(parameters: Iterable[nn.Parameter], schedule: TrainingSchedule) -> torch.optim.Optimizer:
    """The optimiser the loop trains with, a fresh one per task (over the method's
    ``optimizer_parameters()``): ``schedule.optimizer`` (SGD with ``momentum``, or RAdam) at
    ``schedule.lr`` (:func:`run_epoch` sets each epoch's rate on it:
    :func:`~xder_methods.core.schedule.learning_rate`) with ``weight_decay``."""
    params = list(parameters)
    if schedule.optimizer == "radam":
        return torch.optim.RAdam(params, lr=schedule.lr, weight_decay=schedule.weight_decay)
    return torch.optim.SGD(
        params, lr=schedule.lr, momentum=schedule.momentum, weight_decay=schedule.weight_decay
    )


def _first_tasks(evaluation: Evaluation, n_tasks: int) -> Evaluation:
    """``evaluation`` restricted to tasks ``0..n_tasks-1`` (a fit with ``schedule.tasks``)."""
    return Evaluation(
        evaluation.class_il[:n_tasks],
        evaluation.task_il[:n_tasks],
        [row[:n_tasks] for row in evaluation.head_counts[:n_tasks]],
    )


def _evaluate_all(loop: FitState, seen_tasks: int) -> tuple[Evaluation, Evaluation | None]:
    stream, schedule, method = loop.stream, loop.schedule, loop.method
    kwargs: dict[str, Any] = {
        "seen_tasks": seen_tasks,
        "transform": method.transforms.test,
        "batch_size": schedule.eval_batch_size,
        "class_il_outputs": schedule.class_il_outputs,
    }
    splits = [(stream.test_x, stream.test_y, stream.test_task)]
    if stream.val_x is not None and stream.val_y is not None:
        splits.append((stream.val_x, stream.val_y, stream.val_task))
    n_tasks = loop.n_tasks
    if n_tasks < stream.n_tasks:
        # Only the rows of the tasks this fit trains (labels are contiguous per task, else each
        # row's task is given); the Class-IL argmax spans the seen classes, so no mistake can go
        # to a later task's head.
        end = loop.setting.class_range(n_tasks - 1)[1]
        kept = [(y < end) if t is None else (t < n_tasks) for _, y, t in splits]
        splits = [
            (x[k.to(x.device)], y[k], None if t is None else t[k])
            for (x, y, t), k in zip(splits, kept, strict=True)
        ]
    method.train(False)
    with autocast(schedule.precision, loop.generator.device):
        results = [evaluate(method, x, y, loop.setting, tasks=t, **kwargs) for x, y, t in splits]
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
    threads: int | None = 0,
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
        resume: a :meth:`FitState.snapshot`; the run continues from its position and, on the same
            device, ends with the same results as an uninterrupted run.
        threads: torch's CPU threads while it trains (:class:`~xder_methods.core.threads.
            ThreadPolicy`; the count before is restored after). 0 (the default): a fair share of
            the cores other programs leave free, followed as they start and end, unless
            ``OMP_NUM_THREADS`` fixes it (on a CPU, a warning says when that is fewer than the
            cores); N: exactly N. A CPU run's numbers depend on the count, so fix it for numbers
            that repeat. None: leave torch's count alone (the caller manages it).

    Returns:
        The accuracy matrices (:class:`History`).

    Raises:
        NonFiniteLossError: a loss term was NaN or infinite at the end of an epoch. Callbacks do
            not see that epoch's end, so a checkpoint callback's last checkpoint (if it took one)
            is the last good state.
        MethodConfigError: ``schedule.tasks`` is more than the stream's tasks.
    """
    if threads is None:
        return _fit(method, stream, schedule, generator, callbacks, resume)
    with ThreadPolicy(threads) as policy:
        if generator.device.type == "cpu" and policy.auto and policy.threads < policy.share.cores:
            warnings.warn(
                f"fit trains on {policy.threads} CPU threads of {policy.share.cores} cores "
                f"({policy.busy} kept busy by other programs, {policy.runs - 1} other training runs "
                f"here) and follows the share as they come and go; the numbers depend on the count: "
                f"pass threads={policy.threads} to fix it",
                stacklevel=2,
            )
        return _fit(method, stream, schedule, generator, [*callbacks, _FollowTheShare(policy)], resume)


class _FollowTheShare(Callback):
    """Re-reads the fair share of a run's thread policy between steps (:meth:`ThreadPolicy.poll`)."""

    def __init__(self, policy: ThreadPolicy) -> None:
        self.policy = policy

    def on_step(self, loop: FitState) -> None:
        self.policy.poll()


def _fit(
    method: ContinualMethod,
    stream: TaskStream,
    schedule: TrainingSchedule,
    generator: torch.Generator,
    callbacks: Sequence[Callback],
    resume: dict[str, Any] | None,
) -> History:
    """:func:`fit` with torch's thread count as the caller left it."""
    if schedule.tasks is not None and not 1 <= schedule.tasks <= stream.n_tasks:
        raise MethodConfigError(
            f"train.tasks = {schedule.tasks} is out of range: the benchmark has {stream.n_tasks} tasks; "
            f"give 1..{stream.n_tasks}, or leave it unset for all of them"
        )
    loop = FitState(method, stream, schedule, generator)
    method.step_policy = schedule.step_policy
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
        loop.withheld = resume.get("withheld")
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
            loop.withheld = method.prepare_task(task, data, schedule.budget)
            loop.task, loop.epoch = task, 0
        loop.optimizer = make_optimizer(method.optimizer_parameters(), schedule)
        if resumed_mid_task and resume is not None and resume["optimizer"] is not None:
            loop.optimizer.load_state_dict(resume["optimizer"])
        rows = _training_rows(stream, task, method.training_data)
        withheld = loop.withheld
        if withheld is not None and method.training_data == "task":
            keep = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
            keep[withheld.to(rows.device)] = False
            rows = rows[keep]
        in_order = stream.scenario == "general" and method.training_data == "task"
        bounds = _stream_bounds(stream, rows, schedule) if in_order else _batches(rows, schedule)
        loop.steps_per_epoch = len(bounds)
        for callback in calls:
            callback.on_task_start(loop)
        for epoch in range(loop.epoch, schedule.epochs):
            epoch_record = run_epoch(loop, task, epoch, rows, bounds, calls, shuffle=not in_order)
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
        loop.task, loop.epoch, loop.optimizer, loop.withheld = task + 1, 0, None, None
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


def _batches(rows: Tensor, schedule: TrainingSchedule) -> list[tuple[int, int]]:
    return batch_bounds(rows.shape[0], schedule.batch_size, drop_last=schedule.drop_last)


def _stream_bounds(stream: TaskStream, rows: Tensor, schedule: TrainingSchedule) -> list[tuple[int, int]]:
    """The batches of a ``general`` stream taken in its order: each segment (``train_segment``)
    cut on its own (:func:`batch_bounds`), so that no batch spans two, as the stream's batches
    arrive (MNIST-360's two classes at a time)."""
    segment = stream.train_segment
    if segment is None:
        return _batches(rows, schedule)
    ids = segment[rows.to(segment.device)]
    _, sizes = torch.unique_consecutive(ids, return_counts=True)
    bounds, offset = [], 0
    for size in sizes.tolist():  # once per task, before its epochs
        bounds += [
            (offset + a, offset + b)
            for a, b in batch_bounds(size, schedule.batch_size, drop_last=schedule.drop_last)
        ]
        offset += size
    return bounds


def apply_step(
    method: ContinualMethod, loss: Tensor, optimizer: torch.optim.Optimizer
) -> dict[str, Tensor] | None:
    """The optimisation half of a training step, after ``method.observe`` returned ``loss``:
    zero the gradients, back-propagate, ``method.after_backward()``, step the optimiser,
    ``method.after_step(optimizer)``, whose extra terms (or None) it returns. The one owner of
    that order (the loop's and bench's)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    method.after_backward()
    optimizer.step()
    return method.after_step(optimizer)


def train_step(loop: FitState, x_raw: Tensor, y: Tensor, *, task: int, probe: bool = False) -> StepResult:
    """One training step on the stream batch ``(x_raw, y)`` of ``task`` (the one owner of a
    step's order): :func:`begin_step`, the stream augmentation and ``observe`` under
    :func:`autocast`, the gradient-norm probes of the step's loss groups when ``probe``,
    :func:`apply_step`, whose extra terms join the step's. A method with
    ``manual_optimization`` takes its own steps inside ``observe`` (with ``loop.optimizer``,
    which it is given first): nothing runs around it, no probe either. ``loop.optimizer`` must
    be set."""
    method, schedule, generator, optimizer = loop.method, loop.schedule, loop.generator, loop.optimizer
    assert optimizer is not None
    manual = method.manual_optimization
    if manual:
        method.optimizer = optimizer
    begin_step(schedule)
    with autocast(schedule.precision, generator.device, cache=not schedule.step_graph):
        out = method.observe(Batch(method.transforms.train(x_raw, generator), y, x_raw, task))
    terms = {name: value.detach() for name, value in out.terms.items()}
    norms = _group_grad_norms(out.groups, optimizer) if probe and out.groups and not manual else {}
    if out.loss is not None and not manual:
        terms |= {
            name: value.detach() for name, value in (apply_step(method, out.loss, optimizer) or {}).items()
        }
    loss = None if out.loss is None else out.loss.detach()
    return StepResult(loss, terms, norms)


def run_step(loop: FitState, x_raw: Tensor, y: Tensor, *, task: int, probe: bool = False) -> StepResult:
    """A training step as :func:`run_epoch` runs it: :func:`train_step`, or with ``step_graph``
    (and no ``probe``) the same step recorded and replayed by ``loop.graphs`` (a
    :class:`~xder_methods.core.graphs.StepGraphs`, made for ``loop.optimizer`` when first needed).
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
    loop: FitState,
    task: int,
    epoch: int,
    rows: Tensor,
    bounds: list[tuple[int, int]],
    calls: Iterable[Callback] = (),
    *,
    shuffle: bool = True,
) -> EpochRecord:
    """One training epoch of ``task`` as :func:`fit` runs it (the one owner of an epoch's order):
    the lr of ``epoch`` and its in-epoch changes, ``rows`` of the stream (indices into
    ``loop.stream.train_x``) shuffled on the generator's device (in their order, not shuffled,
    with ``shuffle=False``: a ``general`` stream) and cut at ``bounds``, and for
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
    if shuffle:
        order = rows[torch.randperm(rows.shape[0], generator=generator, device=device).to(rows.device)]
    else:
        order = rows
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
