"""Parameters and gradients as one flat vector: the form in which GEM and A-GEM compare and
project gradients, and oEWC and SI weigh and anchor parameters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

__all__ = ["assign_gradients", "flat_parameters", "flatten_gradients"]


def flat_parameters(parameters: Iterable[Tensor]) -> Tensor:
    """All of ``parameters`` as one (P,) vector, each in its logical (row-major) order, whatever
    its memory format (a channels-last weight is copied, not viewed). Keeps the graph."""
    return torch.cat([p.reshape(-1) for p in parameters])


def flatten_gradients(parameters: Sequence[nn.Parameter], gradients: Sequence[Tensor | None]) -> Tensor:
    """The gradients of ``parameters`` concatenated in their order, one ``(P,)`` vector,
    ``P = sum(p.numel())``; a missing gradient (None: the parameter took no part in the loss)
    counts as zeros, so that every vector of the same parameters has the same layout."""
    parts = [
        torch.zeros(p.numel(), dtype=p.dtype, device=p.device) if g is None else g.reshape(-1)
        for p, g in zip(parameters, gradients, strict=True)
    ]
    return torch.cat(parts)


def assign_gradients(parameters: Sequence[nn.Parameter], flat: Tensor) -> None:
    """Copy the ``(P,)`` vector ``flat`` (the layout of :func:`flatten_gradients`) into the
    parameters' ``.grad``, in place. A parameter whose ``.grad`` is None keeps None (it took no
    part in the step's loss; the optimiser leaves it alone), as in the authors' code."""
    start = 0
    for p in parameters:
        end = start + p.numel()
        if p.grad is not None:
            p.grad.copy_(flat[start:end].view_as(p.grad))
        start = end
