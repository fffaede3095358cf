"""Network helpers: frozen copies, BatchNorm statistics left untouched, features in eval mode."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import cast

import torch
from torch import Tensor, nn

from xder_methods.core.protocols import Backbone, Transform
from xder_methods.parts.losses import at_least_float32

__all__ = ["eval_features", "frozen_batchnorm_stats", "frozen_copy"]


@contextlib.contextmanager
def frozen_batchnorm_stats(module: nn.Module) -> Iterator[None]:
    """Inside the block, BatchNorm layers in train mode normalise with the batch statistics but
    leave their running statistics (and ``num_batches_tracked``) untouched."""
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.track_running_stats for m in layers]
    for m in layers:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m, value in zip(layers, saved, strict=True):
            m.track_running_stats = value


def frozen_copy(net: nn.Module, finetune: Callable[[nn.Module], object] | None = None) -> nn.Module:
    """A copy of ``net`` in eval mode whose parameters need no gradient (a teacher).

    ``finetune``, if given, first trains the copy: it is called with the copy in train mode,
    its parameters as trainable as ``net``'s (HAL's fine-tuned estimate of the future network)."""
    teacher = copy.deepcopy(net)
    if finetune is not None:
        finetune(teacher.train(True))
    teacher.requires_grad_(False)
    return teacher.train(False)


def eval_features(net: nn.Module, x_raw: Tensor, transform: Transform, batch_size: int) -> Tensor:
    """(N, D) ``net.forward_features`` of ``transform(x_raw)`` in eval mode (the mode is restored)."""
    with torch.no_grad():
        backbone = cast(Backbone, net)  # a method's network is a Backbone (not checkable on nn.Module)
        was_training = net.training
        net.train(False)
        try:
            chunks = [
                at_least_float32(
                    backbone.forward_features(transform(x_raw[start : start + batch_size])).flatten(1)
                )
                for start in range(0, x_raw.shape[0], batch_size)
            ]
        finally:
            net.train(was_training)
        if not chunks:
            return torch.zeros(0, getattr(net, "num_features", 0), device=x_raw.device)
        return torch.cat(chunks)
