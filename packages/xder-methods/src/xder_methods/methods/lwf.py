"""LwF (``lwf``): Learning without Forgetting with a softmax distillation (Li & Hoiem, "Learning
without Forgetting", ECCV 2016 / TPAMI 2017), as the DER paper ran it on Split CIFAR-10 (Buzzega
et al., NeurIPS 2020, Table 2; the authors' code: mammoth ``models/lwf.py``).

Not to be confused with LwF.MC (:mod:`xder_methods.methods.lwf_mc`), iCaRL's multi-class variant with
sigmoid targets: here the old classes are distilled through a temperature-softened softmax.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.errors import check_settings
from xder_methods.core.passes import train_passes
from xder_methods.core.protocols import (
    Backbone,
    Batch,
    Scenario,
    StepOutput,
    StepPolicy,
    TaskBudget,
    TaskData,
    Transform,
)
from xder_methods.core.registry import register_method
from xder_methods.core.schedule import shuffled_batches
from xder_methods.parts.losses import seen_class_cross_entropy
from xder_methods.parts.teacher import PreviousModelTeacher

__all__ = ["LwF", "LwFConfig", "distillation_loss", "smooth_probabilities", "warm_up_head"]


@dataclass(frozen=True, kw_only=True)
class LwFConfig:
    """Attributes:
    alpha: weight of the distillation term (Li & Hoiem's lambda_o). 3.0: mammoth
        ``utils/best_args.py``, ``seq-cifar10`` / ``lwf``, the value behind the DER paper's Split
        CIFAR-10 row (Li & Hoiem use 1).
    tau: distillation temperature T. 2.0: Li & Hoiem Sec. 3 ("T = 2"); mammoth's best_args give
        ``softmax_temp = 2.0`` (and its ``lwf.py`` hard-codes 2).
    warmup_epochs: epochs of the warm-up of the new task's head before each task t >= 1 (Li &
        Hoiem's warm-up step; see :func:`warm_up_head`). None (default): as many as the task's
        own (``train.epochs``), as mammoth; 0: no warm-up.

    The training schedule of that row, which belongs to the benchmark's presets and not to this
    config: lr 0.01, batch 32, 50 epochs, no momentum, and an L2 penalty (see :class:`LwF`).
    """

    alpha: float = 3.0
    tau: float = 2.0
    warmup_epochs: int | None = None

    def __post_init__(self) -> None:
        check_settings(
            [
                (self.alpha >= 0, f"alpha must be >= 0, got {self.alpha}"),
                (self.tau > 0, f"tau must be > 0, got {self.tau}"),
                (
                    self.warmup_epochs is None or self.warmup_epochs >= 0,
                    f"warmup_epochs must be >= 0 or unset, got {self.warmup_epochs}",
                ),
            ],
            prefix="method.",
        )


def smooth_probabilities(probabilities: Tensor, tau: float) -> Tensor:
    """Li & Hoiem's softened probabilities ``y'_k = y_k ** (1 / tau) / sum_j y_j ** (1 / tau)``
    (their Eq. for L_old; mammoth's ``smooth``).

    For ``y = softmax(z)`` this is ``softmax(z / tau)``: ``tau > 1`` flattens the distribution.

    Args:
        probabilities: (B, K) rows of non-negative numbers (probabilities), not all zero.
        tau: the temperature, > 0.

    Returns:
        (B, K), each row summing to 1.
    """
    powered = probabilities.pow(1.0 / tau)
    return powered / powered.sum(dim=1, keepdim=True)


def distillation_loss(logits: Tensor, teacher_logits: Tensor, tau: float) -> Tensor:
    """Li & Hoiem's L_old, a cross-entropy between softened softmaxes, mean over the batch:
    ``-mean_i sum_k y'_ik log yhat'_ik`` with ``y' = smooth(softmax(teacher_logits), tau)`` and
    ``yhat' = smooth(softmax(logits), tau)``.

    This is mammoth's ``modified_kl_div(smooth(softmax(old), T), smooth(softmax(new), T))``: a
    cross-entropy, not a KL divergence (they differ by the teacher's entropy, a constant of the
    student), with no ``tau ** 2`` factor. The student's side is taken in the log domain,
    ``log yhat' = log_softmax(logits / tau)`` (equal in exact arithmetic), so that a probability
    that underflows to 0 gives a finite loss where ``log(smooth(softmax(.)))`` would give inf/NaN.

    Args:
        logits: (B, K) the student's logits over the distilled classes.
        teacher_logits: (B, K) the teacher's logits of the same inputs (treated as constants).
        tau: the temperature, > 0.

    Returns:
        A scalar.
    """
    targets = smooth_probabilities(teacher_logits.detach().softmax(dim=1), tau)
    return -(targets * (logits / tau).log_softmax(dim=1)).sum(dim=1).mean()


def warm_up_head(
    net: nn.Module,
    data: TaskData,
    transform: Transform,
    new_classes: tuple[int, int],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    drop_last: bool,
    generator: torch.Generator | None,
    policy: StepPolicy | None = None,
) -> None:
    """Li & Hoiem's warm-up step: train the head on the new classes alone, the rest frozen.

    For each of ``epochs`` epochs, over the task's rows in a fresh random order, in batches of
    ``batch_size`` (:func:`~xder_methods.core.schedule.shuffled_batches`): augment the batch (``transform``),
    take the features with the network in eval mode and without gradient, and take one plain
    SGD step (no momentum, no weight decay) on ``CE(softmax(head(features)[:, start:end]),
    y - start)``, the cross-entropy over the new classes ``[start, end)`` only. Only the head's
    new-class rows have a gradient, so the backbone, BatchNorm's statistics and the old classes'
    rows are left exactly as they were. As mammoth's ``LwF.begin_task`` (there: the
    classifier's parameters, its own SGD, the training loader).

    Args:
        net: a :class:`~xder_methods.core.protocols.Backbone` (``forward_features``,
            ``forward_head``); trained in place, its train/eval mode restored.
        data: the task's training rows (examples as stored, labels), on the network's device.
        transform: the training augmentation (``transforms.train``).
        new_classes: ``[start, end)``, the task's classes.
        epochs: the warm-up's epochs (mammoth: the task's own, as the next three).
        batch_size: its batch size.
        lr: its learning rate.
        drop_last: whether each epoch drops its last partial batch.
        generator: the source of the batch order and the augmentation.
        policy: the run's step policy (:func:`~xder_methods.core.passes.train_passes`; None:
            fp32, no CUDA graphs).
    """
    start, end = new_classes
    backbone = cast(Backbone, net)
    was_training = net.training
    net.train(False)
    # Every parameter is handed over, but only the head's receive a gradient (the features are
    # taken without one), and SGD leaves a parameter whose gradient is None as it is.
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    n, device = data.y.shape[0], data.y.device

    def loss(index: Tensor) -> Tensor:
        with torch.no_grad():
            features = backbone.forward_features(transform(data.x_raw[index], generator))
        logits = backbone.forward_head(features)[:, start:end].float()
        return F.cross_entropy(logits, data.y[index] - start)

    batches = (
        index
        for _ in range(epochs)
        for index in shuffled_batches(n, batch_size, drop_last=drop_last, generator=generator, device=device)
    )
    try:
        train_passes(batches, loss, optimizer, policy=policy or StepPolicy(), device=device)
    finally:
        net.train(was_training)


@register_method("lwf", LwFConfig)
class LwF(PreviousModelTeacher[LwFConfig]):
    """Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017), no buffer.

    On a stream batch ``(x, y)`` of task t, with ``f`` the network, ``f_old`` the frozen network
    as it was at the end of task t - 1, ``O = [0, start_t)`` the past classes and
    ``S = [0, end_t)`` the classes seen so far::

        loss = CE(softmax(f(x)[:, S]), y)
               + alpha * (-mean_i sum_{k in O} softmax(f_old(x)[:, O] / T)_ik
                                               * log softmax(f(x)[:, O] / T)_ik)   (t >= 1)

    (:func:`~xder_methods.parts.losses.seen_class_cross_entropy`, :func:`distillation_loss`); in task 0
    the loss is the cross-entropy alone. Weight decay (Li & Hoiem's R(theta)) is the optimiser's
    (``train.weight_decay``). Prediction is the network's own output. No host synchronisation.

    Checked against Li & Hoiem (Alg. 1, Sec. 3) and mammoth (``models/lwf.py``,
    ``utils/training.py``, ``datasets/seq_cifar10.py``, ``utils/best_args.py``); point by point:

    * Cross-entropy: one softmax over the seen classes S (mammoth's mask
      ``eye[current_task * cpt - 1]``, its task counter being already advanced by ``begin_task``).
      Same here. Li & Hoiem's multi-head setting has a new-task loss on the new head only; in
      Class-IL the seen-class softmax is what the DER paper ran.
    * Distillation: softmax over the past classes only, for the teacher and for the student, both
      softened by ``y ** (1/T)`` and compared by a cross-entropy, mean over the batch (Li &
      Hoiem's L_old, mammoth's ``modified_kl_div``). Same here, computed stably (see
      :func:`distillation_loss`). mammoth ignores its ``--softmax_temp`` and uses T = 2; ``tau``
      is read here (default 2).
    * The teacher's outputs: Li & Hoiem (Alg. 1) and mammoth record the old network's outputs once
      per image before training the task; mammoth does so in eval mode (BatchNorm running
      statistics) on the image neither augmented nor normalised (``not_aug_transform`` is
      ``ToTensor`` alone on Split CIFAR-10, whereas training inputs are normalised), and pairs
      them with the student's output on a fresh augmentation. Here a frozen copy of the network
      (``self.teacher``, eval mode, in the ``state_dict``) computes them per step on the very
      augmented, normalised batch the student sees. Without augmentation, and with mammoth's
      teacher inputs normalised like its training inputs, the two would be the same numbers; with
      augmentation the copy's targets belong to the very input the student is fitted on, which
      is LwF's intent (keep f close to f_old on the new data), and mammoth's normalisation
      mismatch is not reproduced. Cost: one extra forward
      pass of the frozen network per step from task 1 on. mammoth records after its warm-up
      (below), which changes the new classes' rows of the classifier only: the old classes'
      outputs are the end-of-task-(t-1) network's in both.
    * Warm-up: Li & Hoiem first train only the new task's head with the rest frozen; mammoth, at
      the beginning of every task t >= 1, trains the classifier (``net.classifier``, plain SGD at
      the task's lr, no weight decay) for as many epochs as the task itself, on the task's
      augmented training data, with the network in eval mode and a cross-entropy over the new
      task's classes only. Same here (:meth:`prepare_task`, :func:`warm_up_head`), with the
      loop's batch size and ``drop_last``; ``warmup_epochs`` sets its length (default: the
      task's epochs). The teacher is copied before it, which changes nothing distilled: the
      warm-up moves only the new classes' rows.
    * Weight decay: mammoth of 2020 (the DER paper) adds ``wd_reg * sum(theta ** 2)`` over every
      parameter to the loss (``wd_reg = 0.0005``), whose gradient ``2 * wd_reg * theta`` is SGD's
      ``weight_decay = 0.001``; mammoth since 2022 passes ``optim_wd = 0.0005`` to SGD instead.
      Either is a schedule setting here (``train.weight_decay``), outside the logged loss.

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the distillation is over the old classes and the warm-up over
    the new ones (a Domain-IL task brings no new classes), from the previous task's model (a
    general stream is one task).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "it distils the old classes' outputs and warms up the new classes' head, and a "
            "domain-il task brings no new classes"
        ),
        "general": (
            "it distils from the previous task's model, and a general stream is one task, so it "
            "would never distil"
        ),
    }

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> None:
        """The warm-up of the new head before every task t >= 1 (:func:`warm_up_head`)."""
        epochs = budget.epochs if self.config.warmup_epochs is None else self.config.warmup_epochs
        if task == 0 or epochs == 0:
            return
        warm_up_head(
            self.net,
            data,
            self.transforms.train,
            self.setting.class_range(task),
            epochs=epochs,
            batch_size=budget.batch_size,
            lr=budget.lr,
            drop_last=budget.drop_last,
            generator=self.generator,
            policy=self.step_policy,
        )

    def observe(self, batch: Batch) -> StepOutput:
        num_old, num_seen = self.setting.class_range(batch.task)
        logits = self.net(batch.x)
        ce = seen_class_cross_entropy(logits, batch.y, num_seen)
        if num_old == 0:
            return StepOutput(ce, {"ce": ce.detach()})
        with torch.no_grad():
            teacher = self.teacher(batch.x)[:, :num_old].float()
        distillation = distillation_loss(logits[:, :num_old].float(), teacher, self.config.tau)
        loss = ce + self.config.alpha * distillation
        return StepOutput(loss, {"ce": ce.detach(), "distillation": distillation.detach()})
