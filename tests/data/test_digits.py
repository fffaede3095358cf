"""seq-digits: the fixed split, encoding, tasks and class orders of the offline benchmark."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from xder_data import benchmark_defaults, load_benchmark


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("seq-digits")


def test_sizes_and_per_class_split(bench, digits) -> None:
    counts = np.bincount(digits.target)
    assert bench.train_x.shape == (1442, 1, 8, 8)
    assert bench.test_x.shape == (355, 1, 8, 8)
    assert torch.bincount(bench.test_y).tolist() == [n // 5 for n in counts]
    assert torch.bincount(bench.train_y).tolist() == [n - n // 5 for n in counts]


def test_split_follows_the_protocol(bench, digits) -> None:
    # For class 0 (the first drawn from the shared rng): ascending indices permuted by
    # default_rng(0); the first n_0 // 5 are test.
    rng = np.random.default_rng(0)
    rows0 = rng.permutation(np.flatnonzero(digits.target == 0))
    test0 = rows0[: len(rows0) // 5]
    expected = np.rint(digits.images[test0] * 255 / 16).astype(np.uint8)
    got = bench.test_x[bench.test_y == 0][:, 0].numpy()
    assert np.array_equal(got, expected)


def test_uint8_encoding(bench, digits) -> None:
    values = set(np.unique(bench.train_x.numpy()).tolist())
    assert values <= {round(v * 255 / 16) for v in range(17)}
    assert {0, 16, 128, 255} <= values  # 0 -> 0, 1 -> 16, 8 -> 127.5 -> 128, 16 -> 255
    assert bench.train_x.dtype == torch.uint8


def test_normalisation_is_the_train_mean_and_std(bench) -> None:
    scaled = bench.train_x.double() / 255
    assert bench.mean[0] == pytest.approx(float(scaled.mean()), abs=1e-12)
    assert bench.std[0] == pytest.approx(float(scaled.std(unbiased=False)), abs=1e-12)


def test_tasks_hold_two_consecutive_classes(bench) -> None:
    assert bench.n_tasks == 5
    for t in range(5):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (2 * t, 2 * t + 2)
        assert set(bench.train_y[split.train].tolist()) == {2 * t, 2 * t + 1}
        assert set(bench.test_y[split.test].tolist()) == {2 * t, 2 * t + 1}


def test_reversed_order_puts_nine_and_eight_first(bench) -> None:
    rev = load_benchmark("seq-digits", class_order="reversed")
    first = rev.task(0)
    images = rev.train_x[first.train]
    # The images of task 0 are exactly those of original classes 9 and 8.
    originals = bench.train_x[(bench.train_y == 9) | (bench.train_y == 8)]
    assert images.shape == originals.shape
    assert sorted(map(bytes, images.numpy())) == sorted(map(bytes, originals.numpy()))
    assert rev.class_names[:2] == ("9", "8")


def _pairs(x: torch.Tensor, y: torch.Tensor) -> list[tuple[bytes, int]]:
    """The (image bytes, label) pairs of a split, sorted: the split as a multiset."""
    return sorted(zip(map(bytes, x.numpy()), y.tolist(), strict=True))


def test_validation_split_on_request(bench) -> None:
    held = load_benchmark("seq-digits", validation=0.1)
    # Per class, round(0.1 * n_c) of its train rows (n_c = 143, 146, 142, 147, 145, 146, 145, 144,
    # 140, 144: see test_sizes_and_per_class_split), with Python's round: 14.5 -> 14.
    assert torch.bincount(held.val_y).tolist() == [14, 15, 14, 15, 14, 15, 14, 14, 14, 14]
    assert held.val_x.shape == (143, 1, 8, 8)
    assert held.train_x.shape == (1442 - 143, 1, 8, 8)
    # Held out, not copied: train and validation together are the plain train split, labels included.
    together = _pairs(torch.cat([held.train_x, held.val_x]), torch.cat([held.train_y, held.val_y]))
    assert together == _pairs(bench.train_x, bench.train_y)
    assert held.test_x.shape == bench.test_x.shape
    assert held.val_y[held.task(1).val].tolist() == [2] * 14 + [3] * 15  # in the train split's order


def test_protocol_defaults() -> None:
    defaults = benchmark_defaults("seq-digits")
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (
        10,
        32,
        32,
        0.05,
    )
    assert (defaults.momentum, defaults.weight_decay, defaults.lr_schedule) == (0.0, 0.0, "none")
    assert defaults.buffer_size == 200
    assert defaults.backbone_options == {"width": 16, "in_channels": 1}


def _shifted(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``image`` (C, H, W) moved down by dy and right by dx, zeros where it came from outside."""
    out = torch.zeros_like(image)
    h, w = image.shape[1:]
    out[:, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = image[
        :, max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)
    ]
    return out


def test_train_transform_crops_without_flip(bench) -> None:
    # An asymmetric image: 64 distinct non-zero values, so every shift and the mirror image (and
    # its shifts) differ from one another, and padded pixels (0) are told apart from the image's.
    image = torch.arange(1, 65, dtype=torch.uint8).view(1, 8, 8)
    x = image.expand(200, 1, 8, 8).contiguous()
    out = bench.train_transform(x, torch.Generator().manual_seed(0))
    assert out.shape == (200, 1, 8, 8)
    assert out.dtype == torch.float32
    # Then normalised: pixel / 255 minus the train mean, over the train std. Neighbouring pixel
    # values differ by 1 / 255 / std (about 0.01) after it, far above the tolerance.
    offsets = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]  # 1-pixel zero padding

    def normalised(images: list[torch.Tensor]) -> torch.Tensor:
        return (torch.stack(images).double() / 255 - bench.mean[0]) / bench.std[0]

    shifts = normalised([_shifted(image, dy, dx) for dy, dx in offsets])
    mirrors = normalised([_shifted(image.flip(-1), dy, dx) for dy, dx in offsets])
    drawn = []
    for view in out.double():
        assert not any(torch.allclose(view, mirror, atol=1e-5) for mirror in mirrors)
        (match,) = [o for o, s in zip(offsets, shifts, strict=True) if torch.allclose(view, s, atol=1e-5)]
        drawn.append(match)
    # 200 draws, uniform over the 9 offsets: every one appears, so the crop does move pixels.
    assert set(drawn) == set(offsets)


def test_seq_digits_tensors_have_row_major_strides() -> None:
    # NumPy leaves the size-1 channel axis a stride of 1: the loaded tensors are restrided, so
    # that torch does not read them as channels-last (see Benchmark.with_standard_strides).
    bench = load_benchmark("seq-digits", None)
    for tensor in (bench.train_x, bench.test_x):
        assert tensor.stride() == torch.empty(tensor.shape).stride()
