"""SI (``si``): Synaptic Intelligence (Zenke, Poole & Ganguli, "Continual Learning Through Synaptic
Intelligence", ICML 2017)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from xder_methods.core.errors import check_settings
from xder_methods.core.protocols import ContinualSetting, Scenario, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.anchoring import AnchoredFineTuning, quadratic_penalty
from xder_methods.parts.gradients import flat_parameters, flatten_gradients

__all__ = ["SI", "SIConfig", "path_contribution", "si_importance", "si_penalty"]

PathGradient = Literal["total", "task"]


@dataclass(frozen=True, kw_only=True)
class SIConfig:
    """Attributes:
    c: weight of the surrogate loss (0.5: the DER paper's choice for Split CIFAR-10, mammoth
        ``utils/best_args.py``, ``seq-cifar10`` / ``si`` / ``c``; the protocol there is lr 0.03,
        batch 32, 50 epochs, no momentum or weight decay).
    xi: damping of the importance's denominator, ``(Delta theta) ** 2 + xi`` (1.0: same table,
        ``xi``); > 0, so that a parameter that never moved gets importance 0, not 0 / 0.
    path_gradient: the gradient in the path integral ``omega += -g * Delta theta``: ``total``
        (default; the gradient the optimiser steps with, surrogate term and clipping included:
        under plain SGD exactly the authors' code's ``lr * g ** 2``) or ``task`` (the paper's: the
        gradient of the cross-entropy alone, unclipped).
    grad_clip: every gradient entry clipped to ``[-grad_clip, grad_clip]`` before the step (1.0:
        the authors' code clips by value 1; ``inf`` turns it off, as in the paper).
    """

    c: float = 0.5
    xi: float = 1.0
    path_gradient: PathGradient = "total"
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        checks = [
            (self.c >= 0, f"method.c must be >= 0, got {self.c}"),
            (self.xi > 0, f"method.xi must be > 0, got {self.xi}"),
            (
                self.path_gradient in ("total", "task"),
                f"method.path_gradient must be total or task, got {self.path_gradient!r}",
            ),
            (self.grad_clip > 0, f"method.grad_clip must be > 0 (inf: no clipping), got {self.grad_clip}"),
        ]
        check_settings(checks)


# ---------------------------------------------------------------------------------------------
# Pure functions


def path_contribution(gradient: Tensor, before: Tensor, after: Tensor) -> Tensor:
    """One step's term of the path integral (paper Eq. 3, discretised): ``-g * (after - before)``,
    each parameter's share of the loss decrease of the step, to first order.

    Args:
        gradient: (P,) the gradient at ``before``.
        before: (P,) the parameters before the optimiser step.
        after: (P,) the parameters after it (any optimiser: the actual change, momentum and
            weight decay included).

    Returns:
        (P,) the step's contribution to ``omega``.
    """
    return -gradient * (after - before)


def si_importance(omega: Tensor, delta: Tensor, xi: float) -> Tensor:
    """A task's per-parameter importance (paper Eq. 5): ``omega / (delta ** 2 + xi)``.

    Args:
        omega: (P,) the path integral accumulated over the task.
        delta: (P,) the parameters' total change over the task, ``theta_end - theta_start``.
        xi: damping (> 0).

    Returns:
        (P,) to add to the running importance ``Omega``.
    """
    return omega / (delta.pow(2) + xi)


def si_penalty(params: Tensor, anchors: Tensor, importance: Tensor, c: float) -> Tensor:
    """The surrogate loss ``c * sum_k Omega_k (theta_k - theta*_k) ** 2`` (paper Eq. 4):
    :func:`quadratic_penalty` weighted by the importance.

    Args:
        params: (P,) current parameters (gradient flows through them).
        anchors: (P,) ``theta*``, the parameters at the end of the last task (constants).
        importance: (P,) ``Omega`` (constants).

    Returns:
        () scalar.
    """
    return quadratic_penalty(params, anchors, importance, c)


# ---------------------------------------------------------------------------------------------
# The method


@register_method("si", SIConfig)
class SI(AnchoredFineTuning[SIConfig]):
    """Synaptic Intelligence (Zenke, Poole & Ganguli, ICML 2017): fine-tuning with a quadratic
    surrogate loss anchoring each parameter to its value at the last task's end, weighted by how
    much the parameter's own movement lowered the loss along the past tasks' training paths. No
    memory of past data.

    Each step (``g``: the step's gradient, see ``path_gradient``; ``Delta``: the actual change
    the optimiser made)::

        loss = CE_seen(f(x), y) + c * sum_k Omega_k (theta_k - theta*_k) ** 2
        omega_k += -g_k * Delta_k

    At each task's end: ``Omega += omega / ((theta - theta*) ** 2 + xi)``, then ``theta* <- theta``
    and ``omega <- 0``. ``theta*`` starts as the network's initial parameters (the first task's
    start). ``CE_seen`` is FT's (:class:`~xder_methods.methods.sgd.SGD`): one softmax over the classes seen
    so far. The step's loss is :class:`~xder_methods.parts.anchoring.AnchoredFineTuning`'s, with
    ``w = Omega``. The gradient and the parameters are read around the loop's optimiser step
    (:meth:`after_backward`, :meth:`after_step`); no host synchronisation.

    Checked against the paper and the authors' code (mammoth ``models/si.py``, the DER paper's
    runs); point by point:

    * Path integral: the paper (Eq. 3) sums ``-g * Delta theta`` with ``g`` the gradient of the
      task's own loss, the surrogate term excluded; mammoth adds ``lr * g ** 2`` with ``g`` the
      gradient of the total loss (surrogate included) after clipping, which equals
      ``-g * Delta theta`` only for plain SGD at a fixed lr. Followed: ``-g * Delta theta`` with
      the ACTUAL change (exact for any optimiser, momentum and weight decay included), and by
      default mammoth's gradient (``path_gradient="total"``), since the DER paper's ``c`` was tuned
      with it and it never makes a step's term negative under plain SGD; ``path_gradient="task"``
      is the paper's (the surrogate's gradient ``2 c Omega (theta - theta*)``, known in closed
      form, is subtracted from the step's gradient: no second backward pass). Under the DER
      paper's protocol (plain SGD, constant lr) the default is mammoth's computation exactly.
    * Gradient clipping: mammoth clips every gradient entry to [-1, 1] before the step; the paper
      does not. Followed: mammoth (``grad_clip = 1.0``; ``inf`` for the paper), a training-
      protocol detail behind the DER paper's numbers.
    * Surrogate form: both write ``c * sum Omega (theta - theta*) ** 2`` (no 1/2), and both
      accumulate ``Omega`` over tasks without decay.
    * Cross-entropy span: mammoth's spans all outputs (future classes included); here the classes
      seen so far, as FT's (docs/methods.md, "What the competitors compute").
    * State: ``omega``, ``Omega`` and ``theta*`` are flat buffers over ``net.parameters()``
      (mammoth's ``get_params`` order), so checkpoints, mid-task included, carry them.

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): the path integral is consolidated into the penalty at each
    task's end, which a general stream never has.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": (
            "it consolidates its path integral into the penalty at each task's end, and a general"
            " stream has no task ends"
        ),
    }

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: SIConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.register_buffer("omega", torch.zeros_like(self.anchors))
        self.register_buffer("importance", torch.zeros_like(self.anchors))
        # One step's gradient and starting point, from after_backward to after_step (not state:
        # a checkpoint is taken between steps).
        self._step_gradient: Tensor | None = None
        self._step_start: Tensor | None = None

    omega: Tensor
    importance: Tensor

    def penalty_weights(self) -> tuple[Tensor, float]:
        return self.importance, self.config.c

    def _gradient(self) -> Tensor:
        params = list(self.net.parameters())
        return flatten_gradients(params, [p.grad for p in params])

    @torch.no_grad()
    def after_backward(self) -> None:
        theta = flat_parameters(self.net.parameters())
        task_gradient = None
        if self.config.path_gradient == "task":  # read before clipping: the task loss's own gradient
            task_gradient = self._gradient()
            if self.current_task > 0:  # minus the surrogate's, 2 c Omega (theta - theta*)
                task_gradient -= 2 * self.config.c * self.importance * (theta - self.anchors)
        if math.isfinite(self.config.grad_clip):
            torch.nn.utils.clip_grad_value_(self.net.parameters(), self.config.grad_clip)
        self._step_gradient = self._gradient() if task_gradient is None else task_gradient
        self._step_start = theta

    @torch.no_grad()
    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._step_gradient is None or self._step_start is None:
            raise RuntimeError("SI.after_step without after_backward: the step's gradient is missing")
        after = flat_parameters(self.net.parameters())
        self.omega += path_contribution(self._step_gradient, self._step_start, after)
        self._step_gradient = self._step_start = None

    @torch.no_grad()
    def end_task(self, task: int, data: TaskData) -> None:
        theta = flat_parameters(self.net.parameters())
        self.importance += si_importance(self.omega, theta - self.anchors, self.config.xi)
        self.anchors.copy_(theta)
        self.omega.zero_()
