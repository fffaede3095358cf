"""HAL (``hal``): Hindsight Anchor Learning (Chaudhry, Gordo, Dokania, Torr & Lopez-Paz, "Using
Hindsight to Anchor Past Knowledge in Continual Learning", AAAI 2021), as the DER paper ran it
(Buzzega et al., NeurIPS 2020, Table 2; mammoth ``models/hal.py`` and ``utils/buffer.py`` at the
paper's release)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import check_settings
from xder_methods.core.passes import train_passes
from xder_methods.core.protocols import (
    Backbone,
    Batch,
    ContinualSetting,
    Scenario,
    StepOutput,
    TaskData,
    Transforms,
)
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.networks import frozen_copy
from xder_methods.parts.replay import ReplayConfig, join_replay, prefill_reservoir
from xder_methods.parts.task_memory import TaskMemory, per_task_share

__all__ = ["ANCHOR_LR_BEFORE_TRAINING", "HAL", "HALConfig", "anchor_loss", "anchor_objective"]

ANCHOR_LR_BEFORE_TRAINING = 0.03
"""The anchors' lr where no training step preceded them (the DER paper's Split CIFAR-10 lr)."""

Memory = Literal["reservoir", "ring"]


@dataclass(frozen=True, kw_only=True)
class HALConfig(ReplayConfig):
    """Attributes (values: mammoth ``best_args``, seq-cifar10, buffer 200; buffer 500 differs in
    ``lambda_ = 0.1`` and ``beta = 0.3``):

    buffer_size: the episodic memory (200: the DER paper's smallest Split CIFAR-10 buffer,
        Table 2).
    memory: how stream items enter it. ``reservoir`` (default): reservoir sampling over the
        whole stream, what the DER paper's code ran (see :class:`HAL`); ``ring``: a ring of
        ``buffer_size // n_tasks`` rows per task keeping each task's latest items (mammoth's
        later ``RingBuffer``, the per-task episodic memory of the HAL paper).
    minibatch_size: buffer items replayed per step (32).
    lambda_: weight of the anchoring loss (mammoth ``hal_lambda``; 0.2).
    beta: decay of the running mean ``phi`` of the stream's features (0.5).
    gamma: weight of the feature term of the anchors' objective (0.1).
    steps_on_anchors: SGD steps of each task's anchor optimisation (100).
    finetuning_epochs: SGD steps of the memory fine-tuning that estimates forgetting; as in
        mammoth, each is ONE step on one batch of ``finetuning_batch_size`` buffer items (1).
    finetuning_batch_size: items of each fine-tuning step (mammoth: its stream batch size, 32).
    anchor_lr: learning rate of the fine-tuning and of the anchors' optimisation; None
        (default): the training lr of the task's last step, as mammoth takes its ``args.lr``
        (:data:`ANCHOR_LR_BEFORE_TRAINING`, the DER paper's 0.03, where no step was taken).
    """

    buffer_size: int = 200
    memory: Memory = "reservoir"
    minibatch_size: int = 32
    lambda_: float = 0.2
    beta: float = 0.5
    gamma: float = 0.1
    steps_on_anchors: int = 100
    finetuning_epochs: int = 1
    finetuning_batch_size: int = 32
    anchor_lr: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            (self.memory in ("reservoir", "ring"), f"memory must be reservoir or ring, got {self.memory!r}"),
            (self.lambda_ >= 0, f"lambda_ must be >= 0, got {self.lambda_}"),
            (0 <= self.beta <= 1, f"beta must be in [0, 1], got {self.beta}"),
            (self.gamma >= 0, f"gamma must be >= 0, got {self.gamma}"),
            (self.steps_on_anchors >= 0, f"steps_on_anchors must be >= 0, got {self.steps_on_anchors}"),
            (self.finetuning_epochs >= 0, f"finetuning_epochs must be >= 0, got {self.finetuning_epochs}"),
            (self.finetuning_batch_size >= 1, "finetuning_batch_size must be >= 1"),
            (self.anchor_lr is None or self.anchor_lr > 0, f"anchor_lr must be > 0, got {self.anchor_lr}"),
        ]
        check_settings(checks, prefix="method.")


def anchor_objective(
    finetuned_logits: Tensor,
    current_logits: Tensor,
    current_features: Tensor,
    labels: Tensor,
    phi: Tensor,
    gamma: float,
) -> Tensor:
    """What each anchor maximises (HAL paper Eq. "anchor"): the forgetting its class suffers when
    the network is fine-tuned on the memory, minus ``gamma`` times the squared distance of its
    features to the running mean ``phi`` of the task's features::

        CE(f_finetuned(e), c) - CE(f_current(e), c) - gamma * || phi(e) - phi_t ||^2

    Args:
        finetuned_logits: (K, C) logits of the K anchors under the fine-tuned copy.
        current_logits: (K, C) their logits under the current network.
        current_features: (K, F) the current network's features of the anchors.
        labels: (K,) the class of each anchor.
        phi: (F,) the running mean of the task's stream features.

    Returns:
        (K,) the objective of each anchor (the squared distance summed over the F features).
    """
    forgetting = F.cross_entropy(finetuned_logits, labels, reduction="none") - F.cross_entropy(
        current_logits, labels, reduction="none"
    )
    return forgetting - gamma * (current_features - phi).pow(2).sum(dim=1)


def anchor_loss(new_logits: Tensor, old_logits: Tensor, lambda_: float) -> Tensor:
    """The anchoring loss: ``lambda_ * mean((new - old) ** 2)`` over anchors and classes
    (mammoth's; the HAL paper sums the squared norms over the anchors).

    Args:
        new_logits: (A, C) the anchors' logits after the temporary step (a constant).
        old_logits: (A, C) their logits at the parameters being updated (carries the gradient).

    Returns:
        () the loss.
    """
    return lambda_ * (new_logits.detach() - old_logits).pow(2).mean()


@register_method("hal", HALConfig)
class HAL(MethodBase[HALConfig]):
    """Hindsight Anchor Learning: experience replay plus one learned anchor input per past class,
    whose outputs the update keeps in check.

    Each step, with ``theta`` the parameters before it, ``B`` the stream batch joined with
    ``minibatch_size`` replayed items, lr ``eta`` (the loop's optimiser)::

        theta_tmp = theta - eta * g,          g = grad CE(f_theta(B))          (the loop's step)
        theta    <- theta - eta * (g + grad_theta lambda_ * mean((f_theta_tmp(E) - f_theta(E))^2))
        phi_t    <- beta * phi_t + (1 - beta) * mean_x features_theta(x), x in the stream batch

    where ``E`` holds the anchors of every class of the earlier tasks and ``f_theta_tmp(E)`` is a
    constant. :meth:`observe` takes both steps with the loop's optimiser
    (``manual_optimization``): it keeps ``theta``, steps on the cross-entropy to ``theta_tmp``,
    evaluates the anchors there, restores ``theta``, back-propagates the anchoring loss onto the
    cross-entropy's gradient still in ``.grad`` and steps again, then updates ``phi_t`` at the
    final weights (mammoth's order exactly). During the first task (no anchors) only the
    ``phi_t`` update is added.

    At the end of task t (:meth:`end_task`): a copy of the network is fine-tuned on the memory
    (``finetuning_epochs`` SGD steps, lr ``anchor_lr``, on ``finetuning_batch_size`` augmented
    buffer items each); then, for each class c of the task, an anchor e_c, drawn uniformly in
    [0, 1)^input_shape, takes ``steps_on_anchors`` SGD steps (lr ``anchor_lr``) of gradient ascent
    on :func:`anchor_objective` (the fine-tuned copy's loss on c minus the current network's,
    minus ``gamma ||features(e_c) - phi_t||^2``). The task's anchors are optimised together as one
    batch: the objective is a sum over anchors, each with its own gradient, so this is mammoth's
    one-anchor-at-a-time loop (without BatchNorm batch statistics, below).

    Cost: ``steps_on_anchors`` forward/backward passes through each of the two networks on a batch
    of the task's anchors (mammoth: three passes per step, one anchor at a time), plus the
    fine-tuning; at the task's end only. Per step, a copy of the parameters and two extra
    forward passes (one with backward) on the anchors. No host synchronisation.

    Where the paper, mammoth and this class differ, point by point:

    * The anchoring step is taken with ``f_theta_tmp(E)`` as a constant, at the pre-step weights,
      adding its gradient to the cross-entropy's (mammoth does not zero the gradients between the
      two backward passes): the HAL paper's Alg. 1 read with a stop-gradient on the temporary
      parameters, as mammoth runs it. Followed: mammoth's (the DER paper's numbers). To first
      order this gradient moves the anchors' outputs towards ``f_theta_tmp(E)``, the same way as
      the cross-entropy step; see the tests, which measure it.
    * Anchoring loss: mean over anchors and classes (mammoth); the HAL paper writes the sum over
      anchors of the squared norms: a constant factor ``lambda_`` absorbs. Followed: mammoth's.
    * Memory: the DER paper's code builds ``Buffer(buffer_size, ..., mode='ring')``, but that
      class's ``add_data`` always inserts by reservoir sampling (its ring index function is never
      called), and the per-task reset in ``end_task`` never fires (the buffer's task number
      starts at ``n_tasks``). So the paper's HAL replays and fine-tunes from a reservoir of
      ``buffer_size`` items over the whole stream (up to 200 items already in task 0).
      Followed: ``memory = "reservoir"``, the default. ``memory = "ring"`` keeps each task's
      latest ``buffer_size // n_tasks`` items in a ring of its own, as mammoth's later code does.
      Items are stored unaugmented after the step's replay draw and augmented at every draw
      (mammoth's order; without its ``--iba`` flag, later mammoth stores the augmented view).
    * Fine-tuning: mammoth's ``finetuning_epochs`` counts single SGD steps on one batch of its
      stream batch size, not passes over the memory; followed, with the batch size a field.
    * BatchNorm: mammoth evaluates its spare network in train mode, so one anchor is normalised
      with its own batch statistics (impossible for a BatchNorm1d of one item). Here the
      fine-tuned copy and the current network are evaluated in eval mode (running statistics) for
      the anchors' optimisation; the copy is fine-tuned in train mode, as mammoth's. Without
      BatchNorm the same.
    * The per-step forward passes on the anchors run with the network in train mode, updating
      BatchNorm's running statistics, and ``phi_t`` is computed from a further train-mode pass on
      the augmented stream batch, both as in mammoth. ``phi_t`` restarts from zero every task
      (mammoth deletes it at the task's end).
    * Cross-entropy over all outputs, future classes included, everywhere (mammoth's
      ``self.loss``). Anchors are learned at the end of every task, the last included (mammoth).

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): the anchors are learned at each task's end, which a general
    stream never has. In ``domain-il`` each task's end adds an anchor of every class (every task
    has every class), kept beside the earlier tasks' (:meth:`anchor_rows`), as mammoth's HAL
    appends them.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": "it learns its anchors at each task's end, and a general stream has no task ends",
    }

    manual_optimization = True

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: HALConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        device = self.device
        self.buffer = Buffer.for_setting(config.buffer_size, setting, device)
        self.portion = per_task_share(config.buffer_size, setting.n_tasks)
        self.memory = TaskMemory(self.buffer)  # memory="ring": each task's ring of ``portion`` rows
        self.training_lr: float | None = None  # the lr of the last step
        self.anchors: Tensor
        self.phi: Tensor
        # One row per class of each task (anchor_rows), learned at the task's end; zero until then.
        rows = sum(setting.classes_per_task)
        self.register_buffer("anchors", torch.zeros(rows, *setting.input_shape, device=device))
        self.register_buffer("phi", torch.zeros(int(cast(Backbone, net).num_features), device=device))

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    def begin_task(self, task: int) -> None:
        super().begin_task(task)
        self.phi.zero_()
        self.memory.offered = 0

    def anchor_rows(self, task: int) -> tuple[int, int]:
        """Rows ``[start, end)`` of :attr:`anchors` that hold ``task``'s anchors, one per class of
        the task in label order: after the earlier tasks' rows. In ``class-il`` they are the
        task's labels; in ``domain-il``, where every task has every class, each task adds its own
        anchor of every class (mammoth's HAL appends one per class of each task)."""
        start = sum(self.setting.classes_per_task[:task])
        return start, start + self.setting.classes_per_task[task]

    def active_anchors(self, task: int) -> Tensor:
        """(A, ...) the anchors in use during ``task``: those of every class of each earlier task."""
        return self.anchors[: self.anchor_rows(task)[0]]

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's anchors (:meth:`end_task`), then its rows into the memory by reservoir
        sampling (:func:`~xder_methods.parts.replay.prefill_reservoir`, with either ``memory``)."""
        self.end_task(task, data)
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        x, y = join_replay(
            batch, self.buffer, self.config.minibatch_size, self.transforms.train, self.generator
        )
        anchors = self.active_anchors(batch.task)
        pre_step = [p.detach().clone() for p in self.net.parameters()] if anchors.shape[0] else None
        loss = F.cross_entropy(self.net(x), y, reduction="none").mean()
        self.store(batch)
        self.step(loss)
        assert self.optimizer is not None
        self.training_lr = float(self.optimizer.param_groups[0]["lr"])  # a Python float: no sync
        terms = {"ce": loss.detach()}
        if pre_step is not None:
            with torch.no_grad():
                new_logits = self.net(anchors)
                for p, saved in zip(self.net.parameters(), pre_step, strict=True):
                    p.copy_(saved)
            anchor = anchor_loss(new_logits, self.net(anchors), self.config.lambda_)
            self.step(anchor, accumulate=True)  # onto the cross-entropy's gradient, as mammoth
            terms["anchor"] = anchor.detach()
        with torch.no_grad():
            features = cast(Backbone, self.net).forward_features(batch.x).flatten(1)
            features = features.float().mean(dim=0)
            self.phi.mul_(self.config.beta).add_(features, alpha=1 - self.config.beta)
        return StepOutput(terms["ce"], terms)

    def store(self, batch: Batch) -> None:
        """Offer the stream batch (unaugmented) to the memory: by reservoir sampling over the
        whole stream, or into the current task's ring (``memory``)."""
        if self.config.memory == "reservoir":
            self.buffer.add_reservoir(batch.x_raw, batch.y, task_labels=batch.task, generator=self.generator)
            return
        self.memory.add_to_ring(batch.x_raw, batch.y, batch.task, self.portion)

    def end_task(self, task: int, data: TaskData) -> None:
        """Learn one anchor per class of ``task`` (see the class docstring)."""
        start, end = self.setting.class_range(task)
        first, last = self.anchor_rows(task)
        finetuned = self.finetuned_copy()
        current = cast(Backbone, frozen_copy(self.net))
        anchors = torch.rand(
            (end - start, *self.setting.input_shape), generator=self.generator, device=self.anchors.device
        ).requires_grad_(True)
        optimizer = torch.optim.SGD([anchors], lr=self.anchor_lr())
        labels = torch.arange(start, end, device=self.anchors.device)

        def ascent(_: int) -> Tensor:
            features = current.forward_features(anchors).flatten(1)
            logits = current.forward_head(features)
            objective = anchor_objective(
                finetuned(anchors), logits, features, labels, self.phi, self.config.gamma
            )
            return -objective.sum()  # gradient ascent on the objective

        steps = range(self.config.steps_on_anchors)
        train_passes(steps, ascent, optimizer, policy=self.step_policy, device=self.device)
        self.anchors[first:last] = anchors.detach()

    def finetuned_copy(self) -> nn.Module:
        """A copy of the network after ``finetuning_epochs`` SGD steps on buffer batches (train
        mode), returned in eval mode without gradients: the estimate of the future network."""
        return frozen_copy(self.net, finetune=self.finetune)

    def finetune(self, model: nn.Module) -> None:
        """``finetuning_epochs`` SGD steps (lr ``anchor_lr``) of ``model`` on batches of
        ``finetuning_batch_size`` augmented buffer items (none while the buffer is empty)."""
        optimizer = torch.optim.SGD(model.parameters(), lr=self.anchor_lr())

        def loss(_: int) -> Tensor:
            sample = self.buffer.sample(self.config.finetuning_batch_size, self.generator)
            x = self.transforms.train(sample.examples, self.generator)
            return F.cross_entropy(model(x), sample.labels)

        steps = range(self.config.finetuning_epochs if len(self.buffer) else 0)
        train_passes(steps, loss, optimizer, policy=self.step_policy, device=self.device)

    def anchor_lr(self) -> float:
        """The lr of the fine-tuning and of the anchors: ``anchor_lr``, else the training lr."""
        if self.config.anchor_lr is not None:
            return float(self.config.anchor_lr)
        return ANCHOR_LR_BEFORE_TRAINING if self.training_lr is None else self.training_lr

    def get_extra_state(self) -> dict[str, Any]:
        state = {"seen_in_task": self.memory.offered, "training_lr": self.training_lr}
        return {**super().get_extra_state(), **state}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.memory.offered = int(state["seen_in_task"])
        self.training_lr = state["training_lr"]
