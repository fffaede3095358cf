"""What a training step costs, counted exactly (docs/development.md, "How it is fast"): no host
synchronisation, and the number of dispatched ops within a budget set from measurement, so that a
change that adds work to the step (a Python loop over samples, a repeated forward) shows up here."""

from __future__ import annotations

import pytest
import torch

from xder_methods import Batch, OpCounter, Transforms, method_config_class

# Ops of one task-1 step plus its backward pass on the conftest's TinyNet with BatchNorm, batch 6,
# minibatch 4, measured when the budget was set (er 86, derpp 175, xder 444), plus 10%.
OP_BUDGET = {"er": 95, "derpp": 193, "xder": 489}


@pytest.mark.parametrize("name", sorted(OP_BUDGET))
def test_a_step_has_no_host_sync_and_stays_within_its_op_budget(
    name, make_stream, in_second_task, transforms: Transforms
) -> None:
    stream = make_stream()
    extra = {"simclr_batch_size": 4} if name == "xder" else {}
    config = method_config_class(name)(buffer_size=20, minibatch_size=4, **extra)
    method = in_second_task(name, stream, transforms, config)
    step_rows = stream.task(1).train[:6]
    x = stream.train_x[step_rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[step_rows], x, 1)
    with OpCounter() as counter:
        method.observe(batch).loss.backward()
    assert counter.host_syncs == 0, counter.syncs
    assert counter.total <= OP_BUDGET[name], f"{name}: {counter.total} ops > budget {OP_BUDGET[name]}"
