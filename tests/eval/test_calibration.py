"""ECE and reliability bins worked out by hand (Guo et al., 2017), and the reliability diagram."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from xder_eval import ReliabilityBins, expected_calibration_error, plot_reliability_diagram, reliability_bins

# n_bins = 5: bins (0, .2], (.2, .4], (.4, .6], (.6, .8], (.8, 1].
PROBS = np.array(
    [
        [0.90, 0.10, 0.00],  # conf .90 -> bin 4, right
        [0.30, 0.70, 0.00],  # conf .70 -> bin 3, wrong (label 0)
        [0.60, 0.40, 0.00],  # conf .60, on the edge .6 -> bin 2 (closed on the right), right
        [0.45, 0.55, 0.00],  # conf .55 -> bin 2, right
        [0.80, 0.20, 0.00],  # conf .80, on the edge .8 -> bin 3, wrong (label 1)
        [1.00, 0.00, 0.00],  # conf 1 -> bin 4 (the last), right
        [0.35, 0.33, 0.32],  # conf .35 -> bin 1, wrong (label 2)
    ]
)
LABELS = np.array([0, 0, 0, 1, 1, 0, 2])


def test_reliability_bins_by_hand() -> None:
    bins = reliability_bins(PROBS, LABELS, n_bins=5)
    np.testing.assert_allclose(bins.edges, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    np.testing.assert_array_equal(bins.counts, [0, 1, 2, 2, 2])
    np.testing.assert_allclose(bins.confidence[1:], [0.35, 0.575, 0.75, 0.95])
    np.testing.assert_allclose(bins.accuracy[1:], [0.0, 1.0, 0.0, 1.0])
    assert np.isnan(bins.confidence[0])
    assert np.isnan(bins.accuracy[0])
    assert bins.n_bins == 5
    assert bins.total == 7


def test_ece_by_hand() -> None:
    # (1 * |0 - .35| + 2 * |1 - .575| + 2 * |0 - .75| + 2 * |1 - .95|) / 7 = (.35 + .85 + 1.5 + .1) / 7
    assert expected_calibration_error(PROBS, LABELS, n_bins=5) == pytest.approx(0.4)
    assert reliability_bins(PROBS, LABELS, n_bins=5).expected_calibration_error() == pytest.approx(0.4)


def test_ece_is_zero_when_confidence_matches_accuracy() -> None:
    probs = np.array([[0.75, 0.25]] * 4)
    assert expected_calibration_error(probs, np.array([0, 0, 0, 1])) == pytest.approx(0.0)


def test_one_bin_compares_mean_confidence_with_accuracy() -> None:
    # A single bin: ECE = |accuracy - mean confidence| = |2/3 - (.9 + .7 + .5) / 3|.
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.5, 0.5]])
    assert expected_calibration_error(probs, np.array([0, 1, 1]), n_bins=1) == pytest.approx(1 / 30)


@pytest.mark.parametrize(
    ("confidence", "n_bins", "expected_bin"),
    [
        (0.2, 5, 0),  # exactly on the inner edge 1/5: the lower bin
        (np.nextafter(0.2, 1.0), 5, 1),  # just above it: the upper bin
        (1 / 3, 15, 4),  # 5/15 as a float: bin (4/15, 5/15]
        (1.0, 15, 14),  # the last bin is closed on the right
        (0.0, 15, 0),  # zero goes to the first bin rather than nowhere
    ],
)
def test_edge_convention(confidence: float, n_bins: int, expected_bin: int) -> None:
    probs = np.array([[confidence, 0.0]])
    counts = reliability_bins(probs, np.array([0]), n_bins=n_bins).counts
    assert counts.sum() == 1
    assert counts[expected_bin] == 1


def test_default_is_fifteen_bins() -> None:
    """Without n_bins, Guo et al.'s M = 15. Confidences .5 and .52 share the bin (7/15, 8/15] =
    (.467, .533] of 15 bins, but not of 16, where .5 = 8/16 closes bin 7 and .52 opens bin 8."""
    probs = np.array([[0.5, 0.5], [0.52, 0.48]])  # both predict class 0 (the first on a tie)
    labels = np.array([0, 1])  # the first right, the second wrong
    bins = reliability_bins(probs, labels)
    assert bins.n_bins == 15
    assert bins.edges[1] == 1 / 15
    assert bins.counts[7] == 2
    # One bin: |accuracy .5 - confidence .51| = .01 (16 bins: .5 * |1 - .5| + .5 * |0 - .52| = .51).
    assert expected_calibration_error(probs, labels) == pytest.approx(0.01)


def test_one_class_is_enough() -> None:
    # C = 1: every item is predicted right with confidence 1, a perfectly calibrated model.
    assert expected_calibration_error(np.ones((2, 1)), np.array([0, 0])) == 0.0


def test_empty_bins_are_nan_whatever_the_callers_error_state() -> None:
    """An empty bin's mean is 0 / 0, silenced on purpose: NaN even for a caller that makes numpy
    raise on every floating-point error (bin 0 of PROBS with 5 bins is empty)."""
    with np.errstate(all="raise"):
        bins = reliability_bins(PROBS, LABELS, n_bins=5)
    assert np.isnan(bins.confidence[0])
    assert np.isnan(bins.accuracy[0])


def test_ties_predict_the_first_class() -> None:
    probs = np.array([[0.5, 0.5]])
    assert reliability_bins(probs, np.array([0]), n_bins=2).accuracy[0] == 1.0
    assert reliability_bins(probs, np.array([1]), n_bins=2).accuracy[0] == 0.0


def _ece_by_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    """Guo et al.'s formula bin by bin with (lower, upper] masks, written independently."""
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    total = 0.0
    for b in range(n_bins):
        lower, upper = b / n_bins, (b + 1) / n_bins
        in_bin = (confidence > lower) & (confidence <= upper)
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    return total


