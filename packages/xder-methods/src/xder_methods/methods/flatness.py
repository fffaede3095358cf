"""Flatness regularisers LFR and LLR, and ``er_flat``: the X-DER paper's "stable regime" study.

X-DER paper Sec. 6.2 ("The effectiveness of flat minima in Continual Learning"): on a sequence of
two tasks, the network is trained on the first with cross-entropy plus a loss-surface regulariser
(the *stable regime*), then Experience Replay learns the second, and the accuracy retained on the
first task is compared with the *plastic regime* (plain SGD on the first task, then ER). The two
regularisers, both built on an adversarial point in an l_inf ball of radius ``epsilon`` around
each input, found by ``steps`` signed-gradient ascent steps of size ``step_size`` (projected on
the ball) from a uniform random start drawn from an explicit generator:

- LFR, Local Flatness Regularizer (Xu, Li, Jiang, Xia, "Adversarial Defense via Local Flatness
  Regularization", ICIP 2020): the local flatness ``max_{||d||_inf <= eps} ||grad_x l(x + d)||_1``
  (the l1 norm is the dual of the l_inf ball); the malign point maximises the gradient norm and
  the regulariser is the gradient's l1 norm there (:func:`local_flatness`).
- LLR, Local Linearity Regularizer (Qin et al., "Adversarial Robustness through Local
  Linearization", NeurIPS 2019): the error of the first-order Taylor approximation
  ``g(d; x) = |l(x + d) - l(x) - d^T grad_x l(x)|``, maximised over the ball (``d_LL``), plus the
  gradient-alignment term ``|d_LL^T grad_x l(x)|``; Qin et al. minimise
  ``l(x) + lambda * g(d_LL; x) + mu * |d_LL^T grad_x l(x)|`` (:func:`local_linearity`).

Both regularisers are differentiable in the model's parameters (double back-propagation through
the input gradient); the adversarial point itself is a constant. Values are means over the batch
of per-example quantities, the input gradient of example i being that of its own loss l_i.

``er_flat`` (:class:`ERFlat`) trains task 0 with ``CE + mu * regulariser`` on the stream only
(the paper's "plain SGD" on the first task, filling the reservoir buffer as ER does, but not
replaying it) and every later task with plain ER. ``regulariser="none"`` is the plastic-regime
baseline.

Hyperparameters (the X-DER paper lists none for this study; our choices and their sources):

- LFR weight ``mu = 0.03``: the weight of the LFR authors' CIFAR-10 training command (their
  public code, ``--lambada 0.03``).
- LLR weights: ``mu = 4`` and ``llr_alignment = 0.75``, so that ``mu * (g + 0.75 * |d^T grad|)``
  equals Qin et al.'s CIFAR-10 ``lambda = 4``, ``mu = 3``.
- ``epsilon = 8/255``: the radius both papers use on CIFAR-10 (l_inf). Deviation: it is applied
  to the network's input, which here is normalised by the benchmark's mean/std, so it is about
  ``8/255 * std`` in pixel units (~2/255 on CIFAR); the malign point is not clipped to the
  valid pixel range.
- ``steps = 5`` with ``step_size = 2.5 * epsilon / steps`` (the usual PGD rule of thumb: a total
  travel of 2.5 epsilon): our choice, to keep the first task affordable (each LFR step costs a
  double backward pass); Qin et al. start from a uniform random point in the ball, as we do.
- The inner maximisation and the regulariser's forward passes run with BatchNorm in train mode
  but its running statistics frozen (the clean cross-entropy updates them once per step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.errors import check_settings
from xder_methods.core.protocols import Batch, Scenario, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.methods.er import ER
from xder_methods.parts.networks import frozen_batchnorm_stats
from xder_methods.parts.replay import ReplayConfig

__all__ = ["ERFlat", "ERFlatConfig", "local_flatness", "local_linearity"]

LossOfInputs = Callable[[Tensor], Tensor]
"""Maps inputs (B, ...) to per-example losses (B,)."""

DEFAULT_MU = {"lfr": 0.03, "llr": 4.0, "none": 0.0}


def _start(x: Tensor, epsilon: float, generator: torch.Generator | None) -> Tensor:
    """Uniform in the l_inf ball from ``generator``; the centre (zero) without one."""
    if generator is None:
        return torch.zeros_like(x)
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return (2.0 * u - 1.0) * epsilon


def _input_gradient(loss_fn: LossOfInputs, x: Tensor, create_graph: bool) -> tuple[Tensor, Tensor]:
    """Per-example losses (B,) at ``x`` and their input gradients (B, ...) (zeros where the loss
    does not depend on the input)."""
    x = x.detach().requires_grad_(True)
    losses = loss_fn(x)
    if not losses.requires_grad:
        return losses, torch.zeros_like(x)
    (grad,) = torch.autograd.grad(losses.sum(), x, create_graph=create_graph, allow_unused=True)
    return losses, torch.zeros_like(x) if grad is None else grad


def _ascend(objective: Tensor, delta: Tensor, step_size: float, epsilon: float) -> Tensor:
    """One signed-gradient ascent step on ``objective`` w.r.t. ``delta``, projected on the ball."""
    if not objective.requires_grad:  # constant in delta: nowhere to go
        return delta.detach()
    (grad,) = torch.autograd.grad(objective, delta, allow_unused=True)
    if grad is None:
        return delta.detach()
    return (delta.detach() + step_size * grad.sign()).clamp(-epsilon, epsilon)


def local_flatness(
    loss_fn: LossOfInputs,
    x: Tensor,
    *,
    epsilon: float,
    steps: int,
    step_size: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """LFR (Xu et al., ICIP 2020): ``mean_i ||grad_x l_i(x_i + d_i)||_1`` at the malign point
    ``d_i = argmax_{||d||_inf <= epsilon} ||grad_x l_i(x_i + d)||_1`` (``steps`` signed ascent
    steps from a uniform start drawn from ``generator``, or from ``d = 0`` without one).

    Args:
        loss_fn: inputs (B, ...) -> per-example losses (B,), differentiable in the inputs (and in
            the model's parameters, which receive the regulariser's gradient).
        x: (B, ...) inputs (not modified; no gradient flows to them).
        epsilon: radius of the l_inf ball.
        steps: ascent steps (0: evaluate at the start point).
        step_size: size of each signed step.
        generator: source of the random start.

    Returns:
        A scalar, differentiable in the parameters of ``loss_fn``.
    """
    x = x.detach()
    delta = _start(x, epsilon, generator)
    for _ in range(steps):
        delta.requires_grad_(True)
        losses = loss_fn(x + delta)
        if not losses.requires_grad:  # the loss does not depend on the input: all points are alike
            break
        (grad,) = torch.autograd.grad(losses.sum(), delta, create_graph=True, allow_unused=True)
        if grad is None:
            break
        delta = _ascend(grad.abs().sum(), delta, step_size, epsilon)
    _, grad = _input_gradient(loss_fn, x + delta.detach(), create_graph=True)
    return grad.flatten(1).abs().sum(dim=1).mean()


def local_linearity(
    loss_fn: LossOfInputs,
    x: Tensor,
    *,
    epsilon: float,
    steps: int,
    step_size: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """LLR (Qin et al., NeurIPS 2019): the local linearity measure and the gradient alignment.

    With ``g(d; x) = |l(x + d) - l(x) - d^T grad_x l(x)|`` per example, ``d_LL`` maximises ``g``
    over the l_inf ball of radius ``epsilon`` (``steps`` signed ascent steps from a uniform
    start drawn from ``generator``; ``l(x)`` and its gradient are constants of the search).
    Without a generator the search starts at ``d = 0``, where the gradient of ``g`` vanishes for a
    smooth loss: pass one for training.

    Args:
        loss_fn: inputs (B, ...) -> per-example losses (B,).
        x: (B, ...) inputs (not modified).
        epsilon: the inner maximisation's radius, as in :func:`local_flatness`.
        steps: the inner maximisation's ascent steps, as in :func:`local_flatness`.
        step_size: the inner maximisation's step size, as in :func:`local_flatness`.
        generator: the inner maximisation's random start, as in :func:`local_flatness`.

    Returns:
        ``(gamma, alignment)``: the batch means of ``g(d_LL; x)`` and ``|d_LL^T grad_x l(x)|``,
        both differentiable in the parameters of ``loss_fn`` (Qin et al. weigh them by lambda
        and mu).
    """
    x = x.detach()
    clean, grad = _input_gradient(loss_fn, x, create_graph=True)
    clean_const, grad_const = clean.detach(), grad.detach()

    def taylor_error(delta: Tensor, value: Tensor, slope: Tensor) -> Tensor:
        return (loss_fn(x + delta) - value - (delta * slope).flatten(1).sum(dim=1)).abs()

    delta = _start(x, epsilon, generator)
    for _ in range(steps):
        delta.requires_grad_(True)
        delta = _ascend(taylor_error(delta, clean_const, grad_const).sum(), delta, step_size, epsilon)
    delta = delta.detach()
    gamma = taylor_error(delta, clean, grad).mean()
    alignment = (delta * grad).flatten(1).sum(dim=1).abs().mean()
    return gamma, alignment


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ERFlatConfig(ReplayConfig):
    """ER with a flatness regulariser on the first task (X-DER paper Sec. 6.2). The X-DER paper
    lists no hyperparameters for this study: the sources of these are in the module docstring.

    Attributes:
        buffer_size, minibatch_size: ER's (500 and 32, Split CIFAR-100).
        regulariser: ``lfr``, ``llr`` or ``none`` (the plastic-regime baseline).
        mu: weight of the regulariser on task 0; None: 0.03 for LFR (Xu et al.), 4 for LLR
            (Qin et al.'s lambda).
        llr_alignment: LLR's gradient-alignment weight relative to its Taylor error (0.75 = Qin
            et al.'s mu = 3 over lambda = 4).
        epsilon: l_inf radius in network-input units (8/255, both papers on CIFAR-10).
        steps: ascent steps of the inner maximisation (5, our choice).
        step_size: size of each step; None: ``2.5 * epsilon / steps``.
    """

    regulariser: Literal["lfr", "llr", "none"] = "lfr"
    mu: float | None = None
    llr_alignment: float = 0.75
    epsilon: float = 8 / 255
    steps: int = 5
    step_size: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            (
                self.regulariser in ("lfr", "llr", "none"),
                f"method.regulariser must be lfr, llr or none, got {self.regulariser!r}",
            ),
            (self.mu is None or self.mu >= 0, f"method.mu must be >= 0, got {self.mu}"),
            (self.llr_alignment >= 0, f"method.llr_alignment must be >= 0, got {self.llr_alignment}"),
            (self.epsilon > 0, f"method.epsilon must be > 0, got {self.epsilon}"),
            (self.steps >= 0, f"method.steps must be >= 0, got {self.steps}"),
            (
                self.step_size is None or self.step_size > 0,
                f"method.step_size must be > 0, got {self.step_size}",
            ),
        ]
        check_settings(checks)

    @property
    def weight(self) -> float:
        """The regulariser's weight mu (its source default when ``mu`` is None)."""
        return DEFAULT_MU[self.regulariser] if self.mu is None else self.mu

    @property
    def ascent_step(self) -> float:
        """The inner maximisation's step size."""
        if self.step_size is not None:
            return self.step_size
        return 2.5 * self.epsilon / max(self.steps, 1)


@register_method("er_flat", ERFlatConfig)
class ERFlat(ER[ERFlatConfig]):
    """The stable-regime study's learner (X-DER paper Sec. 6.2): task 0 minimises
    ``CE(stream) + mu * regulariser(stream)`` with no replay (plain SGD, the reservoir buffer
    filling as ER's does); from task 1 on it is :class:`~xder_methods.methods.er.ER`. Cross-entropy spans
    all outputs, as ER's does, so both tasks use the same output space.

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): the stable regime ends at the second task's start, and a
    general stream is one task (it would never replay).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": (
            "it trains the first task regularised and without replay and replays from the second "
            "on, and a general stream is one task, so it would never replay"
        ),
    }

    def regulariser(self, x: Tensor, y: Tensor) -> Tensor:
        """The configured regulariser (unweighted) of the batch ``(x, y)``, BatchNorm statistics
        frozen; differentiable in the network's parameters."""
        cfg = self.config

        def loss_fn(inputs: Tensor) -> Tensor:
            return F.cross_entropy(self.net(inputs), y, reduction="none")

        with frozen_batchnorm_stats(self.net):
            if cfg.regulariser == "lfr":
                return local_flatness(
                    loss_fn,
                    x,
                    epsilon=cfg.epsilon,
                    steps=cfg.steps,
                    step_size=cfg.ascent_step,
                    generator=self.generator,
                )
            gamma, alignment = local_linearity(
                loss_fn,
                x,
                epsilon=cfg.epsilon,
                steps=cfg.steps,
                step_size=cfg.ascent_step,
                generator=self.generator,
            )
            return gamma + cfg.llr_alignment * alignment

    def observe(self, batch: Batch) -> StepOutput:
        cfg = self.config
        if batch.task > 0:
            return super().observe(batch)
        loss = F.cross_entropy(self.net(batch.x), batch.y)
        terms = {"ce": loss.detach()}
        if cfg.regulariser != "none":
            penalty = cfg.weight * self.regulariser(batch.x, batch.y)
            loss = loss + penalty
            terms[cfg.regulariser] = penalty.detach()
        self.store(batch)
        return StepOutput(loss, terms, {"stream": loss})
