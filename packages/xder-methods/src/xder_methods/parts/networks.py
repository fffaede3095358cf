"""Network helpers: frozen copies, BatchNorm statistics left untouched or kept per part of a
batch, features in eval mode."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import cast

import torch
from torch import Tensor, nn

from xder_methods.core.protocols import Backbone, Transform
from xder_methods.parts.losses import at_least_float32

__all__ = ["batchnorm_per_part", "eval_features", "frozen_batchnorm_stats", "frozen_copy"]


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


class _PartForward:
    """A BatchNorm layer's forward over the concatenation of parts: the layer's own forward on
    each part in order (``frozen`` parts without touching the running statistics), the results
    concatenated. In eval mode, the layer's own forward on the whole."""

    def __init__(self, layer: nn.modules.batchnorm._BatchNorm) -> None:
        self.layer = layer
        self.sizes: list[int] = []
        self.frozen: list[bool] = []

    def __call__(self, x: Tensor) -> Tensor:
        layer, forward = self.layer, type(self.layer).forward
        if not layer.training:
            return forward(layer, x)
        tracking = layer.track_running_stats
        outputs = []
        for i, part in enumerate(x.split(self.sizes)):
            layer.track_running_stats = tracking and not self.frozen[i]
            try:
                outputs.append(forward(layer, part))
            finally:
                layer.track_running_stats = tracking
        return torch.cat(outputs)


_PART_FORWARD = "_xder_part_forward"  # where a BatchNorm layer keeps its _PartForward


@contextlib.contextmanager
def batchnorm_per_part(module: nn.Module, sizes: Sequence[int], frozen: Sequence[bool]) -> Iterator[None]:
    """Inside the block, a pass of ``module`` over the concatenation of parts of ``sizes`` rows
    (in order) computes what one pass per part computes: every BatchNorm layer in train mode
    normalises each part with that part's own batch statistics and updates its running
    statistics part after part, but not for the parts whose ``frozen`` flag is set (as under
    :func:`frozen_batchnorm_stats`); every other layer runs once over all the rows.

    The outputs and running statistics are those of the separate passes (to the bit on a CPU,
    where a convolution's result for a row does not depend on the batch around it); the
    gradients differ by the order in which their sums are rounded. Exact only for networks whose
    BatchNorm layers are their only layers that mix rows (dropout draws its random numbers in
    another order). It is meant for a GPU (one pass of large kernels where the separate passes
    make several of small ones; not measured there yet); on a CPU it is slower."""
    sizes, flags = list(sizes), list(frozen)
    if len(flags) != len(sizes):
        raise ValueError(f"batchnorm_per_part: {len(sizes)} parts but {len(flags)} frozen flags")
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.__dict__.get("forward") for m in layers]
    for m in layers:
        # One forward object per layer, kept on it and reused from step to step: a compiled
        # network (torch.compile) then meets the same object with the same sizes, not a new one
        # to compile again each step.
        part_forward = m.__dict__.get(_PART_FORWARD)
        if not isinstance(part_forward, _PartForward):
            part_forward = _PartForward(m)
            m.__dict__[_PART_FORWARD] = part_forward
        part_forward.sizes, part_forward.frozen = sizes, flags
        m.forward = part_forward  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        for m, previous in zip(layers, saved, strict=True):
            if previous is None:
                del m.forward
            else:
                m.forward = previous  # type: ignore[method-assign]


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
