"""The replay buffer: fixed-shape tensors on the training device, vectorised policies.

Rows ``0 .. len(buffer) - 1`` hold items; one extra scratch row (index ``capacity``) receives the
writes a policy discards, so that insertion never needs a data-dependent branch (no host
synchronisation; docs/development.md, "How it is fast", point 3). Policies are pure functions that
return slots.

The count of items ever offered lives on the device (``Buffer.seen``), so that a step that
inserts by reservoir sampling runs the same ops on every step once the buffer is full: the
condition for replaying it from a CUDA graph (:mod:`xder_methods.core.graphs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import torch
from torch import Tensor, nn

from xder_methods.core.protocols import ContinualSetting

__all__ = ["Buffer", "BufferSample", "reservoir_slots"]


def reservoir_slots(
    num_seen: int | Tensor,
    batch_size: int,
    capacity: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Reservoir sampling (Vitter's Algorithm R) for a batch of new items, vectorised.

    Item j of the batch is the ``n = num_seen + j``-th item ever offered (``num_seen``: an int,
    or a 0-d int64 tensor on ``device``, read there without a host synchronisation). If ``n < capacity`` it
    goes to slot n; otherwise it draws ``r`` uniform on ``{0, ..., n}`` and replaces slot r if
    ``r < capacity``, else it is discarded. Offering the items one at a time, a later item of the
    batch overwrites an earlier one that drew the same slot; here the earlier one is discarded
    instead, which leaves the same buffer.

    Returns:
        (batch_size,) int64 slots; ``capacity`` marks a discarded item.
    """
    n = num_seen + torch.arange(batch_size, device=device)
    # float64 keeps floor(u * (n + 1)) uniform on {0..n} for any realistic stream length.
    u = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
    drawn = torch.floor(u * (n + 1).to(torch.float64)).to(torch.int64)
    slots = torch.where(n < capacity, n, drawn)
    slots = torch.where(slots < capacity, slots, torch.full_like(slots, capacity))
    later = torch.ones(batch_size, batch_size, dtype=torch.bool, device=device).triu(1)
    shadowed = ((slots[:, None] == slots[None, :]) & later).any(dim=1)
    return torch.where(shadowed, torch.full_like(slots, capacity), slots)


@dataclass(frozen=True)
class BufferSample:
    """Items drawn from a buffer. ``index``: (k,) their rows, for later logit updates."""

    index: Tensor
    examples: Tensor
    labels: Tensor
    logits: Tensor | None
    task_labels: Tensor


