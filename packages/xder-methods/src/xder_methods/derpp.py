"""DER++ (``derpp``): DER plus replayed labels (Buzzega et al., NeurIPS 2020; X-DER paper Eq. 6)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from xder_methods._registry import register_method
from xder_methods.buffer import BufferSample
from xder_methods.der import DER, DERConfig

__all__ = ["DERpp", "DERppConfig"]


@dataclass(frozen=True, kw_only=True)
class DERppConfig(DERConfig):
    """Attributes:
    alpha: logit-matching weight (0.1: paper App. "Hyperparameter Choice", Split CIFAR-100).
    beta: weight of the cross-entropy on a second, independent buffer batch (0.5, same table).
    replay_forward: ``separate`` (the authors' code) or ``joint`` forward passes of the stream
        and both buffer batches (see :class:`~xder_methods.er.DarkReplayConfig`).
    """

    alpha: float = 0.1
    beta: float = 0.5


@register_method("derpp", DERppConfig)
class DERpp(DER):
    """DER++: DER's logit replay plus ``beta`` times the cross-entropy of an independently drawn
    buffer batch against its stored labels (over all outputs, as in the authors' code)."""

    replay_batches = 2

    def replay_loss(
        self, samples: list[BufferSample], outputs: list[Tensor], terms: dict[str, Tensor]
    ) -> Tensor:
        loss = super().replay_loss(samples, outputs, terms)
        ce = self.config.beta * F.cross_entropy(outputs[1], samples[1].labels)
        terms["buffer_ce"] = ce.detach()
        return loss + ce
