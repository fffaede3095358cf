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

__all__ = ["SEQ_DIGITS_DEFAULTS", "digits_split", "seq_digits"]

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


@register_benchmark("seq-digits", defaults=SEQ_DIGITS_DEFAULTS)
def seq_digits(root: Path | None = None) -> Benchmark:
    """Load ``seq-digits`` (``root`` is ignored: the data ship with scikit-learn)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)[:, None]  # (N, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    train_rows, test_rows = digits_split(labels)
    train_x = images[train_rows]
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
        train_y=torch.from_numpy(labels[train_rows]),
        test_x=torch.from_numpy(images[test_rows]),
        test_y=torch.from_numpy(labels[test_rows]),
        defaults=SEQ_DIGITS_DEFAULTS,
        train_transform=Compose(CropFlip(8, padding=1, flip=False), Normalize(mean, std)),
        test_transform=Normalize(mean, std),
        strong_transform=StrongAugment(8, mean, std),
        class_names=tuple(str(c) for c in range(10)),
    )
