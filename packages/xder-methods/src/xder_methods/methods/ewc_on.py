"""oEWC (``ewc_on``): online Elastic Weight Consolidation (Schwarz et al., "Progress & Compress: A
scalable framework for continual learning", ICML 2018; after Kirkpatrick et al., "Overcoming
catastrophic forgetting in neural networks", PNAS 2017)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from xder_methods.core.errors import check_settings
from xder_methods.core.protocols import ContinualSetting, Scenario, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.anchoring import AnchoredFineTuning, quadratic_penalty
from xder_methods.parts.gradients import flat_parameters, per_example_gradients

__all__ = [
    "OnlineEWC",
    "OnlineEWCConfig",
    "ewc_penalty",
    "fisher_diagonal",
]


@dataclass(frozen=True, kw_only=True)
class OnlineEWCConfig:
    """Attributes:
    lambda_: weight of the Fisher penalty (10: the DER paper's choice for Split CIFAR-10, mammoth
        ``utils/best_args.py``, ``seq-cifar10`` / ``ewc_on`` / ``e_lambda``; the paper's protocol
        there is lr 0.03, batch 32, 50 epochs, no momentum or weight decay).
    gamma: decay of the accumulated Fisher at each task's end, ``F <- gamma * F + F_task``
        (1.0: same table, ``gamma``).
    fisher_chunk_size: examples per vectorised per-example-gradient pass at the task's end (32,
        the protocol's batch size). Memory only: it holds ``fisher_chunk_size`` gradients of the
        whole network at once (ResNet-18: about 45 MB each); the Fisher is the same up to the
        order of float additions.
    """

    lambda_: float = 10.0
    gamma: float = 1.0
    fisher_chunk_size: int = 32

    def __post_init__(self) -> None:
        checks = [
            (self.lambda_ >= 0, f"method.lambda_ must be >= 0, got {self.lambda_}"),
            (self.gamma >= 0, f"method.gamma must be >= 0, got {self.gamma}"),
            (
                self.fisher_chunk_size >= 1,
                f"method.fisher_chunk_size must be >= 1, got {self.fisher_chunk_size}",
            ),
        ]
        check_settings(checks)


# ---------------------------------------------------------------------------------------------
# Pure functions


def fisher_diagonal(grads: Tensor, log_likelihoods: Tensor, count: int | None = None) -> Tensor:
    """The diagonal Fisher estimate of the authors' code: each item's squared gradient of the
    log-likelihood of its label, weighted by that likelihood, summed and divided by ``count``.

    ``F = sum_i exp(log p(y_i | x_i)) * g_i ** 2 / count``,  ``g_i = d log p(y_i | x_i) / d theta``.

    Args:
        grads: (B, ...) per-item gradients ``g_i`` of one parameter (or of the flat vector).
        log_likelihoods: (B,) ``log p(y_i | x_i)`` (no gradient needed).
        count: the divisor (default B): the task's number of items when ``grads`` is one chunk of
            it, so that the chunks' results add up to the task's mean.

    Returns:
        (...) the Fisher diagonal, the shape of one item's gradient.
    """
    weights = log_likelihoods.detach().exp().reshape((-1,) + (1,) * (grads.dim() - 1))
    return (weights * grads.pow(2)).sum(dim=0) / (grads.shape[0] if count is None else count)


def ewc_penalty(params: Tensor, anchors: Tensor, fisher: Tensor, lambda_: float) -> Tensor:
    """The online-EWC penalty ``lambda_ * sum_i F_i (theta_i - theta*_i) ** 2`` (no 1/2: the
    authors' code, whose ``lambda_`` the DER paper tuned): :func:`quadratic_penalty` weighted by
    the Fisher.

    Args:
        params: (P,) current parameters (gradient flows through them).
        anchors: (P,) the parameters ``theta*`` at the end of the last task (constants).
        fisher: (P,) the accumulated Fisher diagonal (constants).

    Returns:
        () scalar.
    """
    return quadratic_penalty(params, anchors, fisher, lambda_)


# ---------------------------------------------------------------------------------------------
# The method


@register_method("ewc_on", OnlineEWCConfig)
class OnlineEWC(AnchoredFineTuning[OnlineEWCConfig]):
    """Online EWC (Schwarz et al., ICML 2018, the online consolidation of Progress & Compress,
    applied to the one network as the DER paper's baseline): fine-tuning with a quadratic penalty
    that anchors each parameter to its value at the last task's end, weighted by a running sum of
    the tasks' diagonal Fisher information. No memory of past data.

    Step (tasks t >= 1; task 0 is plain fine-tuning, the Fisher being zero)::

        loss = CE_seen(f(x), y) + lambda_ * sum_i F_i (theta_i - theta*_i) ** 2

    At the end of each task, over all of its training items (N of them)::

        F_task = (1 / N) sum_n p(y_n | x_n) * (d log p(y_n | x_n) / d theta) ** 2
        F <- gamma * F + F_task;   theta* <- theta

    ``CE_seen`` is FT's (:class:`~xder_methods.methods.sgd.SGD`): one softmax over the classes seen so far.
    The step is :class:`~xder_methods.parts.anchoring.AnchoredFineTuning`'s, with ``w = F``. It
    makes no host synchronisation; the task's end makes one vectorised per-item gradient pass per
    ``fisher_chunk_size`` items (:func:`~xder_methods.parts.gradients.per_example_gradients`).

    Checked against the authors' code (mammoth ``models/ewc_on.py``, the DER paper's runs) and the
    paper; point by point:

    * Penalty form: mammoth adds ``lambda_ * 2 F (theta - theta*)`` to the gradient, i.e. the
      penalty above with no factor 1/2 and F itself in it. Schwarz et al. write half a squared
      Fisher norm with the decayed ``gamma F*``. Followed: mammoth, since the DER paper's
      ``lambda_`` (10) was tuned for its form (the 1/2 would halve the effective weight); with the
      paper's ``gamma = 1`` the two differ by the 1/2 only.
    * Fisher estimate: mammoth weights the squared gradient of the TRUE label's log-likelihood by
      that label's probability (one term of the expectation over ``y ~ p(y|x)`` that defines the
      Fisher; the paper uses the Fisher itself). Followed: mammoth (:func:`fisher_diagonal`), for
      the DER paper's ``lambda_``.
    * Normalisation: mammoth divides the sum by ``len(train_loader) * batch_size`` (N rounded up to
      whole batches: 10016 for a Split CIFAR-10 task of 10000); here by N, the mean.
    * Inputs: mammoth reads the task through its training loader, augmented; here likewise, each
      item augmented once by ``transforms.train`` with the method's generator.
    * Network mode: mammoth runs each item ALONE through the network left in train mode, so each
      BatchNorm normalises with that one item's statistics (undefined where a channel holds one
      value: BatchNorm1d, or a 1x1 feature map as ``seq-digits``' last stage) and its running
      statistics are overwritten by the last items' as a side effect, changing the network
      evaluated next. Deviation: the Fisher is taken in eval mode (running statistics, nothing
      updated), i.e. of the network that is anchored and evaluated.
    * Softmax span: mammoth's log-likelihood and cross-entropy span all outputs (future classes
      included); here both span the classes seen so far, as FT's cross-entropy does
      (docs/methods.md, "What the competitors compute").
    * State: F and theta* are flat buffers over ``net.parameters()`` (mammoth's ``get_params``
      order), so checkpoints and resume carry them.

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): the penalty's Fisher information and anchors are taken at each
    task's end, which a general stream never has.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": (
            "it takes its Fisher information and anchors at each task's end, and a general stream"
            " has no task ends"
        ),
    }

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: OnlineEWCConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.register_buffer("fisher", torch.zeros_like(self.anchors))

    fisher: Tensor

    def penalty_weights(self) -> tuple[Tensor, float]:
        return self.fisher, self.config.lambda_

    def end_task(self, task: int, data: TaskData) -> None:
        fisher = self.task_fisher(data)
        self.fisher.mul_(self.config.gamma).add_(fisher)
        self.anchors.copy_(flat_parameters(self.net.parameters()).detach())

    def task_fisher(self, data: TaskData) -> Tensor:
        """(P,) the Fisher diagonal of one task's items (see the class docstring), in eval mode."""
        num_seen = self.seen_classes(data.task)

        def log_likelihood(logits: Tensor, y: Tensor) -> Tensor:
            """``log p(y | x)`` of one item, the softmax over the seen classes: (1, C), (1,) -> ()."""
            return logits[0, :num_seen].float().log_softmax(dim=0).gather(0, y).squeeze(0)

        count = data.y.shape[0]
        total = torch.zeros_like(self.fisher)
        was_training = self.net.training
        self.net.train(False)
        try:
            for start in range(0, count, self.config.fisher_chunk_size):
                end = min(start + self.config.fisher_chunk_size, count)
                x = self.transforms.train(data.x_raw[start:end], self.generator)
                grads, log_likelihoods = per_example_gradients(self.net, log_likelihood, x, data.y[start:end])
                parts = [fisher_diagonal(g, log_likelihoods, count).reshape(-1) for g in grads.values()]
                total += torch.cat(parts)
        finally:
            self.net.train(was_training)
        return total
