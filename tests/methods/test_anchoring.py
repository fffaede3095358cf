"""The quadratic penalty of oEWC and SI by hand and against a float64 loop; the anchored step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xder_methods import Batch
from xder_methods.parts.anchoring import AnchoredFineTuning, quadratic_penalty


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


class _Anchored(AnchoredFineTuning[None]):
    """The base class with ``w = 2`` everywhere and strength 0.5."""

    def penalty_weights(self) -> tuple[torch.Tensor, float]:
        return torch.full_like(self.anchors, 2.0), 0.5


def test_anchored_step_by_hand(tiny_net, stream, transforms, setting_of) -> None:
    """Task 0: the cross-entropy over its 2 classes alone, logged as ``ce``. A batch of task 1
    (read from the batch): the cross-entropy over the 4 classes seen, plus
    ``0.5 * sum_i 2 * 0.1 ** 2 = 0.01 * P`` once every parameter has moved by 0.1 from its anchor."""
    torch.manual_seed(0)
    net = tiny_net(6)
    generator = torch.Generator()
    method = _Anchored(net, setting_of(stream), transforms, None, generator)
    assert method.generator is generator
    x = torch.rand(4, 1, 2, 2)
    y = torch.tensor([0, 1, 1, 0])
    out = method.observe(Batch(x, y, x, 0))
    expected = F.cross_entropy(net(x)[:, :2], y)
    torch.testing.assert_close(out.loss, expected)
    assert list(out.terms) == ["ce"]
    torch.testing.assert_close(out.terms["ce"], expected)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1)
    n_params = sum(p.numel() for p in net.parameters())
    y = torch.tensor([2, 3, 0, 1])
    out = method.observe(Batch(x, y, x, 1))  # current_task is still 0: the batch's task counts
    ce = F.cross_entropy(net(x)[:, :4], y)
    torch.testing.assert_close(out.terms["ce"], ce)
    torch.testing.assert_close(out.terms["penalty"], torch.tensor(0.01 * n_params), rtol=1e-4, atol=0)
    torch.testing.assert_close(out.loss, ce + out.terms["penalty"])
