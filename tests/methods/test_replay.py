"""The replay building blocks of parts/replay.py by hand: the rehearsal config's checks, the
merged-replay sampler's counts, shares and draws, joining buffer items to a stream batch."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from xder_methods import Batch, Buffer, MethodConfigError
from xder_methods.parts.replay import MergedReplay, ReplayConfig, join_replay


def filled_buffer(memory: int) -> Buffer:
    """A buffer whose rows hold items 0 .. memory - 1 (example and label alike)."""
    buffer = Buffer(memory, (1,), torch.int64)
    items = torch.arange(memory)
    buffer.write(items, items[:, None], items)
    buffer.set_size(memory)
    return buffer


def test_replay_config_takes_a_minibatch_of_one_item_and_refuses_none() -> None:
    assert ReplayConfig(minibatch_size=1).minibatch_size == 1
    with pytest.raises(MethodConfigError):
        ReplayConfig(minibatch_size=0)


def test_merged_replay_starts_unplanned_at_step_zero() -> None:
    merged = MergedReplay()
    assert merged.get_extra_state() == {"steps_per_epoch": 0, "step": 0}
    fresh = MergedReplay()
    fresh.load_state_dict(merged.state_dict())
    assert (fresh.steps_per_epoch, fresh.step) == (0, 0)


def test_merged_replay_steps_without_a_share_replay_nothing() -> None:
    """3 exemplars over 5 steps: step s replays rows floor(3 s / 5) .. floor(3 (s + 1) / 5) - 1,
    i.e. none, 1, none, 1, 1 exemplars."""
    buffer = filled_buffer(3)
    merged = MergedReplay()
    merged.plan(10, 2, drop_last=False)
    assert merged.steps_per_epoch == 5
    draws = [merged.draw(buffer, torch.Generator().manual_seed(0), fallback=4) for _ in range(5)]
    assert [None if d is None else d.labels.numel() for d in draws] == [None, 1, None, 1, 1]
    assert sorted(d.labels.item() for d in draws if d is not None) == [0, 1, 2]


def test_merged_replay_resumed_mid_epoch_draws_a_new_order() -> None:
    """A sampler restored from a state dict mid-epoch has no permutation yet: it draws one.
    10 exemplars over 5 steps: step 3 replays 2 of them."""
    buffer = filled_buffer(10)
    merged = MergedReplay()
    merged.set_extra_state({"steps_per_epoch": 5, "step": 3})
    sample = merged.draw(buffer, torch.Generator().manual_seed(0), fallback=4)
    assert sample is not None
    assert sample.labels.numel() == 2
    assert sample.labels.unique().numel() == 2
    assert torch.equal(sample.labels, sample.index)
    assert merged.step == 4


def test_merged_replay_draws_its_order_from_the_generator_only() -> None:
    """The same generator seed gives the same exemplars whatever torch's global generator."""
    buffer = filled_buffer(20)
    drawn: list[Tensor] = []
    for global_seed in (0, 1):
        merged = MergedReplay()
        merged.plan(2, 2, drop_last=False)  # one step: the whole permutation
        with torch.random.fork_rng():
            torch.manual_seed(global_seed)
            sample = merged.draw(buffer, torch.Generator().manual_seed(7), fallback=4)
        assert sample is not None
        assert sorted(sample.labels.tolist()) == list(range(20))
        drawn.append(sample.labels)
    assert torch.equal(drawn[0], drawn[1])


def test_join_replay_with_an_empty_buffer_is_the_stream_batch_itself() -> None:
    """Nothing drawn, nothing augmented: the stream batch's own tensors."""
    calls: list[Tensor] = []

    def transform(x: Tensor, generator: torch.Generator | None) -> Tensor:
        calls.append(x)
        return x.float() + 0.5

    batch = Batch(torch.zeros(3, 1), torch.arange(3), torch.zeros(3, 1, dtype=torch.int64), 0)
    x, y = join_replay(batch, Buffer(4, (1,), torch.int64), 2, transform, torch.Generator())
    assert x is batch.x
    assert y is batch.y
    assert calls == []
    x, y = join_replay(batch, filled_buffer(4), 2, transform, torch.Generator().manual_seed(0))
    assert len(calls) == 1
    assert x.shape == (5, 1)
    assert torch.equal(x[3:, 0], y[3:].float() + 0.5)  # each row's example equals its label
