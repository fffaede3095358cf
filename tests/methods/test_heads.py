"""The heads of parts/heads.py by hand: RPC's regular simplex and polytope logits, LUCIR's cosine
head's initial weights. (Their use by RPC and LUCIR is tested in test_rpc.py and
test_lwf_icarl_lucir.py.)"""

from __future__ import annotations

import math

import pytest
import torch

from xder_methods.parts.heads import CosineHead, polytope_logits, regular_simplex


def test_regular_simplex_of_two_and_three_classes_by_hand() -> None:
    """K = 2: the points +1 and -1 of the line. K = 3: e1, e2 and ``(a, a)`` with
    ``a = (1 - sqrt 3) / 2``, centred (mean ``m = (3 - sqrt 3) / 6`` per coordinate) and scaled to
    unit length: the unit vectors at -15, 105 and 225 degrees (e.g. row 0 is
    ``(1 - m, -m) / sqrt(2/3) = (cos 15, -sin 15)``)."""
    torch.testing.assert_close(
        regular_simplex(2, dtype=torch.float64), torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    )
    angles = [math.radians(d) for d in (-15.0, 105.0, 225.0)]
    expected = torch.tensor([[math.cos(a), math.sin(a)] for a in angles], dtype=torch.float64)
    torch.testing.assert_close(regular_simplex(3, dtype=torch.float64), expected, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="two classes"):
        regular_simplex(1)


def test_regular_simplex_is_built_in_float64() -> None:
    """Unit rows, pairwise dot products ``-1 / (K - 1)`` and rows summing to zero, to float64
    precision (a float32 construction would be off by ~1e-8); the default dtype otherwise."""
    vertices = regular_simplex(10, dtype=torch.float64)
    assert vertices.shape == (10, 9)
    gram = vertices @ vertices.T
    expected = torch.full((10, 10), -1.0 / 9, dtype=torch.float64).fill_diagonal_(1.0)
    torch.testing.assert_close(gram, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(vertices.sum(dim=0), torch.zeros(9, dtype=torch.float64), rtol=0, atol=1e-15)
    assert regular_simplex(10).dtype == torch.get_default_dtype()


def test_polytope_logits_in_the_outputs_dtype() -> None:
    """float64 outputs through float32 vertices: float64 logits; only the first D outputs count.
    (1, 2) . (1, 0) = 1, (1, 2) . (0, 1) = 2, (1, 2) . (-1, -1) = -3."""
    outputs = torch.tensor([[1.0, 2.0, 9.0]], dtype=torch.float64)
    vertices = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    logits = polytope_logits(outputs, vertices)
    assert logits.dtype == torch.float64
    assert logits.tolist() == [[1.0, 2.0, -3.0]]


def test_cosine_head_draws_its_weights_from_the_generator_in_plus_minus_one_over_sqrt_d() -> None:
    """D = 4: each task's block uniform in [-1/2, 1/2), drawn in task order from the generator;
    sigma starts at 1."""
    head = CosineHead(4, (2, 3), torch.Generator().manual_seed(7))
    generator = torch.Generator().manual_seed(7)
    expected = [torch.empty(c, 4).uniform_(-0.5, 0.5, generator=generator) for c in (2, 3)]
    assert [tuple(w.shape) for w in head.weights] == [(2, 4), (3, 4)]
    for got, want in zip(head.weights, expected, strict=True):
        assert torch.equal(got.detach(), want)
    weights = head.weight().detach()
    assert ((weights >= -0.5) & (weights < 0.5)).all()
    assert weights.min() < 0 < weights.max()
    assert head.sigma.tolist() == [1.0]


def test_cosine_head_without_a_generator_draws_from_the_global_one() -> None:
    torch.manual_seed(3)
    head = CosineHead(4, (2,))
    torch.manual_seed(3)
    assert torch.equal(head.weights[0].detach(), torch.empty(2, 4).uniform_(-0.5, 0.5))
