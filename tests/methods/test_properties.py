"""Invariants of the shared parts, on inputs hypothesis draws: the buffer's size and count, the
uniformity of reservoir sampling over the stream, the masked losses on masks of every shape, the
merged-share partition of an epoch, herding against a brute-force search, and the exemplar helpers.
Each property is stated against an independent computation (loops, float64, or counting)."""

from __future__ import annotations

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xder_methods import Buffer, reservoir_slots
from xder_methods.parts.losses import (
    future_constraint,
    logit_matching_loss,
    masked_cross_entropy,
    violation_mean,
)
from xder_methods.parts.replay import MergedReplay, merged_share
from xder_methods.parts.selection import (
    class_balanced_quotas,
    first_occurrence,
    herding,
    rank_within_class,
)
from xder_methods.parts.task_memory import kept_rows, ring_slots

# A stream cut into batches: each batch 1..12 items.
batches = st.lists(st.integers(1, 12), min_size=1, max_size=8)
seeds = st.integers(0, 2**31 - 1)


def offer(buffer: Buffer, sizes: list[int], generator: torch.Generator) -> int:
    """Offer items 0, 1, ... (their own labels and examples) in batches of ``sizes``."""
    first = 0
    for size in sizes:
        items = torch.arange(first, first + size)
        buffer.add_reservoir(items[:, None], items, task_labels=len(sizes), generator=generator)
        first += size
    return first


# ------------------------------------------------------------------------------- the buffer


@given(capacity=st.integers(0, 20), sizes=batches, seed=seeds)
def test_reservoir_buffer_size_count_and_contents(capacity: int, sizes: list[int], seed: int) -> None:
    buffer = Buffer(capacity, (1,), torch.int64)
    offered = offer(buffer, sizes, torch.Generator().manual_seed(seed))
    assert len(buffer) == min(offered, capacity)
    assert buffer.num_seen == offered
    assert buffer.is_full == (offered >= capacity)
    stored = buffer.labels[: len(buffer)].tolist()
    # Every row holds a distinct offered item, its example and label together.
    assert len(set(stored)) == len(stored)
    assert all(0 <= item < offered for item in stored)
    assert buffer.examples[: len(buffer), 0].tolist() == stored
    # While the stream is shorter than the memory, everything is kept in arrival order.
    if offered <= capacity:
        assert stored == list(range(offered))


@settings(max_examples=12)
@given(
    capacity=st.integers(1, 6),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    seed=seeds,
)
def test_reservoir_keeps_every_item_of_the_stream_with_probability_m_over_n(
    capacity: int, sizes: list[int], seed: int
) -> None:
    """Algorithm R's guarantee, batch by batch: after n items, each is in memory with probability
    min(1, M/n), whatever the batching. 1500 streams; 5 binomial standard deviations."""
    trials, n = 1500, sum(sizes)
    generator = torch.Generator().manual_seed(seed)
    kept = torch.zeros(n)
    for _ in range(trials):
        buffer = Buffer(capacity, (1,), torch.int64)
        offer(buffer, sizes, generator)
        kept[buffer.labels[: len(buffer)]] += 1
    p = min(1.0, capacity / n)
    sd = math.sqrt(p * (1 - p) / trials)
    assert torch.all((kept / trials - p).abs() <= 5 * sd + 1e-9), (kept / trials, p)
    # Exactly M items are kept in every trial once the stream is long enough.
    assert kept.sum() == trials * min(capacity, n)


@given(capacity=st.integers(1, 10), num_seen=st.integers(0, 40), batch=st.integers(1, 16), seed=seeds)
def test_reservoir_slots_fill_then_replace_with_one_writer_per_slot(
    capacity: int, num_seen: int, batch: int, seed: int
) -> None:
    slots = reservoir_slots(num_seen, batch, capacity, torch.Generator().manual_seed(seed)).tolist()
    for j, slot in enumerate(slots):
        n = num_seen + j
        assert 0 <= slot <= capacity  # capacity: discarded
        if n < capacity:
            # The memory fills in order; an item a later one of its batch replaces is discarded.
            assert slot == (capacity if n in slots[j + 1 :] else n)
    written = [slot for slot in slots if slot < capacity]
    assert len(written) == len(set(written))


@given(capacity=st.integers(1, 8), sizes=batches, k=st.integers(0, 12), seed=seeds)
def test_sample_draws_distinct_stored_rows(capacity: int, sizes: list[int], k: int, seed: int) -> None:
    buffer = Buffer(capacity, (1,), torch.int64)
    generator = torch.Generator().manual_seed(seed)
    offer(buffer, sizes, generator)
    sample = buffer.sample(k, generator)
    index = sample.index.tolist()
    assert len(index) == min(k, len(buffer))
    assert len(set(index)) == len(index)
    assert all(0 <= i < len(buffer) for i in index)
    assert torch.equal(sample.labels, buffer.labels[sample.index])
    assert torch.equal(sample.examples, buffer.examples[sample.index])


