"""ER (``er``): experience replay with a reservoir buffer (Riemer et al., ICLR 2019;
Chaudhry et al., 2019 "On Tiny Episodic Memories")."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.protocols import Batch, ContinualSetting, StepOutput, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.replay import (
    ReplayConfig,
    join_replay,
    prefill_reservoir,
    stream_buffer_groups,
)

__all__ = ["ER", "ReplayConfigT"]

ReplayConfigT = TypeVar("ReplayConfigT", bound=ReplayConfig)


@register_method("er", ReplayConfig)
class ER(MethodBase[ReplayConfigT]):
    """Experience Replay, X-DER paper Sec. 5.2.

    Each step concatenates the stream batch with ``minibatch_size`` buffer items (weakly
    augmented, independently of the stream) and takes one cross-entropy over all outputs, as the
    authors' code does. The stream batch then enters the buffer by reservoir sampling
    (unaugmented). Paper defaults (Split CIFAR-100): lr 0.1, no momentum or weight decay.
    """

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: ReplayConfigT,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer.for_setting(
            config.buffer_size, setting, self.device, num_logits=self.stored_logits
        )

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    stored_logits = 0
    """Width of the logits the buffer keeps (0 for ER; DER stores every class's logit)."""

    def observe(self, batch: Batch) -> StepOutput:
        x, y = join_replay(
            batch, self.buffer, self.config.minibatch_size, self.transforms.train, self.generator
        )
        per_item = F.cross_entropy(self.logits(x), y, reduction="none")
        loss = per_item.mean()
        self.store(batch)
        return StepOutput(loss, {"ce": loss.detach()}, stream_buffer_groups(per_item, batch.y.shape[0]))

    def graph_key(self) -> Hashable | None:
        """Replayable at a fixed buffer size (:meth:`MethodBase.graph_key`): once the buffer is
        full, every step draws, augments and inserts alike (the count of items offered is on the
        device)."""
        return ("buffer", len(self.buffer))

    def logits(self, x: Tensor) -> Tensor:
        """The outputs the cross-entropy is taken on (the network's own)."""
        logits: Tensor = self.net(x)
        return logits

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows offered to the buffer by reservoir sampling, as the stream offers them
        (:func:`~xder_methods.parts.replay.prefill_reservoir`), then :meth:`end_task`."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)
        self.end_task(task, data)

    def store(self, batch: Batch) -> None:
        """Offer the stream batch to the reservoir buffer (unaugmented)."""
        self.buffer.add_reservoir(batch.x_raw, batch.y, task_labels=batch.task, generator=self.generator)
