"""Batched skeleton augmentation and normalisation, for ``(B, C=3, T, V, M)`` joint tensors.

Same contract as :mod:`xder_data.augment`: every transform is ``transform(x, generator) -> Tensor``
on a whole batch on any device, random parameters are drawn per sample from ``generator`` (a
``torch.Generator`` on ``x``'s device), and nothing loops over samples in Python.

A joint is *real* when any of its three coordinates is non-zero. Absent bodies, frames without a
body and the zero padding of NTU arrays are all-zero joints: every transform here keeps them at
exactly zero (no noise, no shift), so that a missing second body stays missing.

Paper (X-DER, App. "Data Augmentation Techniques", following Li et al. 2017): Gaussian noise with
mean 0.01 and standard deviation 0.02 on the 3-D coordinates, then a random rotation of up to
±30° about the x, y and z axes; "finally, all data points are normalized". The paper does not say
which normalisation; :class:`SkeletonNormalize` documents the one chosen here.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

__all__ = ["SkeletonAugment", "SkeletonNormalize", "real_joints", "rotation_matrices"]

MID_SPINE = 1
"""0-based index of NTU joint 2, "middle of the spine"."""


def real_joints(x: Tensor) -> Tensor:
    """Mask of the real joints of ``x: (B, 3, T, V, M)``: ``(B, 1, T, V, M)`` bool."""
    return (x != 0).any(dim=1, keepdim=True)


def rotation_matrices(angles: Tensor) -> Tensor:
    """Rotations ``R = Rz @ Ry @ Rx`` from angles about x, y and z.

    Each factor is the standard right-handed rotation, e.g.
    ``Rz = [[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]]``, so ``R @ p`` first rotates the point ``p``
    about x, then about y, then about z.

    Args:
        angles: ``(B, 3)`` radians, columns (theta_x, theta_y, theta_z).

    Returns:
        ``(B, 3, 3)`` rotation matrices, same dtype and device as ``angles``.
    """
    cos, sin = torch.cos(angles), torch.sin(angles)
    one, zero = torch.ones_like(cos[:, 0]), torch.zeros_like(cos[:, 0])
    cx, cy, cz = cos.unbind(dim=1)
    sx, sy, sz = sin.unbind(dim=1)
    rx = torch.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], dim=1).view(-1, 3, 3)
    ry = torch.stack([cy, zero, sy, zero, one, zero, -sy, zero, cy], dim=1).view(-1, 3, 3)
    rz = torch.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], dim=1).view(-1, 3, 3)
    return rz @ ry @ rx


class SkeletonAugment:
    """The paper's skeleton augmentation: Gaussian noise, then a random 3-D rotation (per sample).

    Per sample, with every parameter drawn independently from ``generator``:

    1. ``(theta_x, theta_y, theta_z)`` uniform in ``[-max_degrees, max_degrees]`` (drawn first, as
       one ``(B, 3)`` uniform tensor);
    2. with ``shear > 0`` only: the six off-diagonal entries of ``S = I + off-diagonal``, each
       uniform in ``[-shear, shear]`` (one ``(B, 6)`` draw, rows then columns);
    3. noise ``N(noise_mean, noise_std**2)`` for every coordinate (one ``(B, 3, T, V, M)`` draw),
       added to real joints only;
    4. ``x <- R @ S @ x`` at every joint, with ``R = Rz @ Ry @ Rx`` (:func:`rotation_matrices`) and
       ``S = I`` without shear. The map is linear, so all-zero joints stay exactly zero.

    The rotation is about the coordinate origin. On raw Kinect coordinates (the body sits about
    3 m in front of the camera) this also moves the body; :class:`SkeletonNormalize` applied next
    (as the benchmark does, and as the paper orders it) removes that translation, since
    ``R x - R c = R (x - c)``: the composite is a rotation about the body's centre.

    ``shear`` is not in the paper; it is the stronger variant this project uses for X-DER's strong
    views (see ``xder_data.ntu60``).

    Args:
        noise_mean: the Gaussian noise's mean, in the data's unit (metres for NTU).
        noise_std: the Gaussian noise's standard deviation, in the same unit.
        max_degrees: the largest rotation about each axis.
        shear: the largest off-diagonal shear coefficient (0: no shear).

    Call: ``x: (B, 3, T, V, M)`` of any float dtype -> float32 ``(B, 3, T, V, M)``.
    """

    def __init__(
        self,
        *,
        noise_mean: float = 0.01,
        noise_std: float = 0.02,
        max_degrees: float = 30.0,
        shear: float = 0.0,
    ) -> None:
        if noise_std < 0 or max_degrees < 0 or shear < 0:
            raise ValueError(
                f"SkeletonAugment needs noise_std, max_degrees and shear >= 0, got "
                f"{noise_std}, {max_degrees}, {shear}"
            )
        self.noise_mean = float(noise_mean)
        self.noise_std = float(noise_std)
        self.max_degrees = float(max_degrees)
        self.shear = float(shear)

    def sample_matrices(self, batch: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
        """The per-sample linear maps ``R @ S``: ``(B, 3, 3)`` float32 (steps 1, 2 and 4)."""
        limit = math.radians(self.max_degrees)
        u = torch.rand(batch, 3, generator=generator, device=device)
        matrices = rotation_matrices((2 * u - 1) * limit)
        if self.shear > 0:
            v = torch.rand(batch, 6, generator=generator, device=device)
            off = (2 * v - 1) * self.shear
            eye = torch.eye(3, device=device).expand(batch, 3, 3).clone()
            rows, cols = (0, 0, 1, 1, 2, 2), (1, 2, 0, 2, 0, 1)
            eye[:, rows, cols] = off
            matrices = matrices @ eye
        return matrices

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if x.dim() != 5 or x.shape[1] != 3:
            raise ValueError(f"SkeletonAugment expects (B, 3, T, V, M), got {tuple(x.shape)}")
        x = x.to(torch.float32)
        matrices = self.sample_matrices(x.shape[0], generator, x.device)
        real = real_joints(x)
        noise = torch.randn(x.shape, generator=generator, device=x.device)
        x = x + (noise * self.noise_std + self.noise_mean) * real
        return torch.einsum("bij,bjtvm->bitvm", matrices, x)

    def __repr__(self) -> str:
        return (
            f"SkeletonAugment(noise_mean={self.noise_mean}, noise_std={self.noise_std}, "
            f"max_degrees={self.max_degrees}, shear={self.shear})"
        )


class SkeletonNormalize:
    """Normalise skeleton batches: the "all data points are normalized" step of the paper.

    Modes:

    * ``"center"`` (default): subtract one 3-D point per sample, body 0's mid-spine joint (NTU
      joint 2) in the first frame where it is real, from every real joint of every body and
      frame. One fixed centre per sequence (docs/data-formats.md, "Skeleton preprocessing")
      keeps the global motion that actions such as *falling*, *sit down* or *walking towards* are
      made of, and keeps the two bodies' relative position; a per-frame centre would erase both.
      A sample whose body 0 has no real mid-spine joint is left unshifted.
    * ``"none"``: raw coordinates (EfficientGCN's own X-sub setting), only cast to float32.

    Deterministic: the generator is ignored. Call: ``x: (B, 3, T, V, M)`` -> float32, same shape.
    """

    def __init__(self, mode: Literal["center", "none"] = "center") -> None:
        if mode not in ("center", "none"):
            raise ValueError(f"unknown skeleton normalisation {mode!r}: use 'center' or 'none'")
        self.mode = mode

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if x.dim() != 5 or x.shape[1] != 3:
            raise ValueError(f"SkeletonNormalize expects (B, 3, T, V, M), got {tuple(x.shape)}")
        x = x.to(torch.float32)
        if self.mode == "none":
            return x
        spine = x[:, :, :, MID_SPINE, 0]  # (B, 3, T)
        present = (spine != 0).any(dim=1)  # (B, T)
        first = present.to(torch.int8).argmax(dim=1)  # the first True (0 when none)
        centre = spine.gather(2, first.view(-1, 1, 1).expand(-1, 3, 1)).squeeze(2)  # (B, 3)
        centre = centre * present.any(dim=1, keepdim=True)
        return x - centre.view(-1, 3, 1, 1, 1) * real_joints(x)

    def __repr__(self) -> str:
        return f"SkeletonNormalize(mode={self.mode!r})"
