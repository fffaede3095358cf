"""Loss terms against independent float64 formulas."""

from __future__ import annotations

import math

import torch

from xder_methods.parts.losses import logit_matching_loss, seen_class_cross_entropy


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


# ------------------------------------------------------------------------------------ X-DER


from xder_methods.parts.losses import (  # noqa: E402
    future_constraint,
    future_preparation_loss,
    past_constraint,
    rescale_logits,
    separated_cross_entropy,
    violation_mean,
)


def test_separated_cross_entropy_against_a_loop_and_its_gradient() -> None:
    torch.manual_seed(1)
    logits = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([3, 4, 5, 3])
    loss = separated_cross_entropy(logits, labels, 3, 6)
    expected = 0.0
    for row, label in zip(logits.detach().tolist(), labels.tolist(), strict=True):
        part = row[3:6]
        expected += math.log(sum(math.exp(v) for v in part)) - part[label - 3]
    assert math.isclose(float(loss.detach()), expected / 4, rel_tol=1e-12)
    loss.backward()
    assert torch.count_nonzero(logits.grad[:, :3]) == 0  # past logits
    assert torch.count_nonzero(logits.grad[:, 6:]) == 0  # future logits


def reference_rescale(stored, fresh, labels, start, end, gamma):
    out = [row[:] for row in stored.tolist()]
    for i, (z, o, y) in enumerate(zip(stored.tolist(), fresh.tolist(), labels.tolist(), strict=True)):
        g = z[y]
        if g <= 0:
            continue
        mx = max(o[start:end])
        factor = min(gamma * g / mx, 1.0) if mx > 0 else 1.0  # Eq. 7: min(gamma g / max, 1)
        for k in range(start, end):
            out[i][k] = o[k] * factor
    return torch.tensor(out, dtype=torch.float64)


def test_rescale_logits_by_hand() -> None:
    stored = torch.tensor(
        [[2.0, 0.0, 9.0, 9.0], [4.0, 0.0, 9.0, 9.0], [-1.0, 0.0, 9.0, 9.0]], dtype=torch.float64
    )
    fresh = torch.tensor(
        [[5.0, 5.0, 4.0, 1.0], [5.0, 5.0, 1.0, 2.0], [5.0, 5.0, 4.0, 1.0]], dtype=torch.float64
    )
    labels = torch.tensor([0, 0, 0])
    before = stored.clone(), fresh.clone()
    out = rescale_logits(stored, fresh, labels, 2, 4, 0.5)
    # Row 0: g = 2, max = 4 > 0.5 * 2 -> slice * (0.5 * 2 / 4) = (1.0, 0.25).
    # Row 1: g = 4, max = 2 <= 0.5 * 4 -> implanted as it is.
    # Row 2: g = -1 <= 0 -> the stored row is kept.
    assert out.tolist() == [[2.0, 0.0, 1.0, 0.25], [4.0, 0.0, 1.0, 2.0], [-1.0, 0.0, 9.0, 9.0]]
    assert torch.equal(stored, before[0])
    assert torch.equal(fresh, before[1])


def test_rescale_logits_at_the_edges_g_zero_and_gamma_zero() -> None:
    """A ground-truth logit of exactly 0 keeps the stored row (``g > 0`` is the guard, not
    ``g >= 0``); with gamma = 0 a slice whose maximum is exactly 0 is already at the bound
    ``gamma * g = 0`` and is implanted as it is (no 0 / 0), one whose maximum is positive is zeroed."""
    stored = torch.tensor([[0.0, 1.0, 9.0, 9.0], [2.0, 0.0, 9.0, 9.0]], dtype=torch.float64)
    fresh = torch.tensor([[5.0, 5.0, 4.0, 1.0], [5.0, 5.0, 4.0, 1.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0])
    # Row 0: g = 0 -> stored. Row 1: g = 2, max 4 > 0.5 * 2 -> (4, 1) * 1 / 4 = (1, 0.25).
    out = rescale_logits(stored, fresh, labels, 2, 4, 0.5)
    assert out.tolist() == [[0.0, 1.0, 9.0, 9.0], [2.0, 0.0, 1.0, 0.25]]
    fresh = torch.tensor([[5.0, 5.0, 0.0, -1.0], [5.0, 5.0, 3.0, -1.0]], dtype=torch.float64)
    stored = torch.tensor([[2.0, 0.0, 9.0, 9.0], [2.0, 0.0, 9.0, 9.0]], dtype=torch.float64)
    # gamma = 0, g = 2: row 0's max 0 <= 0 -> (0, -1) as it is; row 1's max 3 > 0 -> (3, -1) * 0.
    out = rescale_logits(stored, fresh, labels, 2, 4, 0.0)
    assert out.tolist() == [[2.0, 0.0, 0.0, -1.0], [2.0, 0.0, 0.0, 0.0]]


def test_rescale_logits_against_equation_7() -> None:
    g = torch.Generator().manual_seed(0)
    stored = torch.randn(200, 10, generator=g, dtype=torch.float64) * 3
    fresh = torch.randn(200, 10, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, 4, (200,), generator=g)
    out = rescale_logits(stored, fresh, labels, 4, 10, 0.85)
    torch.testing.assert_close(out, reference_rescale(stored, fresh, labels, 4, 10, 0.85))
    gt = stored.gather(1, labels[:, None])[:, 0]
    positive = gt > 0
    assert (out[positive, 4:].max(dim=1).values <= 0.85 * gt[positive] + 1e-12).all()


def reference_supcon(logits, labels, head_size, first, tau):
    """Eq. 8-9 with Python loops in float64."""
    n, v, c = logits.shape
    rows = [(logits[i, a].tolist(), int(labels[i])) for i in range(n) for a in range(v)]
    heads = range(first, c // head_size)
    per_head = []
    for h in heads:
        zs = []
        for vec, _ in rows:
            part = vec[h * head_size : (h + 1) * head_size]
            norm = math.sqrt(sum(x * x for x in part))
            zs.append([x / norm for x in part])
        anchors = []
        for i, (_, yi) in enumerate(rows):
            positives = [p for p, (_, yp) in enumerate(rows) if p != i and yp == yi]
            if not positives:
                continue
            sims = [sum(a * b for a, b in zip(zs[i], zs[k], strict=True)) / tau for k in range(len(rows))]
            denominator = math.log(sum(math.exp(s) for k, s in enumerate(sims) if k != i))
            anchors.append(-sum(sims[p] - denominator for p in positives) / len(positives))
        per_head.append(sum(anchors) / len(anchors))
    return sum(per_head) / len(per_head)


def test_future_preparation_loss_against_a_loop() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 2, 12, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 2, 0, 5])
    got = future_preparation_loss(logits, labels, head_size=3, first_future_head=1, tau=5.0)
    assert math.isclose(float(got), reference_supcon(logits, labels, 3, 1, 5.0), rel_tol=1e-10)
    single_view = logits[:, :1]  # label 5 and 2 have no positive: those anchors do not count
    got = future_preparation_loss(single_view, labels, head_size=3, first_future_head=2, tau=0.5)
    assert math.isclose(float(got), reference_supcon(single_view, labels, 3, 2, 0.5), rel_tol=1e-10)


