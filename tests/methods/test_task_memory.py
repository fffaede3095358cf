"""The per-task memory of GEM, A-GEM, FDR and HAL: its pure functions and its layouts by hand."""

from __future__ import annotations

import torch

from xder_methods.parts.buffer import Buffer
from xder_methods.parts.task_memory import (
    TaskMemory,
    kept_rows,
    per_task_share,
    ring_slots,
    task_memory_rows,
)


def items(first: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n items whose one-value example and label are ``first, first + 1, ...``."""
    values = torch.arange(first, first + n)
    return values[:, None].to(torch.uint8), values


def test_per_task_share_and_kept_rows_by_hand() -> None:
    assert [per_task_share(200, t) for t in (1, 2, 3, 5)] == [200, 100, 66, 40]
    # Blocks of 5 and 4 items cut to 3 each: rows 0-2 of the first, 5-7 of the second.
    assert kept_rows([5, 4], 3).tolist() == [0, 1, 2, 5, 6, 7]
    # A block shorter than the share keeps all of its items.
    assert kept_rows([2, 5], 3).tolist() == [0, 1, 2, 3, 4]
    assert kept_rows([], 3).tolist() == []


def test_task_memory_rows_are_distinct_and_at_most_the_share() -> None:
    rows = task_memory_rows(10, 4, torch.Generator().manual_seed(0), "cpu")
    assert rows.shape == (4,)
    assert len(set(rows.tolist())) == 4
    assert all(0 <= r < 10 for r in rows.tolist())
    assert sorted(task_memory_rows(3, 4, torch.Generator(), "cpu").tolist()) == [0, 1, 2]
    # The same draw as one randperm of the rows, cut (a seed gives the same rows).
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(0))[:4]
    assert torch.equal(rows, expected)


def test_ring_slots_by_hand() -> None:
    # Task 1 owns rows 4..7 (portion 4); its items 0, 1, 2 go to rows 4, 5, 6.
    assert ring_slots(0, 3, 4, 1, 12).tolist() == [4, 5, 6]
    # Its items 3, 4, 5: 3 % 4, 4 % 4, 5 % 4 = 3, 0, 1, i.e. rows 7, 4, 5 (the oldest overwritten).
    assert ring_slots(3, 3, 4, 1, 12).tolist() == [7, 4, 5]
    # Six items into a ring of 4: items 0 and 1 are overwritten by items 4 and 5 of the same batch,
    # so they are discarded (row 12 = capacity) and every row is written once.
    assert ring_slots(0, 6, 4, 1, 12).tolist() == [12, 12, 6, 7, 4, 5]
    assert ring_slots(5, 2, 0, 1, 12).tolist() == [12, 12]  # no room per task: nothing stored


def test_blocks_are_added_after_the_last_and_cut_to_a_share() -> None:
    buffer = Buffer(10, (1,), num_logits=2)
    memory = TaskMemory(buffer)
    for task, (first, n) in enumerate([(0, 5), (10, 4)]):
        x, y = items(first, n)
        memory.add_block(x, y, task, logits=torch.stack([y, -y], dim=1).float())
    assert memory.blocks == [(0, 5), (5, 9)]
    assert memory.counts == [5, 4]
    assert len(buffer) == 9
    assert buffer.labels[:9].tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 13]
    assert buffer.task_labels[:9].tolist() == [0] * 5 + [1] * 4
    # A third task: every block cut to 10 // 3 = 3 items, moved together, then the new block.
    memory.cut(3)
    assert memory.blocks == [(0, 3), (3, 6)]
    assert len(buffer) == 6
    x, y = items(20, 3)
    memory.add_block(x, y, 2, logits=torch.stack([y, -y], dim=1).float())
    assert memory.blocks == [(0, 3), (3, 6), (6, 9)]
    stored = buffer.all()
    assert stored.labels.tolist() == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    assert stored.examples[:, 0].tolist() == stored.labels.tolist()
    assert stored.task_labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert stored.logits is not None
    assert stored.logits[:, 1].tolist() == [-float(v) for v in stored.labels.tolist()]


def test_counts_lay_the_blocks_out_from_row_zero() -> None:
    memory = TaskMemory(Buffer(10, (1,)))
    memory.counts = [3, 0, 2]
    assert memory.blocks == [(0, 3), (3, 3), (3, 5)]
    assert memory.counts == [3, 0, 2]


def test_each_task_ring_keeps_its_latest_items_in_its_own_rows() -> None:
    """Share 4 of 12 rows: task 0 offered 6 items keeps items 2..5 in rows 0..3 (4, 5 over 0,
    1); task 1 then fills rows 4.. and never touches task 0's."""
    buffer = Buffer(12, (1,))
    memory = TaskMemory(buffer)
    for first, n in [(0, 3), (3, 3)]:
        memory.add_to_ring(*items(first, n), task=0, share=4)
    assert memory.offered == 6
    assert len(buffer) == 4
    assert buffer.labels[:4].tolist() == [4, 5, 2, 3]
    memory.offered = 0  # a new task begins
    memory.add_to_ring(*items(10, 2), task=1, share=4)
    assert len(buffer) == 6
    assert buffer.labels[:6].tolist() == [4, 5, 2, 3, 10, 11]
    assert buffer.task_labels[:6].tolist() == [0, 0, 0, 0, 1, 1]