# ------------------------------------------------------------------------- the masked losses

shapes = st.tuples(st.integers(1, 6), st.integers(2, 7))


def masks(rows: int, columns: int, seed: int, density: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(rows, columns, generator=generator) < density


@given(shape=shapes, seed=seeds, density=st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0]))
def test_logit_matching_loss_is_the_mean_over_the_masked_entries(
    shape: tuple[int, int], seed: int, density: float
) -> None:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(shape, generator=generator, dtype=torch.float64)
    targets = torch.randn(shape, generator=generator, dtype=torch.float64)
    mask = masks(*shape, seed, density)
    chosen = [
        (logits[i, j] - targets[i, j]).item() ** 2
        for i, j in itertools.product(range(shape[0]), range(shape[1]))
        if mask[i, j]
    ]
    expected = sum(chosen) / len(chosen) if chosen else 0.0
    assert math.isclose(float(logit_matching_loss(logits, targets, mask)), expected, abs_tol=1e-12)
    everything = [
        (a - b) ** 2 for a, b in zip(logits.flatten().tolist(), targets.flatten().tolist(), strict=True)
    ]
    assert math.isclose(float(logit_matching_loss(logits, targets)), sum(everything) / len(everything))


@given(shape=shapes, seed=seeds, per_row=st.booleans())
def test_masked_cross_entropy_is_a_softmax_over_the_kept_columns(
    shape: tuple[int, int], seed: int, per_row: bool
) -> None:
    rows, columns = shape
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(shape, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(columns, (rows,), generator=generator)
    if per_row:
        mask = masks(rows, columns, seed, 0.6)
        mask[torch.arange(rows), labels] = True  # every label a kept column
    else:
        mask = masks(1, columns, seed, 0.6)[0]
        mask[labels] = True
    loss = masked_cross_entropy(logits, labels, mask)
    row_masks = mask if per_row else mask.expand(rows, columns)
    expected = 0.0
    for i in range(rows):
        kept = [logits[i, j].item() for j in range(columns) if row_masks[i, j]]
        expected += math.log(sum(math.exp(v) for v in kept)) - logits[i, labels[i]].item()
    assert math.isclose(loss.item(), expected / rows, rel_tol=1e-9, abs_tol=1e-12)
    loss.backward()
    assert logits.grad is not None
    assert torch.count_nonzero(logits.grad[~row_masks]) == 0  # left-out columns get no gradient


@given(rows=st.integers(1, 12), seed=seeds, weighted=st.booleans())
def test_violation_mean_is_the_mean_of_the_counted_positive_entries(
    rows: int, seed: int, weighted: bool
) -> None:
    generator = torch.Generator().manual_seed(seed)
    violation = torch.randn(rows, generator=generator, dtype=torch.float64)
    weights = (torch.rand(rows, generator=generator) < 0.5).double() if weighted else None
    counted = [
        v for i, v in enumerate(violation.tolist()) if v > 0 and (weights is None or weights[i].item() > 0)
    ]
    expected = sum(counted) / len(counted) if counted else 0.0
    assert math.isclose(float(violation_mean(violation, weights)), expected, abs_tol=1e-12)


@given(
    heads=st.integers(2, 4),
    head_size=st.integers(1, 3),
    rows=st.integers(1, 8),
    seed=seeds,
    form=st.sampled_from(["reference", "paper"]),
    margin=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_future_constraint_with_weights_counts_only_the_weighted_rows(
    heads: int, head_size: int, rows: int, seed: int, form: str, margin: float
) -> None:
    generator = torch.Generator().manual_seed(seed)
    task = heads - 2  # one future head at least
    logits = torch.randn(rows, heads * head_size, generator=generator, dtype=torch.float64)
    labels = torch.randint((task + 1) * head_size, (rows,), generator=generator)
    weights = (torch.rand(rows, generator=generator) < 0.6).double()
    values = []
    for i in range(rows):
        if weights[i] == 0:
            continue
        row = logits[i].tolist()
        future = max(row[(task + 1) * head_size :])
        if form == "reference":
            own = labels[i].item() // head_size
            values.append(future + margin - max(row[own * head_size : (own + 1) * head_size]))
        else:
            values.append(max(0.0, future - row[labels[i].item()] + margin))
    if form == "reference":
        positive = [v for v in values if v > 0]
        expected = sum(positive) / len(positive) if positive else 0.0
    else:
        expected = sum(values) / len(values) if values else 0.0
    loss = future_constraint(
        logits, labels, task=task, head_size=head_size, margin=margin, weights=weights, form=form
    )
    assert math.isclose(float(loss), expected, abs_tol=1e-12)


# ---------------------------------------------------------------- merged replay's epoch share


@given(memory=st.integers(0, 60), steps=st.integers(1, 25))
def test_merged_shares_partition_the_memory_over_an_epoch(memory: int, steps: int) -> None:
    shares = [merged_share(memory, steps, step) for step in range(steps)]
    assert shares[0][0] == 0
    assert shares[-1][1] == memory
    for (_, end), (start, _) in itertools.pairwise(shares):
        assert end == start  # contiguous: every exemplar in exactly one step
    sizes = [end - start for start, end in shares]
    assert max(sizes) - min(sizes) <= 1  # as even as possible
    assert all(size in (memory // steps, -(-memory // steps)) for size in sizes)


@given(memory=st.integers(1, 30), rows=st.integers(1, 80), batch=st.integers(1, 16), seed=seeds)
def test_merged_replay_replays_every_exemplar_once_an_epoch(
    memory: int, rows: int, batch: int, seed: int
) -> None:
    buffer = Buffer(memory, (1,), torch.int64)
    items = torch.arange(memory)
    buffer.add_reservoir(items[:, None], items, generator=torch.Generator())
    merged = MergedReplay()
    merged.plan(rows, batch, drop_last=False)
    generator = torch.Generator().manual_seed(seed)
    for _epoch in range(2):
        replayed: list[int] = []
        for _ in range(merged.steps_per_epoch):
            sample = merged.draw(buffer, generator, fallback=4)
            if sample is not None:
                replayed += sample.labels.tolist()
        assert sorted(replayed) == list(range(memory))


# ------------------------------------------------------------------------ exemplar selection


def brute_force_herding(features: list[list[float]], k: int) -> list[int]:
    """iCaRL's greedy herding written out in plain Python, float64."""

    def unit(v: list[float]) -> list[float]:
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    units = [unit(f) for f in features]
    dims = len(units[0])
    mean = [sum(u[d] for u in units) / len(units) for d in range(dims)]
    chosen: list[int] = []
    total = [0.0] * dims
    for j in range(1, min(k, len(units)) + 1):
        best, best_cost = -1, math.inf
        for i, u in enumerate(units):
            if i in chosen:
                continue
            cost = sum((mean[d] - (total[d] + u[d]) / j) ** 2 for d in range(dims))
            if cost < best_cost:
                best, best_cost = i, cost
        chosen.append(best)
        total = [total[d] + units[best][d] for d in range(dims)]
    return chosen


@given(n=st.integers(1, 9), dims=st.integers(1, 4), k=st.integers(1, 10), seed=seeds)
def test_herding_against_a_brute_force_search(n: int, dims: int, k: int, seed: int) -> None:
    features = torch.randn(n, dims, generator=torch.Generator().manual_seed(seed)) + 0.5
    assert herding(features, k).tolist() == brute_force_herding(features.double().tolist(), k)


@given(labels=st.lists(st.integers(0, 4), min_size=1, max_size=20))
def test_rank_within_class_counts_the_earlier_rows_of_the_class(labels: list[int]) -> None:
    ranks = rank_within_class(torch.tensor(labels), 5).tolist()
    assert ranks == [labels[:i].count(label) for i, label in enumerate(labels)]
    first = [labels.index(label) == i for i, label in enumerate(labels)]
    assert first_occurrence(torch.tensor(labels)).tolist() == first


@given(free=st.integers(0, 50), classes=st.integers(1, 12), seed=seeds)
def test_class_balanced_quotas_share_every_free_slot_evenly(free: int, classes: int, seed: int) -> None:
    quotas = class_balanced_quotas(free, classes, torch.Generator().manual_seed(seed), None).tolist()
    assert sum(quotas) == free
    assert set(quotas) <= {free // classes, free // classes + 1}


@given(counts=st.lists(st.integers(0, 8), max_size=6), share=st.integers(0, 8))
def test_kept_rows_cut_each_block_to_its_share(counts: list[int], share: int) -> None:
    starts = [sum(counts[:k]) for k in range(len(counts))]
    expected = [s + i for s, c in zip(starts, counts, strict=True) for i in range(min(c, share))]
    assert kept_rows(counts, share).tolist() == expected


@given(
    seen=st.integers(0, 30),
    batch=st.integers(1, 12),
    portion=st.integers(0, 6),
    task=st.integers(0, 3),
)
def test_ring_slots_keep_each_task_s_latest_items_in_its_rows(
    seen: int, batch: int, portion: int, task: int
) -> None:
    capacity = 4 * portion
    slots = ring_slots(seen, batch, portion, task, capacity).tolist()
    # Offering the items one at a time to a ring of ``portion`` rows: the last writer of a row wins.
    ring: dict[int, int] = {}
    for j in range(batch):
        if portion:
            ring[task * portion + (seen + j) % portion] = j
    written = [slot for slot in slots if slot < capacity]
    assert len(written) == len(set(written))  # no row written twice in one call
    assert {slot: j for j, slot in enumerate(slots) if slot < capacity} == ring
