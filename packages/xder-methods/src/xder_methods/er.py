"""ER (``er``): experience replay with a reservoir buffer (Riemer et al., ICLR 2019;
Chaudhry et al., 2019 "On Tiny Episodic Memories")."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods._registry import register_method
from xder_methods.base import MethodBase
from xder_methods.buffer import Buffer
from xder_methods.errors import MethodConfigError
from xder_methods.protocols import Batch, ContinualSetting, StepOutput, Transform, Transforms

__all__ = [
    "ER",
    "DarkReplayConfig",
    "ReplayConfig",
    "ReplayForward",
    "forward_parts",
    "join_replay",
    "stream_buffer_groups",
]


@dataclass(frozen=True, kw_only=True)
class ReplayConfig:
    """Settings shared by the rehearsal methods.

    Attributes:
        buffer_size: memory size M (the paper evaluates 500 and 2000 on Split CIFAR-100).
        minibatch_size: items drawn from the buffer per step (32 on Split CIFAR-100).
    """

    buffer_size: int = 500
    minibatch_size: int = 32

    def __post_init__(self) -> None:
        if self.buffer_size < 0:
            raise MethodConfigError(
                f"buffer size must be >= 0, got {self.buffer_size}: pass --buffer-size 200 or similar"
            )
        if self.minibatch_size < 1:
            raise MethodConfigError(f"method.minibatch_size must be >= 1, got {self.minibatch_size}")


ReplayForward = Literal["separate", "joint"]


@dataclass(frozen=True, kw_only=True)
class DarkReplayConfig(ReplayConfig):
    """Settings of the rehearsal methods whose stream and buffer batches feed different losses
    (DER, DER++, DER++-ACE, X-DER).

    Attributes:
        replay_forward: how the stream batch and the step's buffer batches go through the
            network. ``separate`` (default, the authors' code): one forward pass per batch, so
            BatchNorm normalises each batch with its own statistics (in the stream batch: the
            current task's classes only) and updates its running statistics once per batch.
            ``joint``: one pass over their concatenation, as ER's: BatchNorm statistics over
            the mixed batch, one running-statistics update, one forward instead of two or
            three. Without BatchNorm the two are the same computation.
    """

    replay_forward: ReplayForward = "separate"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replay_forward not in ("separate", "joint"):
            raise MethodConfigError(
                f"method.replay_forward must be separate or joint, got {self.replay_forward!r}"
            )


def forward_parts(
    forward: Callable[[Tensor], Tensor], parts: Sequence[Tensor], mode: ReplayForward
) -> list[Tensor]:
    """Outputs of ``forward`` on each of ``parts``: one call each (``separate``) or one call on
    their concatenation split back into the parts (``joint``); see
    :class:`DarkReplayConfig`."""
    if mode == "joint" and len(parts) > 1:
        return list(forward(torch.cat(list(parts))).split([part.shape[0] for part in parts]))
    return [forward(part) for part in parts]


def join_replay(
    batch: Batch,
    buffer: Buffer,
    minibatch_size: int,
    transform: Transform,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """The stream batch followed by ``minibatch_size`` buffer items drawn without replacement and
    weakly augmented (independently of the stream): ``(x, y)``; the stream alone while the buffer
    is empty. The replay of ER and of the methods built like it (RPC, iCaRL, LUCIR, BiC)."""
    if not len(buffer):
        return batch.x, batch.y
    sample = buffer.sample(minibatch_size, generator)
    return torch.cat([batch.x, transform(sample.examples, generator)]), torch.cat([batch.y, sample.labels])


def stream_buffer_groups(per_item: Tensor, n_stream: int) -> dict[str, Tensor]:
    """Split the mean of per-item losses over a joined batch (stream rows first) into its stream
    and buffer parts, which sum to the mean: the loop's gradient-norm groups."""
    stream = per_item[:n_stream].sum() / per_item.shape[0]
    return {"stream": stream, "buffer": per_item.mean() - stream}


@register_method("er", ReplayConfig)
class ER(MethodBase):
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
        config: Any,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer(
            config.buffer_size,
            setting.input_shape,
            setting.input_dtype,
            num_logits=self.stored_logits,
            device=self.device,
        )

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
        return self.net(x)

    def store(self, batch: Batch) -> None:
        """Offer the stream batch to the reservoir buffer (unaugmented)."""
        self.buffer.add_reservoir(batch.x_raw, batch.y, task_labels=batch.task, generator=self.generator)