@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece_matches_the_formula_on_random_inputs(n_bins: int) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(500, 10, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (500,), generator=generator)
    probs = logits.softmax(dim=1)
    expected = _ece_by_loop(probs.numpy(), labels.numpy(), n_bins)
    assert expected_calibration_error(probs, labels, n_bins) == pytest.approx(expected, abs=1e-12)
    assert 0.0 < expected < 1.0


def test_tensor_inputs() -> None:
    probs = torch.tensor(PROBS, dtype=torch.float64)
    assert expected_calibration_error(probs, torch.tensor(LABELS), n_bins=5) == pytest.approx(0.4)
    # bfloat16 (which numpy lacks) is widened first; .75 and .25 are exact in it.
    low = torch.tensor([[0.75, 0.25]] * 4, dtype=torch.bfloat16)
    assert expected_calibration_error(low, torch.tensor([0, 0, 0, 1])) == pytest.approx(0.0)


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error(np.array([[2.0, -1.0]]), np.array([0]))
    # Each way out of [0, 1] alone is refused: below 0, above 1 (by less than 2), NaN.
    for bad in ([-0.1, 0.5], [1.5, 0.0], [np.nan, 0.5]):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            expected_calibration_error(np.array([bad]), np.array([0]))
    with pytest.raises(ValueError, match="entries"):
        expected_calibration_error(PROBS, LABELS[:3])
    with pytest.raises(ValueError, match=r"lie in \[0, 3\)"):
        expected_calibration_error(PROBS, LABELS + 1)
    for n_bins in (0, True, 2.0):  # a bool or a float is not a number of bins, even if it equals one
        with pytest.raises(ValueError, match="n_bins must be a positive integer"):
            expected_calibration_error(PROBS, LABELS, n_bins=n_bins)  # type: ignore[arg-type]
    # The messages name the argument of the wrong rank.
    with pytest.raises(ValueError, match="probs must have 2 dimensions"):
        expected_calibration_error(PROBS[0], LABELS[:1])
    with pytest.raises(ValueError, match="labels must have 1 dimensions"):
        expected_calibration_error(PROBS, LABELS[:, None])
    with pytest.raises(ValueError, match="at least one item and one class"):
        expected_calibration_error(np.zeros((0, 3)), np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="at least one item and one class"):
        expected_calibration_error(np.zeros((3, 0)), np.zeros(3, dtype=np.int64))


def test_reliability_diagram_is_a_png(tmp_path: Path) -> None:
    bins = reliability_bins(PROBS, LABELS, n_bins=5)
    assert isinstance(bins, ReliabilityBins)
    path = plot_reliability_diagram(bins, tmp_path / "reliability.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 1000
