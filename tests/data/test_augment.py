"""Batched augmentation: per-sample parameters, equal in distribution to a per-image reference."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from xder_data import Compose, CropFlip, Normalize


def _reference_outputs(image: torch.Tensor, size: int, padding: int, flip: bool) -> list[torch.Tensor]:
    """Every output torchvision's RandomCrop(size, padding) [+ RandomHorizontalFlip] can give,
    enumerated image by image with Python slicing."""
    padded = F.pad(image, (padding,) * 4)
    span = padded.shape[-1] - size
    outputs = []
    for top, left in itertools.product(range(span + 1), repeat=2):
        crop = padded[:, top : top + size, left : left + size]
        outputs.append(crop)
        if flip:
            outputs.append(crop.flip(-1))
    return outputs


def _identify(batch: torch.Tensor, references: list[torch.Tensor]) -> list[int]:
    """Index of the reference each sample equals (fails if one matches none)."""
    found = []
    for sample in batch:
        matches = [i for i, ref in enumerate(references) if torch.equal(sample, ref)]
        assert len(matches) == 1, "a sample is not one of the per-image reference outputs"
        found.append(matches[0])
    return found


@pytest.mark.parametrize(("padding", "flip"), [(1, False), (2, True)])
def test_cropflip_matches_the_per_image_reference_in_distribution(padding: int, flip: bool) -> None:
    image = torch.arange(1, 3 * 6 * 6 + 1, dtype=torch.uint8).view(3, 6, 6)  # every pixel unique
    references = _reference_outputs(image, 6, padding, flip)
    n = 4000
    out = CropFlip(6, padding=padding, flip=flip)(
        image.expand(n, -1, -1, -1), torch.Generator().manual_seed(0)
    )
    assert out.shape == (n, 3, 6, 6)
    assert out.dtype == torch.uint8
    counts = torch.bincount(torch.tensor(_identify(out, references)), minlength=len(references)).double()
    expected = n / len(references)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # Uniform over every reference output: chi-square with k-1 dof stays far below this bound
    # (mean k-1, sd sqrt(2(k-1))); a biased sampler (e.g. one draw per batch) exceeds it.
    k = len(references)
    assert chi2 < (k - 1) + 6 * (2 * (k - 1)) ** 0.5
    assert counts.min() > 0


def test_cropflip_draws_per_sample_parameters() -> None:
    image = torch.arange(64, dtype=torch.uint8).view(1, 8, 8)
    out = CropFlip(8, padding=1, flip=False)(image.expand(64, -1, -1, -1), torch.Generator().manual_seed(1))
    distinct = {tuple(o.flatten().tolist()) for o in out}
    assert len(distinct) == 9  # all 3x3 offsets occur within one batch


def test_cropflip_is_reproducible_and_leaves_the_global_rng_alone() -> None:
    x = torch.randint(0, 255, (16, 3, 8, 8), dtype=torch.uint8)
    state = torch.get_rng_state()
    a = CropFlip(8, padding=2)(x, torch.Generator().manual_seed(5))
    b = CropFlip(8, padding=2)(x, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state())


def test_cropflip_without_padding_is_identity_for_full_size() -> None:
    x = torch.randint(0, 255, (5, 1, 4, 4), dtype=torch.uint8)
    assert torch.equal(CropFlip(4, padding=0, flip=False)(x, torch.Generator()), x)


@pytest.mark.parametrize("channels", [1, 3])
def test_cropflip_returns_row_major_strides_for_any_channel_count(channels: int) -> None:
    # With one channel a permuted (B, H, W, 1) view is "contiguous" but channel-stride 1, which
    # torch reads as channels-last (oneDNN's channels-last backward crashes on some CPUs).
    x = torch.randint(0, 256, (5, channels, 8, 8), dtype=torch.uint8)
    out = CropFlip(8, padding=1)(x, torch.Generator().manual_seed(0))
    assert out.stride() == torch.empty(5, channels, 8, 8).stride()  # channel stride 64, not 1


def test_cropflip_rejects_crops_larger_than_input() -> None:
    with pytest.raises(ValueError, match="larger"):
        CropFlip(10, padding=0)(torch.zeros(1, 1, 8, 8), torch.Generator())


def test_normalize_by_hand() -> None:
    x = torch.tensor([[[[0, 255]], [[51, 102]]]], dtype=torch.uint8)  # (1, 2, 1, 2)
    out = Normalize((0.5, 0.2), (0.25, 0.1))(x)
    expected = torch.tensor(
        [[[[(0 - 0.5) / 0.25, (1 - 0.5) / 0.25]], [[(0.2 - 0.2) / 0.1, (0.4 - 0.2) / 0.1]]]]
    )
    torch.testing.assert_close(out, expected)
    floats = torch.tensor([[[[1.0]], [[0.0]]]])
    torch.testing.assert_close(
        Normalize((0.5, 0.2), (0.25, 0.1))(floats), torch.tensor([[[[2.0]], [[-2.0]]]])
    )


def test_normalize_does_not_modify_its_input() -> None:
    x = torch.rand(2, 1, 3, 3)
    before = x.clone()
    Normalize((0.5,), (0.5,))(x)
    assert torch.equal(x, before)


def test_compose_threads_the_generator() -> None:
    x = torch.randint(0, 255, (8, 1, 8, 8), dtype=torch.uint8)
    pipeline = Compose(CropFlip(8, padding=1, flip=True), Normalize((0.5,), (0.5,)))
    a = pipeline(x, torch.Generator().manual_seed(3))
    b = Normalize((0.5,), (0.5,))(CropFlip(8, padding=1, flip=True)(x, torch.Generator().manual_seed(3)))
    torch.testing.assert_close(a, b)
