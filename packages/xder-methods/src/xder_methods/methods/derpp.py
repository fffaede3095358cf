"""DER++ (``derpp``): DER plus replayed labels (Buzzega et al., NeurIPS 2020; X-DER paper Eq. 6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.registry import register_method
from xder_methods.methods.der import DER, DERConfig
from xder_methods.parts.buffer import BufferSample

__all__ = ["DERpp", "DERppConfig"]


@dataclass(frozen=True, kw_only=True)
class DERppConfig(DERConfig):
    """Attributes:
    alpha: logit-matching weight (0.1: paper App. "Hyperparameter Choice", Split CIFAR-100).
    beta: weight of the cross-entropy on a second, independent buffer batch (0.5, same table).
    replay_forward: ``separate`` (the authors' code), ``joint`` or ``grouped`` (the authors'
        computation in one pass) forward passes of the stream and both buffer batches (see
        :class:`~xder_methods.parts.replay.DarkReplayConfig`).
    """

    alpha: float = 0.1
    beta: float = 0.5


DERppConfigT = TypeVar("DERppConfigT", bound=DERppConfig)


@register_method("derpp", DERppConfig)
class DERpp(DER[DERppConfigT]):
    """DER++: DER's logit replay plus ``beta`` times the cross-entropy of an independently drawn
    buffer batch against its stored labels (over all outputs, as in the authors' code).

    Checked line by line against the DER paper (Buzzega et al., NeurIPS 2020, Alg. 1) and the
    authors' code (mammoth ``models/derpp.py``, ``utils/buffer.py``, ``utils/training.py``) for
    natural images (docs/results.md, "The DER++ check"); the same in every point below:

    * Replayed items: the buffer holds each stream image unaugmented; every draw applies the
      training transform (crop with padding, flip, normalisation) to each item independently
      (mammoth: ``buffer.get_data(..., transform=self.transform)``, a per-image PIL transform).
    * Stored logits: those of the augmented stream view, from the forward pass of the stream loss,
      before the optimiser step, over all outputs (mammoth: ``logits=outputs.data``).
    * Sampling: reservoir insertion (Algorithm R); two independent draws per step (one for the
      logit term, one for the label term), each ``minibatch_size`` items uniformly without
      replacement, or every item while the buffer holds fewer.
    * Batches: the stream batch and each buffer batch go through the network in a pass of their
      own (three BatchNorm updates per step; ``replay_forward="separate"``, the default); the
      three terms' gradients add up before one SGD step. The cross-entropies span all outputs
      (future classes included) and the logit term is ``F.mse_loss`` (mean over items and
      classes).

    Where the run differs, it is a protocol setting, not this class: each epoch's last partial
    batch is kept on the papers' protocols (``train.drop_last = false``, as mammoth's DataLoader)
    and dropped on ``seq-digits``; the loop builds a fresh SGD optimiser per task where mammoth
    keeps one (the same without momentum, as in the paper's protocols); Class-IL evaluation takes
    the argmax over the seen classes (mammoth since 2023; ``train.class_il_outputs = "all"`` for
    its 2020-2022 argmax over all outputs).
    """

    replay_batches = 2
    graph_key = DER.graph_key  # replayable as ER's step: at a fixed buffer size

    def replay_loss(
        self, samples: list[BufferSample], outputs: list[Tensor], terms: dict[str, Tensor]
    ) -> Tensor:
        loss = super().replay_loss(samples, outputs, terms)
        ce = self.config.beta * F.cross_entropy(outputs[1], samples[1].labels)
        terms["buffer_ce"] = ce.detach()
        return loss + ce
