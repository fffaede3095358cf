"""The analyses of a trained learner, on hand-made data with values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xder_eval.analyses import (
    BufferTraining,
    class_mean_logits,
    curve_auc,
    fewshot_curve,
    fisher_trace,
    head_bias_fractions,
    nearest_neighbour_accuracy,
    noisy_loss,
    train_on_buffer,
)


def test_nearest_neighbour_by_hand() -> None:
    train = np.array([[0.0], [10.0]])
    labels = np.array([0, 1])
    test = np.array([[1.0], [9.0], [6.0]])
    test_labels = np.array([0, 1, 0])
    # 1 -> 0 (right), 9 -> 10 (right), 6 -> 10 (wrong).
    assert nearest_neighbour_accuracy(train, labels, test, test_labels, shots=1) == pytest.approx(200 / 3)


def test_nearest_neighbour_draws_the_shots() -> None:
    # Class 0 has a good (0) and a misleading (20) example; with one shot, accuracy on the query
    # 1 depends on the draw; with two shots both are kept and the query is always right.
    train = np.array([[0.0], [20.0], [10.0]])
    labels = np.array([0, 0, 1])
    one = nearest_neighbour_accuracy(train, labels, np.array([[1.0]]), np.array([0]), shots=1, repeats=200)
    assert 30 < one < 70
    both = nearest_neighbour_accuracy(train, labels, np.array([[1.0]]), np.array([0]), shots=2, repeats=10)
    assert both == 100.0
    assert fewshot_curve(train, labels, np.array([[1.0]]), np.array([0]), shots=(2, 5)) == [100.0, 100.0]


def test_curve_auc_is_the_mean_height() -> None:
    assert curve_auc([1, 3], [10.0, 30.0]) == pytest.approx(20.0)
    assert curve_auc([1, 2, 5], [50.0, 50.0, 50.0]) == pytest.approx(50.0)
    # Trapezoids: (1..2) 15, (2..4) 70 -> 85 over a range of 3.
    assert curve_auc([1, 2, 4], [10.0, 20.0, 50.0]) == pytest.approx(85 / 3)
    with pytest.raises(ValueError, match="two points"):
        curve_auc([1], [3.0])


def test_head_bias_and_class_mean_logits() -> None:
    fractions = head_bias_fractions([[0, 2], [3, 1], [0, 0]])
    assert fractions[0] == [0.0, 1.0]
    assert fractions[1] == [0.75, 0.25]
    assert all(math.isnan(v) for v in fractions[2])
    means = class_mean_logits(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, -1.0]]), np.array([0, 0, 2]), 3)
    assert means[0] == [2.0, 3.0]
    assert means[2] == [5.0, -1.0]
    assert all(math.isnan(v) for v in means[1])


def _linear(weight: list[list[float]], bias: list[float]) -> nn.Linear:
    layer = nn.Linear(len(weight[0]), len(weight), dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float64))
    return layer


def test_noisy_loss_without_noise_is_the_cross_entropy_and_weights_come_back() -> None:
    model = _linear([[1.0, 0.0], [0.0, 2.0]], [0.5, -0.5]).eval()
    x = torch.tensor([[1.0, 1.0], [0.0, 3.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    task_two = (torch.tensor([[2.0, 0.0]], dtype=torch.float64), torch.tensor([1]))
    with torch.no_grad():
        expected_one = float(F.cross_entropy(model(x), y))
        expected_two = float(F.cross_entropy(model(task_two[0]), task_two[1]))
    before = [p.clone() for p in model.parameters()]
    curve = noisy_loss(model, [(x, y), task_two], [0.0, 0.5], generator=torch.Generator().manual_seed(0))
    assert curve[0] == pytest.approx((expected_one + expected_two) / 2)  # the mean over tasks
    assert curve[1] != pytest.approx(curve[0])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_noise_is_relative_to_each_weight() -> None:
    model = _linear([[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0]).eval()  # every |theta| is 0: no noise at all
    data = [(torch.ones(3, 2, dtype=torch.float64), torch.tensor([0, 1, 0]))]
    curve = noisy_loss(model, data, [0.0, 1.0, 10.0], generator=torch.Generator().manual_seed(1))
    assert curve == pytest.approx([math.log(2)] * 3)


def test_fisher_trace_of_a_linear_softmax_by_hand() -> None:
    weight, bias = [[0.5, -1.0], [0.2, 0.3], [-0.4, 0.1]], [0.1, 0.0, -0.2]
    model = _linear(weight, bias).eval()
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 2, 1])
    # For logits W x + b: dL/dW = (p - e_y) x^T and dL/db = p - e_y, so the squared gradient norm is
    # |p - e_y|^2 (|x|^2 + 1).
    p = torch.softmax(
        x @ torch.tensor(weight, dtype=torch.float64).T + torch.tensor(bias, dtype=torch.float64), 1
    )
    residual = p - F.one_hot(y, 3).double()
    expected = float((residual.pow(2).sum(1) * (x.pow(2).sum(1) + 1)).mean())
    assert fisher_trace(model, [(x, y)], batch_size=2) == pytest.approx(expected, rel=1e-10)
    second = fisher_trace(model, [(x[:1], y[:1]), (x[1:], y[1:])])
    per_example = (residual.pow(2).sum(1) * (x.pow(2).sum(1) + 1)).tolist()
    assert second == pytest.approx((per_example[0] + (per_example[1] + per_example[2]) / 2) / 2, rel=1e-10)


def test_train_on_buffer_learns_separable_labels_and_logits() -> None:
    g = torch.Generator().manual_seed(0)
    examples = torch.cat([torch.randn(20, 2, generator=g) + 3, torch.randn(20, 2, generator=g) - 3])
    labels = torch.tensor([0] * 20 + [1] * 20)
    stored = F.one_hot(labels, 2).float() * 4 - 2

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))

    def identity(x, generator=None):
        return x

    settings = BufferTraining(epochs=30, batch_size=8, lr=0.02, momentum=0.0)
    for target in ("labels", "logits", "both"):
        model = train_on_buffer(
            make, examples, labels, stored, target=target, augment=identity, settings=settings, generator=g
        )
        with torch.no_grad():
            accuracy = (model(examples).argmax(1) == labels).float().mean()
        assert accuracy == 1.0
        assert not model.training
    with pytest.raises(ValueError, match="needs stored logits"):
        train_on_buffer(make, examples, labels, None, target="logits", augment=identity)
    with pytest.raises(ValueError, match="target"):
        train_on_buffer(make, examples, labels, stored, target="soft", augment=identity)
