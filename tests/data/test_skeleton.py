"""Skeleton augmentation and normalisation: per-sample draws, ranges, zeros kept, hand cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xder_data.augment import Compose
from xder_data.skeleton import SkeletonAugment, SkeletonNormalize, real_joints, rotation_matrices


def _skeletons(batch: int, frames: int = 6, seed: int = 0) -> torch.Tensor:
    """(B, 3, T, 25, 2) raw-looking skeletons: body 0 everywhere but the last two (padding)
    frames, body 1 absent (zeros) except in frames 1..2 of even samples."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(batch, 3, frames, 25, 2)
    x[:, :, : frames - 2, :, 0] = torch.rand(batch, 3, frames - 2, 25, generator=g) + torch.tensor(
        [0.0, 0.0, 3.0]
    ).view(1, 3, 1, 1)
    x[::2, :, 1:3, :, 1] = torch.rand(len(range(0, batch, 2)), 3, 2, 25, generator=g) + 1.0
    return x


def _fit_linear_maps(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per sample, the 3x3 matrix A with after = A @ before (least squares over all points)."""
    p = before.permute(0, 2, 3, 4, 1).reshape(before.shape[0], -1, 3).double()
    q = after.permute(0, 2, 3, 4, 1).reshape(after.shape[0], -1, 3).double()
    return torch.linalg.lstsq(p, q).solution.transpose(1, 2)  # q^T = A p^T


def _angles_of(r: torch.Tensor) -> torch.Tensor:
    """(theta_x, theta_y, theta_z) of R = Rz Ry Rx (|theta_y| < 90 degrees)."""
    theta_y = -torch.asin(r[:, 2, 0])
    theta_x = torch.atan2(r[:, 2, 1], r[:, 2, 2])
    theta_z = torch.atan2(r[:, 1, 0], r[:, 0, 0])
    return torch.stack([theta_x, theta_y, theta_z], dim=1)


def test_rotation_matrices_compose_z_y_x_by_hand() -> None:
    ax, ay, az = 0.3, -0.2, 0.5
    rx = np.array([[1, 0, 0], [0, math.cos(ax), -math.sin(ax)], [0, math.sin(ax), math.cos(ax)]])
    ry = np.array([[math.cos(ay), 0, math.sin(ay)], [0, 1, 0], [-math.sin(ay), 0, math.cos(ay)]])
    rz = np.array([[math.cos(az), -math.sin(az), 0], [math.sin(az), math.cos(az), 0], [0, 0, 1]])
    got = rotation_matrices(torch.tensor([[ax, ay, az]], dtype=torch.float64))[0].numpy()
    np.testing.assert_allclose(got, rz @ ry @ rx, atol=1e-12)
    # A quarter turn about z sends the x axis to the y axis (right-handed).
    quarter = rotation_matrices(torch.tensor([[0.0, 0.0, math.pi / 2]], dtype=torch.float64))[0]
    torch.testing.assert_close(
        quarter @ torch.tensor([1.0, 0, 0], dtype=torch.float64),
        torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64),
    )


def test_rotations_are_orthogonal_per_sample_and_within_thirty_degrees() -> None:
    x = _skeletons(512)
    out = SkeletonAugment(noise_mean=0.0, noise_std=0.0)(x, torch.Generator().manual_seed(1))
    maps = _fit_linear_maps(x, out)
    eye = torch.eye(3, dtype=torch.float64).expand(512, 3, 3)
    torch.testing.assert_close(maps @ maps.transpose(1, 2), eye, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        torch.linalg.det(maps), torch.ones(512, dtype=torch.float64), atol=1e-5, rtol=0
    )
    degrees = torch.rad2deg(_angles_of(maps))
    assert degrees.abs().max() <= 30.0 + 1e-3
    # Uniform on [-30, 30] per axis: the whole range is used and the quartiles sit near -15/+15.
    assert (degrees.min(dim=0).values < -29).all()
    assert (degrees.max(dim=0).values > 29).all()
    quartiles = torch.quantile(degrees, torch.tensor([0.25, 0.75], dtype=torch.float64), dim=0)
    assert torch.allclose(quartiles[0], torch.full((3,), -15.0, dtype=torch.float64), atol=3.0)
    assert torch.allclose(quartiles[1], torch.full((3,), 15.0, dtype=torch.float64), atol=3.0)
    # The three angles are drawn independently of each other.
    corr = torch.corrcoef(degrees.T)
    assert (corr - torch.eye(3, dtype=torch.float64)).abs().max() < 0.15


def test_every_sample_draws_its_own_parameters() -> None:
    x = _skeletons(1).expand(64, -1, -1, -1, -1)
    out = SkeletonAugment()(x, torch.Generator().manual_seed(2))
    flat = out.reshape(64, -1)
    assert torch.cdist(flat, flat).add(torch.eye(64) * 1e9).min() > 1e-3  # all 64 distinct
    maps = _fit_linear_maps(x, SkeletonAugment(noise_std=0.0, noise_mean=0.0)(x, torch.Generator()))
    assert len({tuple(a.round(decimals=4).flatten().tolist()) for a in maps}) == 64


def test_noise_has_the_paper_mean_and_std_on_real_joints_only() -> None:
    x = _skeletons(256)
    out = SkeletonAugment(max_degrees=0.0)(x, torch.Generator().manual_seed(3))
    real = real_joints(x).expand_as(x)
    noise = (out - x)[real]
    assert noise.mean().item() == pytest.approx(0.01, abs=0.001)
    assert noise.std().item() == pytest.approx(0.02, abs=0.001)
    assert torch.equal(out[~real], torch.zeros_like(out[~real]))


def test_zeros_stay_zero_under_the_full_augmentation() -> None:
    x = _skeletons(32)
    for augment in (SkeletonAugment(), SkeletonAugment(shear=0.3)):
        out = augment(x, torch.Generator().manual_seed(4))
        absent = ~real_joints(x).expand_as(x)
        assert torch.count_nonzero(out[absent]) == 0
        assert torch.equal(real_joints(out), real_joints(x))  # no real joint becomes zero


def test_reproducible_from_the_generator_and_global_rng_untouched() -> None:
    x = _skeletons(8).half()
    state = torch.get_rng_state()
    a = SkeletonAugment()(x, torch.Generator().manual_seed(5))
    b = SkeletonAugment()(x, torch.Generator().manual_seed(5))
    c = SkeletonAugment()(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.dtype == torch.float32
    assert torch.equal(state, torch.get_rng_state())


def test_shear_draws_off_diagonal_coefficients_in_range() -> None:
    augment = SkeletonAugment(max_degrees=0.0, shear=0.3)
    maps = augment.sample_matrices(2000, torch.Generator().manual_seed(7), torch.device("cpu"))
    diagonal = torch.diagonal(maps, dim1=1, dim2=2)
    assert torch.equal(diagonal, torch.ones_like(diagonal))
    off = maps[:, ~torch.eye(3, dtype=torch.bool)]
    assert off.abs().max() <= 0.3
    assert off.min() < -0.29
    assert off.max() > 0.29


def test_invalid_settings_and_shapes_are_rejected() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        SkeletonAugment(max_degrees=-1.0)
    with pytest.raises(ValueError, match=r"\(B, 3, T, V, M\)"):
        SkeletonAugment()(torch.zeros(2, 3, 4, 25), torch.Generator())
    with pytest.raises(ValueError, match="center"):
        SkeletonNormalize("full")  # type: ignore[arg-type]


def test_center_subtracts_body0_mid_spine_of_its_first_present_frame() -> None:
    x = torch.zeros(2, 3, 4, 25, 2)
    # Sample 0: body 0 absent in frame 0, present in frames 1..2; body 1 in frames 0..1.
    x[0, :, 1:3, :, 0] = torch.arange(1, 1 + 3 * 2 * 25, dtype=torch.float32).view(3, 2, 25)
    x[0, :, 0:2, :, 1] = 100.0
    # Sample 1: body 0 has no real joint at all (left unshifted).
    x[1, :, 0, :, 1] = 7.0
    out = SkeletonNormalize("center")(x)
    centre = x[0, :, 1, 1, 0]  # mid-spine (joint 2, index 1) of body 0 in frame 1
    assert centre.tolist() == [2.0, 52.0, 102.0]
    expected = x.clone()
    expected[0, :, 1:3, :, 0] -= centre.view(3, 1, 1)
    expected[0, :, 0:2, :, 1] -= centre.view(3, 1, 1)
    torch.testing.assert_close(out, expected)
    assert torch.count_nonzero(out[0, :, 3]) == 0  # the padding frame stays zero
    assert torch.count_nonzero(out[0, :, 0, :, 0]) == 0  # so does the absent body
    torch.testing.assert_close(out[1], x[1])


def test_none_only_casts() -> None:
    x = _skeletons(3).half()
    out = SkeletonNormalize("none")(x)
    assert out.dtype == torch.float32
    assert torch.equal(out, x.float())


def test_augment_then_center_is_a_rotation_about_the_body() -> None:
    """Rotation about the origin followed by centring equals centring followed by the rotation."""
    x = _skeletons(16)
    pipeline = Compose(SkeletonAugment(noise_mean=0.0, noise_std=0.0), SkeletonNormalize())
    out = pipeline(x, torch.Generator().manual_seed(8))
    matrices = SkeletonAugment(noise_mean=0.0, noise_std=0.0).sample_matrices(
        16, torch.Generator().manual_seed(8), torch.device("cpu")
    )
    expected = torch.einsum("bij,bjtvm->bitvm", matrices, SkeletonNormalize()(x))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
