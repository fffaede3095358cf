"""What ``torch.compile`` (``train.compile``) makes of the library's per-step machinery (an
integration check: compiling forks badly in the mutation run's test workers)."""

from __future__ import annotations

import torch
from torch import nn

from xder_methods import batchnorm_per_part


def test_a_compiled_network_is_compiled_once_for_grouped_steps() -> None:
    """Under ``torch.compile`` the grouped pass meets the same per-layer forward from step to
    step: one graph for the grouped steps and one for the plain passes, however many steps."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).train()
    net.compile(backend="eager")
    x = torch.randn(9, 3, generator=torch.Generator().manual_seed(0))
    for _ in range(4):
        with batchnorm_per_part(net, [2, 3, 4], [False, False, True]):
            net(x).sum().backward()
        net(x).sum().backward()
    assert counters["stats"]["unique_graphs"] == 2
    torch._dynamo.reset()
