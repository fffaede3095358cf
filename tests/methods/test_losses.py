"""Loss terms against independent float64 formulas."""

from __future__ import annotations

import math

import torch

from xder_methods.losses import logit_matching_loss, seen_class_cross_entropy


def test_seen_class_cross_entropy_against_a_loop() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 8, dtype=torch.float64)
    labels = torch.tensor([0, 3, 5, 1, 2])
    expected = 0.0
    for row, label in zip(logits.tolist(), labels.tolist(), strict=True):
        seen = row[:6]
        expected += -(seen[label] - math.log(sum(math.exp(v) for v in seen)))
    expected /= 5
    assert math.isclose(float(seen_class_cross_entropy(logits, labels, 6)), expected, rel_tol=1e-12)


def test_seen_class_cross_entropy_sends_no_gradient_to_unseen_classes() -> None:
    logits = torch.randn(4, 10, requires_grad=True)
    seen_class_cross_entropy(logits, torch.tensor([0, 1, 2, 3]), 4).backward()
    assert logits.grad is not None
    assert torch.count_nonzero(logits.grad[:, 4:]) == 0
    assert torch.count_nonzero(logits.grad[:, :4]) > 0


def test_logit_matching_loss_is_the_mean_squared_error() -> None:
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    assert float(logit_matching_loss(a, b)) == (1 + 4 + 4 + 9) / 4
    b.requires_grad_(True)
    a.requires_grad_(True)
    logit_matching_loss(a, b).backward()
    assert b.grad is None  # stored logits are targets, not trained
