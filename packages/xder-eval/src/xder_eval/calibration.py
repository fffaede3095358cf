"""Calibration: Expected Calibration Error and reliability diagrams (Guo et al., ICML 2017).

The X-DER paper (Sec. 6.1, "Calibration of Continual Learners", Fig. "calibration") compares the ECE
of the final models on Split CIFAR-100, following Menon et al. (2021), who read a low ECE as a good
estimate of the Bayes class-probabilities.

Units: the inputs are probabilities, and so are the outputs: ECE, bin confidences and bin accuracies
are fractions in [0, 1] (the package's rule is that a metric returns the unit of its inputs; the
accuracy matrices are in percent because the training loop records them so). Multiply by 100 for a
percentage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xder_eval._arrays import ArrayLike, check_labels, to_numpy

__all__ = ["ReliabilityBins", "expected_calibration_error", "reliability_bins"]


@dataclass(frozen=True, eq=False)
class ReliabilityBins:
    """The data of a reliability diagram: equal-width confidence bins over [0, 1].

    Attributes:
        edges: (n_bins + 1,) bin edges ``b / n_bins``; bin b is the interval ``(edges[b], edges[b+1]]``
            (the first bin also holds a confidence of exactly 0).
        counts: (n_bins,) number of items whose confidence falls in each bin.
        confidence: (n_bins,) mean confidence (max probability) of each bin; NaN for an empty bin.
        accuracy: (n_bins,) fraction of the bin's items whose argmax is the label; NaN for an empty bin.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def n_bins(self) -> int:
        return int(self.counts.shape[0])

    @property
    def total(self) -> int:
        """Number of items binned (N)."""
        return int(self.counts.sum())

    def expected_calibration_error(self) -> float:
        """ECE = sum_b |B_b|/N * |acc(B_b) - conf(B_b)| over the non-empty bins (a fraction)."""
        filled = self.counts > 0
        weights = self.counts[filled] / self.total
        return float(np.sum(weights * np.abs(self.accuracy[filled] - self.confidence[filled])))


def reliability_bins(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> ReliabilityBins:
    """Bin items by confidence (their max probability) and measure each bin's accuracy.

    Confidence ``p_i = max_c probs[i, c]``, prediction ``y_hat_i = argmax_c probs[i, c]`` (the first
    index on ties). Bin b (0-based) is ``B_b = {i : b/M < p_i <= (b+1)/M}`` with M = ``n_bins``: bins
    are closed on the right, as Guo et al. write ``I_m = ((m-1)/M, m/M]``, so a confidence exactly on
    an inner edge ``b/M`` (compared with the float ``b / M``) belongs to the lower bin, and a
    confidence of 1 to the last one. A confidence of exactly 0 (impossible for a probability
    vector, whose max is at least 1/C) goes to the first bin rather than nowhere.

    Args:
        probs: (N, C) class probabilities (e.g. a softmax of the logits), entries in [0, 1]. Only
            each row's maximum and its position are used; rows need not sum to 1 exactly.
        labels: (N,) integer class ids in [0, C).
        n_bins: M, the number of equal-width bins (15 as in Guo et al.).

    Returns:
        The bins (see :class:`ReliabilityBins`); accuracies and confidences are fractions.

    Raises:
        ValueError: shapes that disagree, no items, NaN or out-of-range probabilities, bad labels,
            or ``n_bins < 1``.
    """
    p = to_numpy(probs, "probs", ndim=2).astype(np.float64)
    n, n_classes = p.shape
    if n == 0 or n_classes == 0:
        raise ValueError(f"probs must hold at least one item and one class, has shape {p.shape}")
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if np.isnan(p).any() or p.min() < 0.0 or p.max() > 1.0:
        raise ValueError("probs must be probabilities in [0, 1] (apply a softmax to logits first)")
    y = check_labels(to_numpy(labels, "labels", ndim=1), n, n_classes)

    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    # side="left" gives the first edge >= p, i.e. b + 1 for p in (edges[b], edges[b+1]].
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    counts = np.bincount(index, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):  # empty bins become NaN on purpose
        mean_confidence = np.bincount(index, weights=confidence, minlength=n_bins) / counts
        accuracy = np.bincount(index, weights=correct, minlength=n_bins) / counts
    return ReliabilityBins(edges=edges, counts=counts, confidence=mean_confidence, accuracy=accuracy)


def expected_calibration_error(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Expected Calibration Error (Guo et al., 2017), a fraction in [0, 1].

    ``ECE = sum_b |B_b| / N * |acc(B_b) - conf(B_b)|``, where ``acc(B_b)`` is the fraction of the
    bin's items predicted right (argmax, first index on ties), ``conf(B_b)`` their mean max
    probability, and the M = ``n_bins`` bins split [0, 1] into equal intervals closed on the right
    (``(b/M, (b+1)/M]``; see :func:`reliability_bins` for the edge rule). Empty bins add nothing.

    Args:
        probs: (N, C) class probabilities, entries in [0, 1].
        labels: (N,) integer class ids in [0, C).
        n_bins: number of bins (15, as in Guo et al.).

    Returns:
        The ECE as a fraction (multiply by 100 for percent).
    """
    return reliability_bins(probs, labels, n_bins).expected_calibration_error()
