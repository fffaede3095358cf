"""``er_balanced``: Experience Replay with a class-balanced replay sampler.

ER (``xder_methods.ER``) draws its replay minibatch uniformly from the buffer, so classes that
fill more of the reservoir are replayed more. Here each stored item is drawn with probability
proportional to ``count(class)^-power`` (without replacement): ``power = 1`` replays every class
equally often in expectation, ``power = 0`` is plain ER. Everything else (reservoir insertion,
one cross-entropy over the joined batch) is ER's.

A plugin module: importing it registers the method (``xder-run --plugin path/to/methods.py``, or
the ``xder.methods`` entry point of this package). It uses only the public API of xder-methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods import ER, Batch, MethodConfigError, ReplayConfig, StepOutput, register_method

__all__ = ["ERBalanced", "ERBalancedConfig", "balanced_replay_weights"]


@dataclass(frozen=True, kw_only=True)
class ERBalancedConfig(ReplayConfig):
    """ER's settings plus ``power``: the exponent of the inverse class frequency of the sampler."""

    power: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.power < 0:
            raise MethodConfigError(f"method.power must be >= 0, got {self.power}")


def balanced_replay_weights(labels: Tensor, num_classes: int, power: float) -> Tensor:
    """(N,) sampling weight of each stored item: ``count(its class)^-power``."""
    counts = torch.bincount(labels, minlength=num_classes).to(torch.float32)
    return counts[labels].pow(-power)


@register_method("er_balanced", ERBalancedConfig)
class ERBalanced(ER):
    """ER with the class-balanced replay sampler of the module docstring."""

    def observe(self, batch: Batch) -> StepOutput:
        x, y = batch.x, batch.y
        size = len(self.buffer)
        if size:
            weights = balanced_replay_weights(
                self.buffer.labels[:size], self.setting.num_classes, self.config.power
            )
            k = min(self.config.minibatch_size, size)
            index = torch.multinomial(weights, k, replacement=False, generator=self.generator)
            sample = self.buffer.gather(index)
            x = torch.cat([x, self.transforms.train(sample.examples, self.generator)])
            y = torch.cat([y, sample.labels])
        loss = F.cross_entropy(self.net(x), y)
        self.store(batch)
        return StepOutput(loss, {"ce": loss.detach()})
