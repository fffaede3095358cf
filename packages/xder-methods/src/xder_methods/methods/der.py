"""DER (``der``): Dark Experience Replay (Buzzega et al., NeurIPS 2020; X-DER paper Eq. 5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.protocols import Batch, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.methods.er import ER
from xder_methods.parts.buffer import BufferSample
from xder_methods.parts.losses import logit_matching_loss
from xder_methods.parts.replay import DarkReplayConfig, forward_parts

__all__ = ["DER", "DERConfig"]


@dataclass(frozen=True, kw_only=True)
class DERConfig(DarkReplayConfig):
    """Attributes:
    alpha: weight of the logit-matching term (0.3: paper App. "Hyperparameter Choice", Split
        CIFAR-100, M = 500 and 2000).
    replay_forward: ``separate`` (the authors' code), ``joint`` or ``grouped`` (the authors'
        computation in one pass) forward passes of the stream and buffer batches (see
        :class:`~xder_methods.parts.replay.DarkReplayConfig`).
    """

    alpha: float = 0.3


DERConfigT = TypeVar("DERConfigT", bound=DERConfig)


@register_method("der", DERConfig)
class DER(ER[DERConfigT]):
    """Dark Experience Replay: cross-entropy on the stream plus ``alpha`` times the mean squared
    error between the current and the stored logits of a buffer batch.

    The buffer (reservoir) stores each stream example unaugmented with the logits of its
    augmented view, computed in the same forward pass as the loss. Cross-entropy spans all
    outputs, future heads included, as in the authors' code. The squared error is averaged over
    classes as well as items (``F.mse_loss``; see :func:`logit_matching_loss`). The stream and
    buffer batches go through the network one pass each, as in the authors' code, or as one
    concatenated pass with ``replay_forward="joint"`` (BatchNorm over them together) or
    ``"grouped"`` (BatchNorm per batch: the authors' computation).
    """

    @property
    def stored_logits(self) -> int:  # type: ignore[override]
        return self.setting.num_classes

    replay_batches = 1
    """Independent buffer batches a step draws (DER: one, for the logit matching)."""

    graph_key = ER.graph_key  # replayable as ER's step: at a fixed buffer size

    def observe(self, batch: Batch) -> StepOutput:
        samples, views = [], []
        if len(self.buffer):
            for _ in range(self.replay_batches):
                sample = self.buffer.sample(self.config.minibatch_size, self.generator)
                samples.append(sample)
                views.append(self.transforms.train(sample.examples, self.generator))
        logits, *outputs = forward_parts(self.net, [batch.x, *views], self.config.replay_forward)
        ce = self.stream_loss(logits, batch)
        terms = {"ce": ce.detach()}
        loss = ce
        groups = {"stream": ce}
        if samples:
            replay = self.replay_loss(samples, outputs, terms)
            loss = loss + replay
            groups["buffer"] = replay
        self.buffer.add_reservoir(
            batch.x_raw, batch.y, logits.detach(), task_labels=batch.task, generator=self.generator
        )
        return StepOutput(loss, terms, groups)

    def stream_loss(self, logits: Tensor, batch: Batch) -> Tensor:
        """The stream term: cross-entropy over all outputs."""
        return F.cross_entropy(logits, batch.y)

    def replay_loss(
        self, samples: list[BufferSample], outputs: list[Tensor], terms: dict[str, Tensor]
    ) -> Tensor:
        """The buffer terms of the step (logged into ``terms``), given the ``replay_batches``
        buffer samples and the network's outputs on their augmented views."""
        assert samples[0].logits is not None
        der = self.config.alpha * logit_matching_loss(outputs[0], samples[0].logits)
        terms["der"] = der.detach()
        return der
