"""The SimCLR-style strong augmentation: parameter ranges, per-sample draws, colour maths."""

from __future__ import annotations

import math

import pytest
import torch

from xder_data import StrongAugment
from xder_data.augment import colour_transforms, grayscale, hue_rotation


def test_crop_boxes_follow_the_scale_and_ratio_ranges() -> None:
    aug = StrongAugment(32, (0.5,), (0.5,))
    boxes = aug.crop_boxes(20000, 32, 32, torch.Generator().manual_seed(0), "cpu")
    top, left, h, w = boxes.unbind(1)
    assert ((h >= 1) & (w >= 1) & (top >= 0) & (left >= 0)).all()
    assert ((top + h <= 32) & (left + w <= 32)).all()
    area = h * w / (32 * 32)
    # Rounding of h and w to whole pixels widens the (0.2, 1) scale range by a little.
    assert area.min() >= 0.2 - 0.05
    assert area.max() <= 1.0
    ratio = w / h
    assert ratio.min() >= 0.75 * 0.9
    assert ratio.max() <= (4 / 3) / 0.9
    # Scale is uniform: the median area sits near the middle of (0.2, 1) once clipped crops
    # (the most elongated ones that do not fit) fall back; it must not collapse to one value.
    assert 0.45 < float(area.median()) < 0.7
    assert len({tuple(b) for b in boxes[:200].tolist()}) > 150  # per-sample draws


def test_each_sample_gets_its_own_draw() -> None:
    aug = StrongAugment(16, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    image = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8)
    out = aug(image.expand(32, -1, -1, -1), torch.Generator().manual_seed(0))
    assert out.shape == (32, 3, 16, 16)
    flat = out.flatten(1)
    distances = torch.cdist(flat, flat)
    assert (distances + torch.eye(32) * 1e9).min() > 1e-3  # no two samples alike


def test_reproducible_from_the_generator_and_global_rng_untouched() -> None:
    aug = StrongAugment(8, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    state = torch.get_rng_state()
    a = aug(x, torch.Generator().manual_seed(4))
    b = aug(x, torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state())


def test_one_channel_inputs_skip_colour_and_are_normalised() -> None:
    aug = StrongAugment(8, (0.5,), (0.25,))
    flat = torch.full((4, 1, 8, 8), 255, dtype=torch.uint8)
    out = aug(flat, torch.Generator().manual_seed(0))
    # A constant image stays constant under crop/flip: (1 - 0.5) / 0.25 = 2.
    torch.testing.assert_close(out, torch.full((4, 1, 8, 8), 2.0))


def test_colour_probabilities() -> None:
    aug = StrongAugment(4, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    colour = torch.tensor([200, 30, 90], dtype=torch.uint8).view(1, 3, 1, 1).expand(4000, 3, 4, 4)
    out = aug(colour, torch.Generator().manual_seed(0))
    is_gray = (out[:, 0] - out[:, 1]).abs().amax(dim=(1, 2)) < 1e-6
    unchanged = (out - colour.float() / 255).abs().amax(dim=(1, 2, 3)) < 1e-5
    # Grayscale with p = 0.2; untouched colour needs no jitter (0.2) and no grayscale (0.8).
    assert abs(float(is_gray.float().mean()) - 0.2) < 0.03
    assert abs(float(unchanged.float().mean()) - 0.16) < 0.03


def test_hue_rotation_keeps_grey_and_turns_red_to_green() -> None:
    rotation = hue_rotation(torch.tensor([2 * math.pi / 3, 0.3]))
    torch.testing.assert_close(rotation[0] @ torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]))
    for r in rotation:
        torch.testing.assert_close(r @ r.T, torch.eye(3), atol=1e-6, rtol=0)
        torch.testing.assert_close(r @ torch.full((3,), 0.4), torch.full((3,), 0.4))
        assert float(torch.linalg.det(r)) == pytest.approx(1.0)


def test_colour_transforms_equal_the_operations_applied_in_order() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 5, 4, generator=g, dtype=torch.float64).float()
    order = torch.stack([torch.randperm(4, generator=g) for _ in range(6)])
    b, c, s = (0.6 + 0.8 * torch.rand(6, generator=g) for _ in range(3))
    h = -0.1 + 0.2 * torch.rand(6, generator=g)
    matrix, offset = colour_transforms(order, b, c, s, h, x.mean(dim=(2, 3)))
    got = torch.einsum("bij,bjhw->bihw", matrix, x) + offset[:, :, None, None]
    for i in range(6):  # an independent, sequential reference without clamping
        y = x[i]
        for op in order[i].tolist():
            if op == 0:
                y = b[i] * y
            elif op == 1:
                y = c[i] * y + (1 - c[i]) * grayscale(y[None]).mean()
            elif op == 2:
                y = s[i] * y + (1 - s[i]) * grayscale(y[None])[0]
            else:
                y = torch.einsum("ij,jhw->ihw", hue_rotation(2 * math.pi * h[i : i + 1])[0], y)
        torch.testing.assert_close(got[i], y, atol=1e-5, rtol=1e-5)


def test_grayscale_weights() -> None:
    x = torch.tensor([0.2, 0.4, 0.6]).view(1, 3, 1, 1)
    assert float(grayscale(x)) == pytest.approx(0.299 * 0.2 + 0.587 * 0.4 + 0.114 * 0.6)


def test_no_crop_fits_falls_back_to_the_centre() -> None:
    aug = StrongAugment(4, (0.5,), (0.5,), scale=(5.0, 6.0))  # no attempt can fit
    boxes = aug.crop_boxes(3, 4, 8, torch.Generator(), "cpu")
    # width/height = 2 > 4/3: the fallback keeps the height and trims the width to 4/3 of it.
    expected_w = round(4 * 4 / 3)
    assert boxes.tolist() == [[0.0, (8 - expected_w) // 2, 4.0, float(expected_w)]] * 3
    assert math.isclose(expected_w, 5)


def test_hue_rotation_is_rodrigues_about_the_grey_axis() -> None:
    angle = torch.tensor([0.3, -1.2, 2.5])
    k = torch.full((3,), 3**-0.5)
    cross = torch.tensor([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])  # k x (.)
    for a, rotation in zip(angle, hue_rotation(angle), strict=True):
        expected = torch.cos(a) * torch.eye(3) + torch.sin(a) * cross + (1 - torch.cos(a)) * torch.outer(k, k)
        torch.testing.assert_close(rotation, expected)


class _HostData(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts tensors made from host data (``torch.tensor(values)``): on a GPU each is a blocking
    copy from pageable memory, a host sync in every step."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += func.overloadpacket is torch.ops.aten.lift_fresh
        return func(*args, **(kwargs or {}))


def test_the_strong_augmentation_copies_nothing_from_the_host() -> None:
    augment = StrongAugment(32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    augment(x, torch.Generator())  # the first call caches the normalisation's constants
    with _HostData() as counter:
        augment(x, torch.Generator().manual_seed(0))
        augment.crop_boxes(16, 32, 32, torch.Generator().manual_seed(0), x.device)
    assert counter.count == 0
    with _HostData() as counter:
        torch.tensor([1.0, 2.0])  # the counter itself sees one
    assert counter.count == 1
