"""MER (``mer``): meta-experience replay (Riemer et al., "Learning to Learn without Forgetting by
Maximizing Transfer and Minimizing Interference", ICLR 2019), as the DER paper ran it (Buzzega et
al., NeurIPS 2020; the authors' code: mammoth ``models/mer.py``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, ContinualSetting, StepOutput, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.replay import ReplayConfig, prefill_reservoir

__all__ = ["MER", "MERConfig", "reptile_update"]


@dataclass(frozen=True, kw_only=True)
class MERConfig(ReplayConfig):
    """Attributes:
    buffer_size: memory size M, a reservoir over the whole stream; 200 (the smallest of the DER
        paper's buffers).
    minibatch_size: memory examples joined to each stream example in each of its batches; 128
        (mammoth ``best_args``, ``seq-mnist`` and ``mnist-360`` ``mer``, every buffer).
    beta: the within-batch Reptile rate; 1 (same entries).
    gamma: the across-batch Reptile rate; 1 (same entries).
    batch_num: batches (memory draws, each an SGD step) per stream example; 1 (``seq-mnist``;
        ``mnist-360``: 3).
    """

    buffer_size: int = 200
    minibatch_size: int = 128
    beta: float = 1.0
    gamma: float = 1.0
    batch_num: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("beta", "gamma"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise MethodConfigError(f"method.{name} must be a finite number > 0, got {value}")
        if self.batch_num < 1:
            raise MethodConfigError(f"method.batch_num must be >= 1, got {self.batch_num}")


@torch.no_grad()
def reptile_update(parameters: Sequence[Tensor], start: Sequence[Tensor], rate: float) -> None:
    """Reptile's meta-step, in place: ``theta <- theta_0 + rate * (theta - theta_0)`` for each
    parameter ``theta`` and its value ``theta_0`` in ``start`` (MER's within-batch step with
    ``rate = beta``, its across-batch step with ``gamma``). Computed in that form, as mammoth does:
    with ``rate = 1`` it may differ from ``theta`` in the last bit."""
    for param, begin in zip(parameters, start, strict=True):
        param.copy_(begin + rate * (param - begin))


@register_method("mer", MERConfig)
class MER(MethodBase[MERConfig]):
    """Meta-Experience Replay (Riemer et al., ICLR 2019), as the DER paper's code runs it.

    The stream is taken one example ``(x, y)`` at a time. For each, with ``theta_A`` the
    parameters before it:

    1. ``batch_num`` batches are drawn: each ``minibatch_size`` memory examples (without
       replacement, weakly augmented) followed by ``(x, y)``; while the memory is empty (the
       stream's first example), ``(x, y)`` twice.
    2. For each batch, with ``theta_W`` the parameters before it: one SGD step on the batch's
       mean cross-entropy (over all outputs), then the within-batch Reptile step
       ``theta <- theta_W + beta * (theta - theta_W)`` (:func:`reptile_update`).
    3. ``(x, y)`` (unaugmented) is offered to the memory by reservoir sampling.
    4. The across-batch Reptile step ``theta <- theta_A + gamma * (theta - theta_A)``.

    With ``beta = gamma = 1`` (the DER paper's values) the Reptile steps leave the SGD steps'
    result: MER is then ER at batch size 1 with ``batch_num`` steps per example. The optimiser
    steps are the loop's optimiser's (:attr:`manual_optimization`, :meth:`MethodBase.step`).

    Checked against the MER paper (Alg. 1) and the DER paper's code (mammoth ``models/mer.py``,
    ``utils/main.py``, ``utils/buffer.py``); where they or this differ:

    * Batches of one: mammoth's ``utils/main.py`` sets ``batch_size = 1`` for ``mer`` whatever
      ``best_args`` say (its ``get_parser`` removes the option), so each ``observe`` receives one
      stream example and the steps above run once. Here the loop's stream batch, of any size,
      is taken as its examples one after another, each exactly as one mammoth ``observe``: the
      same updates as mammoth at batch size 1. What the batch size still changes: the loop
      augments the batch's examples up front (the same distribution), and an epoch that drops
      its last partial batch (``drop_last``) skips up to ``batch_size - 1`` examples; batch size
      1 removes both differences.
    * Within-batch steps: the MER paper's Alg. 1 takes one SGD step per example of a batch;
      mammoth one step on the batch's mean cross-entropy. Followed: mammoth.
    * Empty memory: mammoth's batch is then the stream example alone; here the example twice.
      The mean loss and its gradient are the same in a network without batch statistics (its
      MNIST MLP), and a network with BatchNorm over features can train on it (PyTorch refuses a
      batch of one there in train mode). With BatchNorm over images, the batch's statistics are
      the same too; only the running variance's ``n / (n - 1)`` correction differs, on the first
      example of the stream (the only one that meets an empty memory unless ``buffer_size`` is 0).
    * Batch order: the memory examples first, then the stream example, as mammoth's
      ``draw_batches``; every batch of an example is drawn before its first step (the memory does
      not change in between). The stream example is the loop's augmented view (mammoth's
      ``inputs``); the memory's are augmented by ``transforms.train`` (mammoth's
      ``self.transform``: the dataset's augmentation, none on its MNIST benchmarks).
    * Reptile's parameters: every parameter of the network (mammoth's ``get_params``);
      BatchNorm's running statistics follow the forward passes and are not interpolated, as in
      mammoth.
    * Optimiser: mammoth's one plain SGD at the lr (built once); here the loop's, fresh each
      task, with the run's momentum and weight decay (the same at 0, the paper's). With momentum,
      its state carries across the inner steps, which the Reptile steps do not touch.
    * Insertion: after the within-batch steps and before the across-batch step, as mammoth, so an
      example is in none of its own batches.
    * Logged loss: mammoth returns the last within-batch loss; here ``ce`` is the mean over the
      stream batch's examples of the last within-batch loss of each (one example: mammoth's).
    * Randomness: every draw from ``self.generator`` (mammoth: numpy's global state).

    DER paper settings (mammoth ``best_args``): ``seq-mnist`` (buffers 200, 500, 5120): lr 0.1,
    0.1, 0.03, minibatch_size 128, beta 1, gamma 1, batch_num 1, one epoch; ``mnist-360``
    (buffers 200, 500, 1000): lr 0.2, 0.1, 0.2, minibatch_size 128, beta 1, gamma 1,
    batch_num 3. ``best_args`` hold no MER entry for any other benchmark (none for
    ``seq-cifar10``), so the ``paper`` preset has none there.
    """

    manual_optimization = True

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: MERConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)

    def replay_memory(self) -> Buffer:
        """The reservoir memory: :attr:`buffer`."""
        return self.buffer

    def observe(self, batch: Batch) -> StepOutput:
        """Each example of the stream batch in turn (:meth:`observe_example`); the logged ``ce``
        is the mean of their last within-batch losses."""
        losses = [
            self.observe_example(batch.x[i : i + 1], batch.y[i : i + 1], batch.x_raw[i : i + 1], batch.task)
            for i in range(batch.y.shape[0])
        ]
        ce = torch.stack(losses).mean()
        return StepOutput(ce, {"ce": ce})

    def observe_example(self, x: Tensor, y: Tensor, x_raw: Tensor, task: int) -> Tensor:
        """Steps 1-4 of the class's docstring for one stream example (``x``: (1, ...) augmented,
        ``y``: (1,), ``x_raw``: (1, ...) as stored): mammoth's ``observe`` at batch size 1.

        Returns:
            The last within-batch loss, detached.
        """
        params = list(self.net.parameters())
        across = [p.detach().clone() for p in params]
        batches = [self.replay_batch(x, y) for _ in range(self.config.batch_num)]
        losses = []
        for inputs, labels in batches:
            within = [p.detach().clone() for p in params]
            loss = F.cross_entropy(self.net(inputs), labels)
            self.step(loss)
            reptile_update(params, within, self.config.beta)
            losses.append(loss.detach())
        self.buffer.add_reservoir(x_raw, y, task_labels=task, generator=self.generator)
        reptile_update(params, across, self.config.gamma)
        return losses[-1]

    def replay_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``minibatch_size`` memory examples (weakly augmented) followed by the stream example;
        while the memory is empty, the stream example twice (the class's docstring says why)."""
        if not len(self.buffer):
            return x.repeat_interleave(2, dim=0), y.repeat_interleave(2, dim=0)
        sample = self.buffer.sample(self.config.minibatch_size, self.generator)
        inputs = torch.cat([self.transforms.train(sample.examples, self.generator), x])
        return inputs, torch.cat([sample.labels, y])

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows offered to the reservoir, as the stream offers them
        (:func:`~xder_methods.parts.replay.prefill_reservoir`)."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)
