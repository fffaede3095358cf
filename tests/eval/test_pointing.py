"""Pointing game on handmade masks and saliency maps with planted maxima (Zhang et al., 2016)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xder_eval import PointingResult, pointing_accuracy

H, W = 6, 8


def _map(*peaks: tuple[int, int], value: float = 1.0) -> np.ndarray:
    """A saliency map with low noise-free background and the given peak pixels."""
    sal = np.linspace(0.0, 0.5, H * W).reshape(H, W)  # strictly below every peak
    for row, col in peaks:
        sal[row, col] = value
    return sal


def _mask(*pixels: tuple[int, int]) -> np.ndarray:
    mask = np.zeros((H, W), dtype=bool)
    for row, col in pixels:
        mask[row, col] = True
    return mask


def _box(top: int, left: int, bottom: int, right: int) -> np.ndarray:
    mask = np.zeros((H, W), dtype=bool)
    mask[top:bottom, left:right] = True
    return mask


def test_hits_and_misses_with_planted_maxima() -> None:
    saliency = np.stack([_map((2, 3)), _map((0, 0)), _map((5, 7))])
    masks = np.stack([_box(1, 2, 4, 5), _box(1, 2, 4, 5), _box(5, 7, 6, 8)])
    result = pointing_accuracy(saliency, masks, np.array([0, 0, 1]))
    np.testing.assert_array_equal(result.hits, [True, False, True])
    np.testing.assert_array_equal(result.points, [[2, 3], [0, 0], [5, 7]])
    assert result.n_hits == 2
    assert result.n_misses == 1


def test_per_class_average_differs_from_the_overall_rate() -> None:
    # Class 7: three images, two hits (2/3). Class 2: one image, a hit (1).
    saliency = np.stack([_map((1, 1)), _map((4, 6)), _map((0, 7)), _map((3, 3))])
    masks = np.stack([_box(0, 0, 3, 3), _box(3, 5, 6, 8), _box(3, 0, 6, 3), _box(2, 2, 5, 5)])
    result = pointing_accuracy(saliency, masks, np.array([7, 7, 7, 2]))
    assert isinstance(result, PointingResult)
    assert result.per_class == pytest.approx({7: 2 / 3, 2: 1.0})
    assert result.accuracy == pytest.approx((2 / 3 + 1) / 2)  # PA: mean over classes = 5/6
    assert result.overall_accuracy == pytest.approx(3 / 4)  # hits / (hits + misses)


def test_ties_take_the_first_maximum_in_row_major_order() -> None:
    # Equal peaks at (0, 5) and (1, 0): row-major order visits (0, 5) first.
    saliency = _map((1, 0), (0, 5))[None]
    on_first = pointing_accuracy(saliency, _mask((0, 5))[None], np.array([0]))
    on_second = pointing_accuracy(saliency, _mask((1, 0))[None], np.array([0]))
    assert on_first.hits[0]
    assert not on_second.hits[0]
    np.testing.assert_array_equal(on_first.points, [[0, 5]])
    # Same row: the leftmost wins.
    same_row = _map((3, 6), (3, 2))[None]
    np.testing.assert_array_equal(pointing_accuracy(same_row, _mask((3, 2))[None], [0]).points, [[3, 2]])


def test_a_constant_map_points_at_the_top_left_pixel() -> None:
    saliency = np.zeros((2, H, W))  # e.g. Grad-CAM of a non-positive CAM
    masks = np.stack([_mask((0, 0)), _mask((0, 1))])
    np.testing.assert_array_equal(pointing_accuracy(saliency, masks, [0, 1]).hits, [True, False])


@pytest.mark.parametrize(
    ("tolerance", "hit"),
    [
        (0.0, False),  # strict: the point (2, 2) itself is off the mask
        (1.0, False),  # du^2 + dv^2 < 1 holds only the point itself
        (2.0, False),  # the mask pixel (2, 4) is at distance exactly 2: not strictly inside
        (2.01, True),
        (15.0, True),
    ],
)
def test_tolerance_disc_is_strict(tolerance: float, hit: bool) -> None:
    result = pointing_accuracy(_map((2, 2))[None], _mask((2, 4))[None], [0], tolerance=tolerance)
    assert bool(result.hits[0]) is hit


@pytest.mark.parametrize(("tolerance", "hit"), [(1.0, False), (1.4142, False), (1.4143, True)])
def test_tolerance_on_a_diagonal_neighbour(tolerance: float, hit: bool) -> None:
    # The mask pixel (3, 3) is at squared distance 2 from the point (2, 2).
    result = pointing_accuracy(_map((2, 2))[None], _mask((3, 3))[None], [0], tolerance=tolerance)
    assert bool(result.hits[0]) is hit


def test_tolerance_near_the_border_and_with_an_empty_mask() -> None:
    # The point at the corner (0, 0), the mask pixel at (1, 2): squared distance 5.
    saliency = np.stack([_map((0, 0)), _map((0, 0))])
    masks = np.stack([_mask((1, 2)), np.zeros((H, W), dtype=bool)])
    result = pointing_accuracy(saliency, masks, [0, 1], tolerance=2.3)
    np.testing.assert_array_equal(result.hits, [True, False])  # an empty mask is a miss
    assert pointing_accuracy(saliency, masks, [0, 1], tolerance=2.2).n_hits == 0  # 2.2^2 = 4.84 < 5


def _by_brute_force(saliency: np.ndarray, masks: np.ndarray, tolerance: float) -> np.ndarray:
    hits = []
    for sal, mask in zip(saliency, masks, strict=True):
        flat = int(np.argmax(sal))
        u, v = divmod(flat, sal.shape[1])
        hit = bool(mask[u, v])
        for a, b in zip(*np.nonzero(mask), strict=True):
            hit = hit or (a - u) ** 2 + (b - v) ** 2 < tolerance**2
        hits.append(hit)
    return np.array(hits)


@pytest.mark.parametrize("tolerance", [0.0, 1.5, 3.0, 7.5])
def test_matches_brute_force_on_random_maps(tolerance: float) -> None:
    generator = torch.Generator().manual_seed(2)
    saliency = torch.rand(150, 12, 10, generator=generator)  # more items than one vectorised chunk
    masks = torch.rand(150, 12, 10, generator=generator) > 0.97
    classes = torch.randint(0, 5, (150,), generator=generator)
    result = pointing_accuracy(saliency, masks, classes, tolerance=tolerance)
    expected = _by_brute_force(saliency.numpy(), masks.numpy(), tolerance)
    np.testing.assert_array_equal(result.hits, expected)
    per_class = [expected[classes.numpy() == c].mean() for c in range(5)]
    assert result.accuracy == pytest.approx(np.mean(per_class))
    assert result.overall_accuracy == pytest.approx(expected.mean())


def test_invalid_inputs() -> None:
    saliency, masks = _map((0, 0))[None], _mask((0, 0))[None]
    with pytest.raises(ValueError, match="same shape"):
        pointing_accuracy(saliency, masks[:, :3], [0])
    with pytest.raises(ValueError, match="boolean"):
        pointing_accuracy(saliency, masks.astype(np.uint8), [0])
    with pytest.raises(ValueError, match="tolerance"):
        pointing_accuracy(saliency, masks, [0], tolerance=-1.0)
    with pytest.raises(ValueError, match="entries"):
        pointing_accuracy(saliency, masks, [0, 1])
    with pytest.raises(ValueError, match="NaN"):
        pointing_accuracy(np.full((1, H, W), np.nan), masks, [0])
    with pytest.raises(ValueError, match="3 dimensions"):
        pointing_accuracy(saliency[0], masks[0], [0])
