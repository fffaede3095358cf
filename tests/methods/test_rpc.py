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
from xder_methods.methods.rpc import RPC, RPCConfig, polytope_logits


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


def test_predictions_are_net_outputs_through_the_simplex(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    x = transforms.test(stream.test_x)
    # The simplex's geometry, checked on the method's own copy: K unit vertices in R^(K-1),
    # pairwise dot products -1 / (K - 1), centred at the origin.
    vertices = method.polytope.double()
    assert vertices.shape == (6, 5)
    gram = vertices @ vertices.T
    torch.testing.assert_close(gram.diagonal(), torch.ones(6, dtype=torch.float64))
    off = gram[~torch.eye(6, dtype=torch.bool)]
    torch.testing.assert_close(off, torch.full_like(off, -1 / 5))
    torch.testing.assert_close(vertices.sum(0), torch.zeros(5, dtype=torch.float64), atol=1e-6, rtol=0)
    expected = method.net(x)[:, :5] @ regular_simplex(6).T
    torch.testing.assert_close(method.predict(x), expected)


def test_the_authors_rpc_trains_on_the_raw_outputs(stream, transforms, tiny_net, setting_of) -> None:
    """The X-DER paper's code (the default): cross-entropy on the network's own K outputs, the
    polytope used only by ``predict``; every output row, the K-th included, gets a gradient."""
    method = build(stream, transforms, tiny_net, setting_of)
    assert (method.config.training, method.config.buffer_policy) == ("raw", "class_balanced")
    batch = batch_of(stream, transforms, 0)
    out = method.observe(batch)  # empty buffer: the stream batch alone
    torch.testing.assert_close(out.loss, F.cross_entropy(method.net(batch.x), batch.y))
    assert not torch.allclose(out.loss, F.cross_entropy(method.predict(batch.x), batch.y))
    out.loss.backward()
    assert bool((method.net.classifier.weight.grad.abs().sum(1) > 0).all())


def test_training_through_the_polytope_lives_in_the_prediction_space(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = build(stream, transforms, tiny_net, setting_of, training="polytope")
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
    method = build(stream, transforms, tiny_net, setting_of)  # mammoth's memory, the default
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
    with pytest.raises(MethodConfigError, match=r"method\.training"):
        RPCConfig(training="softmax")  # type: ignore[arg-type]
