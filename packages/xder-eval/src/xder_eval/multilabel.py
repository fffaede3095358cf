"""Multi-label F1 for the COCO-stitched secondary targets (X-DER paper Sec. 6.4, App. "Secondary Targets").

The paper's protocol: each test image is a CIFAR-100 image of a primary class with a COCO patch of a
different, secondary class stitched on it (both drawn from the classes the two datasets share). A
linear classifier on the frozen features is trained "in a multi-label classification scenario",
activating "each logit with a sigmoid" under binary cross-entropy, and is scored "by means of the
F1-score, computed on the secondary targets of the previously-generated test data".

The paper names neither the decision threshold nor the averaging. The choices here:

* a label is predicted when its sigmoid probability is strictly above 0.5 (``scores > threshold``;
  pass logits with ``threshold=0.0`` for the same decision);
* "computed on the secondary targets" (:func:`secondary_target_f1`): the secondary class is the one
  positive of each image, and the primary class's entry is left out of the counts (the classifier
  was trained to predict it, so it is neither a true nor a false positive of the secondary target);
  every other predicted label is a false positive;
* micro averaging by default (one F1 over all counted (image, label) entries); ``"macro"`` (mean of the
  per-label F1) and ``"samples"`` (mean of the per-image F1) are available.

``F1 = 2 TP / (2 TP + FP + FN)``, which equals the harmonic mean of precision and recall whenever
both are defined. When ``2 TP + FP + FN = 0`` (no positive and no prediction) F1 is undefined and
takes ``zero_division`` (0, as scikit-learn does by default; NaN drops that label or image from a
macro or samples average). Results are fractions in [0, 1].
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from xder_eval._arrays import ArrayLike, check_labels, to_numpy

__all__ = ["multilabel_f1", "secondary_target_f1"]

Average = Literal["micro", "macro", "samples"]


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, zero_division: float) -> np.ndarray:
    denominator = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = 2 * tp / denominator
    return np.where(denominator > 0, f1, zero_division)


def multilabel_f1(
    scores: ArrayLike,
    targets: ArrayLike,
    *,
    threshold: float = 0.5,
    average: Average = "micro",
    ignore: ArrayLike | None = None,
    zero_division: float = 0.0,
) -> float:
    """F1 of thresholded multi-label predictions.

    With ``pred = scores > threshold`` and only the entries where ``ignore`` is False counted,
    ``TP = pred & targets``, ``FP = pred & ~targets``, ``FN = ~pred & targets``, and
    ``F1 = 2 TP / (2 TP + FP + FN)``:

    * ``"micro"``: TP, FP, FN summed over all counted entries, one F1;
    * ``"macro"``: one F1 per label (column), then their mean;
    * ``"samples"``: one F1 per item (row), then their mean.

    Args:
        scores: (N, C) sigmoid probabilities (or logits, with ``threshold=0.0``).
        targets: (N, C) bool, the true labels of each item.
        threshold: a label is predicted when its score is strictly greater.
        average: ``"micro"``, ``"macro"`` or ``"samples"``.
        ignore: optional (N, C) bool, entries left out of every count (e.g. the primary class when
            scoring secondary targets).
        zero_division: F1 of a unit (the whole set for micro, a label, an item) with no positive and
            no prediction; NaN leaves it out of a macro/samples mean (NaN if every unit is left out).

    Returns:
        F1, a fraction in [0, 1] (or ``zero_division``).

    Raises:
        ValueError: shapes that disagree, no items, non-bool targets or ignore, NaN scores, or an
            unknown ``average``.
    """
    s = to_numpy(scores, "scores", ndim=2)
    t = to_numpy(targets, "targets", ndim=2)
    if s.shape != t.shape:
        raise ValueError(f"scores {s.shape} and targets {t.shape} must have the same shape")
    if s.shape[0] == 0 or s.shape[1] == 0:
        raise ValueError(f"F1 needs at least one item and one label, got shape {s.shape}")
    if t.dtype != np.bool_:
        raise ValueError(f"targets must be boolean, not {t.dtype}")
    if np.isnan(s).any():
        raise ValueError("scores must not hold NaN")
    counted = np.ones_like(t)
    if ignore is not None:
        skip = to_numpy(ignore, "ignore", ndim=2)
        if skip.shape != t.shape or skip.dtype != np.bool_:
            raise ValueError(f"ignore must be a boolean array of shape {t.shape}")
        counted = ~skip
    if average not in ("micro", "macro", "samples"):
        raise ValueError(f"average must be 'micro', 'macro' or 'samples', got {average!r}")

    pred = s > threshold
    tp = pred & t & counted
    fp = pred & ~t & counted
    fn = ~pred & t & counted
    if average == "micro":
        return float(_f1(tp.sum(), fp.sum(), fn.sum(), zero_division))
    axis = 0 if average == "macro" else 1
    per_unit = _f1(tp.sum(axis=axis), fp.sum(axis=axis), fn.sum(axis=axis), zero_division)
    if np.isnan(per_unit).all():
        return float("nan")
    return float(np.nanmean(per_unit))


def secondary_target_f1(
    scores: ArrayLike,
    primary: ArrayLike,
    secondary: ArrayLike,
    *,
    threshold: float = 0.5,
    average: Average = "micro",
    zero_division: float = float("nan"),
) -> float:
    """F1 on the secondary targets of the COCO-stitched images (the paper's Fig. "coco").

    Each item's one positive is its secondary (stitched) class; its primary class's entry is ignored;
    every other label is a negative. Equivalent to :func:`multilabel_f1` with ``targets`` the one-hot
    of ``secondary`` and ``ignore`` the one-hot of ``primary``.

    Args:
        scores: (N, C) sigmoid probabilities of the multi-label linear probe.
        primary: (N,) class id of the background (CIFAR-100) image.
        secondary: (N,) class id of the stitched (COCO) object, different from ``primary``.
        threshold: a label is predicted when its score is strictly greater (0.5 on probabilities).
        average: ``"micro"`` (default), ``"macro"`` or ``"samples"``.
        zero_division: as in :func:`multilabel_f1`. It matters only for ``"macro"`` (every item has
            one positive), where the default NaN leaves out labels that are never a secondary target
            and never predicted, e.g. the non-shared classes of a 100-way probe, instead of counting
            them as 0.

    Returns:
        F1, a fraction in [0, 1].

    Raises:
        ValueError: bad shapes or ids, or an item whose primary and secondary classes coincide.
    """
    s = to_numpy(scores, "scores", ndim=2)
    n, n_classes = s.shape
    first = check_labels(to_numpy(primary, "primary", ndim=1), n, n_classes, "primary")
    second = check_labels(to_numpy(secondary, "secondary", ndim=1), n, n_classes, "secondary")
    same = np.flatnonzero(first == second)
    if same.size:
        raise ValueError(f"items {same[:5].tolist()} have the same primary and secondary class")
    rows = np.arange(n)
    targets = np.zeros((n, n_classes), dtype=bool)
    targets[rows, second] = True
    ignore = np.zeros((n, n_classes), dtype=bool)
    ignore[rows, first] = True
    return multilabel_f1(
        s, targets, threshold=threshold, average=average, ignore=ignore, zero_division=zero_division
    )
