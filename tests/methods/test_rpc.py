"""What makes RPC RPC: a fixed regular-polytope classifier, shared by training and evaluation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xder_methods import (
    Batch,
    MethodConfigError,
    TaskData,
    TrainingSchedule,
    create_method,
    fit,
    regular_simplex,
)
from xder_methods.rpc import RPC, RPCConfig, polytope_logits


def build(stream, transforms, tiny_net, setting_of, **config) -> RPC:
    torch.manual_seed(0)
    base = {"buffer_size": 10, "minibatch_size": 4}
    return create_method(
        "rpc",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=RPCConfig(**(base | config)),
        generator=torch.Generator().manual_seed(0),
    )


def batch_of(stream, transforms, task, n=6) -> Batch:
    rows = stream.task(task).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, task)


def test_polytope_logits_by_hand() -> None:
    vertices = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    outputs = torch.tensor([[2.0, 3.0, 100.0]])  # the last output is not read
    assert polytope_logits(outputs, vertices).tolist() == [[2.0, 3.0, -5.0]]


def test_logits_are_net_outputs_through_the_simplex(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    x = transforms.test(stream.test_x)
    vertices = regular_simplex(6)
    expected = method.net(x)[:, :5] @ vertices.T
    torch.testing.assert_close(method.logits(x), expected)
    torch.testing.assert_close(method.predict(x), expected)


def test_training_loss_lives_in_the_prediction_space(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    batch = batch_of(stream, transforms, 0)
    out = method.observe(batch)  # empty buffer: the stream batch alone
    expected = F.cross_entropy(method.predict(batch.x), batch.y)  # over all K classes
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    grad = method.net.classifier.weight.grad
    assert torch.count_nonzero(grad[5]) == 0  # the K-th output is not part of the classifier
    assert torch.count_nonzero(grad[:5]) > 0


def test_polytope_never_changes(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    before = method.polytope.clone()
    torch.testing.assert_close(before, regular_simplex(6))
    assert not method.polytope.requires_grad
    parameters = {id(p) for p in method.parameters()}
    assert id(method.polytope) not in parameters
    weights = method.net.classifier.weight.detach().clone()
    fit(
        method,
        stream,
        TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9),
        generator=torch.Generator(),
    )
    assert torch.equal(method.polytope, before)
    assert not torch.equal(method.net.classifier.weight, weights)  # the network did train


def test_class_balanced_policy_fills_the_memory_at_task_end(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, buffer_policy="class_balanced")
    method.begin_task(0)
    method.observe(batch_of(stream, transforms, 0))
    assert len(method.buffer) == 0  # nothing stored during the task
    for t in range(2):
        rows = stream.task(t).train
        method.end_task(t, TaskData(stream.train_x[rows], stream.train_y[rows], t))
    labels = method.buffer.labels[: len(method.buffer)]
    # After task 0: 5 + 5; after task 1: each old class shrinks to 10 // 4 = 2, the 6 free slots
    # go 3 + 3 to the new classes.
    assert torch.bincount(labels, minlength=6).tolist() == [2, 2, 3, 3, 0, 0]
    with pytest.raises(MethodConfigError, match=r"method\.buffer_policy"):
        RPCConfig(buffer_policy="ring")
