"""Replay building blocks: the rehearsal configs (buffer and replay batch sizes, how replayed
items are forwarded, how exemplars enter a step), joining buffer items to a stream batch, the
merged-replay sampler of the exemplar methods, and the stream/buffer loss groups."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, MethodConfig, TaskData, Transform
from xder_methods.core.schedule import batch_bounds, check_protocol_fields
from xder_methods.parts.buffer import Buffer, BufferSample
from xder_methods.parts.networks import batchnorm_per_part, frozen_batchnorm_stats

__all__ = [
    "DarkReplayConfig",
    "ExemplarReplay",
    "ExemplarReplayConfig",
    "MergedReplay",
    "ReplayConfig",
    "ReplayForward",
    "forward_parts",
    "join_replay",
    "merged_share",
    "replay_exemplars",
    "stream_buffer_groups",
]


@dataclass(frozen=True, kw_only=True)
class ReplayConfig(MethodConfig):
    """Settings shared by the rehearsal methods.

    Attributes:
        buffer_size: memory size M (the paper evaluates 500 and 2000 on Split CIFAR-100).
        minibatch_size: items drawn from the buffer per step (32 on Split CIFAR-100).

    A benchmark's protocol fills both (``FILLED_BY_PROTOCOL``:
    :func:`~xder_methods.core.schedule.protocol_fields`), in every subclass.
    """

    FILLED_BY_PROTOCOL = ("buffer_size", "minibatch_size")
    buffer_size: int = 500
    minibatch_size: int = 32

    def __post_init__(self) -> None:
        check_protocol_fields(self)


ReplayForward = Literal["separate", "joint", "grouped"]


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
            three. ``grouped``: ``separate``'s computation in one pass over the concatenation,
            in which each BatchNorm layer normalises (and updates its running statistics with)
            each batch on its own, in order
            (:func:`~xder_methods.parts.networks.batchnorm_per_part`): the outputs and running
            statistics of ``separate`` (to the bit on a CPU), the gradients rounded in another
            order; meant for a GPU (one pass of large kernels; not measured there yet),
            slower on a CPU. Without
            BatchNorm the three are the same computation.
    """

    replay_forward: ReplayForward = "separate"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replay_forward not in ("separate", "joint", "grouped"):
            raise MethodConfigError(
                f"method.replay_forward must be separate, joint or grouped, got {self.replay_forward!r}"
            )


ExemplarReplay = Literal["merged", "joined"]


@dataclass(frozen=True, kw_only=True)
class ExemplarReplayConfig(ReplayConfig):
    """Settings of the exemplar methods whose authors merge the memory into each task's training
    set (iCaRL, LUCIR, BiC).

    Attributes:
        replay: ``merged`` (default, the authors' code: the exemplars get the share of the
            training data they would have merged into it, :class:`MergedReplay`) or ``joined``
            (``minibatch_size`` exemplars joined to every stream batch, as ER).
    """

    replay: ExemplarReplay = "merged"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replay not in ("merged", "joined"):
            raise MethodConfigError(f"method.replay must be merged or joined, got {self.replay!r}")


def merged_share(memory: int, steps: int, step: int) -> tuple[int, int]:
    """``[start, end)`` of the exemplars of step ``step`` (0-based in its epoch) when ``memory``
    exemplars are spread over an epoch of ``steps`` steps as evenly as possible:
    ``floor(step * M / S)`` to ``floor((step + 1) * M / S)``; every exemplar once an epoch."""
    return step * memory // steps, (step + 1) * memory // steps


class MergedReplay(nn.Module):
    """The memory merged into the task's training set, as iCaRL's, LUCIR's and BiC's authors'
    code does it (mammoth's ``icarl_replay``), within the loop's epoch of stream batches: each
    epoch every exemplar is replayed once, the M exemplars spread evenly over the epoch's S steps
    in a permutation drawn at the epoch's first step (:func:`merged_share`: ``M / S`` a step,
    e.g. 3 or 4 beside each stream batch of 32 for M = 500 and 5000 rows a task). The exemplars'
    share of what a step trains on is then ``M / (N + M)`` (9% at M = 500 on Split CIFAR-100, 29%
    at 2000), as in a merged training set; only the number of steps differs (S, where the merged
    set has ``(N + M) / B``).

    :meth:`plan` (from the method's ``prepare_task``) sets S from the task's rows, the batch size
    and the schedule's ``drop_last``; before any plan (a driver that skips ``prepare_task``) a
    step replays ``fallback`` exemplars drawn at random. The step counter travels in the
    method's ``state_dict``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.steps_per_epoch = 0
        self.step = 0
        self.order: Tensor | None = None

    def plan(self, rows: int, batch_size: int, drop_last: bool) -> None:
        """Set the epoch's steps for a task of ``rows`` stream rows; restart the count."""
        self.steps_per_epoch = len(batch_bounds(rows, batch_size, drop_last=drop_last))
        self.step = 0

    def draw(self, buffer: Buffer, generator: torch.Generator | None, fallback: int) -> BufferSample | None:
        """This step's exemplars (None: none this step, or an empty memory)."""
        memory = len(buffer)
        if not memory:
            return None
        if not self.steps_per_epoch:
            return buffer.sample(fallback, generator)
        step = self.step % self.steps_per_epoch
        self.step += 1
        if step == 0 or self.order is None:
            self.order = torch.randperm(memory, generator=generator, device=buffer.labels.device)
        start, end = merged_share(memory, self.steps_per_epoch, step)
        return buffer.gather(self.order[start:end]) if end > start else None

    def get_extra_state(self) -> dict[str, Any]:
        return {"steps_per_epoch": self.steps_per_epoch, "step": self.step}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.steps_per_epoch = int(state["steps_per_epoch"])
        self.step = int(state["step"])


