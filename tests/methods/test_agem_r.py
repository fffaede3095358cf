"""What makes A-GEM-R what it is: A-GEM's projection against a reference batch drawn from a memory
that reservoir sampling fills at every stream step (not at task ends)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xder_methods import Batch, OpCounter, TaskData, Transforms, create_method
from xder_methods.methods.agem import project_agem
from xder_methods.methods.agem_r import AGEMR, AGEMRConfig
from xder_methods.parts.gradients import flatten_gradients


def build(stream, tiny_net, setting_of, transforms, seed=0, **config) -> AGEMR:
    torch.manual_seed(seed)
    method = create_method(
        "agem_r",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=AGEMRConfig(**({"buffer_size": 10, "minibatch_size": 4} | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, AGEMR)
    return method


def batch_of(stream, transforms, rows, task, labels=None) -> Batch:
    x_raw = stream.train_x[rows]
    y = stream.train_y[rows] if labels is None else labels
    return Batch(transforms.train(x_raw, torch.Generator()), y, x_raw, task)


def test_the_memory_is_filled_by_reservoir_at_every_step(stream, transforms, tiny_net, setting_of) -> None:
    """Buffer 10, batches of 4 in task 0: the memory fills from the first step (A-GEM's would be
    empty until the task's end); the first 10 items offered take rows 0..9 in order (reservoir:
    item n < M goes to row n); the 11th and 12th replace a row or are discarded."""
    method = build(stream, tiny_net, setting_of, transforms)
    method.begin_task(0)
    rows = stream.task(0).train[:12]
    offered = stream.train_x[rows]
    for k in range(3):
        method.observe(batch_of(stream, transforms, rows[4 * k : 4 * k + 4], 0))
        assert len(method.buffer) == min(4 * (k + 1), 10)
        if k == 1:
            torch.testing.assert_close(method.buffer.all().examples, offered[:8], rtol=0, atol=0)
    stored = method.buffer.all()
    assert method.buffer.num_seen == 12
    for row in range(10):
        candidates = [row, 10, 11]  # kept, or replaced by one of the two items past the capacity
        assert any(torch.equal(stored.examples[row], offered[c]) for c in candidates), row
    assert stored.task_labels.tolist() == [0] * 10
    method.end_task(0, TaskData(offered, stream.train_y[rows], 0))
    assert len(method.buffer) == 10
    assert method.buffer.num_seen == 12


def test_the_step_is_agems_projection_against_the_reservoir_memory(
    stream, transforms, tiny_net, setting_of
) -> None:
    """After one step of four task-0 items, the memory holds them; a batch of task-0 images
    labelled as class 2 has a gradient against the memory loss (minibatch 4 draws the whole
    memory, unaugmented: the test transform), and the applied gradient is project_agem's of the
    two. The batch then enters the memory too."""
    method = build(stream, tiny_net, setting_of, transforms)
    method.begin_task(0)
    rows = stream.task(0).train
    method.observe(batch_of(stream, transforms, rows[:4], 0))
    assert len(method.buffer) == 4
    params = method.trained_parameters()
    memory = method.buffer.all()
    memory_loss = F.cross_entropy(method.net(transforms.test(memory.examples)), memory.labels)
    memory_gradient = flatten_gradients(params, torch.autograd.grad(memory_loss, params))

    method.net.zero_grad()
    out = method.observe(batch_of(stream, transforms, rows[4:12], 0, labels=torch.full((8,), 2)))
    out.loss.backward()
    raw = flatten_gradients(params, [p.grad for p in params])
    assert float(raw @ memory_gradient) < 0  # the step would increase the memory loss
    method.after_backward()
    applied = flatten_gradients(params, [p.grad for p in params])
    torch.testing.assert_close(applied, project_agem(raw, memory_gradient))
    assert not torch.allclose(applied, raw)
    assert len(method.buffer) == 10
    assert method.buffer.num_seen == 12


def test_a_step_has_no_host_sync(stream, transforms, tiny_net, setting_of) -> None:
    """observe (the reference gradient, the reservoir insertion), backward and after_backward."""
    method = build(stream, tiny_net, setting_of, transforms)
    rows = stream.task(0).train
    method.observe(batch_of(stream, transforms, rows[:4], 0))
    with OpCounter() as counter:
        method.observe(batch_of(stream, transforms, rows[4:8], 0)).loss.backward()
        method.after_backward()
    assert counter.host_syncs == 0, counter.syncs
    assert counter.ops["dot"] == 2  # <g, g_ref> and <g_ref, g_ref>: it projected


def test_prefill_fills_the_reservoir(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, tiny_net, setting_of, Transforms(train=transforms.train, test=transforms.test))
    rows = stream.task(0).train
    method.prefill(0, TaskData(stream.train_x[rows], stream.train_y[rows], 0))
    assert len(method.buffer) == 10
    assert method.buffer.num_seen == rows.shape[0]
