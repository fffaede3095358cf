"""The shared parts stay on their inputs' device: run on torch's ``meta`` device (shapes and
dtypes, no data), every tensor they make is on meta too. A tensor made on the default device
instead (a ``device=`` left out) would be on the CPU: an error, or a silent copy, on a GPU. This
is how the suite checks the code stays right on CUDA without one.

Functions that read values back to the host (``int(...)``, ``.tolist()``, ``nonzero`` sizes,
``bincount``) cannot run on meta: ``update_herding_buffer``, ``class_mean_features``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from xder_methods.parts.buffer import Buffer, reservoir_slots
from xder_methods.parts.gradients import flatten_gradients
from xder_methods.parts.heads import CosineHead
from xder_methods.parts.losses import asymmetric_mask, future_constraint, future_preparation_loss
from xder_methods.parts.networks import eval_features
from xder_methods.parts.replay import MergedReplay
from xder_methods.parts.selection import (
    class_balanced_quotas,
    first_occurrence,
    herding,
    nearest_mean_scores,
    rank_within_class,
)
from xder_methods.parts.task_memory import TaskMemory, kept_rows, ring_slots, task_memory_rows

META = torch.device("meta")


class _MadeOffMeta(TorchDispatchMode):
    """Records every ATen op whose output has a tensor that is not on meta."""

    def __init__(self) -> None:
        super().__init__()
        self.off: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        devices = {leaf.device.type for leaf in tree_leaves(out) if isinstance(leaf, Tensor)}
        if devices - {"meta"}:
            self.off.append(f"{func}: {sorted(devices)}")
        return out


def made_off_meta(call: Callable[[], Any]) -> list[str]:
    """The ops of ``call()`` that made a tensor off meta; the call's tensors must be on meta."""
    with _MadeOffMeta() as mode:
        result = call()
    leaves = [leaf for leaf in tree_leaves(result) if isinstance(leaf, Tensor)]
    assert all(leaf.device == META for leaf in leaves), [leaf.device for leaf in leaves]
    return mode.off


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.empty(shape, dtype=dtype, device=META)


def labels(n: int) -> Tensor:
    return meta(n, dtype=torch.int64)


class _Net(nn.Module):
    """(B, 4) -> features (B, 3): a backbone with ``forward_features``."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.num_features = 3

    def forward_features(self, x: Tensor) -> Tensor:
        return self.body(x)


META_NET, CPU_NET = _Net().to(META), _Net()  # made outside the checked calls


def merged_draw() -> Tensor:
    """The rows a merged replay draws at the first step of an epoch (its permutation's)."""
    buffer = Buffer(6, (1,), device=META)
    buffer.set_size(6)
    merged = MergedReplay()
    merged.plan(10, 5, drop_last=False)
    sample = merged.draw(buffer, None, 2)
    assert sample is not None
    return sample.index


CASES: dict[str, Callable[[], Any]] = {
    # losses
    "asymmetric_mask, task 0": lambda: asymmetric_mask(labels(4), 6, task=0, num_seen=4),
    "asymmetric_mask, task 1": lambda: asymmetric_mask(labels(4), 6, task=1, num_seen=4),
    "future_preparation_loss": lambda: future_preparation_loss(
        meta(4, 2, 9), labels(4), head_size=3, first_future_head=1, tau=2.0
    ),
    "future_constraint": lambda: future_constraint(meta(5, 9), labels(5), task=0, head_size=3, margin=0.3),
    # selection
    "herding": lambda: herding(meta(5, 3), 3),
    "nearest_mean_scores": lambda: nearest_mean_scores(meta(4, 3), meta(2, 3), meta(2, dtype=torch.bool)),
    "first_occurrence": lambda: first_occurrence(labels(5)),
    "rank_within_class": lambda: rank_within_class(labels(5), 3),
    "class_balanced_quotas": lambda: class_balanced_quotas(7, 3, None, META),
    # the buffer and the task memory
    "reservoir_slots": lambda: reservoir_slots(3, 4, 5, None, META),
    "kept_rows": lambda: kept_rows([3, 2], 2, META),
    "kept_rows, no block": lambda: kept_rows([], 2, META),
    "ring_slots": lambda: ring_slots(2, 3, 2, 1, 8, META),
    "ring_slots, no room": lambda: ring_slots(2, 3, 0, 1, 8, META),
    "task_memory_rows": lambda: task_memory_rows(10, 3, None, META),
    "Buffer.add_reservoir": lambda: Buffer(4, (1,), device=META).add_reservoir(meta(3, 1), labels(3)),
    "Buffer.add_reservoir, capacity 0": lambda: Buffer(0, (1,), device=META).add_reservoir(
        meta(3, 1), labels(3)
    ),
    "MergedReplay.draw": merged_draw,
    # gradients
    "flatten_gradients": lambda: flatten_gradients(
        [nn.Parameter(meta(2, 3)), nn.Parameter(meta(4)), nn.Parameter(meta(1))], [meta(2, 3), None, meta(1)]
    ),
    "flatten_gradients, no gradient": lambda: flatten_gradients([nn.Parameter(meta(2))], [None]),
    # networks
    "eval_features": lambda: eval_features(META_NET, meta(5, 4), lambda x: x * 2, 2),
    "eval_features, no rows": lambda: eval_features(CPU_NET, meta(0, 4), lambda x: x * 2, 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_part_makes_its_tensors_on_its_inputs_device(name: str) -> None:
    assert made_off_meta(CASES[name]) == []


def test_task_memory_writes_on_the_buffer_s_device() -> None:
    """Blocks given on the CPU are moved to the buffer's device; the cut and the ring make their
    rows there (a CPU index into a GPU buffer would be an error or a copy each time)."""
    buffer = Buffer(8, (1,), num_logits=2, device=META)
    memory = TaskMemory(buffer)
    x, y, logits = torch.zeros(3, 1, dtype=torch.uint8), torch.arange(3), torch.zeros(3, 2)
    assert made_off_meta(lambda: memory.add_block(x, y, 0, logits=logits)) == []
    assert made_off_meta(lambda: memory.add_block(x, y, 1, logits=logits)) == []
    assert made_off_meta(lambda: memory.cut(2)) == []
    assert (memory.blocks, len(buffer)) == ([(0, 2), (2, 4)], 4)
    ring = TaskMemory(Buffer(8, (1,), device=META))
    assert made_off_meta(lambda: ring.add_to_ring(meta(3, 1, dtype=torch.uint8), labels(3), 1, 4)) == []
    assert len(ring.buffer) == 4 + 3
    for tensor in [*buffer.buffers(), *ring.buffer.buffers()]:
        assert tensor.device == META


def test_cosine_head_lives_on_the_device_asked_for() -> None:
    """Its weights are drawn where the generator lives (here the CPU) and moved to ``device``."""
    head = CosineHead(3, (2, 2), torch.Generator().manual_seed(0), device=META)
    assert [p.device for p in head.parameters()] == [META] * 3
    assert made_off_meta(lambda: head(meta(4, 3))) == []