def test_future_preparation_loss_without_future_heads_is_zero() -> None:
    logits = torch.randn(4, 2, 6, requires_grad=True)
    loss = future_preparation_loss(
        logits, torch.tensor([0, 1, 2, 3]), head_size=3, first_future_head=2, tau=5.0
    )
    assert float(loss.detach()) == 0.0
    loss.backward()


def test_violation_mean() -> None:
    assert float(violation_mean(torch.tensor([-1.0, 2.0, 4.0]))) == 3.0
    assert float(violation_mean(torch.tensor([-1.0, -2.0]))) == 0.0
    assert float(violation_mean(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 0.0, 1.0]))) == 2.5
    # An entry of exactly 0 is no violation: it does not count in the mean (2 / 1, not 2 / 2).
    assert float(violation_mean(torch.tensor([0.0, 2.0, -1.0]))) == 2.0


def test_past_constraint_reference_and_paper_forms_by_loop() -> None:
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(8, 9, generator=g, dtype=torch.float64) * 2
    labels = torch.randint(6, 9, (8,), generator=g)  # task 2 of 3-class heads
    violations = []
    for row in logits.tolist():
        p = [math.exp(v) for v in row[:9]]
        p = [v / sum(p) for v in p]
        violations.append(max(p[:6]) + 0.3 - max(p[6:9]))
    positive = [v for v in violations if v > 0]
    expected = sum(positive) / len(positive) if positive else 0.0
    got = past_constraint(logits, task=2, head_size=3, margin=0.3)
    assert math.isclose(float(got), expected, rel_tol=1e-10)
    paper = [max(0.0, max(r[:6]) - r[y] + 0.3) for r, y in zip(logits.tolist(), labels.tolist(), strict=True)]
    got = past_constraint(logits, task=2, head_size=3, margin=0.3, labels=labels, form="paper")
    assert math.isclose(float(got), sum(paper) / 8, rel_tol=1e-10)


def test_future_constraint_reference_and_paper_forms_by_loop() -> None:
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(10, 12, generator=g, dtype=torch.float64) * 2
    labels = torch.tensor([3, 4, 5, 0, 1, 2, 3, 4, 0, 5])  # task 1 stream items and task 0 buffer items
    weights = torch.tensor([1, 1, 1, 1, 1, 1, 1, 1, 0, 1], dtype=torch.float64)
    violations = []
    for row, y, w in zip(logits.tolist(), labels.tolist(), weights.tolist(), strict=True):
        own = row[(y // 3) * 3 : (y // 3 + 1) * 3]
        v = max(row[6:]) + 0.7 - max(own)
        if w and v > 0:
            violations.append(v)
    got = future_constraint(logits, labels, task=1, head_size=3, margin=0.7, weights=weights)
    assert math.isclose(float(got), sum(violations) / max(len(violations), 1), rel_tol=1e-10)
    hinge = [
        max(0.0, max(r[6:]) - r[y] + 0.7) * w
        for r, y, w in zip(logits.tolist(), labels.tolist(), weights.tolist(), strict=True)
    ]
    got = future_constraint(logits, labels, task=1, head_size=3, margin=0.7, weights=weights, form="paper")
    assert math.isclose(float(got), sum(hinge) / 9, rel_tol=1e-10)


def test_constraints_vanish_when_nothing_is_violated() -> None:
    logits = torch.tensor([[0.0, 0.0, 10.0, 11.0, -5.0, -5.0]])
    assert float(past_constraint(logits, task=1, head_size=2, margin=0.1)) == 0.0
    assert float(future_constraint(logits, torch.tensor([3]), task=1, head_size=2, margin=0.1)) == 0.0


def test_at_least_float32_widens_half_floats_and_keeps_wider_ones() -> None:
    from xder_methods.parts.losses import at_least_float32

    for narrow in (torch.bfloat16, torch.float16):
        x = torch.tensor([1.5, -2.0], dtype=narrow)
        out = at_least_float32(x)
        assert out.dtype == torch.float32
        assert out.tolist() == [1.5, -2.0]
    for wide in (torch.float32, torch.float64):
        x = torch.tensor([1.5, -2.0], dtype=wide)
        assert at_least_float32(x) is x
