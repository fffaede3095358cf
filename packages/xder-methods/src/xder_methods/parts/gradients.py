"""Parameters and gradients as one flat vector: the form in which GEM and A-GEM compare and
project gradients, and oEWC and SI weigh and anchor parameters; per-example gradients (oEWC's
Fisher, GSS's scores)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

__all__ = ["assign_gradients", "flat_parameters", "flatten_gradients", "per_example_gradients"]


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


def per_example_gradients(
    net: nn.Module,
    objective: Callable[[Tensor, Tensor], Tensor],
    x: Tensor,
    y: Tensor,
    *,
    trainable_only: bool = False,
) -> tuple[dict[str, Tensor], Tensor]:
    """The gradient of each item's ``objective(net(x_i[None]), y_i[None])`` (logits ``(1, C)``
    and label ``(1,)`` to a scalar) with respect to ``net``'s parameters, at their current values.

    One vectorised pass (``torch.func.vmap`` of ``grad`` over items, ``functional_call``): each
    item is its own batch of one, through ``net`` in the mode it is in (call it in eval mode:
    BatchNorm in train mode would normalise each item with its own statistics). No gradient
    reaches ``net``'s ``.grad``.

    Args:
        x: (N, ...) network inputs. y: (N,) int64 labels.
        trainable_only: differentiate only the parameters with ``requires_grad`` (the others
            are constants and absent from the result); by default all of them.

    Returns:
        ``({name: (N, *param.shape)}, (N,) the items' objective values, without gradient)``, the names in
        ``net.named_parameters()`` order.

    Raises:
        ValueError: ``net`` holds a module under two names (e.g. a layer both an attribute and an
            entry of a Sequential): ``functional_call`` would leave it new parameter objects.
    """
    if len(list(net.named_modules(remove_duplicate=False))) != len(list(net.named_modules())):
        raise ValueError(
            "per-example gradients need each module of the network registered once: a module "
            "reachable under two names comes back from torch.func.functional_call with new "
            "parameters, which the optimiser no longer holds"
        )
    params = {name: p.detach() for name, p in net.named_parameters() if p.requires_grad or not trainable_only}
    constants = {name: p.detach() for name, p in net.named_parameters() if name not in params}
    constants.update(net.named_buffers())

    def item_objective(params: dict[str, Tensor], x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        value = objective(functional_call(net, {**params, **constants}, (x.unsqueeze(0),)), y.unsqueeze(0))
        return value, value

    grads, values = vmap(grad(item_objective, has_aux=True), in_dims=(None, 0, 0))(params, x, y)
    return grads, values
