"""``seq-digits``: scikit-learn's bundled handwritten digits as a 5-task class-incremental benchmark.

Real data that needs no download, so that the toolkit runs and is tested offline. The protocol is
fixed (so results compare with other implementations):

* ``sklearn.datasets.load_digits()``: 1797 8x8 images with values 0..16, stored here as uint8
  ``round(v * 255 / 16)`` with one channel.
* Split: for each class 0..9 in turn, its indices in ascending order are permuted by one
  ``numpy.random.default_rng(0)``; the first ``n_c // 5`` are test, the rest train
  (1442 train / 355 test).
* 5 tasks x 2 classes; training augmentation: random 8x8 crop after 1-pixel zero padding, no flip;
  normalisation by the train-set mean and std; strong augmentation (X-DER): the SimCLR-style
  :class:`~xder_data.augment.StrongAugment` at 8x8 (one channel: no colour steps).
* Training protocol: ``resnet18-cifar`` width 16 with one input channel, SGD lr 0.05 without
  momentum or weight decay, batch 32, replay minibatch 32, 10 epochs per task, no lr schedule,
  buffer 200; each epoch's last partial batch is dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.scenarios import domain_benchmark, stream_360_benchmark

__all__ = [
    "DIGITS_360_DEFAULTS",
    "DIGITS_DOMAIN_DEFAULTS",
    "SEQ_DIGITS_DEFAULTS",
    "digits_360",
    "digits_split",
    "perm_digits",
    "rot_digits",
    "seq_digits",
]

SEQ_DIGITS_DEFAULTS = BenchmarkDefaults(
    epochs=10,
    batch_size=32,
    minibatch_size=32,
    lr=0.05,
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",
    buffer_size=200,
    backbone="resnet18-cifar",
    backbone_options={"width": 16, "in_channels": 1},
    # Each epoch's last partial batch (1 to 28 of a task's 284-291 rows) is dropped: BatchNorm over a
    # few 8x8 digits with 1x1 maps at the last stage destabilises training (loop.TrainingSchedule).
    drop_last=True,
)


def digits_split(labels: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fixed train/test split of ``seq-digits``.

    For each class 0..9 in turn, its indices in ascending order are permuted by one shared
    ``numpy.random.default_rng(seed)``; the first ``n_c // 5`` are test, the rest train.

    Returns:
        ``(train_rows, test_rows)``: class by class, in the permuted order.
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in range(10):
        rows = rng.permutation(np.flatnonzero(labels == c))
        n_test = len(rows) // 5
        test.append(rows[:n_test])
        train.append(rows[n_test:])
    return np.concatenate(train), np.concatenate(test)


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits as uint8 (N, 1, 8, 8) images, split: train and test images and labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)[:, None]  # (N, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    train_rows, test_rows = digits_split(labels)
    return images[train_rows], labels[train_rows], images[test_rows], labels[test_rows]


@register_benchmark("seq-digits", defaults=SEQ_DIGITS_DEFAULTS)
def seq_digits(root: Path | None = None) -> Benchmark:
    """Load ``seq-digits`` (``root`` is ignored: the data ship with scikit-learn)."""
    train_x, train_y, test_x, test_y = _digits()
    scaled = train_x.astype(np.float64) / 255
    mean, std = (float(scaled.mean()),), (float(scaled.std()),)
    return Benchmark(
        name="seq-digits",
        n_tasks=5,
        classes_per_task=(2,) * 5,
        class_order=tuple(range(10)),
        input_shape=(1, 8, 8),
        mean=mean,
        std=std,
        train_x=torch.from_numpy(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=torch.from_numpy(test_x),
        test_y=torch.from_numpy(test_y),
        defaults=SEQ_DIGITS_DEFAULTS,
        train_transform=Compose(CropFlip(8, padding=1, flip=False), Normalize(mean, std)),
        test_transform=Normalize(mean, std),
        strong_transform=StrongAugment(8, mean, std),
        class_names=tuple(str(c) for c in range(10)),
    )


DIGITS_DOMAIN_DEFAULTS = BenchmarkDefaults(
    epochs=1,
    batch_size=32,
    minibatch_size=32,
    lr=0.1,
    buffer_size=200,
    backbone="mnist-mlp",
    backbone_options={"in_features": 8 * 8},
    drop_last=False,
)
"""``perm-digits`` and ``rot-digits``: ``perm-mnist``'s protocol (one epoch per task, the MNIST MLP,
SGD at a constant lr, last partial batches kept) sized for 1442 rows a task: batch 32 (45 steps a
task), lr 0.1, buffer 200."""

DIGITS_360_DEFAULTS = BenchmarkDefaults(
    epochs=1,
    batch_size=8,
    minibatch_size=8,
    lr=0.1,
    buffer_size=200,
    backbone="mnist-mlp",
    backbone_options={"in_features": 8 * 8},
    drop_last=False,
)
"""``digits-360``: ``mnist-360``'s protocol (one pass over the stream, the MNIST MLP) at batch 8
(about 170 steps over its 1298 draws), lr 0.1, buffer 200."""


@register_benchmark("perm-digits", defaults=DIGITS_DOMAIN_DEFAULTS, scenario="domain-il")
def perm_digits(root: Path | None = None, *, data_seed: int = 0) -> Benchmark:
    """``perm-digits``: 20 Domain-IL tasks, each seq-digits' split with its 64 pixels permuted by
    the task's permutation, built as ``perm-mnist`` is (:func:`xder_data.scenarios.domain_benchmark`;
    ``data_seed`` draws the permutations)."""
    train_x, train_y, test_x, test_y = _digits()
    return domain_benchmark(
        "perm-digits",
        "permuted",
        (train_x, train_y),
        (test_x, test_y),
        defaults=DIGITS_DOMAIN_DEFAULTS,
        seed=data_seed,
    )


@register_benchmark("rot-digits", defaults=DIGITS_DOMAIN_DEFAULTS, scenario="domain-il")
def rot_digits(root: Path | None = None, *, data_seed: int = 0) -> Benchmark:
    """``rot-digits``: 20 Domain-IL tasks, each seq-digits' split rotated by the task's angle
    (uniform in [0, 180) degrees), built as ``rot-mnist`` is; ``data_seed`` draws the angles."""
    train_x, train_y, test_x, test_y = _digits()
    return domain_benchmark(
        "rot-digits",
        "rotated",
        (train_x, train_y),
        (test_x, test_y),
        defaults=DIGITS_DOMAIN_DEFAULTS,
        seed=data_seed,
    )


@register_benchmark("digits-360", defaults=DIGITS_360_DEFAULTS, scenario="general")
def digits_360(root: Path | None = None, *, data_seed: int = 0) -> Benchmark:
    """``digits-360``: seq-digits' classes 0..8 as a general continual stream built as
    ``mnist-360`` is (:func:`xder_data.scenarios.stream_360`); ``data_seed`` draws the stream."""
    train_x, train_y, test_x, test_y = _digits()
    return stream_360_benchmark(
        "digits-360", (train_x, train_y), (test_x, test_y), defaults=DIGITS_360_DEFAULTS, seed=data_seed
    )
