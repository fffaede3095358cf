"""A method's own training passes (LwF's warm-up, BiC's bias stage, LUCIR's fine-tuning, GDumb's
fit, HAL's anchors): the one function they all train through, under the run's step policy."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import torch
from torch import Tensor

from xder_methods.core.protocols import StepPolicy
from xder_methods.core.schedule import autocast, begin_step

__all__ = ["train_passes"]

T = TypeVar("T")


def train_passes(
    batches: Iterable[T],
    loss: Callable[[T], Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    policy: StepPolicy,
    device: torch.device,
    before_step: Callable[[], None] | None = None,
) -> int:
    """Train through ``optimizer`` on each item of ``batches``, as the loop takes a step: mark the
    step's start for a network compiled into CUDA graphs (:func:`~xder_methods.core.schedule.
    begin_step`), compute ``loss(batch)`` under the run's precision
    (:func:`~xder_methods.core.schedule.autocast` on ``device``), then zero the gradients,
    back-propagate, call ``before_step`` (e.g. clip the gradients) and step. Gradients are on
    whatever the caller's mode (a pass inside ``torch.no_grad`` trains too).

    ``batches`` is read lazily, one item a step: a generator that draws a permutation or sets the
    learning rate when an epoch's first batch is asked for does so after the previous step.

    Args:
        batches: what each step trains on (row indices, or anything ``loss`` takes).
        loss: the step's loss, a scalar with a graph to the optimised tensors.
        optimizer: the pass's own optimiser (not the loop's).
        policy: the method's :attr:`~xder_methods.MethodBase.step_policy` (the run's).
        device: where the pass computes (the method's device).
        before_step: called between the backward pass and the optimiser step.

    Returns:
        The number of steps taken.
    """
    steps = 0
    with torch.enable_grad():
        for batch in batches:
            begin_step(policy)
            with autocast(policy.precision, device):
                value = loss(batch)
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            if before_step is not None:
                before_step()
            optimizer.step()
            steps += 1
    return steps
