"""BiC (``bic``): Bias Correction (Wu et al., "Large Scale Incremental Learning", CVPR 2019).

X-DER paper Sec. 5.2: "BiC pairs Experience Replay with a regularization term that resembles the
objective of LwF [and] a separate layer that aims at counteracting bias". docs/methods.md, "What the
competitors compute".

Stage 1 (every step of task t, n old and m new classes, n + m seen): the stream batch and
``minibatch_size`` replayed items go through one forward pass;
``loss = lambda_ * s * L_distill + (1 - lambda_) * L_ce`` (:func:`distillation_weights`), with
``L_ce`` the cross-entropy over the seen classes and ``L_distill`` the cross-entropy between the
softened (temperature ``tau``) outputs of the previous model and of the current one over the old
classes (:func:`bic_distillation_loss`). ``objective = "mammoth"`` (default, the X-DER paper's
code): ``lambda_ = 1 / (t + 1)`` and ``s = tau ** 2``; ``objective = "bic"`` (the BiC paper and
its authors' code): ``lambda_ = n / (n + m)`` and ``s = 1``. Both give 0 at task 0. The previous model (the
teacher, copied at the start of each task t >= 1) is the previous step's model WITH its bias
correction: its logits of task t - 1 go through the bias layer trained at the end of task t - 1,
as in the authors' code ("apply bias corrected classifier for distilling loss", from the third
step on, the first bias layer being trained at the end of the second) and in mammoth
(``distill_after_bic``).

Stage 2 (end of task t >= 1): the bias layer of the newest task, ``q = alpha * o + beta`` on the
logits of task t's classes and the identity on older ones (:func:`bias_correct`),
is trained for ``epochs_bic`` epochs with cross-entropy over the seen classes on a held-out
validation set, the network frozen in eval mode; only ``alpha`` and ``beta`` change.
``predict`` applies the newest task's layer only: BiC's model at step t is the network plus the
step-t correction of the step-t classes, and the authors' code evaluates
``[o_old, alpha_t * o_new + beta_t]``, so the layers of earlier tasks are kept in the state (fixed,
never retrained: one ``(alpha, beta)`` per task) but no longer applied; their correction lives on
in the network through distillation from the corrected teacher. (A PyTorch re-implementation,
sairin1202/BIC, instead applies every task's layer to its own classes in training and
evaluation; we follow the authors and mammoth.)

The held-out validation set. BiC splits the exemplars of old classes and the data of new classes
into train and validation sets (about 10% of the memory) and never trains the network on the
validation part; mammoth's (``icarl_replay(..., val_set_split=0.1)``) takes a random 10% of the
memory and as many random rows of the new task, withheld from the task's training. Here:

- the memory of M items has two parts: a replay part of ``M - V`` items, sampled by the
  replay, and a held-out part of ``V = round(holdout_fraction * M)`` items that is never
  replayed (:func:`holdout_size`). Both are task-balanced (each stored task keeps
  ``capacity // (t + 1)`` of its earliest rows; the new task takes the free slots,
  :func:`task_balanced_mask`) and class-balanced inside a task (new items are stored in an
  order whose every prefix is class-balanced, :func:`interleaved_order`); items are chosen at
  random (mammoth's BiC also picks its exemplars without herding);
- from task 1 on, :meth:`BiC.prepare_task` withholds ``len(holdout)`` random rows of the task
  (what it returns: the loop never trains on them), and the validation set of task t
  is the held-out part (old classes, replayed in none of the tasks since their own) plus those
  rows: about as many new-class items as old ones, as mammoth's.

Deviation: mammoth draws its held-out 10% of the memory afresh at every task (and trains on the
other 90%), where the held-out part here is fixed once an item is stored; the old-class rows were
trained on during their own task (as stream items) in both. With ``V = 0`` (a tiny buffer) there
is no held-out item and the bias layer stays the identity.

Hyperparameters (X-DER paper App. "Hyperparameter Choice", Split CIFAR-100, M = 500 and 2000):
tau 2, epochs_bic 250. The table's lr 0.03, momentum 0, weight decay 0 (M = 500; wd 5e-5 for
M = 2000) belong to the benchmark's training schedule and presets, not to this config.

Other deviations and choices (BiC paper / authors' TensorFlow code / mammoth, the code behind the
X-DER tables):

- the objective: mammoth's (``objective = "mammoth"``, the run behind the X-DER paper's row)
  weighs distillation by ``1 / (t + 1)``, less as tasks accumulate, and multiplies it by
  ``tau ** 2`` (as sairin1202/BIC does): at task 1 the distillation-to-CE weight ratio is 4, at
  task 9 0.44. The BiC paper and its authors' code (``objective = "bic"``) weigh it by
  ``n_old / n_seen`` (``itera / (itera + 1)`` with equal tasks), more as tasks accumulate, with
  no ``tau ** 2``: ratios 1 and 9.
- replay: BiC and mammoth merge the exemplars into the task's training set; here each step
  joins its share of the replay part (``replay = "merged"``, as iCaRL's: every item once an
  epoch, spread over the epoch's stream batches); ``replay = "joined"`` joins
  ``minibatch_size`` items to every stream batch (ER-style, as the X-DER paper describes BiC).
- the bias layer's optimiser: BiC's paper names none; we use Adam with lr ``bias_lr = 1e-3``
  and batches of ``bias_batch_size = 32`` (mammoth, whose ``epochs_bic = 250`` the table lists,
  and sairin1202/BIC); the authors' code used momentum SGD plus ``0.1 * beta ** 2 / 2``.
  Validation items are weakly augmented each epoch (``Transforms.train``) and forwarded in eval
  mode, as in mammoth.
- distillation runs on every input of the step (stream and replayed items, as BiC and mammoth).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.errors import check_settings
from xder_methods.core.passes import train_passes
from xder_methods.core.protocols import (
    Batch,
    ContinualSetting,
    Scenario,
    StepOutput,
    TaskBudget,
    TaskData,
    Transforms,
)
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.replay import (
    ExemplarReplayConfig,
    MergedReplay,
    prefill_reservoir,
    replay_exemplars,
    stream_buffer_groups,
)
from xder_methods.parts.selection import rank_within_class
from xder_methods.parts.teacher import PreviousModelTeacher

__all__ = [
    "BiC",
    "BiCConfig",
    "bias_correct",
    "bic_distillation_loss",
    "distillation_weight",
    "distillation_weights",
    "holdout_size",
    "interleaved_order",
    "task_balanced_mask",
]


Objective = Literal["mammoth", "bic"]


@dataclass(frozen=True, kw_only=True)
class BiCConfig(ExemplarReplayConfig):
    """BiC's hyperparameters (defaults: X-DER paper App. "Hyperparameter Choice", Split
    CIFAR-100, M = 500; the table's lr / momentum / weight decay are the training schedule's).

    Attributes:
        buffer_size: memory size M (500), held-out part included.
        replay: ``merged`` (default, the authors' code: the replay part's share of a training
            set it is merged into) or ``joined`` (``minibatch_size`` with every stream batch).
        minibatch_size: replayed items per step with ``replay = "joined"`` (32).
        objective: how distillation and cross-entropy are weighed (see the module docstring):
            ``mammoth`` (default, the X-DER paper's code: ``1 / (t + 1)`` times ``tau ** 2``) or
            ``bic`` (the BiC paper's ``n_old / n_seen``).
        tau: distillation temperature (2, the table; BiC uses T = 2).
        epochs_bic: epochs of bias-layer training at the end of each task t >= 1 (250, the
            table).
        holdout_fraction: share of the memory held out as the bias layer's validation set and
            never replayed (0.1: BiC's train/val split of the exemplars, mammoth's
            ``valset_split``).
        bias_lr: Adam learning rate of the bias layer (1e-3, mammoth and sairin1202/BIC).
        bias_batch_size: batch size of bias-layer training (32: mammoth's loader batch on Split
            CIFAR-100).
    """

    objective: Objective = "mammoth"
    tau: float = 2.0
    epochs_bic: int = 250
    holdout_fraction: float = 0.1
    bias_lr: float = 1e-3
    bias_batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            (
                self.objective in ("mammoth", "bic"),
                f"method.objective must be mammoth or bic, got {self.objective!r}",
            ),
            (self.tau > 0, f"method.tau must be > 0, got {self.tau}"),
            (self.epochs_bic >= 0, f"method.epochs_bic must be >= 0, got {self.epochs_bic}"),
            (
                0.0 <= self.holdout_fraction < 1.0,
                f"method.holdout_fraction must be in [0, 1), got {self.holdout_fraction}",
            ),
            (self.bias_lr > 0, f"method.bias_lr must be > 0, got {self.bias_lr}"),
            (self.bias_batch_size >= 1, f"method.bias_batch_size must be >= 1, got {self.bias_batch_size}"),
        ]
        check_settings(checks)


# ---------------------------------------------------------------------------------------------
# Pure functions


def bias_correct(logits: Tensor, alpha: Tensor | float, beta: Tensor | float, start: int, end: int) -> Tensor:
    """BiC's bias correction layer: ``alpha * o + beta`` on columns ``[start, end)``
    (the newest task's classes), the identity elsewhere.

    Args:
        logits: (B, C).
        alpha: the scale, a scalar (a 0-dim tensor carries gradient to it).
        beta: the shift, a scalar (likewise).

    Returns:
        A new (B, C) tensor; ``logits`` is not modified.
    """
    columns = torch.arange(logits.shape[1], device=logits.device)
    newest = (columns >= start) & (columns < end)
    return torch.where(newest, logits * alpha + beta, logits)


def bic_distillation_loss(
    logits: Tensor,
    teacher_logits: Tensor,
    n_old: int,
    tau: float,
    reduction: Literal["mean", "none"] = "mean",
) -> Tensor:
    """BiC's distilling loss: ``-sum_{k < n_old} pi_hat_k log pi_k`` with
    ``pi_hat = softmax(teacher_logits[:, :n_old] / tau)`` and ``pi = softmax(logits[:, :n_old] / tau)``.

    Args:
        logits: (B, C) current outputs.
        teacher_logits: (B, C') previous model's outputs, C' >= n_old (treated as constants).
        n_old: number of old classes (columns ``[0, n_old)``).
        tau: temperature.
        reduction: ``mean`` over the batch, or ``none`` for the (B,) per-item values.
    """
    target = F.softmax(teacher_logits[:, :n_old].detach() / tau, dim=1)
    per_item = -(target * F.log_softmax(logits[:, :n_old] / tau, dim=1)).sum(dim=1)
    return per_item.mean() if reduction == "mean" else per_item


def distillation_weight(n_old: int, n_seen: int) -> float:
    """``lambda = n / (n + m)``: old classes over seen classes (BiC; 0 on the first task)."""
    return n_old / n_seen


def distillation_weights(
    objective: Objective, task: int, n_old: int, n_seen: int, tau: float
) -> tuple[float, float]:
    """``(lambda_, s)`` of ``loss = (1 - lambda_) * L_ce + lambda_ * s * L_distill`` at ``task``:
    ``(1 / (t + 1), tau ** 2)`` for ``mammoth``, ``(n_old / n_seen, 1)`` for ``bic``; ``(0, 1)``
    without old classes."""
    if n_old == 0:
        return 0.0, 1.0
    if objective == "mammoth":
        return 1.0 / (task + 1), tau**2
    return distillation_weight(n_old, n_seen), 1.0


def holdout_size(capacity: int, fraction: float) -> int:
    """Slots of the held-out part of a memory of ``capacity`` items: ``round(fraction * M)``
    (half up), e.g. 50 of 500."""
    return int(fraction * capacity + 0.5)


def interleaved_order(labels: Tensor, num_classes: int) -> Tensor:
    """A permutation of ``labels``' rows whose every prefix is class-balanced (to within one):
    the rows ranked 0 in their class (in the given order) first, then those ranked 1, and so on.

    Args:
        labels: (N,) int64 in ``[0, num_classes)``.

    Returns:
        (N,) int64 row indices.
    """
    rank = rank_within_class(labels, num_classes)
    return torch.sort(rank, stable=True).indices


def task_balanced_mask(task_labels: Tensor, per_task: int, n_tasks: int) -> Tensor:
    """(N,) bool: the first ``per_task`` rows (in row order) of each task of ``task_labels``."""
    return rank_within_class(task_labels, n_tasks) < per_task


# ---------------------------------------------------------------------------------------------


@register_method("bic", BiCConfig)
class BiC(PreviousModelTeacher[BiCConfig]):
    """Bias Correction (Wu et al., CVPR 2019; X-DER paper Sec. 5.2): see the module docstring.

    State (all in ``state_dict``): the network, the frozen teacher (a copy of the network taken at
    the start of each task t >= 1, always in eval mode, outside ``optimizer_parameters``), the
    replay part ``buffer`` and the held-out part ``holdout`` of the memory, and the per-task
    bias layers ``bias_alpha`` / ``bias_beta`` ((n_tasks,) each, identity until trained).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): its bias layer rescales each task's new classes against the old
    ones (a Domain-IL task brings none) and is trained at each task's end (a general stream has
    none).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "its bias layer rescales each task's new classes against the old ones, and a "
            "domain-il task brings no new classes"
        ),
        "general": (
            "it holds out part of each task and trains its bias layer at the task's end, and a "
            "general stream has no task ends"
        ),
    }

    # Buffers registered in __init__, declared for the type checker.
    bias_alpha: Tensor
    bias_beta: Tensor

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: BiCConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        device = self.device
        held_out = holdout_size(config.buffer_size, config.holdout_fraction)
        self.buffer = Buffer.for_setting(config.buffer_size - held_out, setting, device)
        self.holdout = Buffer.for_setting(held_out, setting, device)
        self.merged = MergedReplay()
        # Positions of the current task's rows withheld from training (prepare_task), in the state.
        self.withheld = torch.zeros(0, dtype=torch.int64, device=device)
        self.register_buffer("bias_alpha", torch.ones(setting.n_tasks, device=device))
        self.register_buffer("bias_beta", torch.zeros(setting.n_tasks, device=device))

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    # ---------------------------------------------------------------------------------- step

    def corrected(self, logits: Tensor, task: int) -> Tensor:
        """``logits`` with the bias layer of ``task`` applied to that task's classes."""
        start, end = self.setting.class_range(task)
        return bias_correct(logits, self.bias_alpha[task], self.bias_beta[task], start, end)

    def predict(self, x: Tensor) -> Tensor:
        return self.corrected(self.net(x), self.current_task)

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> Tensor | None:
        """From task 1 on, withhold as many random rows of the task as the memory holds out
        (returned, positions in its ``TaskData``: the new part of stage 2's validation set, never
        trained on); spread the replayed items over the rest's epoch
        (:class:`~xder_methods.parts.replay.MergedReplay`)."""
        n = data.y.shape[0]
        count = min(len(self.holdout), n - 1) if task >= 1 else 0
        self.withheld = torch.randperm(n, generator=self.generator, device=data.y.device)[:count]
        self.merged.plan(n - count, budget.batch_size, budget.drop_last)
        return self.withheld if self.withheld.numel() else None

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows into the memory by reservoir sampling
        (:func:`~xder_methods.parts.replay.prefill_reservoir`): a memory of the right size and
        classes, not herded: :meth:`end_task` would also train the bias layer."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        cfg, t = self.config, batch.task
        x, y = replay_exemplars(batch, self.buffer, cfg, self.merged, self.transforms.train, self.generator)
        logits = self.net(x)
        n_old, n_seen = self.setting.class_range(t)[0], self.seen_classes(t)
        lambda_, scale = distillation_weights(cfg.objective, t, n_old, n_seen, cfg.tau)
        ce = F.cross_entropy(logits[:, :n_seen], y, reduction="none")
        per_item = (1.0 - lambda_) * ce
        terms = {"ce": (1.0 - lambda_) * ce.detach().mean()}
        if n_old:
            with torch.no_grad():
                teacher_logits = self.corrected(self.teacher(x), t - 1)
            distill = bic_distillation_loss(logits, teacher_logits, n_old, cfg.tau, reduction="none")
            per_item = per_item + lambda_ * scale * distill
            terms["distill"] = lambda_ * scale * distill.detach().mean()
        loss = per_item.mean()
        groups = {"stream": loss}
        if x.shape[0] > batch.y.shape[0]:
            groups = stream_buffer_groups(per_item, batch.y.shape[0])
        return StepOutput(loss, terms, groups)

    # ------------------------------------------------------------------------------ task end

    def fit_bias_layer(self, task: int, examples: Tensor, labels: Tensor) -> None:
        """Stage 2: train ``(alpha, beta)`` of ``task`` on raw ``examples`` (N, ...) with labels
        (N,), the network frozen in eval mode; nothing else changes."""
        cfg = self.config
        start, end = self.setting.class_range(task)
        alpha = torch.ones((), device=self.device, requires_grad=True)
        beta = torch.zeros((), device=self.device, requires_grad=True)
        optimizer = torch.optim.Adam([alpha, beta], lr=cfg.bias_lr)
        was_training = self.training
        self.train(False)
        n = labels.shape[0]

        def batches() -> Iterator[Tensor]:
            for _ in range(cfg.epochs_bic):
                order = torch.randperm(n, generator=self.generator, device=labels.device)
                for first in range(0, n, cfg.bias_batch_size):
                    yield order[first : first + cfg.bias_batch_size]

        def loss(rows: Tensor) -> Tensor:
            with torch.no_grad():
                logits = self.net(self.transforms.train(examples[rows], self.generator))[:, :end]
            return F.cross_entropy(bias_correct(logits, alpha, beta, start, end), labels[rows])

        train_passes(batches(), loss, optimizer, policy=self.step_policy, device=self.device)
        with torch.no_grad():
            self.bias_alpha[task] = alpha.detach()
            self.bias_beta[task] = beta.detach()
        self.train(was_training)

    @torch.no_grad()
    def end_task(self, task: int, data: TaskData) -> None:
        start, end = self.setting.class_range(task)
        withheld, self.withheld = self.withheld, self.withheld[:0]
        trained = torch.ones(data.y.shape[0], dtype=torch.bool, device=data.y.device)
        trained[withheld] = False
        candidates = torch.nonzero(trained).flatten()  # the rows trained on (one read-back a task)
        shuffled = candidates[
            torch.randperm(candidates.shape[0], generator=self.generator, device=data.y.device)
        ]
        order = shuffled[interleaved_order(data.y[shuffled] - start, end - start)]
        # Stage 2 on the held-out old items plus the task's withheld rows (as many: prepare_task).
        if task >= 1 and len(self.holdout):
            held = self.holdout.all()
            self.fit_bias_layer(
                task,
                torch.cat([held.examples, data.x_raw[withheld].to(held.examples.dtype)]),
                torch.cat([held.labels, data.y[withheld]]),
            )
        # Memory: the held-out part takes the head of the interleaved order, the replay part
        # the rest (re-interleaved so that its prefix is class-balanced too).
        taken = self._refill(self.holdout, order, data, task)
        rest = order[taken:]
        rest = rest[interleaved_order(data.y[rest] - start, end - start)]
        self._refill(self.buffer, rest, data, task)

    def get_extra_state(self) -> dict[str, Any]:
        return {**super().get_extra_state(), "withheld": self.withheld.tolist()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.withheld = torch.tensor(state["withheld"], dtype=torch.int64, device=self.device)

    def _refill(self, part: Buffer, candidates: Tensor, data: TaskData, task: int) -> int:
        """Shrink each stored task of ``part`` to ``capacity // (task + 1)`` earliest rows, then
        append the head of ``candidates`` (rows of ``data``) in the free slots; returns how many."""
        kept = 0
        if len(part):
            stored = part.all()
            keep = task_balanced_mask(stored.task_labels, part.capacity // (task + 1), self.setting.n_tasks)
            rows = torch.nonzero(keep).flatten()
            kept = rows.shape[0]
            item = part.gather(rows)
            slots = torch.arange(kept, device=rows.device)
            part.write(slots, item.examples, item.labels, task_labels=item.task_labels)
        take = min(part.capacity - kept, candidates.shape[0])
        picked = candidates[:take]
        slots = torch.arange(kept, kept + take, device=part.labels.device)
        part.write(slots, data.x_raw[picked], data.y[picked], task_labels=task)
        part.set_size(kept + take)
        part.num_seen = kept + take
        return take
