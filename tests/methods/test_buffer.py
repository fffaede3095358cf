"""The replay buffer: vectorised reservoir sampling against Algorithm R item by item."""

from __future__ import annotations

import math

import pytest
import torch

from xder_methods import Buffer, reservoir_slots


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