class Buffer(nn.Module):
    """Fixed-capacity replay memory.

    Tensors (registered, so they travel with ``state_dict`` and ``.to(device)``):
    ``examples: (M + 1, *example_shape)`` in the raw dtype (uint8 images are stored unaugmented),
    ``labels: (M + 1,)``, ``logits: (M + 1, num_logits)`` when ``num_logits > 0``,
    ``task_labels: (M + 1,)`` (the task during which the item was inserted). Row M is scratch.
    ``seen``: a 0-d int64 device tensor, the items ever offered (travels in the extra state as
    ``num_seen``); ``size``: the rows filled, a Python int (it is ``min(seen, capacity)`` under
    reservoir insertion, and settles at the capacity).

    Args:
        capacity: M, the number of items it holds.
        example_shape: shape of one example, e.g. ``(3, 32, 32)``.
        example_dtype: dtype of stored examples.
        num_logits: width of the stored logits (0: no logits).
    """

    # Buffers registered in __init__ (``logits`` is declared there), declared for the type checker.
    examples: Tensor
    labels: Tensor
    task_labels: Tensor
    seen: Tensor

    def __init__(
        self,
        capacity: int,
        example_shape: tuple[int, ...],
        example_dtype: torch.dtype = torch.uint8,
        num_logits: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if capacity < 0:
            raise ValueError(f"buffer capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        rows = capacity + 1
        self.register_buffer(
            "examples", torch.zeros((rows, *example_shape), dtype=example_dtype, device=device)
        )
        self.register_buffer("labels", torch.zeros(rows, dtype=torch.int64, device=device))
        self.register_buffer("task_labels", torch.zeros(rows, dtype=torch.int64, device=device))
        self.logits: Tensor | None
        if num_logits:
            self.register_buffer("logits", torch.zeros(rows, num_logits, device=device))
        else:
            self.logits = None
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64, device=device), persistent=False)
        self.size = 0

    @classmethod
    def for_setting(
        cls,
        capacity: int,
        setting: ContinualSetting,
        device: torch.device | str | None,
        *,
        num_logits: int = 0,
    ) -> Self:
        """A method's memory of ``capacity`` items shaped as ``setting``'s examples (its input
        shape and dtype), on ``device``: the one place a method builds its buffer."""
        return cls(capacity, setting.input_shape, setting.input_dtype, num_logits=num_logits, device=device)

    def __len__(self) -> int:
        return self.size

    @property
    def num_seen(self) -> int:
        """Items ever offered. Reads the device counter: a host synchronisation, so not for use
        inside a training step."""
        return int(self.seen)

    @num_seen.setter
    def num_seen(self, value: int) -> None:
        self.seen.fill_(value)

    def count_offered(self, n: int) -> None:
        """Add n items to the count offered (for policies that place items themselves), on the
        device: no host synchronisation."""
        self.seen.add_(n)

    @property
    def is_full(self) -> bool:
        return self.size >= self.capacity

    def write(
        self,
        slots: Tensor,
        examples: Tensor,
        labels: Tensor,
        logits: Tensor | None = None,
        task_labels: Tensor | int = 0,
    ) -> None:
        """Store items at ``slots`` (``capacity`` = discard). Does not change ``len``."""
        self.examples.index_copy_(0, slots, examples.to(self.examples.dtype))
        self.labels.index_copy_(0, slots, labels.to(torch.int64))
        if isinstance(task_labels, int):
            task_labels = torch.full_like(labels, task_labels, dtype=torch.int64)
        self.task_labels.index_copy_(0, slots, task_labels.to(torch.int64))
        if self.logits is not None:
            if logits is None:
                raise ValueError("this buffer stores logits: pass them")
            self.logits.index_copy_(0, slots, logits.detach().to(self.logits.dtype))

    def add_reservoir(
        self,
        examples: Tensor,
        labels: Tensor,
        logits: Tensor | None = None,
        task_labels: Tensor | int = 0,
        *,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Offer a batch to the buffer by reservoir sampling; returns the (B,) slots used."""
        batch = labels.shape[0]
        if self.capacity == 0:
            self.count_offered(batch)
            return torch.zeros(batch, dtype=torch.int64, device=labels.device)
        slots = reservoir_slots(self.seen, batch, self.capacity, generator, labels.device)
        self.write(slots, examples, labels, logits, task_labels)
        self.count_offered(batch)
        self.size = min(self.size + batch, self.capacity)
        return slots

    def set_size(self, size: int) -> None:
        """Declare rows ``0 .. size - 1`` filled (for policies that write rows themselves)."""
        if not 0 <= size <= self.capacity:
            raise ValueError(f"size must be in [0, {self.capacity}], got {size}")
        self.size = size

    def sample(self, k: int, generator: torch.Generator | None = None) -> BufferSample:
        """Draw ``min(k, len(self))`` distinct items uniformly at random."""
        k = min(k, self.size)
        index = torch.randperm(self.size, generator=generator, device=self.labels.device)[:k]
        return self.gather(index)

    def gather(self, index: Tensor) -> BufferSample:
        """The items at rows ``index``."""
        return BufferSample(
            index=index,
            examples=self.examples[index],
            labels=self.labels[index],
            logits=None if self.logits is None else self.logits[index],
            task_labels=self.task_labels[index],
        )

    def all(self) -> BufferSample:
        """Every stored item, in row order."""
        return self.gather(torch.arange(self.size, device=self.labels.device))

    def update_logits(self, index: Tensor, values: Tensor) -> None:
        """Overwrite the stored logits of rows ``index`` with ``values`` (no gradient)."""
        if self.logits is None:
            raise ValueError("this buffer stores no logits")
        self.logits.index_copy_(0, index, values.detach().to(self.logits.dtype))

    def get_extra_state(self) -> dict[str, Any]:
        return {"num_seen": self.num_seen, "size": self.size}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.num_seen = int(state["num_seen"])
        self.size = int(state["size"])
