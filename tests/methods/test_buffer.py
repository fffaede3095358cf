"""The replay buffer: vectorised reservoir sampling against Algorithm R item by item; a task's rows
offered to it at once (``prefill_reservoir``)."""

from __future__ import annotations

import math

import pytest
import torch

from xder_methods import Buffer, TaskData, reservoir_slots
from xder_methods.parts.replay import prefill_reservoir


def sequential_reservoir(
    capacity: int, batches: list[torch.Tensor], uniforms: list[torch.Tensor]
) -> list[int]:
    """Algorithm R one item at a time (the authors' ``reservoir``), given the same uniforms."""
    memory: list[int] = []
    seen = 0
    for items, u in zip(batches, uniforms, strict=True):
        for item, draw in zip(items.tolist(), u.tolist(), strict=True):
            if seen < capacity:
                memory.append(item)
            else:
                slot = math.floor(draw * (seen + 1))
                if slot < capacity:
                    memory[slot] = item
            seen += 1
    return memory


@pytest.mark.parametrize(("capacity", "batch"), [(5, 4), (7, 3), (3, 8), (10, 10)])
def test_vectorised_reservoir_equals_algorithm_r(capacity: int, batch: int) -> None:
    buffer = Buffer(capacity, (1,), torch.int64)
    generator = torch.Generator().manual_seed(capacity * 100 + batch)
    batches, uniforms = [], []
    for b in range(9):
        items = torch.arange(b * batch, (b + 1) * batch)
        uniforms.append(torch.rand(batch, generator=generator.clone_state(), dtype=torch.float64))
        buffer.add_reservoir(items[:, None], items, generator=generator)
        batches.append(items)
    expected = sequential_reservoir(capacity, batches, uniforms)
    assert len(buffer) == len(expected) == min(capacity, 9 * batch)
    assert buffer.examples[: len(buffer), 0].tolist() == expected
    assert buffer.labels[: len(buffer)].tolist() == expected
    assert buffer.num_seen == 9 * batch


def test_reservoir_keeps_each_item_with_probability_m_over_n() -> None:
    capacity, batch, batches, trials = 5, 4, 5, 3000
    kept = torch.zeros(batch * batches)
    generator = torch.Generator().manual_seed(0)
    for _ in range(trials):
        buffer = Buffer(capacity, (1,), torch.int64)
        for b in range(batches):
            items = torch.arange(b * batch, (b + 1) * batch)
            buffer.add_reservoir(items[:, None], items, generator=generator)
        kept[buffer.labels[:capacity]] += 1
    frequency = kept / trials
    # Every one of the 20 items is kept with probability 5/20; binomial sd is 0.008.
    assert torch.allclose(frequency, torch.full_like(frequency, 0.25), atol=0.04)


def test_reservoir_slots_discard_marker_and_no_duplicates() -> None:
    slots = reservoir_slots(1000, 64, 10, torch.Generator().manual_seed(1))
    kept = slots[slots < 10]
    assert ((slots >= 0) & (slots <= 10)).all()
    assert kept.unique().numel() == kept.numel()  # one writer per slot
    assert reservoir_slots(0, 4, 10).tolist() == [0, 1, 2, 3]


def test_sample_is_without_replacement_and_capped() -> None:
    buffer = Buffer(10, (2,), torch.uint8)
    x = torch.arange(12, dtype=torch.uint8).view(6, 2)
    buffer.add_reservoir(x, torch.arange(6), generator=torch.Generator())
    sample = buffer.sample(4, torch.Generator().manual_seed(0))
    assert sample.index.unique().numel() == 4
    assert torch.equal(sample.examples, buffer.examples[sample.index])
    assert buffer.sample(50, torch.Generator()).index.numel() == 6
    assert buffer.all().labels.tolist() == list(range(6))


def test_logits_are_stored_and_updated() -> None:
    buffer = Buffer(4, (1,), torch.uint8, num_logits=3)
    logits = torch.arange(12.0).view(4, 3)
    buffer.add_reservoir(torch.zeros(4, 1), torch.arange(4), logits, generator=torch.Generator())
    assert torch.equal(buffer.logits[:4], logits)
    buffer.update_logits(torch.tensor([2]), torch.tensor([[-1.0, -2.0, -3.0]]))
    assert buffer.logits[2].tolist() == [-1.0, -2.0, -3.0]
    assert buffer.logits[1].tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="logits"):
        buffer.add_reservoir(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), generator=torch.Generator())


