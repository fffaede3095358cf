"""Multi-label F1 and the secondary-target F1 of the COCO-stitched images, worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xder_eval import multilabel_f1, secondary_target_f1

# Three items, three labels; predictions at threshold 0.5 (strictly above):
#   item 0: pred {0, 1}, true {0}     -> TP 1, FP 1, FN 0
#   item 1: pred {2},    true {1, 2}  -> TP 1, FP 0, FN 1
#   item 2: pred {},     true {2}     -> TP 0, FP 0, FN 1   (0.5 is not above 0.5)
SCORES = np.array(
    [
        [0.9, 0.6, 0.1],
        [0.2, 0.4, 0.7],
        [0.1, 0.3, 0.5],
    ]
)
TARGETS = np.array(
    [
        [True, False, False],
        [False, True, True],
        [False, False, True],
    ]
)


def test_micro_f1_by_hand() -> None:
    # TP 2, FP 1, FN 2: 2*2 / (4 + 1 + 2).
    assert multilabel_f1(SCORES, TARGETS) == pytest.approx(4 / 7)


def test_macro_f1_by_hand() -> None:
    # label 0: TP 1 -> 1; label 1: FP 1, FN 1 -> 0; label 2: TP 1, FN 1 -> 2/3.
    assert multilabel_f1(SCORES, TARGETS, average="macro") == pytest.approx((1 + 0 + 2 / 3) / 3)


def test_samples_f1_by_hand() -> None:
    # item 0: 2/3; item 1: 2/3; item 2: 0.
    assert multilabel_f1(SCORES, TARGETS, average="samples") == pytest.approx(4 / 9)


def test_threshold_is_strict_and_movable() -> None:
    # At 0.45 item 2's 0.5 counts: TP 3, FP 1, FN 1 -> 6 / 8.
    assert multilabel_f1(SCORES, TARGETS, threshold=0.45) == pytest.approx(6 / 8)
    # Logits with threshold 0 make the same decisions as probabilities with 0.5.
    logits = torch.logit(torch.tensor(SCORES))
    assert multilabel_f1(logits, torch.tensor(TARGETS), threshold=0.0) == pytest.approx(4 / 7)


def test_ignored_entries_leave_every_count() -> None:
    ignore = np.zeros_like(TARGETS)
    ignore[0, 1] = True  # item 0's false positive
    ignore[1, 1] = True  # item 1's false negative
    # TP 2, FP 0, FN 1: 4 / 5. Macro: label 1 has no positive and no prediction left (zero_division).
    assert multilabel_f1(SCORES, TARGETS, ignore=ignore) == pytest.approx(4 / 5)
    assert multilabel_f1(SCORES, TARGETS, ignore=ignore, average="macro") == pytest.approx(
        (1 + 0 + 2 / 3) / 3
    )
    nan = float("nan")
    assert multilabel_f1(SCORES, TARGETS, ignore=ignore, average="macro", zero_division=nan) == pytest.approx(
        (1 + 2 / 3) / 2
    )


def test_no_positives_and_no_predictions() -> None:
    scores = np.zeros((2, 3))
    empty = np.zeros((2, 3), dtype=bool)
    for average in ("micro", "macro", "samples"):
        assert multilabel_f1(scores, empty, average=average) == 0.0
        assert multilabel_f1(scores, empty, average=average, zero_division=1.0) == 1.0
        assert math.isnan(multilabel_f1(scores, empty, average=average, zero_division=float("nan")))


def test_predictions_without_positives_and_positives_without_predictions() -> None:
    empty = np.zeros((2, 2), dtype=bool)
    assert multilabel_f1(np.ones((2, 2)), empty, zero_division=1.0) == 0.0  # only false positives
    assert multilabel_f1(np.zeros((2, 2)), ~empty, zero_division=1.0) == 0.0  # only false negatives


def test_samples_average_skips_empty_items_with_nan() -> None:
    # item 0 perfect (1), item 1 has no positive and no prediction.
    scores = np.array([[0.9, 0.1], [0.1, 0.1]])
    targets = np.array([[True, False], [False, False]])
    assert multilabel_f1(scores, targets, average="samples") == pytest.approx(0.5)
    assert multilabel_f1(scores, targets, average="samples", zero_division=float("nan")) == 1.0


def _by_loop(scores: np.ndarray, targets: np.ndarray, average: str) -> float:
    """Precision, recall and their harmonic mean, counted entry by entry."""
    n, c = scores.shape

    def f1(cells: list[tuple[int, int]]) -> float:
        tp = sum(1 for i, j in cells if scores[i, j] > 0.5 and targets[i, j])
        fp = sum(1 for i, j in cells if scores[i, j] > 0.5 and not targets[i, j])
        fn = sum(1 for i, j in cells if scores[i, j] <= 0.5 and targets[i, j])
        if tp == 0:
            return 0.0
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        return 2 * precision * recall / (precision + recall)

    if average == "micro":
        return f1([(i, j) for i in range(n) for j in range(c)])
    if average == "macro":
        return float(np.mean([f1([(i, j) for i in range(n)]) for j in range(c)]))
    return float(np.mean([f1([(i, j) for j in range(c)]) for i in range(n)]))


@pytest.mark.parametrize("average", ["micro", "macro", "samples"])
def test_matches_precision_and_recall_on_random_inputs(average: str) -> None:
    generator = torch.Generator().manual_seed(3)
    scores = torch.rand(60, 7, generator=generator, dtype=torch.float64)
    targets = torch.rand(60, 7, generator=generator) > 0.7
    expected = _by_loop(scores.numpy(), targets.numpy(), average)
    assert multilabel_f1(scores, targets, average=average) == pytest.approx(expected)


def test_secondary_target_f1_by_hand() -> None:
    # Four stitched images over 4 classes; (primary, secondary) and the labels predicted above 0.5:
    #   (0, 1): pred {0, 1}  -> primary ignored, TP 1
    #   (1, 2): pred {1}     -> primary ignored, FN 1
    #   (2, 3): pred {3, 0}  -> TP 1, FP 1 (class 0)
    #   (3, 0): pred {}      -> FN 1
    scores = np.array(
        [
            [0.9, 0.8, 0.1, 0.1],
            [0.1, 0.9, 0.2, 0.1],
            [0.7, 0.1, 0.4, 0.6],
            [0.1, 0.1, 0.1, 0.1],
        ]
    )
    primary, secondary = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    # Micro: TP 2, FP 1, FN 2 -> 4 / 7.
    assert secondary_target_f1(scores, primary, secondary) == pytest.approx(4 / 7)
    # Samples: 1, 0, 2/3, 0.
    assert secondary_target_f1(scores, primary, secondary, average="samples") == pytest.approx(5 / 12)
    # Macro per class: 0 -> FP 1 (item 2), FN 1 (item 3): 0; 1 -> TP: 1; 2 -> FN: 0; 3 -> TP: 1.
    assert secondary_target_f1(scores, primary, secondary, average="macro") == pytest.approx(0.5)


def test_secondary_target_macro_leaves_out_classes_never_involved() -> None:
    # A 5-way probe: classes 0, 2 (only ever primary, hence ignored) and 4 are never a counted
    # positive nor predicted. The default zero_division (NaN) leaves them out of the macro mean
    # instead of counting them as 0.
    scores = np.array([[0.9, 0.8, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.9, 0.1]])
    primary, secondary = np.array([0, 2]), np.array([1, 3])
    assert secondary_target_f1(scores, primary, secondary, average="macro") == pytest.approx(1.0)
    assert secondary_target_f1(scores, primary, secondary, average="macro", zero_division=0.0) == (
        pytest.approx(2 / 5)
    )


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="same primary and secondary"):
        secondary_target_f1(np.zeros((2, 3)), np.array([0, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="boolean"):
        multilabel_f1(SCORES, TARGETS.astype(int))
    with pytest.raises(ValueError, match="average"):
        multilabel_f1(SCORES, TARGETS, average="weighted")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same shape"):
        multilabel_f1(SCORES, TARGETS[:, :2])
    with pytest.raises(ValueError, match="ignore"):
        multilabel_f1(SCORES, TARGETS, ignore=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"lie in \[0, 3\)"):
        secondary_target_f1(np.zeros((1, 3)), np.array([0]), np.array([3]))
