"""FDR: the function distance by hand and against a float64 loop, the per-task working memory, the
function-space step, training, resume, host syncs."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from xder_methods import (
    Batch,
    OpCounter,
    TaskData,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
)
from xder_methods.methods.fdr import FDR, FDRConfig, function_distance


def identity_transforms(x, generator=None):
    return x.float() / 255


def build(stream, tiny_net, setting_of, transforms, seed: int = 0, **config) -> FDR:
    torch.manual_seed(0)
    method = create_method(
        "fdr",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=FDRConfig(**({"buffer_size": 10, "minibatch_size": 4} | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, FDR)
    return method


# ------------------------------------------------------------------------------ pure functions


def test_function_distance_by_hand() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    stored = torch.zeros(2, 2)
    # Row 0: softmax (1/2, 1/2) on both sides: 0. Row 1: softmax (3/4, 1/4) vs (1/2, 1/2), a
    # difference of (1/4, -1/4), norm sqrt(1/16 + 1/16) = sqrt(1/8).
    torch.testing.assert_close(function_distance(logits, stored), torch.tensor([0.0, math.sqrt(1 / 8)]))


def test_function_distance_matches_a_float64_loop() -> None:
    g = torch.Generator().manual_seed(3)
    logits, stored = torch.randn(5, 7, generator=g), 3 * torch.randn(5, 7, generator=g)
    expected = []
    for row, ref in zip(logits.double().tolist(), stored.double().tolist(), strict=True):
        p = [math.exp(v) / sum(math.exp(u) for u in row) for v in row]
        q = [math.exp(v) / sum(math.exp(u) for u in ref) for v in ref]
        expected.append(math.sqrt(sum((a - b) ** 2 for a, b in zip(p, q, strict=True))))
    torch.testing.assert_close(
        function_distance(logits, stored), torch.tensor(expected), rtol=1e-5, atol=1e-6
    )


def test_function_distance_sends_no_gradient_to_the_stored_logits() -> None:
    logits, stored = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    function_distance(logits, stored).sum().backward()
    assert logits.grad is not None
    assert stored.grad is None


# -------------------------------------------------------------------------------- the memory


def test_end_task_shares_the_memory_equally_and_stores_the_logits_of_the_time(
    stream, tiny_net, setting_of
) -> None:
    transforms = Transforms(train=identity_transforms, test=identity_transforms)
    method = build(stream, tiny_net, setting_of, transforms)
    ends = []
    for task in range(3):
        rows = stream.task(task).train
        method.begin_task(task)
        with torch.no_grad():  # move the network, so that each task's logits are its own
            for p in method.net.parameters():
                p.add_(0.1)
        method.end_task(task, _task_data(stream, task))
        ends.append(method.buffer.all())
        # The items of this task just stored: the logits of the network of now on their view.
        mine = ends[-1].task_labels == task
        x = ends[-1].examples[mine]
        torch.testing.assert_close(ends[-1].logits[mine], method.net(identity_transforms(x)).detach())
        assert bool((x[:, None] == stream.train_x[rows][None]).flatten(2).all(2).any(1).all())
    # buffer 10: 10 items after task 0, 5 + 5 after task 1, 3 + 3 + 3 after task 2 (10 // 3).
    assert [e.task_labels.tolist() for e in ends] == [
        [0] * 10,
        [0] * 5 + [1] * 5,
        [0] * 3 + [1] * 3 + [2] * 3,
    ]
    assert method.memory.counts == [3, 3, 3]
    # Each cut keeps the first items of a block, examples and logits as they were stored.
    torch.testing.assert_close(ends[1].examples[:5], ends[0].examples[:5])
    torch.testing.assert_close(ends[1].logits[:5], ends[0].logits[:5])
    torch.testing.assert_close(ends[2].logits[3:6], ends[1].logits[5:8])
    assert torch.equal(ends[2].labels // 2, ends[2].task_labels)  # two classes per task


def _task_data(stream, task):
    rows = stream.task(task).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], task)


# -------------------------------------------------------------------------------- behaviour


def test_the_function_space_step_descends_the_distance_to_the_stored_outputs(
    stream, tiny_net, setting_of
) -> None:
    """``observe`` takes two steps with the loop's optimiser: the cross-entropy's, then exactly
    ``-lr * alpha * grad`` of the mean function distance of the buffer items (every item drawn:
    minibatch >= buffer) at the weights the first step left; the distance falls. During task 0
    (empty buffer) only the cross-entropy step is taken."""
    transforms = Transforms(train=identity_transforms, test=identity_transforms)
    method = build(stream, tiny_net, setting_of, transforms, minibatch_size=10, alpha=0.5)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.05)
    method.optimizer = optimizer
    assert FDR.manual_optimization
    rows = stream.task(0).train[:8]
    x0, y0 = identity_transforms(stream.train_x[rows]), stream.train_y[rows]
    reference = copy.deepcopy(method.net)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    F.cross_entropy(reference(x0), y0).backward()
    reference_opt.step()
    out = method.observe(Batch(x0, y0, stream.train_x[rows], 0))
    assert set(out.terms) == {"ce"}
    for p, q in zip(method.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach())

    method.end_task(0, _task_data(stream, 0))
    method.begin_task(1)
    rows = stream.task(1).train[:8]
    for _ in range(5):  # learn task 1: the outputs on task 0's items drift from the stored ones
        x = identity_transforms(stream.train_x[rows])
        optimizer.zero_grad()
        F.cross_entropy(method.net(x), stream.train_y[rows]).backward()
        optimizer.step()

    memory = method.buffer.all()
    x = identity_transforms(memory.examples)
    x1, y1 = identity_transforms(stream.train_x[rows]), stream.train_y[rows]
    reference = copy.deepcopy(method.net)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    F.cross_entropy(reference(x1), y1).backward()
    reference_opt.step()  # the cross-entropy step, then the function-space step from there
    params = list(reference.parameters())
    distance = function_distance(reference(x), memory.logits).mean()
    expected_grads = torch.autograd.grad(0.5 * distance, params)
    out = method.observe(Batch(x1, y1, stream.train_x[rows], 1))
    assert set(out.terms) == {"ce", "function_distance"}
    for p, p0, g in zip(method.net.parameters(), params, expected_grads, strict=True):
        torch.testing.assert_close(p.detach(), p0.detach() - 0.05 * g)
    after = function_distance(method.net(x), memory.logits).mean()
    assert float(after.detach()) < float(distance.detach())


def test_fdr_trains_task_zero(stream, transforms, tiny_net, setting_of) -> None:
    def at_chance(num_classes: int):
        torch.manual_seed(1)  # the registry-wide test's untrained net (50% on task 0)
        return tiny_net(num_classes)

    method = build(stream, at_chance, setting_of, transforms)
    schedule = TrainingSchedule(epochs=6, batch_size=8, lr=0.1)
    history = fit(method, stream, schedule, generator=torch.Generator())
    assert history.class_il[0][0] >= 75.0, history.class_il


def test_a_step_has_no_host_sync(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, tiny_net, setting_of, transforms)
    method.end_task(0, _task_data(stream, 0))
    method.begin_task(1)
    rows = stream.task(1).train[:6]
    x = stream.train_x[rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, 1)
    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    with OpCounter() as counter:
        out = method.observe(batch)  # the stream step and the function-space step
    assert counter.host_syncs == 0, counter.syncs
    assert set(out.terms) == {"ce", "function_distance"}


def test_end_task_stores_the_train_mode_logits_of_each_chunk(
    stream, transforms, tiny_net, setting_of
) -> None:
    """Guards the stored outputs being those of the network in train mode (mammoth's): with
    BatchNorm, each chunk of ``minibatch_size`` items of the augmented view is normalised with its
    own batch statistics, not the running ones, and the running statistics are updated by each
    chunk. Replayed here: the same draws from a copy of the method's generator (randperm, then the
    train transform) and a copy of the network, run chunk by chunk."""
    method = build(stream, lambda n: tiny_net(n, batchnorm=True), setting_of, transforms)
    norm = method.net.body[2]
    assert isinstance(norm, torch.nn.BatchNorm1d)
    with torch.no_grad():  # running statistics far from any chunk's own
        norm.running_mean.fill_(3.0)
        norm.running_var.fill_(9.0)
    method.net.train()
    method.begin_task(0)
    reference = copy.deepcopy(method.net)
    replay = torch.Generator().manual_seed(0)
    replay.set_state(method.generator.get_state())
    data = _task_data(stream, 0)

    method.end_task(0, data)

    rows = torch.randperm(data.y.shape[0], generator=replay)[:10]  # share: buffer_size 10 // 1 task
    view = transforms.train(data.x_raw[rows], replay)
    with torch.no_grad():
        train_mode = torch.cat([reference(view[s:e]) for s, e in ((0, 4), (4, 8), (8, 10))])
        eval_mode = copy.deepcopy(reference).eval()(view)
    stored = method.buffer.all()
    assert torch.equal(stored.examples, data.x_raw[rows])
    torch.testing.assert_close(stored.logits, train_mode)
    assert float((stored.logits - eval_mode).abs().max()) > 0.1
    torch.testing.assert_close(norm.running_mean, reference.body[2].running_mean)
    torch.testing.assert_close(norm.running_var, reference.body[2].running_var)
    assert float((norm.running_mean - 3.0).abs().max()) > 0.1  # updated by the chunks
