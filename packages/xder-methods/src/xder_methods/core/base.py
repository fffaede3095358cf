"""The one shallow helper base class of the methods: shared plumbing, no training logic."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

import torch
from torch import Tensor, nn

from xder_methods.core.protocols import (
    SCENARIOS,
    Batch,
    ContinualSetting,
    Scenario,
    StepOutput,
    StepPolicy,
    TaskBudget,
    TaskData,
    Transforms,
    require_scenario,
)
from xder_methods.core.registry import registered_name

if TYPE_CHECKING:
    from xder_methods.parts.buffer import Buffer

__all__ = ["ConfigT", "MethodBase"]

ConfigT = TypeVar("ConfigT")
"""A method's config type (its frozen dataclass): ``MethodBase[ERConfig]``."""


class MethodBase(nn.Module, Generic[ConfigT]):
    """Holds the network, the problem setting, the transforms, the config and the generator; a
    method subclasses it and implements :meth:`observe` (and, where it needs them,
    :meth:`begin_task` and :meth:`end_task`).

    The training loop (:func:`xder_methods.fit`) calls, for each task ``t``: ``begin_task(t)``;
    ``prepare_task(t, data, budget)`` with the task's training rows; then, for each batch of
    the task's data, ``observe(batch)`` and back-propagates the returned loss itself (it owns the
    optimiser: a method returns a loss, it does not step), unless the method sets
    :attr:`manual_optimization`; then ``end_task(t, data)`` with the whole task. Every random
    draw goes through ``self.generator``, so that a seed repeats a run and a checkpoint resumes it.

    Being an ``nn.Module``, a method's ``state_dict`` holds everything it owns (network, replay
    buffer, teacher, counters), so checkpoints and resume work for every method alike: keep state
    in parameters, buffers or modules, or add it to :meth:`get_extra_state`.

    A whole method, experience replay in 36 lines registered with :func:`register_method`, is on
    the documentation's Plugins page ("A method: what it implements"; the tests train it).
    """

    training_data: Literal["task", "cumulative", "none"] = "task"

    manual_optimization: bool = False
    """True: :meth:`observe` takes the step's optimiser steps itself, with :meth:`step` (on the
    loop's optimiser, :attr:`optimizer`), and returns the step's detached loss and terms; the loop
    then does nothing around it (no backward pass, :meth:`after_backward`, optimiser step,
    :meth:`after_step` or gradient-norm probe). For methods that take several steps on one batch
    (FDR's function-space step, HAL's anchor step, GSS's ``batch_num`` steps). The whole of such
    an ``observe`` runs under the run's precision (with ``bf16``, the extra steps' forward passes
    too)."""

    step_policy: StepPolicy = StepPolicy()
    """The run's precision and CUDA-graph marking (the loop sets it before the first task; fp32
    until then): a method's own training passes follow it through
    :func:`~xder_methods.core.passes.train_passes`."""

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {}
    """The scenarios (:data:`~xder_methods.Scenario`) the method cannot run in, each with why, one
    clause read after "<method> cannot run a <scenario> benchmark: "; empty (the default): it runs
    in every one. The constructor refuses a setting of one of them before it builds anything
    (:meth:`ContinualSetting.require <xder_methods.ContinualSetting.require>`, naming the method
    by its registered name), so that a run stops with one line. A method that does not subclass
    this class calls ``setting.require`` in its own constructor."""

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: ConfigT,
        generator: torch.Generator | None = None,
    ) -> None:
        type(self).check_scenario(setting.scenario)
        super().__init__()
        self.net = net
        self.setting = setting
        self.transforms = transforms
        self.config: ConfigT = config
        self.generator = generator
        self.current_task = 0
        self.optimizer: torch.optim.Optimizer | None = None
        """The loop's optimiser of the current task, set before each step of a method with
        :attr:`manual_optimization` (None before its first step)."""

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def seen_classes(self, task: int | None = None) -> int:
        """Number of classes seen up to and including ``task`` (default: the current task)."""
        return self.setting.class_range(self.current_task if task is None else task)[1]

    def begin_task(self, task: int) -> None:
        """Called once before the first batch of ``task`` (0-based): sets :attr:`current_task`.
        A method that prepares per task (a teacher's copy, a new head) overrides it and calls
        ``super().begin_task(task)``."""
        self.current_task = task

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> Tensor | None:
        """Called once per task after :meth:`begin_task` and before the task's first epoch, with
        the task's training rows (``data``: as :meth:`end_task` receives them) and the task's
        budget (epochs, batch size, lr, ``drop_last``). A method that trains on the task's data
        before the loop does (LwF's warm-up of the new head) overrides it; its random draws go
        through ``self.generator``. A run resumed in the middle of the task does not call it
        again (what it did is in the checkpoint); one resumed at the task's start does, from the
        same random state, so resuming gives the uninterrupted run's numbers.

        Returns:
            The rows the loop must leave out of the task's epochs: a (K,) int64 tensor of
            positions among ``data``'s rows, kept as a validation set the method keeps (BiC's);
            None (the default): train on every row. The loop keeps them in its checkpoint, so
            that a run resumed in the middle of the task withholds the same ones.
        """
        return None

    def observe(self, batch: Batch) -> StepOutput:
        """One training step on ``batch`` (the stream's examples of the current task, augmented
        in ``batch.x`` and as stored in ``batch.x_raw``): the loss to back-propagate and the
        terms to log (:class:`StepOutput`). The loop zeroes the gradients, calls ``backward``
        on the loss and steps the optimiser; the method only computes. Every method implements it.
        """
        raise NotImplementedError

    def graph_key(self) -> Hashable | None:
        """Whether the next training step may be replayed from a CUDA graph (``train.step_graph``,
        :mod:`xder_methods.core.graphs`), and on what it depends: None (the default) while it may not;
        else a value holding every Python value that the step's ops read (e.g. the buffer's
        filled size), such that two steps with equal keys (and the same task, batch shape and
        learning rate) run the same ops on the same held tensors and change no Python attribute.

        A method opts in by defining it; a subclass does not inherit the opt-in (its step may
        differ) and defines it again where its step qualifies too. ``train.step_graph`` on a CPU
        checks the declaration step by step.
        """
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "graph_key" not in cls.__dict__:
            cls.graph_key = MethodBase.graph_key  # type: ignore[method-assign]

    def after_backward(self) -> None:
        """Called after the loop back-propagates :meth:`observe`'s loss and before the optimiser
        steps: the step's gradients are in the parameters' ``.grad``, and a method may change
        them in place (GEM and A-GEM project them). Nothing by default; not called on a step
        whose loss is None."""

    def after_step(self, optimizer: torch.optim.Optimizer) -> dict[str, Tensor] | None:
        """Called right after the loop's optimiser step (``optimizer``: the loop's). A method that
        tracks the parameters' path (SI) overrides it; nothing by default; not called on a step
        whose loss is None, nor for a method with :attr:`manual_optimization`. Returns extra
        detached scalar terms to log with the step's (None: none)."""
        return None

    @classmethod
    def check_scenario(cls, scenario: Scenario) -> None:
        """Refuse ``scenario`` if the class declares it in :attr:`refused_scenarios`, with its
        reason (:func:`~xder_methods.core.protocols.require_scenario`); the constructor calls it,
        and a run's plan before any data is read."""
        why = cls.refused_scenarios.get(scenario)
        if why is not None:
            runs = tuple(s for s in SCENARIOS if s not in cls.refused_scenarios)
            require_scenario(registered_name(cls), scenario, runs, why)

    def step(self, loss: Tensor, *, accumulate: bool = False) -> None:
        """One optimiser step on ``loss`` for a method with :attr:`manual_optimization`, as the
        loop takes one: zero the gradients, back-propagate, :meth:`after_backward`, step
        :attr:`optimizer`. ``accumulate``: do not zero the gradients first, so that ``loss``'s add
        to those the parameters hold (HAL's anchor step, onto its cross-entropy step's)."""
        optimizer = self.optimizer
        if optimizer is None:
            raise RuntimeError("step() before the loop set the optimiser (manual_optimization methods only)")
        if not accumulate:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.after_backward()
        optimizer.step()

    def prefill(self, task: int, data: TaskData) -> None:
        """Bring the method to the end of ``task`` without training on it (``data``: the task's
        rows, as :meth:`end_task` receives them), so that a step of a later task can be measured
        (``xder-run bench``): by default :meth:`end_task`. A method whose memory fills from the
        stream in :meth:`observe` overrides it to fill the memory from ``data``."""
        self.end_task(task, data)

    def end_task(self, task: int, data: TaskData) -> None:
        """Called once after the last epoch of ``task`` with all of its training data (``data``:
        examples as stored, labels, on the training device); nothing by default. Methods that
        fill or update a buffer at the task's end (X-DER, iCaRL, GDumb) override it."""

    def predict(self, x: Tensor) -> Tensor:
        """Logits over all classes, ``(B, num_classes)``; the loop restricts them for Class-IL."""
        logits: Tensor = self.net(x)
        return logits

    def optimizer_parameters(self) -> Iterator[nn.Parameter]:
        """What the loop's per-task SGD optimises (the network by default)."""
        return self.net.parameters()

    def replay_memory(self) -> Buffer | None:
        """The memory the method replays from (the analyses read its stored items and logits);
        None (the default): it keeps none. A method with a buffer returns it."""
        return None

    @property
    def forgetting_defined(self) -> bool:
        """Whether forgetting means anything for the method's accuracy matrix: True by default;
        False where the rows before the last are no trained model's (JT in ``final`` mode, GDumb
        fitted after the last task only), so that the run's results leave it out."""
        return True

    def get_extra_state(self) -> dict[str, Any]:
        return {"current_task": self.current_task}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.current_task = int(state["current_task"])
