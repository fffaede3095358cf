"""LwF.MC (``lwf_mc``): Learning without Forgetting, multi-class, as iCaRL defines it
(Rebuffi et al., "iCaRL: Incremental Classifier and Representation Learning", CVPR 2017, Sec. 4;
Li & Hoiem, "Learning without Forgetting", ECCV 2016; X-DER paper Sec. 5.2).

No exemplars. From task 1 on, the network as it was when the task began (a frozen copy, the
"teacher") gives sigmoid targets for the old classes; the loss is a binary cross-entropy over the
classes seen so far, with the teacher's sigmoids as targets for the old classes and one-hot labels
for the new ones (iCaRL Alg. 3 without exemplars). Prediction is the network's own output.

Protocol values of the X-DER paper (App. "Hyperparameter Choice", Split CIFAR-100): lr 0.03,
momentum 0, weight decay 5e-4; they belong to the benchmark's training schedule (presets), not to
this config.

Deviations:
    - the binary cross-entropy is averaged over items AND seen classes (the authors' code,
      mammoth's ``F.binary_cross_entropy_with_logits``); iCaRL's Alg. 3 writes a sum, which
      differs by a constant factor the learning rate absorbs;
    - the teacher is a registered submodule copied at ``begin_task`` of every task t >= 1 (the
      authors' code deep-copies the network at the end of each task: the same weights), so that
      ``state_dict`` holds it; it stays in eval mode even when the method is put in train mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.base import ConfigT
from xder_methods.core.protocols import Batch, Scenario, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.parts.teacher import PreviousModelTeacher

__all__ = ["LwFMC", "LwFMCConfig", "binary_cross_entropy_per_item", "distillation_targets"]


@dataclass(frozen=True, kw_only=True)
class LwFMCConfig:
    """LwF.MC has no hyperparameter of its own: lr 0.03, momentum 0 and weight decay 5e-4 (X-DER
    paper App. "Hyperparameter Choice", Split CIFAR-100) are the training schedule's."""


def distillation_targets(
    labels: Tensor, teacher_logits: Tensor | None, num_old: int, num_seen: int
) -> Tensor:
    """iCaRL's targets over the seen classes (Alg. 3): the teacher's sigmoids for the old classes
    ``[0, num_old)``, one-hot labels for the new classes ``[num_old, num_seen)``.

    Args:
        labels: (B,) global labels (< num_seen). An exemplar of an old class gets 0 on every new
            class: its own label is represented only through the teacher's output.
        teacher_logits: (B, C >= num_old) the teacher's logits of the same inputs (None when
            ``num_old == 0``).

    Returns:
        (B, num_seen) float targets in [0, 1], without gradient.
    """
    # A comparison, not F.one_hot: on the CPU one_hot reads the labels' range back (a host sync).
    classes = torch.arange(num_old, num_seen, device=labels.device)
    one_hot = (labels[:, None] == classes[None, :]).float()
    if num_old == 0:
        return one_hot
    if teacher_logits is None:
        raise ValueError("old classes need the teacher's logits")
    old = torch.sigmoid(teacher_logits[:, :num_old].detach().float())
    return torch.cat([old, one_hot.to(old.device)], dim=1)


def binary_cross_entropy_per_item(logits: Tensor, targets: Tensor) -> Tensor:
    """Sigmoid binary cross-entropy of each item, averaged over its classes: ``(B, K) -> (B,)``."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").mean(dim=1)


@register_method("lwf_mc", LwFMCConfig)
class LwFMC(PreviousModelTeacher[ConfigT]):
    """LwF.MC: sigmoid cross-entropy on the new classes plus sigmoid distillation from the model
    of the previous task on the old ones (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the new classes are trained against the previous task's model's
    outputs on the old ones (a Domain-IL task brings no new classes; a general stream is one
    task, with no previous model).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "it trains the new classes against the previous model's outputs on the old ones, and "
            "a domain-il task brings no new classes"
        ),
        "general": (
            "it distils from the previous task's model, and a general stream is one task, so it "
            "would never distil"
        ),
    }

    @torch.no_grad()
    def teacher_logits(self, x: Tensor) -> Tensor:
        """(B, C) outputs of the frozen previous model."""
        logits: Tensor = self.teacher(x)
        return logits

    def distillation_loss_per_item(self, x: Tensor, y: Tensor, task: int) -> Tensor:
        """(B,) iCaRL loss of each input (targets from the teacher for the old classes)."""
        num_old, num_seen = self.setting.class_range(task)
        logits = self.net(x)[:, :num_seen].float()
        teacher = self.teacher_logits(x) if num_old else None
        return binary_cross_entropy_per_item(logits, distillation_targets(y, teacher, num_old, num_seen))

    def observe(self, batch: Batch) -> StepOutput:
        loss = self.distillation_loss_per_item(batch.x, batch.y, batch.task).mean()
        return StepOutput(loss, {"bce": loss.detach()})
