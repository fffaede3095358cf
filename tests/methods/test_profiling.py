"""The op counter's notion of a host sync (:mod:`xder_methods.core.profiling`), op by op."""

from __future__ import annotations

import torch

from xder_methods import OpCounter, is_host_sync, is_view

aten = torch.ops.aten


def test_reads_of_device_values_count() -> None:
    x = torch.arange(6.0)
    with OpCounter() as counter:
        float(x.sum())
        x[x > 2]
        x.nonzero()
    assert counter.syncs == {"_local_scalar_dense": 1, "index": 1, "nonzero": 1}


def test_tensors_made_from_host_data_count_and_fills_do_not() -> None:
    with OpCounter() as counter:
        torch.tensor([0.299, 0.587, 0.114])
        torch.full((3,), 0.5)
        torch.eye(3).roll(1, dims=0)
    assert counter.host_syncs == 1
    assert counter.syncs == {"lift_fresh": 1}


def test_copies_between_host_and_device() -> None:
    cpu, cuda = torch.ones(2), torch.device("cuda")  # a device object needs no GPU
    assert is_host_sync(aten._to_copy.default, (cpu,), {"device": cuda})  # blocking host -> device
    assert not is_host_sync(aten._to_copy.default, (cpu,), {"device": cuda, "non_blocking": True})
    assert not is_host_sync(aten._to_copy.default, (cpu,), {"device": torch.device("cpu")})
    assert not is_host_sync(aten._to_copy.default, (cpu,), {"dtype": torch.float64})  # no device change
    meta = torch.empty(2, device="meta")
    assert is_host_sync(aten._to_copy.default, (meta,), {"device": torch.device("cpu")})  # device -> host
    assert is_host_sync(aten.copy_.default, (cpu, meta), {})


def test_views_launch_nothing_and_are_told_apart() -> None:
    """By hand: a view, a permutation, an expansion and a select alias their input (no kernel);
    an add, a sum, an in-place add and a copy write memory (one kernel each)."""
    x = torch.arange(6.0)
    with OpCounter() as counter:
        y = x.view(2, 3).t().unsqueeze(0)
        y[0].expand(2, 3, 2)
        z = x + 1
        z.sum()
        z.add_(1)
        z.clone()
    assert counter.views == {"view": 1, "t": 1, "unsqueeze": 1, "select": 1, "expand": 1}
    assert counter.total == 9
    assert counter.launches == 4
    assert is_view(aten.permute.default)
    assert not is_view(aten.add_.Tensor)  # writes its input: not a view
    assert not is_view(aten.mul.Tensor)
