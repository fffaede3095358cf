"""The quadratic penalty of oEWC and SI by hand and against a float64 loop."""

from __future__ import annotations

import pytest
import torch

from xder_methods.parts.anchoring import quadratic_penalty


def test_quadratic_penalty_by_hand() -> None:
    params = torch.tensor([1.0, 2.0, -1.0], requires_grad=True)
    anchors = torch.tensor([0.0, 2.0, 1.0])
    weights = torch.tensor([3.0, 5.0, 0.5])
    # 2 * (3 * 1 + 5 * 0 + 0.5 * 4) = 10; gradient 2 * strength * w * (theta - theta*) = (12, 0, -4).
    penalty = quadratic_penalty(params, anchors, weights, 2.0)
    assert penalty.item() == pytest.approx(10.0)
    penalty.backward()
    torch.testing.assert_close(params.grad, torch.tensor([12.0, 0.0, -4.0]))


def test_quadratic_penalty_matches_a_float64_loop() -> None:
    g = torch.Generator().manual_seed(0)
    params, anchors, weights = torch.randn(3, 50, generator=g)
    rows = zip(params.tolist(), anchors.tolist(), weights.tolist(), strict=True)
    expected = 0.7 * sum(w * (p - a) ** 2 for p, a, w in rows)  # Python floats: float64
    assert quadratic_penalty(params, anchors, weights, 0.7).item() == pytest.approx(expected, rel=1e-5)
