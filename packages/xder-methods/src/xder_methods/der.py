"""DER (``der``): Dark Experience Replay (Buzzega et al., NeurIPS 2020; X-DER paper Eq. 5)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from xder_methods._registry import register_method
from xder_methods.er import ER, ReplayConfig
from xder_methods.losses import logit_matching_loss
from xder_methods.protocols import Batch, StepOutput

__all__ = ["DER", "DERConfig"]


@dataclass(frozen=True, kw_only=True)
class DERConfig(ReplayConfig):
    """Attributes:
    alpha: weight of the logit-matching term (0.3: paper App. "Hyperparameter Choice", Split
        CIFAR-100, M = 500 and 2000).
    """

    alpha: float = 0.3


@register_method("der", DERConfig)
class DER(ER):
    """Dark Experience Replay: cross-entropy on the stream plus ``alpha`` times the mean squared
    error between the current and the stored logits of a buffer batch.

    The buffer (reservoir) stores each stream example unaugmented with the logits of its
    augmented view, computed in the same forward pass as the loss. Cross-entropy spans all
    outputs, future heads included, as in the authors' code. The squared error is averaged over
    classes as well as items (``F.mse_loss``; see :func:`logit_matching_loss`).
    """

    @property
    def stored_logits(self) -> int:  # type: ignore[override]
        return self.setting.num_classes

    def observe(self, batch: Batch) -> StepOutput:
        logits = self.net(batch.x)
        ce = F.cross_entropy(logits, batch.y)
        terms = {"ce": ce.detach()}
        loss = ce
        groups = {"stream": ce}
        if len(self.buffer):
            replay = self.replay_loss(terms)
            loss = loss + replay
            groups["buffer"] = replay
        self.buffer.add_reservoir(
            batch.x_raw, batch.y, logits.detach(), task_labels=batch.task, generator=self.generator
        )
        return StepOutput(loss, terms, groups)

    def replay_loss(self, terms: dict[str, Tensor]) -> Tensor:
        """The buffer terms of the step (logged into ``terms``)."""
        sample = self.buffer.sample(self.config.minibatch_size, self.generator)
        assert sample.logits is not None
        outputs = self.net(self.transforms.train(sample.examples, self.generator))
        der = self.config.alpha * logit_matching_loss(outputs, sample.logits)
        terms["der"] = der.detach()
        return der
