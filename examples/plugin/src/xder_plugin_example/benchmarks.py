"""``seq-stripes``: synthetic stripe patterns, 6 orientations (0, 30, ..., 150 degrees) in 3 tasks.

Each image is a sinusoidal grating at its class's orientation with a random spatial frequency,
phase and colour, plus Gaussian noise, drawn from ``numpy.random.default_rng(0)``: the data are
the same on every machine and need no download. Options (``--set benchmark.KEY=VALUE``):
``per_class`` training images per class (test: a quarter as many), ``size`` (the side in pixels)
and ``noise`` (the noise's standard deviation, on [0, 1] pixel values).

The protocol uses this package's ``tiny-cnn`` backbone (width 8): 4 epochs per task, batch 16,
replay minibatch 16, SGD at lr 0.1, buffer 60. The benchmark is built with
``xder_data.benchmark_from_tensors``, so it has the CIFAR-style augmentation (crop with padding,
flip) and a strong augmentation for X-DER.

A plugin module: importing it registers the benchmark (``xder.benchmarks`` entry point, or
``--plugin path/to/benchmarks.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xder_data import (
    Benchmark,
    BenchmarkDefaults,
    BenchmarkOptionError,
    benchmark_from_tensors,
    register_benchmark,
)

__all__ = ["SEQ_STRIPES_DEFAULTS", "seq_stripes", "stripes"]

N_CLASSES = 6

SEQ_STRIPES_DEFAULTS = BenchmarkDefaults(
    epochs=4,
    batch_size=16,
    minibatch_size=16,
    lr=0.1,
    buffer_size=60,
    backbone="tiny-cnn",
    backbone_options={"width": 8},
    drop_last=True,
)


def stripes(n: int, size: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images per class: ``(images (6n, 3, size, size) uint8, labels (6n,) int64)``."""
    labels = np.repeat(np.arange(N_CLASSES), n)
    angle = labels * np.pi / N_CLASSES
    frequency = rng.uniform(1.5, 3.0, labels.shape) * 2 * np.pi / size
    phase = rng.uniform(0, 2 * np.pi, labels.shape)
    colour = rng.uniform(0.3, 1.0, (labels.shape[0], 3))
    yy, xx = np.mgrid[0:size, 0:size]
    along = np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy
    wave = 0.5 + 0.5 * np.sin(frequency[:, None, None] * along + phase[:, None, None])
    images = wave[:, None] * colour[:, :, None, None]
    images = images + rng.normal(0, noise, images.shape)
    return np.rint(np.clip(images, 0, 1) * 255).astype(np.uint8), labels.astype(np.int64)


@register_benchmark("seq-stripes", defaults=SEQ_STRIPES_DEFAULTS)
def seq_stripes(root: Path | None, *, per_class: int = 100, size: int = 16, noise: float = 0.15) -> Benchmark:
    """The stripes benchmark (``root`` is ignored: the data are generated)."""
    if per_class < 4 or size < 4 or noise < 0:
        raise BenchmarkOptionError(
            f"seq-stripes needs per_class >= 4, size >= 4 and noise >= 0, got {per_class}, {size}, {noise}"
        )
    rng = np.random.default_rng(0)
    train_x, train_y = stripes(per_class, size, noise, rng)
    test_x, test_y = stripes(per_class // 4, size, noise, rng)
    return benchmark_from_tensors(
        train_x,
        train_y,
        test_x,
        test_y,
        tasks=3,
        class_names=[f"{30 * c} deg" for c in range(N_CLASSES)],
        name="seq-stripes",
        defaults=SEQ_STRIPES_DEFAULTS,
    )