def test_state_dict_round_trip_keeps_counters() -> None:
    buffer = Buffer(3, (1,), torch.uint8)
    buffer.add_reservoir(torch.ones(5, 1), torch.arange(5), task_labels=2, generator=torch.Generator())
    clone = Buffer(3, (1,), torch.uint8)
    clone.load_state_dict(buffer.state_dict())
    assert (len(clone), clone.num_seen) == (3, 5)
    assert torch.equal(clone.labels, buffer.labels)
    assert clone.task_labels[:3].tolist() == [2, 2, 2]


def test_zero_capacity_buffer_stays_empty() -> None:
    buffer = Buffer(0, (1,), torch.uint8)
    buffer.add_reservoir(torch.ones(5, 1), torch.arange(5), generator=torch.Generator())
    assert len(buffer) == 0
    assert buffer.sample(3, torch.Generator()).index.numel() == 0
    with pytest.raises(ValueError, match=">= 0"):
        Buffer(-1, (1,))


def test_update_logits_casts_to_the_stored_dtype() -> None:
    """float64 values into the float32 logits: stored rounded to float32 (1/3 -> its float32)."""
    buffer = Buffer(2, (1,), torch.uint8, num_logits=2)
    buffer.update_logits(torch.tensor([1]), torch.tensor([[1 / 3, -2.0]], dtype=torch.float64))
    assert buffer.logits.dtype == torch.float32
    assert buffer.logits[1].tolist() == [torch.tensor(1 / 3, dtype=torch.float32).item(), -2.0]
    assert buffer.logits[0].tolist() == [0.0, 0.0]


# ------------------------------------------------------------------ prefill_reservoir (replay.py)