def replay_exemplars(
    batch: Batch,
    buffer: Buffer,
    config: ExemplarReplayConfig,
    merged: MergedReplay,
    transform: Transform,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """The stream batch followed by this step's exemplars, weakly augmented: ``config.replay``
    decides how many (:class:`MergedReplay`, or :func:`join_replay`'s ``minibatch_size``)."""
    if config.replay == "joined":
        return join_replay(batch, buffer, config.minibatch_size, transform, generator)
    return _joined(batch, merged.draw(buffer, generator, config.minibatch_size), transform, generator)


def forward_parts(
    forward: Callable[[Tensor], Tensor],
    parts: Sequence[Tensor],
    mode: ReplayForward,
    *,
    network: nn.Module | None = None,
    frozen: Sequence[bool] = (),
) -> list[Tensor]:
    """Outputs of ``forward`` on each of ``parts`` (see :class:`DarkReplayConfig`).

    ``frozen`` marks, by position (the parts beyond it unmarked), the parts whose pass leaves
    the BatchNorm running statistics of ``network`` (default: ``forward`` itself) alone
    (:func:`~xder_methods.parts.networks.frozen_batchnorm_stats`).

    * ``separate``: one call per part, the unmarked parts first, in order.
    * ``joint``: one call on the concatenation of the unmarked parts, split back; each marked
      part a call of its own.
    * ``grouped``: one call on the concatenation of every part, in which ``network``'s
      BatchNorm layers normalise each part on its own
      (:func:`~xder_methods.parts.networks.batchnorm_per_part`): ``separate``'s computation.

    Raises:
        ValueError: BatchNorm layers to split or freeze, but no ``network`` and ``forward`` is
            not a module.
    """
    flags = [*frozen, *[False] * (len(parts) - len(frozen))]
    module = network if network is not None else forward if isinstance(forward, nn.Module) else None
    if module is None and (any(flags) or (mode == "grouped" and len(parts) > 1)):
        raise ValueError("forward_parts: give the network whose BatchNorm layers to split or freeze")
    sizes = [part.shape[0] for part in parts]
    if mode == "grouped" and len(parts) > 1:
        assert module is not None
        with batchnorm_per_part(module, sizes, flags):
            return list(forward(torch.cat(list(parts))).split(sizes))
    live = [i for i, flag in enumerate(flags) if not flag]
    outputs: dict[int, Tensor] = {}
    if mode == "joint" and len(live) > 1:
        joined = forward(torch.cat([parts[i] for i in live])).split([sizes[i] for i in live])
        outputs.update((i, joined[k]) for k, i in enumerate(live))
    else:
        outputs.update((i, forward(parts[i])) for i in live)
    for i in (i for i, flag in enumerate(flags) if flag):
        assert module is not None
        with frozen_batchnorm_stats(module):
            outputs[i] = forward(parts[i])
    return [outputs[i] for i in range(len(parts))]


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
    sample = buffer.sample(minibatch_size, generator) if len(buffer) else None
    return _joined(batch, sample, transform, generator)


def _joined(
    batch: Batch, sample: BufferSample | None, transform: Transform, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """The stream batch followed by ``sample``'s items, weakly augmented (the stream alone for
    None)."""
    if sample is None:
        return batch.x, batch.y
    return torch.cat([batch.x, transform(sample.examples, generator)]), torch.cat([batch.y, sample.labels])


def stream_buffer_groups(per_item: Tensor, n_stream: int) -> dict[str, Tensor]:
    """Split the mean of per-item losses over a joined batch (stream rows first) into its stream
    and buffer parts, which sum to the mean: the loop's gradient-norm groups."""
    stream = per_item[:n_stream].sum() / per_item.shape[0]
    return {"stream": stream, "buffer": per_item.mean() - stream}


def prefill_reservoir(
    buffer: Buffer,
    net: nn.Module,
    transform: Transform,
    data: TaskData,
    generator: torch.Generator | None,
    batch_size: int = 256,
) -> None:
    """Offer a task's rows (``data``) to ``buffer`` by reservoir sampling, as a stream of them
    would (a method's ``prefill``); where the buffer stores logits, those of the rows it kept are
    ``net``'s outputs on their ``transform``-ed view in eval mode (the mode is restored)."""
    with torch.no_grad():
        n = data.y.shape[0]
        logits = None if buffer.logits is None else buffer.logits.new_zeros(n, buffer.logits.shape[1])
        slots = buffer.add_reservoir(data.x_raw, data.y, logits, task_labels=data.task, generator=generator)
        if buffer.logits is None:
            return
        rows = slots[slots < buffer.capacity]
        was_training = net.training
        net.train(False)
        try:
            for start in range(0, rows.shape[0], batch_size):
                chunk = rows[start : start + batch_size]
                buffer.update_logits(chunk, net(transform(buffer.examples[chunk])))
        finally:
            net.train(was_training)
