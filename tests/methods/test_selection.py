"""iCaRL's memory update and class means by hand (parts/selection.py). Herding itself is checked
against a brute-force search in test_properties.py, the methods' use of these in
test_lwf_icarl_lucir.py."""

from __future__ import annotations

import math

import torch

from xder_methods import Buffer, TaskData
from xder_methods.parts.selection import class_mean_features, herding, update_herding_buffer


def herded(y: torch.Tensor, features: torch.Tensor, label: int, m: int) -> torch.Tensor:
    """The rows of ``label`` that herding picks, in its order."""
    rows = torch.nonzero(y == label).flatten()
    return rows[herding(features[rows], m)]


def test_update_herding_buffer_groups_classes_cuts_them_and_keeps_task_labels() -> None:
    """Task 1 brings classes 1, 0, 2 interleaved (3 classes, unbalanced): 2 exemplars each, in
    class order, each class's in herding order, all with task label 1. Task 2 brings class 3 with
    1 exemplar a class: every stored class is cut to its first exemplar (keeping task label 1),
    class 3's follows with task label 2."""
    generator = torch.Generator().manual_seed(0)
    buffer = Buffer(8, (1,), torch.uint8)
    y = torch.tensor([1, 0, 2, 0, 1, 2, 0, 1])
    x = torch.arange(10, 18, dtype=torch.uint8)[:, None]
    features = torch.randn(8, 3, generator=generator)
    update_herding_buffer(buffer, TaskData(x, y, 1), features, 2)
    order = torch.cat([herded(y, features, c, 2) for c in (0, 1, 2)])
    assert (len(buffer), buffer.num_seen) == (6, 6)
    assert buffer.labels[:6].tolist() == [0, 0, 1, 1, 2, 2]
    assert torch.equal(buffer.examples[:6], x[order])
    assert buffer.task_labels[:6].tolist() == [1] * 6

    y2, x2 = torch.tensor([3, 3, 3]), torch.tensor([[20], [21], [22]], dtype=torch.uint8)
    features2 = torch.randn(3, 3, generator=generator)
    update_herding_buffer(buffer, TaskData(x2, y2, 2), features2, 1)
    assert (len(buffer), buffer.num_seen) == (4, 4)
    assert buffer.labels[:4].tolist() == [0, 1, 2, 3]
    assert torch.equal(buffer.examples[:3], x[order[[0, 2, 4]]])
    assert torch.equal(buffer.examples[3], x2[herded(y2, features2, 3, 1)[0]])
    assert buffer.task_labels[:4].tolist() == [1, 1, 1, 2]


def test_update_herding_buffer_with_a_task_without_rows_only_cuts() -> None:
    buffer = Buffer(4, (1,), torch.uint8)
    y, x = torch.tensor([0, 0, 1, 1]), torch.tensor([[1], [2], [3], [4]], dtype=torch.uint8)
    update_herding_buffer(buffer, TaskData(x, y, 0), torch.eye(4), 2)
    empty = TaskData(x[:0], y[:0], 1)
    update_herding_buffer(buffer, empty, torch.zeros(0, 4), 1)
    assert buffer.labels[: len(buffer)].tolist() == [0, 1]
    assert buffer.num_seen == 2


def test_class_means_in_float64_by_hand() -> None:
    """Class 0: unit features (.6, .8) and (0, 1), their sum (.6, 1.8) normalised to
    ``(1, 3) / sqrt 10``; class 1 absent (zero row); class 2: (1, 0). float64 in, float64 out."""
    features = torch.tensor([[3.0, 4.0], [0.0, 2.0], [5.0, 0.0]], dtype=torch.float64)
    means, present = class_mean_features(features, torch.tensor([0, 0, 2]), 3)
    assert means.dtype == torch.float64
    expected = torch.tensor(
        [[1 / math.sqrt(10), 3 / math.sqrt(10)], [0.0, 0.0], [1.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(means, expected, rtol=0, atol=1e-15)
    assert present.tolist() == [True, False, True]


def test_class_balanced_quotas_share_exactly_beyond_float_precision() -> None:
    """``free // n`` each in integer arithmetic: 2^53 + 1 (not a float64) is kept exactly."""
    from xder_methods.parts.selection import class_balanced_quotas

    free = 2**53 + 1
    assert class_balanced_quotas(free, 1, None, "cpu").tolist() == [free]
    quotas = class_balanced_quotas(2 * free + 1, 2, torch.Generator().manual_seed(0), "cpu")
    assert sorted(quotas.tolist()) == [free, free + 1]
