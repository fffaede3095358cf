"""What a training step costs, counted exactly (PERFORMANCE.md): no host synchronisation, and the
number of dispatched ops within a budget set from measurement, so that a change that adds work
to the step (a Python loop over samples, a repeated forward) shows up here."""

from __future__ import annotations

import pytest
import torch

from xder_methods import Batch, OpCounter, TaskData, Transforms, create_method, method_config_class

# Ops of one task-1 step plus its backward pass on the conftest's TinyNet with BatchNorm, batch 6,
# minibatch 4, measured when the budget was set (er 86, derpp 175, xder 444), plus 10%.
OP_BUDGET = {"er": 95, "derpp": 193, "xder": 489}


@pytest.mark.parametrize("name", sorted(OP_BUDGET))
def test_a_step_has_no_host_sync_and_stays_within_its_op_budget(
    name, make_stream, tiny_net, setting_of, transforms: Transforms
) -> None:
    stream = make_stream()
    torch.manual_seed(0)
    extra = {"simclr_batch_size": 4} if name == "xder" else {}
    config = method_config_class(name)(buffer_size=20, minibatch_size=4, **extra)
    method = create_method(
        name,
        net=tiny_net(6, batchnorm=True),
        setting=setting_of(stream),
        transforms=transforms,
        config=config,
        generator=torch.Generator().manual_seed(0),
    )
    rows = stream.task(0).train
    if name == "xder":
        method.end_task(0, TaskData(stream.train_x[rows], stream.train_y[rows], 0))
    else:
        first = rows[:6]
        x = stream.train_x[first]
        method.observe(Batch(transforms.train(x), stream.train_y[first], x, 0))
    method.begin_task(1)
    step_rows = stream.task(1).train[:6]
    x = stream.train_x[step_rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[step_rows], x, 1)
    with OpCounter() as counter:
        method.observe(batch).loss.backward()
    assert counter.host_syncs == 0, counter.syncs
    assert counter.total <= OP_BUDGET[name], f"{name}: {counter.total} ops > budget {OP_BUDGET[name]}"
