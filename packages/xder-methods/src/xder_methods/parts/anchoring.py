"""Fine-tuning with each parameter anchored to its value at the last task's end by a weighted
quadratic penalty (oEWC, SI): the penalty and the base class of the methods that train with it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from xder_methods.core.base import ConfigT, MethodBase
from xder_methods.core.protocols import Batch, ContinualSetting, StepOutput, Transforms
from xder_methods.parts.gradients import flat_parameters
from xder_methods.parts.losses import seen_class_cross_entropy

__all__ = ["AnchoredFineTuning", "quadratic_penalty"]


def quadratic_penalty(params: Tensor, anchors: Tensor, weights: Tensor, strength: float) -> Tensor:
    """``strength * sum_i w_i (theta_i - theta*_i) ** 2`` (no factor 1/2).

    Args:
        params: (P,) current parameters ``theta`` (gradient flows through them).
        anchors: (P,) ``theta*`` (constants).
        weights: (P,) ``w`` (constants).

    Returns:
        () scalar.
    """
    return strength * (weights * (params - anchors).pow(2)).sum()


class AnchoredFineTuning(MethodBase[ConfigT]):
    """Fine-tuning with a quadratic penalty that anchors each parameter (oEWC, SI). Each step::

        loss = CE_seen(f(x), y) + strength * sum_i w_i (theta_i - theta*_i) ** 2

    ``CE_seen``: FT's cross-entropy, one softmax over the classes seen so far; the penalty from
    task 1 on (the weights are zero until the first task ends). ``theta*`` (``anchors``) is a
    flat buffer over ``net.parameters()``, the network's initial parameters until a subclass moves
    it; the subclass gives ``w`` and ``strength`` (:meth:`penalty_weights`)."""

    anchors: Tensor

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: ConfigT,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.register_buffer("anchors", flat_parameters(net.parameters()).detach().clone())

    def penalty_weights(self) -> tuple[Tensor, float]:
        """``(w, strength)``: the (P,) weights of the penalty and its strength."""
        raise NotImplementedError

    def observe(self, batch: Batch) -> StepOutput:
        ce = seen_class_cross_entropy(self.net(batch.x), batch.y, self.seen_classes(batch.task))
        if batch.task == 0:  # the weights are zero until the first task ends: the penalty would be 0
            return StepOutput(ce, {"ce": ce.detach()})
        weights, strength = self.penalty_weights()
        penalty = quadratic_penalty(flat_parameters(self.net.parameters()), self.anchors, weights, strength)
        return StepOutput(ce + penalty, {"ce": ce.detach(), "penalty": penalty.detach()})
