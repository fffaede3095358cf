"""The training schedule (the protocol of each task and the engine's settings), the learning
rate at each step, autocast, and the batches of an epoch."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import torch
from torch import Tensor

from xder_methods.core.errors import check_settings
from xder_methods.core.protocols import MethodConfig, StepPolicy, TaskBudget

__all__ = [
    "PROTOCOL_METHOD_FIELDS",
    "TrainingProtocol",
    "TrainingSchedule",
    "autocast",
    "batch_bounds",
    "begin_step",
    "check_protocol_fields",
    "learning_rate",
    "protocol_fields",
    "protocol_values",
    "shuffled_batches",
]


@dataclass(frozen=True, kw_only=True)
class TrainingProtocol:
    """How each task is trained, as a benchmark's protocol states it (identical for every
    method): the fields every protocol gives, declared once here. ``xder_data.BenchmarkDefaults``
    carries the same fields for each benchmark (it cannot import this package; a test of the
    command-line package holds the two equal, names, types and defaults).

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

    def __post_init__(self) -> None:
        checks = [
            (self.epochs >= 1, "epochs must be >= 1 (with none, a task trains nothing)"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (self.momentum >= 0, "momentum must be >= 0"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (self.warmup_epochs >= 0, "warmup_epochs must be >= 0"),
            (
                self.lr_schedule in ("none", "multistep", "cosine"),
                "lr_schedule must be none, multistep or cosine",
            ),
            (self.optimizer in ("sgd", "radam"), "optimizer must be sgd or radam"),
            (
                all(math.isfinite(m) and m > 0 for m in self.milestones),
                "milestones must be > 0 (positions within the task, in epochs)",
            ),
            (list(self.milestones) == sorted(self.milestones), "milestones must be increasing"),
        ]
        check_settings(checks, prefix="train: ")


PROTOCOL_METHOD_FIELDS: dict[str, tuple[int, int | None]] = {
    "buffer_size": (0, 200),
    "minibatch_size": (1, None),
}
"""The method settings a benchmark's protocol can fill (``xder_data.BenchmarkDefaults`` holds
each), with the least value each takes and a value its message suggests: a method's config
declares which of them it takes (:func:`protocol_fields`)."""


def protocol_fields(config: Any) -> tuple[str, ...]:
    """The fields a benchmark's protocol fills in a method's config (a config dataclass or one of
    its instances), as the config declares them: a config that subclasses
    :class:`~xder_methods.MethodConfig` names them in its ``FILLED_BY_PROTOCOL`` class variable
    (names of :data:`PROTOCOL_METHOD_FIELDS`); a run's layers give each the protocol's value of
    the same name above the config's default, as ``xder-run train`` and ``bench`` do; a config
    that declares none takes nothing from the protocol. Subclasses inherit the declaration::

        @dataclass(frozen=True, kw_only=True)
        class MyReplayConfig(MethodConfig):
            FILLED_BY_PROTOCOL = ("buffer_size", "minibatch_size")
            buffer_size: int = 500
            minibatch_size: int = 32

            def __post_init__(self) -> None:
                check_protocol_fields(self)

    >>> from xder_methods import ReplayConfig, GDumbConfig, LwFConfig
    >>> protocol_fields(ReplayConfig), protocol_fields(GDumbConfig), protocol_fields(LwFConfig)
    (('buffer_size', 'minibatch_size'), ('buffer_size',), ())

    Raises:
        TypeError: a declared name the protocol does not fill, or that is not a field of the
            config (a mistake in the method's code).
    """
    cls = config if isinstance(config, type) else type(config)
    declared = tuple(cls.FILLED_BY_PROTOCOL) if issubclass(cls, MethodConfig) else ()
    names = {f.name for f in dataclasses.fields(config)}
    wrong = [name for name in declared if name not in PROTOCOL_METHOD_FIELDS or name not in names]
    if wrong:
        raise TypeError(
            f"{cls.__name__}.FILLED_BY_PROTOCOL names {wrong[0]!r}: "
            f"a protocol fills {', '.join(PROTOCOL_METHOD_FIELDS)} only, each a field of the config"
        )
    return declared


def protocol_values(config: Any) -> dict[str, int]:
    """A method config's values of its :func:`protocol_fields` (``{"buffer_size": 200, ...}``;
    ``{}`` for a method that takes none)."""
    values = dataclasses.asdict(config)
    return {name: int(values[name]) for name in protocol_fields(config)}


def check_protocol_fields(config: Any) -> None:
    """A method config's protocol-filled fields (:func:`protocol_fields`) against their least
    values (:data:`PROTOCOL_METHOD_FIELDS`), the one check of those rules:
    ``method.buffer_size must be >= 0, got -1 (e.g. 200)``. A config's ``__post_init__`` calls it.

    Raises:
        MethodConfigError: a value below its least.
    """
    checks = []
    for name, value in protocol_values(config).items():
        minimum, example = PROTOCOL_METHOD_FIELDS[name]
        hint = "" if example is None else f" (e.g. {example})"
        checks.append((value >= minimum, f"{name} must be >= {minimum}, got {value}{hint}"))
    check_settings(checks, prefix="method.")


@dataclass(frozen=True, kw_only=True)
class TrainingSchedule(TrainingProtocol):
    """How each task is trained: the protocol (:class:`TrainingProtocol`, whose fields it has)
    and the engine's settings, which change how fast a run goes or what it records, not what it
    computes (precision excepted: bf16 rounds).

    Attributes:
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
            :mod:`xder_methods.core.graphs`); steps it does not declare run eagerly. On a CPU each
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
        super().__post_init__()
        checks = [
            (self.eval_batch_size >= 1, "eval_batch_size must be >= 1"),
            (self.record_every >= 0, "record_every must be >= 0"),
            (self.precision in ("fp32", "bf16"), "precision must be fp32 or bf16"),
            (self.class_il_outputs in ("seen", "all"), "class_il_outputs must be seen or all"),
            (
                self.compile_mode in ("default", "reduce-overhead"),
                "compile_mode must be default or reduce-overhead",
            ),
            (
                not (self.step_graph and self.compile),
                "step_graph records eager steps: leave compile off with it",
            ),
            (
                not (self.step_graph and self.optimizer != "sgd"),
                "step_graph records SGD's step only (radam keeps a step count on the host)",
            ),
            (self.tasks is None or self.tasks >= 1, "tasks must be >= 1 (or unset: every task)"),
        ]
        check_settings(checks, prefix="train: ")

    @property
    def budget(self) -> TaskBudget:
        """What each task's training gets, as a method's ``prepare_task`` sees it."""
        return TaskBudget(self.epochs, self.batch_size, self.lr, self.drop_last)

    @property
    def step_policy(self) -> StepPolicy:
        """How each training step runs (precision, CUDA-graph marking), as a method's own
        training passes follow it."""
        return StepPolicy(self.precision, self.cuda_graphs)

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


def begin_step(schedule: TrainingSchedule | StepPolicy) -> None:
    """Mark the start of a training step for a network compiled into CUDA graphs
    (``compile_mode = "reduce-overhead"``, ``cuda_graphs`` of a schedule or a step policy): torch
    may then reuse the previous step's graph outputs' memory. Nothing (no tensor op, no host
    sync) otherwise."""
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
    GDumb's and LUCIR's fitting, through :func:`~xder_methods.core.passes.train_passes`); the
    main loop keeps its own (it indexes rows held elsewhere).
    """
    order = torch.randperm(n, generator=generator, device=device)
    for start, end in batch_bounds(n, batch_size, drop_last=drop_last):
        yield order[start:end]
