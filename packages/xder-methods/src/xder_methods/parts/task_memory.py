"""A memory shared among tasks: each task's items in a block of rows of a
:class:`~xder_methods.parts.buffer.Buffer` of their own (GEM and A-GEM, FDR, HAL's ring), and
the base class of the methods whose episodic memory it is (GEM, A-GEM)."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.protocols import ContinualSetting, TaskData, Transforms
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.replay import ReplayConfig

__all__ = [
    "EpisodicMemory",
    "EpisodicMemoryConfigT",
    "TaskMemory",
    "kept_rows",
    "per_task_share",
    "ring_slots",
    "task_memory_rows",
]


def per_task_share(capacity: int, tasks: int) -> int:
    """Rows each task keeps when ``capacity`` rows are shared equally among ``tasks`` tasks:
    ``capacity // tasks``."""
    return capacity // tasks


def task_memory_rows(num_rows: int, share: int, generator: torch.Generator | None, device: Any) -> Tensor:
    """The rows of one task's training data that enter the memory at the task's end:
    ``min(share, num_rows)`` distinct rows drawn uniformly (mammoth: the first batch of a shuffled
    loader of batch size ``share``).

    Returns:
        (min(share, num_rows),) int64 row indices.
    """
    return torch.randperm(num_rows, generator=generator, device=device)[:share]


def kept_rows(counts: list[int], share: int, device: torch.device | str | None = None) -> Tensor:
    """Rows of a buffer laid out as one contiguous block per task (block j holds ``counts[j]``
    items, blocks in task order from row 0) that survive cutting every block to its first
    ``share`` items: a (sum(min(c, share)),) int64 index, in block order."""
    parts, start = [], 0
    for count in counts:
        parts.append(torch.arange(start, start + min(count, share), device=device))
        start += count
    if not parts:
        return torch.zeros(0, dtype=torch.int64, device=device)
    return torch.cat(parts)