def to_float(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255


def forward_sizes(net: torch.nn.Module) -> list[int]:
    """The batch sizes of ``net``'s forward passes from now on."""
    sizes: list[int] = []
    net.register_forward_pre_hook(lambda _, args: sizes.append(args[0].shape[0]))
    return sizes


def test_prefill_reservoir_offers_the_rows_and_stores_eval_mode_logits(batchnorm_net) -> None:
    """Two items already stored (label 0 and 1, logits 7, task 0), then 12 rows of task 2 offered
    by reservoir sampling with generator seed 0: the draws of ``reservoir_slots(2, 12, 4)`` with
    that seed keep items 6, 9 and 11 in rows 1, 3 and 2 (row 0 keeps its item). The kept rows get
    the network's outputs in eval mode (BatchNorm on its running statistics) on their test view,
    computed here one row at a time, in chunks of ``batch_size`` = 2 rows (2 + 1); the network is
    back in train mode, its running statistics untouched."""
    net, batchnorm, statistics, reference = batchnorm_net
    buffer = Buffer(4, (1, 2, 2), torch.uint8, num_logits=3)
    old = torch.full((2, 1, 2, 2), 200, dtype=torch.uint8)
    buffer.add_reservoir(old, torch.tensor([0, 1]), torch.full((2, 3), 7.0), generator=torch.Generator())
    x, y = torch.randint(0, 256, (12, 1, 2, 2), dtype=torch.uint8), torch.arange(12) % 3
    slots = reservoir_slots(2, 12, 4, torch.Generator().manual_seed(0)).tolist()
    assert slots == [4, 4, 4, 4, 4, 4, 1, 4, 4, 3, 4, 2]  # 4 = discarded
    sizes = forward_sizes(net)
    prefill_reservoir(
        buffer, net, to_float, TaskData(x, y, 2), torch.Generator().manual_seed(0), batch_size=2
    )
    assert sizes == [2, 1]  # the 3 kept rows, each forwarded once
    assert (len(buffer), buffer.num_seen) == (4, 14)
    kept = {1: 6, 3: 9, 2: 11}  # row: item
    with torch.no_grad():
        for row, item in kept.items():
            assert torch.equal(buffer.examples[row], x[item])
            assert (buffer.labels[row].item(), buffer.task_labels[row].item()) == (y[item].item(), 2)
            torch.testing.assert_close(buffer.logits[row], reference(to_float(x[item : item + 1]))[0])
    assert torch.equal(buffer.examples[0], old[0])
    assert (buffer.labels[0].item(), buffer.task_labels[0].item()) == (0, 0)
    assert buffer.logits[0].tolist() == [7.0, 7.0, 7.0]
    assert net.training
    assert all(torch.equal(a, b) for a, b in zip(batchnorm.buffers(), statistics, strict=True))
    prefill_reservoir(buffer, net.eval(), to_float, TaskData(x, y, 2), torch.Generator())
    assert not net.training  # a network in eval mode stays so


def test_prefill_reservoir_forwards_256_rows_at_a_time_by_default(tiny_net) -> None:
    """300 rows into an empty memory of 300: all kept, forwarded as 256 + 44."""
    net = tiny_net(3)
    buffer = Buffer(300, (1, 2, 2), torch.uint8, num_logits=3)
    sizes = forward_sizes(net)
    x = torch.zeros(300, 1, 2, 2, dtype=torch.uint8)
    prefill_reservoir(buffer, net, to_float, TaskData(x, torch.zeros(300, dtype=torch.int64), 0), None)
    assert sizes == [256, 44]


class _NeverCalled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("a memory without logits needs no forward pass")


def test_prefill_reservoir_without_logits_stores_the_rows_only() -> None:
    """A memory of 3 without logits offered 5 rows of task 1: the rows that
    ``reservoir_slots(0, 5, 3)`` keeps with the same seed, their task label 1; no forward pass
    and the network's mode untouched."""
    buffer = Buffer(3, (1,), torch.uint8)
    x, y = torch.arange(10, 15, dtype=torch.uint8)[:, None], torch.arange(5)
    slots = reservoir_slots(0, 5, 3, torch.Generator().manual_seed(1)).tolist()
    net = _NeverCalled().train(True)
    prefill_reservoir(buffer, net, to_float, TaskData(x, y, 1), torch.Generator().manual_seed(1))
    rows = {slot: item for item, slot in enumerate(slots) if slot < 3}
    assert sorted(rows) == [0, 1, 2]
    assert [buffer.labels[r].item() for r in range(3)] == [rows[r] for r in range(3)]
    assert [buffer.examples[r, 0].item() for r in range(3)] == [10 + rows[r] for r in range(3)]
    assert buffer.task_labels[:3].tolist() == [1, 1, 1]
    assert (len(buffer), buffer.num_seen) == (3, 5)
    assert net.training


def test_buffer_has_one_scratch_row_and_keeps_seen_out_of_the_state_dict() -> None:
    """Rows ``0 .. M - 1`` and the scratch row M: M + 1 rows in each registered tensor. The count
    offered travels in the extra state as ``num_seen``, not as a tensor of the state dict."""
    buffer = Buffer(4, (2, 3), torch.uint8, num_logits=5)
    assert buffer.examples.shape == (5, 2, 3)
    assert buffer.labels.shape == buffer.task_labels.shape == (5,)
    assert buffer.logits is not None
    assert buffer.logits.shape == (5, 5)
    assert sorted(buffer.state_dict()) == ["_extra_state", "examples", "labels", "logits", "task_labels"]


def test_zero_capacity_buffer_returns_int64_slots() -> None:
    slots = Buffer(0, (1,)).add_reservoir(torch.zeros(3, 1, dtype=torch.uint8), torch.arange(3))
    assert slots.dtype == torch.int64
    assert slots.tolist() == [0, 0, 0]


def test_write_casts_labels_task_labels_and_logits_to_the_stored_dtypes() -> None:
    """Labels and task labels of any integer dtype, logits of any float dtype, are stored as the
    buffer's int64 and float32; an int task label fills every written row, 0 by default."""
    buffer = Buffer(3, (1,), torch.uint8, num_logits=2)
    x = torch.tensor([[7], [8]], dtype=torch.uint8)
    slots = torch.tensor([2, 0])
    logits = torch.tensor([[0.5, -1.25], [2.0, 3.0]], dtype=torch.float64)
    buffer.write(
        slots, x, torch.tensor([4, 1], dtype=torch.int32), logits, torch.tensor([5, 6], dtype=torch.int32)
    )
    assert buffer.labels.tolist() == [1, 0, 4, 0]
    assert buffer.task_labels.tolist() == [6, 0, 5, 0]
    assert buffer.logits is not None
    assert buffer.logits.dtype == torch.float32
    assert buffer.logits[[2, 0]].tolist() == [[0.5, -1.25], [2.0, 3.0]]
    # uint8 labels with a task label beyond uint8's range: the task labels are int64.
    buffer.write(slots, x, torch.tensor([4, 1], dtype=torch.uint8), logits, task_labels=300)
    assert buffer.task_labels.tolist() == [300, 0, 300, 0]
    buffer.write(torch.tensor([0]), x[:1], torch.tensor([3]), logits[:1])
    assert buffer.task_labels.tolist() == [0, 0, 300, 0]
    assert buffer.labels.tolist() == [3, 0, 4, 0]
