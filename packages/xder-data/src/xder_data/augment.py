"""Batched augmentation on the training device, with per-sample random parameters.

Every transform is a callable ``transform(x, generator) -> Tensor`` that acts on a whole batch
``x: (B, C, H, W)`` on any device and draws its random parameters from ``generator`` (a
``torch.Generator`` on the same device as ``x``), one draw per sample. Nothing here reads the
global RNG, and no transform loops over samples in Python (docs/development.md, "How it is
fast", point 2; torchvision's v2 transforms draw one parameter set per batch tensor, which is why
they are not used here).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "Compose",
    "CropFlip",
    "Normalize",
    "StrongAugment",
    "Transform",
    "colour_transforms",
    "grayscale",
    "hue_rotation",
]


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
            flipped = torch.rand(batch, generator=generator, device=device, dtype=torch.float32) < 0.5
            cols = torch.where(flipped[:, None], out_w - 1 - cols, cols)
        else:
            cols = cols.expand(batch, out_w)
        rows = top[:, None] + torch.arange(out_h, device=device)
        cols = left[:, None] + cols
        samples = torch.arange(batch, device=device)[:, None, None]
        # Advanced indices separated by a slice move to the front: (B, out_h, out_w, C).
        out = x[samples, :, rows[:, :, None], cols[:, None, :]]
        # Row-major NCHW strides, also for one channel, where .contiguous() would keep the
        # permuted view (channel stride 1): torch reads such a tensor as channels-last, and
        # oneDNN's channels-last convolution backward corrupts the heap on some CPUs for small
        # images (8x8 digits on an AMD EPYC without AVX-512).
        return out.permute(0, 3, 1, 2).clone(memory_format=torch.contiguous_format)

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
            mean = torch.tensor(self.mean, device=x.device, dtype=torch.float32).view(shape)
            std = torch.tensor(self.std, device=x.device, dtype=torch.float32).view(shape)
            self._cache[x.device] = (mean, std)
        return self._cache[x.device]

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        mean, std = self._constants(x)
        x = x.to(torch.float32).mul_(1 / 255) if x.dtype == torch.uint8 else x.to(torch.float32)
        return (x - mean) / std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


# ---------------------------------------------------------------------------------------------
# SimCLR-style strong augmentation (X-DER's future preparation)

_GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision's rgb_to_grayscale


@functools.lru_cache(maxsize=64)
def _constant(values: tuple[float, ...], device: torch.device, dtype: torch.dtype = torch.float32) -> Tensor:
    """A small read-only vector of constants on ``device``, made once per (values, device, dtype)
    by fill kernels and then reused, so a training step launches nothing for it. Not
    ``torch.tensor(values, device=device)``: on a GPU that is a blocking copy from the host's
    pageable memory, a host sync (seen in every X-DER step on an H200)."""
    return torch.stack([torch.full((), float(v), dtype=dtype, device=device) for v in values])


_CROSS = tuple(v * 3**-0.5 for v in (0.0, -1.0, 1.0, 1.0, 0.0, -1.0, -1.0, 1.0, 0.0))
"""k x (.) for the unit grey axis k = (1, 1, 1) / sqrt 3, row by row."""


def grayscale(x: Tensor) -> Tensor:
    """Luma of RGB images ``(B, 3, H, W)`` -> ``(B, 1, H, W)``."""
    r, g, b = x.unbind(dim=1)
    return (_GRAY_WEIGHTS[0] * r + _GRAY_WEIGHTS[1] * g + _GRAY_WEIGHTS[2] * b).unsqueeze(1)


def hue_rotation(angle: Tensor) -> Tensor:
    """(B, 3, 3) rotations of RGB about the grey axis (1, 1, 1) by ``angle`` radians (B,): a hue
    shift of ``angle / (2 pi)`` of the colour wheel that keeps grey pixels grey (Rodrigues)."""
    k = torch.full((3,), 3**-0.5, device=angle.device, dtype=angle.dtype)
    eye = torch.eye(3, device=angle.device)
    cross = _constant(_CROSS, angle.device).view(3, 3)
    cos, sin = angle.cos()[:, None, None], angle.sin()[:, None, None]
    return cos * eye + sin * cross + (1 - cos) * torch.outer(k, k)


def colour_transforms(
    order: Tensor, brightness: Tensor, contrast: Tensor, saturation: Tensor, hue: Tensor, mean_rgb: Tensor
) -> tuple[Tensor, Tensor]:
    """Per-sample affine colour maps ``x -> A x + o`` composing the four jitter operations in each
    sample's order (one per-sample colour matrix: docs/development.md, "How it is fast", point 2).

    The operations, each linear in the image: brightness ``b x``; contrast ``c x + (1 - c) m``
    with m the mean grey level of the image at that point; saturation ``s x + (1 - s) grey(x)``;
    hue: :func:`hue_rotation` by ``2 pi h``.

    Args:
        order: (B, 4) each sample's permutation of (0 brightness, 1 contrast, 2 saturation, 3 hue).
        brightness, contrast, saturation, hue: (B,) factors (hue as a fraction of the wheel).
        mean_rgb: (B, 3) mean of each channel of the input image.

    Returns:
        ``A: (B, 3, 3)`` and ``o: (B, 3)``.
    """
    batch, device = order.shape[0], order.device
    luma = _constant(_GRAY_WEIGHTS, device)
    eye = torch.eye(3, device=device).expand(batch, 3, 3)
    grey = torch.outer(
        torch.ones(3, device=device, dtype=torch.float32), luma
    )  # x -> (luma . x) in every channel
    # Each operation's matrix, (B, 4, 3, 3) in the order of ``order``'s codes; contrast also adds
    # (1 - c) m to the offset, m the image's mean grey level at its turn.
    maps = torch.stack(
        [
            brightness[:, None, None] * eye,
            contrast[:, None, None] * eye,
            saturation[:, None, None] * eye + (1 - saturation)[:, None, None] * grey,
            hue_rotation(2 * math.pi * hue),
        ],
        dim=1,
    )
    chosen = maps[torch.arange(batch, device=device)[:, None], order]  # (B, 4, 3, 3) in each sample's order
    contrast_shift = (order == 1) * (1 - contrast)[:, None]  # (B, 4): 1 - c at contrast's turn, else 0
    matrix = eye.clone()
    offset = torch.zeros(batch, 3, 1, device=device, dtype=torch.float32)
    for stage in range(4):
        step = chosen[:, stage]
        mean_now = torch.bmm(matrix, mean_rgb[:, :, None]) + offset  # image mean at this point
        m = (mean_now[:, :, 0] * luma).sum(dim=1)
        matrix = torch.bmm(step, matrix)
        offset = torch.bmm(step, offset) + (contrast_shift[:, stage] * m)[:, None, None]
    return matrix, offset[:, :, 0]


def _per_sample(values: Tensor, x: Tensor) -> Tensor:
    return values.view(-1, *([1] * (x.dim() - 1)))


class StrongAugment:
    """SimCLR-style strong augmentation, batched with per-sample random parameters (Chen et al.,
    2020; the X-DER authors' ``strong_aug``), then normalisation.

    Per sample, in this order (torchvision's semantics, one draw per image):

    1. random resized crop to ``size`` (scale (0.2, 1), ratio (3/4, 4/3), ten attempts then the
       central fallback), bilinear;
    2. horizontal flip with probability 0.5;
    3. with probability 0.8, colour jitter: brightness, contrast and saturation factors uniform
       in [0.6, 1.4] and a hue shift uniform in [-0.1, 0.1], applied in a random order, composed
       into one per-sample affine colour map (:func:`colour_transforms`) and clamped once;
    4. grayscale with probability 0.2;
    5. :class:`Normalize`.

    One-channel inputs skip the colour steps (3 and 4). The crop and flip are one
    ``affine_grid``/``grid_sample`` over the batch; nothing loops over samples.

    Deviation from torchvision's ``ColorJitter`` (for speed, docs/development.md): the four
    operations are composed as linear maps and clamped to [0, 1] once at the end instead of after each
    operation, and the hue shift is a rotation of RGB about the grey axis instead of a shift of
    the hue in HSV. Both are the same operations up to clipping and the hue geometry; the cost is
    one 3x3 map per image instead of four HSV round trips.

    Call: ``x: (B, C, H, W)`` uint8 (or float in [0, 1]) -> float32 ``(B, C, size, size)``
    (``(B, C, h, w)`` for ``size=(h, w)``).
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        mean: Sequence[float],
        std: Sequence[float],
        *,
        scale: tuple[float, float] = (0.2, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1),
        jitter_p: float = 0.8,
        grayscale_p: float = 0.2,
    ) -> None:
        self.size = size
        self._out = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        self.scale = scale
        self.ratio = ratio
        self.jitter = jitter
        self.jitter_p = jitter_p
        self.grayscale_p = grayscale_p
        self.normalize = Normalize(mean, std)

    def crop_boxes(
        self,
        batch: int,
        height: int,
        width: int,
        generator: torch.Generator | None,
        device: torch.device | str,
    ) -> Tensor:
        """Per-sample crop boxes ``(B, 4)`` as (top, left, h, w), following torchvision's
        ``RandomResizedCrop.get_params`` (ten attempts, then a central crop)."""
        attempts = 10
        area = height * width
        u = torch.rand(batch, attempts, 4, generator=generator, device=device, dtype=torch.float64)
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[..., 0])
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * u[..., 1])
        w = torch.round(torch.sqrt(target * aspect))
        h = torch.round(torch.sqrt(target / aspect))
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = ok.to(torch.int8).argmax(dim=1)  # the first attempt that fits
        pick = first[:, None]
        w, h = w.gather(1, pick)[:, 0], h.gather(1, pick)[:, 0]
        top = torch.floor(u[..., 2].gather(1, pick)[:, 0] * (height - h + 1))
        left = torch.floor(u[..., 3].gather(1, pick)[:, 0] * (width - w + 1))
        # Central fallback when no attempt fits (torchvision clamps the ratio to the range).
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            fw, fh = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            fw, fh = round(height * self.ratio[1]), height
        else:
            fw, fh = width, height
        fallback = _constant(((height - fh) // 2, (width - fw) // 2, fh, fw), device, torch.float64)
        boxes = torch.stack([top, left, h, w], dim=1)
        return torch.where(ok.any(dim=1, keepdim=True), boxes, fallback)

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        batch, channels, height, width = x.shape
        device = x.device
        x = x.to(torch.float32).mul_(1 / 255) if x.dtype == torch.uint8 else x.to(torch.float32)
        boxes = self.crop_boxes(batch, height, width, generator, device).to(torch.float32)
        top, left, h, w = boxes.unbind(dim=1)
        flip = torch.rand(batch, generator=generator, device=device, dtype=torch.float32) < 0.5
        sign = 1.0 - 2.0 * flip.to(torch.float32)
        theta = torch.zeros(batch, 2, 3, device=device, dtype=torch.float32)
        theta[:, 0, 0] = sign * w / width
        theta[:, 0, 2] = (2 * left + w) / width - 1
        theta[:, 1, 1] = h / height
        theta[:, 1, 2] = (2 * top + h) / height - 1
        grid = F.affine_grid(theta, [batch, channels, *self._out], align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if channels == 3:
            x = self._colour(x, generator)
        return self.normalize(x)

    def _colour(self, x: Tensor, generator: torch.Generator | None) -> Tensor:
        batch, device = x.shape[0], x.device
        b, c, s, hue = self.jitter
        u = torch.rand(batch, 6, generator=generator, device=device, dtype=torch.float32)
        order = torch.rand(batch, 4, generator=generator, device=device, dtype=torch.float32).argsort(dim=1)
        matrix, offset = colour_transforms(
            order,
            brightness=1 - b + 2 * b * u[:, 0],
            contrast=1 - c + 2 * c * u[:, 1],
            saturation=1 - s + 2 * s * u[:, 2],
            hue=-hue + 2 * hue * u[:, 3],
            mean_rgb=x.mean(dim=(2, 3)),
        )
        jitter_on = u[:, 4] < self.jitter_p
        gray_on = u[:, 5] < self.grayscale_p
        jittered = (torch.einsum("bij,bjhw->bihw", matrix, x) + offset[:, :, None, None]).clamp(0, 1)
        x = torch.where(_per_sample(jitter_on, x), jittered, x)
        return torch.where(_per_sample(gray_on, x), grayscale(x).expand_as(x), x)

    def __repr__(self) -> str:
        return f"StrongAugment(size={self.size}, {self.normalize!r})"