def ring_slots(
    seen_in_task: int,
    batch_size: int,
    portion: int,
    task: int,
    capacity: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """Slots of a per-task ring buffer (mammoth ``ring``) for a batch of new items.

    Task t owns rows ``[t * portion, (t + 1) * portion)``; its n-th item (``n = seen_in_task + j``
    for item j of the batch) goes to row ``t * portion + n % portion``, overwriting the oldest, so
    each task keeps its ``portion`` latest items. An item that a later item of the same batch
    overwrites (``j + portion < batch_size``) is marked ``capacity`` (discarded), so that no row is
    written twice in one call.

    Returns:
        (batch_size,) int64 slots on ``device`` (``capacity`` marks a discarded item).
    """
    j = torch.arange(batch_size, device=device)
    if portion == 0:
        return torch.full_like(j, capacity)
    slots = task * portion + (seen_in_task + j) % portion
    return torch.where(j + portion < batch_size, torch.full_like(j, capacity), slots)


class TaskMemory:
    """The rows of ``buffer`` that hold each task's items, and the writes that keep them so.

    Two layouts, one per way of filling:

    * Blocks stored at tasks' ends (GEM, A-GEM, FDR): ``blocks[k] = (start, end)``, the rows of
      the k-th stored task, contiguous and in task order from row 0 (:meth:`add_block`); FDR
      re-shares the rows by cutting every block to its first ``share`` items (:meth:`cut`).
    * A ring per task filled from the stream (HAL's ``memory="ring"``, :meth:`add_to_ring`):
      task t owns rows ``[t * share, (t + 1) * share)`` and keeps its ``share`` latest items;
      ``offered`` counts the items the current task's ring has been offered (set it to 0 when a
      task begins).

    Plain Python numbers: the owning method keeps them in its extra state. Every write goes to
    the device without a host synchronisation; ``len(buffer)`` follows the rows in use.
    """

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.blocks: list[tuple[int, int]] = []
        self.offered = 0

    @property
    def counts(self) -> list[int]:
        """Items of each stored block, in task order. Setting it lays the blocks out contiguously
        from row 0."""
        return [end - start for start, end in self.blocks]

    @counts.setter
    def counts(self, counts: list[int]) -> None:
        starts = [sum(counts[:k]) for k in range(len(counts))]
        self.blocks = [(start, start + count) for start, count in zip(starts, counts, strict=True)]

    def add_block(self, examples: Tensor, labels: Tensor, task: int, logits: Tensor | None = None) -> None:
        """Store one task's items (examples ``(n, ...)`` as stored, labels ``(n,)``, logits
        ``(n, C)`` where the buffer keeps them) in the rows after the last block, as its block."""
        device = self.buffer.labels.device
        start = self.blocks[-1][1] if self.blocks else 0
        end = start + labels.shape[0]
        slots = torch.arange(start, end, device=device)
        logits = None if logits is None else logits.to(device)
        self.buffer.write(slots, examples.to(device), labels.to(device), logits, task_labels=task)
        self.buffer.set_size(end)
        self.blocks.append((start, end))

    def cut(self, share: int) -> None:
        """Cut every block to its first ``share`` items and move the blocks together from row 0
        (examples, labels, logits and task labels as stored)."""
        device = self.buffer.labels.device
        kept = self.buffer.gather(kept_rows(self.counts, share, device))
        size = kept.labels.shape[0]
        rows = torch.arange(size, device=device)
        self.buffer.write(rows, kept.examples, kept.labels, kept.logits, kept.task_labels)
        self.buffer.set_size(size)
        self.counts = [min(count, share) for count in self.counts]

    def add_to_ring(self, examples: Tensor, labels: Tensor, task: int, share: int) -> None:
        """Offer a stream batch (examples ``(n, ...)`` as stored, labels ``(n,)``) to ``task``'s
        ring of ``share`` rows (:func:`ring_slots`); the buffer's rows in use end with it."""
        n = labels.shape[0]
        slots = ring_slots(self.offered, n, share, task, self.buffer.capacity, labels.device)
        self.buffer.write(slots, examples, labels, task_labels=task)
        self.offered += n
        self.buffer.set_size(task * share + min(self.offered, share))


EpisodicMemoryConfigT = TypeVar("EpisodicMemoryConfigT", bound=ReplayConfig)
"""The config of an :class:`EpisodicMemory` method (its ``buffer_size`` is the memory's)."""


class EpisodicMemory(MethodBase[EpisodicMemoryConfigT]):
    """A method whose memory is episodic (GEM, A-GEM): at each task's end, ``buffer_size //
    n_tasks`` examples drawn uniformly from the task's training rows, unaugmented, with their
    labels, in a block of rows of their own (:class:`TaskMemory`, as mammoth's GEM and A-GEM
    store them). State: the buffer (``state_dict``) and each block's rows (extra state,
    ``task_rows``)."""

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: EpisodicMemoryConfigT,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)
        self.memory = TaskMemory(self.buffer)  # blocks: rows [start, end) of each stored task

    def replay_memory(self) -> Buffer:
        """The episodic memory: :attr:`buffer`."""
        return self.buffer

    def trained_parameters(self) -> list[nn.Parameter]:
        """The parameters whose gradients are compared and projected (the optimised ones)."""
        return [p for p in self.optimizer_parameters() if p.requires_grad]

    def end_task(self, task: int, data: TaskData) -> None:
        """Store ``buffer_size // n_tasks`` uniformly drawn examples of ``task`` (unaugmented) in
        the next free rows of the buffer."""
        if task < len(self.memory.blocks):
            return  # already stored (the loop ends each task once; this keeps it idempotent)
        share = per_task_share(self.config.buffer_size, self.setting.n_tasks)
        rows = task_memory_rows(data.y.shape[0], share, self.generator, data.y.device)
        self.memory.add_block(data.x_raw[rows], data.y[rows], task)

    def get_extra_state(self) -> dict[str, Any]:
        return {**super().get_extra_state(), "task_rows": list(self.memory.blocks)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.memory.blocks = [(int(start), int(end)) for start, end in state["task_rows"]]
