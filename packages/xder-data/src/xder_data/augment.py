"""Batched augmentation on the training device, with per-sample random parameters.

Every transform is a callable ``transform(x, generator) -> Tensor`` that acts on a whole batch
``x: (B, C, H, W)`` on any device and draws its random parameters from ``generator`` (a
``torch.Generator`` on the same device as ``x``), one draw per sample. Nothing here reads the
global RNG, and no transform loops over samples in Python (see PERFORMANCE.md, design point 2;
torchvision's v2 transforms draw one parameter set per batch tensor, which is why they are not
used here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Compose", "CropFlip", "Normalize", "Transform"]


@runtime_checkable
class Transform(Protocol):
    """A batched transform: ``(x: (B, ...), generator) -> (B, ...)``."""

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor: ...


class Compose:
    """Apply transforms in order, threading the same generator through each."""

    def __init__(self, *transforms: Transform) -> None:
        self.transforms = tuple(transforms)

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        for transform in self.transforms:
            x = transform(x, generator)
        return x

    def __repr__(self) -> str:
        return f"Compose({', '.join(map(repr, self.transforms))})"


class CropFlip:
    """Random crop after zero padding, then (optionally) a random horizontal flip.

    Equal in distribution to torchvision's ``RandomCrop(size, padding)`` followed by
    ``RandomHorizontalFlip(0.5)`` applied image by image: each sample draws its own offsets,
    uniform over ``[0, H + 2 * padding - size]``, and its own flip with probability 1/2.

    Args:
        size: output height and width (an int for a square crop).
        padding: zeros added on every side before cropping (in pixel space, before
            normalisation, as torchvision pads PIL images).
        flip: draw a horizontal flip with probability 0.5 per sample.

    Call: ``x: (B, C, H, W)`` of any dtype -> ``(B, C, size, size)`` of the same dtype.
    """

    def __init__(self, size: int | tuple[int, int], padding: int = 0, flip: bool = True) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        if padding < 0 or min(self.size) < 1:
            raise ValueError(f"CropFlip needs size >= 1 and padding >= 0, got {size}, {padding}")
        self.padding = padding
        self.flip = flip

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        batch, _, height, width = x.shape
        pad = self.padding
        if pad:
            x = F.pad(x, (pad, pad, pad, pad))
        out_h, out_w = self.size
        span_h, span_w = height + 2 * pad - out_h, width + 2 * pad - out_w
        if span_h < 0 or span_w < 0:
            raise ValueError(f"crop {self.size} is larger than the padded input {tuple(x.shape[2:])}")
        device = x.device
        top = torch.randint(0, span_h + 1, (batch,), generator=generator, device=device)
        left = torch.randint(0, span_w + 1, (batch,), generator=generator, device=device)
        cols = torch.arange(out_w, device=device)
        if self.flip:
            flipped = torch.rand(batch, generator=generator, device=device) < 0.5
            cols = torch.where(flipped[:, None], out_w - 1 - cols, cols)
        else:
            cols = cols.expand(batch, out_w)
        rows = top[:, None] + torch.arange(out_h, device=device)
        cols = left[:, None] + cols
        samples = torch.arange(batch, device=device)[:, None, None]
        # Advanced indices separated by a slice move to the front: (B, out_h, out_w, C).
        out = x[samples, :, rows[:, :, None], cols[:, None, :]]
        return out.permute(0, 3, 1, 2).contiguous()

    def __repr__(self) -> str:
        return f"CropFlip(size={self.size}, padding={self.padding}, flip={self.flip})"


class Normalize:
    """Scale uint8 images to [0, 1], then subtract ``mean`` and divide by ``std`` per channel.

    Float inputs are taken to be in [0, 1] already. Deterministic: the generator is ignored.
    Call: ``x: (B, C, ...)`` -> float32 ``(B, C, ...)``.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        if len(mean) != len(std):
            raise ValueError("mean and std need one value per channel")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {tuple(std)}")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self._cache: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def _constants(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.device not in self._cache:
            shape = (1, len(self.mean)) + (1,) * (x.dim() - 2)
            mean = torch.tensor(self.mean, device=x.device).view(shape)
            std = torch.tensor(self.std, device=x.device).view(shape)
            self._cache[x.device] = (mean, std)
        return self._cache[x.device]

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        mean, std = self._constants(x)
        x = x.to(torch.float32).mul_(1 / 255) if x.dtype == torch.uint8 else x.to(torch.float32)
        return (x - mean) / std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"
