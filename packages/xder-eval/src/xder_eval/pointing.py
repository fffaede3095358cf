"""Pointing game (Zhang et al., ECCV 2016), as the X-DER paper scores Grad-CAM maps (Sec. 6.4).

For each (image, class) pair the maximum point of the class's saliency map is a *hit* when it falls on
the class's ground-truth region, up to a tolerance, and a *miss* otherwise. The paper's headline
figure is the pointing accuracy averaged over classes,

    PA = 1/|Y| sum_y #hit_y / (#hit_y + #miss_y),

the form TorchRay's pointing-game benchmark computes; the overall ``hits / (hits + misses)`` is
reported beside it. Both are fractions in [0, 1].

Conventions:

* The maximum point is the first maximum in row-major order (``argmax`` of the flattened map):
  on ties the topmost, then leftmost, pixel wins. A constant map (e.g. an all-zero Grad-CAM) points
  at pixel (0, 0). The centroid of the maxima is not used.
* TorchRay's tolerance test: a disc of radius r pixels around the point, strictly inside
  (``du^2 + dv^2 < r^2`` in integer pixel offsets), is a hit when it meets the mask. The disc always
  holds the point itself, so r = 0 is the strict test (the point must lie on the mask), and any
  r <= 1 gives the same result as r = 0.
* An item whose mask is empty is a miss (nothing can be hit). Drop such items beforehand if they
  should not count (e.g. an object that the centre crop removed).
* The tolerance is in pixels of the maps given: the original 15 px belongs to the original paper's
  image scale, so scale it to the evaluation geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xder_eval._arrays import ArrayLike, to_numpy

__all__ = ["PointingResult", "pointing_accuracy"]

_CHUNK = 64  # items per vectorised disc test: bounds the (chunk, H, W) temporaries


@dataclass(frozen=True, eq=False)
class PointingResult:
    """Outcome of the pointing game over N (image, class) pairs.

    Attributes:
        accuracy: mean over the classes present of each class's hits / (hits + misses) (the paper's
            PA, TorchRay's figure), a fraction.
        overall_accuracy: total hits / N, a fraction.
        per_class: class id -> that class's hits / (hits + misses).
        hits: (N,) bool, whether each item was a hit.
        points: (N, 2) int64, the (row, column) of each map's maximum point.
    """

    accuracy: float
    overall_accuracy: float
    per_class: dict[int, float]
    hits: np.ndarray
    points: np.ndarray

    @property
    def n_hits(self) -> int:
        return int(self.hits.sum())

    @property
    def n_misses(self) -> int:
        return int(self.hits.shape[0] - self.hits.sum())


def pointing_accuracy(
    saliency: ArrayLike, masks: ArrayLike, classes: ArrayLike, *, tolerance: float = 0.0
) -> PointingResult:
    """Pointing-game accuracy of saliency maps against ground-truth masks.

    Item i is a hit when ``exists (u, v) with masks[i, u, v] and (u - u_i)^2 + (v - v_i)^2 < r^2 or
    (u, v) = (u_i, v_i)``, where ``(u_i, v_i)`` is the first row-major argmax of ``saliency[i]`` and
    r = ``tolerance``. Accuracy per class y is ``#hit_y / (#hit_y + #miss_y)`` over the items of class
    y; the headline ``accuracy`` averages it over the classes present in ``classes``.

    Args:
        saliency: (N, H, W) saliency maps (e.g. Grad-CAM of the target class), no NaN.
        masks: (N, H, W) bool ground-truth regions of each item's target class, same geometry.
        classes: (N,) integer class id of each item (the class whose map and mask these are).
        tolerance: r, disc radius in pixels (>= 0; 0 is the strict test, TorchRay uses 15 at
            the original paper's image scale).

    Returns:
        A :class:`PointingResult`.

    Raises:
        ValueError: no items, shapes that disagree, NaN saliency, non-bool masks, non-integer
            classes, or a negative or non-finite tolerance.
    """
    maps = to_numpy(saliency, "saliency", ndim=3)
    regions = to_numpy(masks, "masks", ndim=3)
    labels = to_numpy(classes, "classes", ndim=1)
    if maps.shape != regions.shape:
        raise ValueError(f"saliency {maps.shape} and masks {regions.shape} must have the same shape")
    n, height, width = maps.shape
    if n == 0 or height == 0 or width == 0:
        raise ValueError(f"the pointing game needs at least one non-empty map, got shape {maps.shape}")
    if labels.shape[0] != n:
        raise ValueError(f"classes has {labels.shape[0]} entries, expected {n}")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"classes must hold integer class ids, not {labels.dtype}")
    if regions.dtype != np.bool_:
        raise ValueError(f"masks must be boolean, not {regions.dtype}")
    if np.isnan(maps).any():
        raise ValueError("saliency maps must not hold NaN")
    tolerance = float(tolerance)
    if not np.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a finite number of pixels >= 0, got {tolerance}")

    rows, cols = np.divmod(maps.reshape(n, -1).argmax(axis=1), width)  # first maximum, row-major
    hits = regions[np.arange(n), rows, cols]
    if tolerance > 1.0:  # r <= 1: the strict disc holds only the point itself
        radius2 = tolerance * tolerance
        grid_rows, grid_cols = np.arange(height), np.arange(width)
        for start in range(0, n, _CHUNK):
            stop = min(start + _CHUNK, n)
            du2 = (grid_rows[None, :] - rows[start:stop, None]) ** 2  # (n, H)
            dv2 = (grid_cols[None, :] - cols[start:stop, None]) ** 2  # (n, W)
            disc = du2[:, :, None] + dv2[:, None, :] < radius2
            hits[start:stop] = (disc & regions[start:stop]).reshape(stop - start, -1).any(axis=1)

    labels = labels.astype(np.int64)
    per_class = {int(c): float(hits[labels == c].mean()) for c in np.unique(labels)}
    return PointingResult(
        accuracy=float(np.mean(list(per_class.values()))),
        overall_accuracy=float(hits.mean()),
        per_class=per_class,
        hits=hits,
        points=np.stack([rows, cols], axis=1).astype(np.int64),
    )
