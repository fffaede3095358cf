"""LwF (``lwf``): Learning without Forgetting with a softmax distillation (Li & Hoiem, "Learning
without Forgetting", ECCV 2016 / TPAMI 2017), as the DER paper ran it on Split CIFAR-10 (Buzzega
et al., NeurIPS 2020, Table 2; the authors' code: mammoth ``models/lwf.py``).

Not to be confused with LwF.MC (:mod:`xder_methods.lwf_mc`), iCaRL's multi-class variant with
sigmoid targets: here the old classes are distilled through a temperature-softened softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from xder_methods._registry import register_method
from xder_methods.errors import check_settings
from xder_methods.losses import seen_class_cross_entropy
from xder_methods.lwf_mc import PreviousModelTeacher
from xder_methods.protocols import Batch, StepOutput

__all__ = ["LwF", "LwFConfig", "distillation_loss", "smooth_probabilities"]


@dataclass(frozen=True, kw_only=True)
class LwFConfig:
    """Attributes:
    alpha: weight of the distillation term (Li & Hoiem's lambda_o). 3.0: mammoth
        ``utils/best_args.py``, ``seq-cifar10`` / ``lwf``, the value behind the DER paper's Split
        CIFAR-10 row (Li & Hoiem use 1).
    tau: distillation temperature T. 2.0: Li & Hoiem Sec. 3 ("T = 2"); mammoth's best_args give
        ``softmax_temp = 2.0`` (and its ``lwf.py`` hard-codes 2).

    The training schedule of that row, which belongs to the benchmark's presets and not to this
    config: lr 0.01, batch 32, 50 epochs, no momentum, and an L2 penalty (see :class:`LwF`).
    """

    alpha: float = 3.0
    tau: float = 2.0

    def __post_init__(self) -> None:
        check_settings(
            [
                (self.alpha >= 0, f"alpha must be >= 0, got {self.alpha}"),
                (self.tau > 0, f"tau must be > 0, got {self.tau}"),
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


@register_method("lwf", LwFConfig)
class LwF(PreviousModelTeacher):
    """Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017), no buffer.

    On a stream batch ``(x, y)`` of task t, with ``f`` the network, ``f_old`` the frozen network
    as it was at the end of task t - 1, ``O = [0, start_t)`` the past classes and
    ``S = [0, end_t)`` the classes seen so far::

        loss = CE(softmax(f(x)[:, S]), y)
               + alpha * (-mean_i sum_{k in O} softmax(f_old(x)[:, O] / T)_ik
                                               * log softmax(f(x)[:, O] / T)_ik)   (t >= 1)

    (:func:`~xder_methods.losses.seen_class_cross_entropy`, :func:`distillation_loss`); in task 0
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
      task's classes only. NOT done here: ``begin_task`` receives no data in this loop (a task's
      data reach a method only at ``end_task``), so the new head starts each task from its
      initialisation, as under fine-tuning. Reproducing it needs the loop to hand the task's
      training rows to the method before its first epoch.
    * Weight decay: mammoth of 2020 (the DER paper) adds ``wd_reg * sum(theta ** 2)`` over every
      parameter to the loss (``wd_reg = 0.0005``), whose gradient ``2 * wd_reg * theta`` is SGD's
      ``weight_decay = 0.001``; mammoth since 2022 passes ``optim_wd = 0.0005`` to SGD instead.
      Either is a schedule setting here (``train.weight_decay``), outside the logged loss.
    """

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
