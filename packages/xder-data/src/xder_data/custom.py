"""Benchmarks from the user's own data: tensors in, a :class:`~xder_data.Benchmark` out.

:func:`benchmark_from_tensors` is the Python entry point (docs/python-api.md, "Use it from
Python"); the ``folder`` benchmark (:mod:`xder_data.folder`) decodes image folders or an ``.npz``
file and hands the arrays to it. Both give the CIFAR-style protocol :data:`CUSTOM_DEFAULTS` (the
DER paper's Split CIFAR-10 settings, ``seq-cifar10``):

* classes are the distinct training labels in ascending order, relabelled 0..K-1 (natural class
  order), split into tasks by :func:`split_classes` (2 classes per task unless told otherwise);
* training augmentation: a random crop to the image size after zero padding of 1/8 of the
  shorter side (4 pixels at 32x32) and a horizontal flip; then normalisation by ``mean``/``std``,
  computed from the training images when not given (:func:`channel_stats`);
* ``strong_transform``: :class:`~xder_data.augment.StrongAugment` at the image size, so that
  X-DER's future preparation runs;
* ``resnet18-cifar`` (width 64, 3 input channels), 50 epochs per task, batch 32, replay
  minibatch 32, SGD at lr 0.03 without momentum or schedule, buffer 200, each epoch's last partial
  batch kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults
from xder_data.errors import BenchmarkFormatError, BenchmarkOptionError

__all__ = [
    "CUSTOM_DEFAULTS",
    "DEFAULT_CLASSES_PER_TASK",
    "benchmark_from_tensors",
    "channel_stats",
    "split_classes",
]

CUSTOM_DEFAULTS = BenchmarkDefaults(
    epochs=50,  # the DER paper's Seq-CIFAR-10 protocol (seq-cifar10)
    batch_size=32,
    minibatch_size=32,
    lr=0.03,
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",
    buffer_size=200,
    backbone="resnet18-cifar",
    backbone_options={"width": 64, "in_channels": 3},
    drop_last=False,
)
"""The CIFAR-style protocol of a benchmark built from the user's own data."""

DEFAULT_CLASSES_PER_TASK = 2
"""Classes per task when neither ``tasks`` nor ``classes_per_task`` is given (as Split CIFAR-10)."""


def split_classes(
    n_classes: int, *, tasks: int | None = None, classes_per_task: int | Sequence[int] | None = None
) -> tuple[int, ...]:
    """The number of classes of each task.

    Args:
        n_classes: K, the classes of the data.
        tasks: the number of tasks T; alone, each task gets K / T classes.
        classes_per_task: an int (every task gets as many) or a list (one entry per task, in
            order, summing to K). Neither given: :data:`DEFAULT_CLASSES_PER_TASK`.

    Raises:
        BenchmarkOptionError: the classes do not divide into the tasks asked for, or a count
            below 1.
    """
    fix = "set benchmark.tasks or benchmark.classes_per_task (an int, or a list such as [2, 2, 1])"
    if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
        raise BenchmarkOptionError(f"benchmark.tasks must be an integer >= 1, got {tasks!r}")
    if classes_per_task is None:
        if tasks is None:
            classes_per_task = DEFAULT_CLASSES_PER_TASK
        elif tasks > n_classes:
            raise BenchmarkOptionError(f"{n_classes} classes cannot make {tasks} tasks: {fix}")
        elif n_classes % tasks:
            raise BenchmarkOptionError(
                f"{n_classes} classes do not divide into {tasks} tasks: {fix}, e.g. "
                f"'benchmark.classes_per_task={_uneven(n_classes, tasks)}' (quoted for the shell)"
            )
        else:
            return (n_classes // tasks,) * tasks
    if isinstance(classes_per_task, int) and not isinstance(classes_per_task, bool):
        if classes_per_task < 1:
            raise BenchmarkOptionError(f"benchmark.classes_per_task must be >= 1, got {classes_per_task}")
        if n_classes % classes_per_task:
            raise BenchmarkOptionError(
                f"{n_classes} classes do not divide into tasks of {classes_per_task}: {fix}"
            )
        counts = (classes_per_task,) * (n_classes // classes_per_task)
    else:
        # A bool (excluded above) is neither a count nor a list: the error below names it.
        counts = tuple(classes_per_task) if isinstance(classes_per_task, Sequence) else ()
        if not counts or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts):
            raise BenchmarkOptionError(
                f"benchmark.classes_per_task must be an int or a list of ints >= 1, got {classes_per_task!r}"
            )
        if sum(counts) != n_classes:
            raise BenchmarkOptionError(
                f"benchmark.classes_per_task {list(counts)} holds {sum(counts)} classes, the data have "
                f"{n_classes}: the list must sum to {n_classes}"
            )
    if tasks is not None and len(counts) != tasks:
        raise BenchmarkOptionError(
            f"{n_classes} classes in tasks of {list(counts)} make {len(counts)} tasks, not the "
            f"{tasks} asked for: {fix}"
        )
    return counts


def _uneven(n_classes: int, tasks: int) -> list[int]:
    base, extra = divmod(n_classes, tasks)
    return [base + 1] * extra + [base] * (tasks - extra)


def channel_stats(x: Tensor, chunk: int = 4096) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) standard deviation of images scaled to [0, 1].

    Args:
        x: (N, C, H, W) uint8 (divided by 255) or float in [0, 1]; summed in float64, ``chunk``
            rows at a time.

    Returns:
        ``(mean, std)``, C values each; a constant channel gets std 1 (Normalize divides by it).
    """
    channels = x.shape[1]
    total = torch.zeros(channels, dtype=torch.float64)
    squares = torch.zeros(channels, dtype=torch.float64)
    for start in range(0, x.shape[0], chunk):
        part = x[start : start + chunk].to(torch.float64)
        if x.dtype == torch.uint8:
            part /= 255
        total += part.sum(dim=(0, 2, 3))
        squares += part.square().sum(dim=(0, 2, 3))
    count = max(x.shape[0] * x.shape[2] * x.shape[3], 1)
    mean = total / count
    std = (squares / count - mean.square()).clamp_min(0).sqrt()
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    return tuple(mean.tolist()), tuple(std.tolist())


def _images(x: Tensor | np.ndarray, what: str) -> Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 4:
        raise BenchmarkFormatError(f"{what} must be (N, C, H, W) images, got shape {tuple(x.shape)}")
    if x.dtype != torch.uint8 and not x.is_floating_point():
        raise BenchmarkFormatError(f"{what} must be uint8 (0..255) or float in [0, 1], got {x.dtype}")
    return x


def _labels(y: Tensor | np.ndarray, n: int, what: str) -> Tensor:
    y = torch.as_tensor(y)
    if y.dim() != 1 or y.dtype.is_floating_point or y.dtype in (torch.bool, torch.complex64):
        raise BenchmarkFormatError(f"{what} must be a 1-D integer array, got {y.dtype} {tuple(y.shape)}")
    if y.shape[0] != n:
        raise BenchmarkFormatError(f"{what} holds {y.shape[0]} labels for {n} images")
    return y.to(torch.int64)


def _stat(values: Sequence[float] | None, channels: int, what: str) -> tuple[float, ...] | None:
    if values is None:
        return None
    out = tuple(float(v) for v in values)
    if len(out) != channels:
        raise BenchmarkOptionError(
            f"benchmark.{what} has {len(out)} values, the images have {channels} channels: "
            "give one per channel"
        )
    if what == "std" and any(v <= 0 for v in out):
        raise BenchmarkOptionError(f"benchmark.std must be positive, got {list(out)}")
    return out


def benchmark_from_tensors(
    train_x: Tensor | np.ndarray,
    train_y: Tensor | np.ndarray,
    test_x: Tensor | np.ndarray,
    test_y: Tensor | np.ndarray,
    *,
    tasks: int | None = None,
    classes_per_task: int | Sequence[int] | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    class_names: Sequence[str] | None = None,
    name: str = "tensors",
    defaults: BenchmarkDefaults = CUSTOM_DEFAULTS,
) -> Benchmark:
    """A class-incremental benchmark from images and labels held in memory.

    Args:
        train_x: (N, C, H, W) training images, uint8 (0..255) or float in [0, 1].
        train_y: (N,) integer labels, any values: the distinct training labels in ascending order
            become classes 0..K-1 (the natural class order).
        test_x: (N, C, H, W) test images, as ``train_x``; the same C, H, W.
        test_y: (N,) integer labels; every test label must be a training label.
        tasks: the split into tasks (:func:`split_classes`; 2 classes per task when neither this
            nor ``classes_per_task`` is given).
        classes_per_task: the split into tasks, as ``tasks``.
        mean: per-channel normalisation of [0, 1]-scaled images; computed from ``train_x``
            (:func:`channel_stats`) when not given.
        std: per-channel normalisation, as ``mean``.
        class_names: one name per class, in ascending label order.
        name: the benchmark's name (``Benchmark.name``).
        defaults: the training protocol (the CIFAR-style :data:`CUSTOM_DEFAULTS`).

    Returns:
        A :class:`~xder_data.Benchmark` on the CPU, with the transforms of the module docstring.

    Raises:
        BenchmarkFormatError: ill-shaped or ill-typed arrays, no training image, or a test label
            that no training image has.
        BenchmarkOptionError: the classes do not divide into the tasks asked for, or ``mean``,
            ``std`` or ``class_names`` of the wrong length.
    """
    train_x, test_x = _images(train_x, "train_x"), _images(test_x, "test_x")
    if train_x.shape[0] == 0:
        raise BenchmarkFormatError("train_x holds no image: the benchmark needs training images")
    if tuple(test_x.shape[1:]) != tuple(train_x.shape[1:]):
        raise BenchmarkFormatError(
            f"test images are {tuple(test_x.shape[1:])}, training images {tuple(train_x.shape[1:])}: "
            "give both splits the same (C, H, W)"
        )
    train_y = _labels(train_y, train_x.shape[0], "train_y")
    test_y = _labels(test_y, test_x.shape[0], "test_y")
    classes = torch.unique(train_y)  # sorted
    missing = sorted(set(torch.unique(test_y).tolist()) - set(classes.tolist()))
    if missing:
        raise BenchmarkFormatError(
            f"test label {missing[0]} has no training image: every test class must be a training class"
        )
    n_classes = int(classes.shape[0])
    counts = split_classes(n_classes, tasks=tasks, classes_per_task=classes_per_task)
    if class_names is not None and len(class_names) != n_classes:
        raise BenchmarkOptionError(f"{len(class_names)} class names for {n_classes} classes")
    channels, height, width = (int(s) for s in train_x.shape[1:])
    mean, std = _stat(mean, channels, "mean"), _stat(std, channels, "std")
    if mean is None or std is None:
        computed_mean, computed_std = channel_stats(train_x)
        mean, std = mean or computed_mean, std or computed_std
    padding = max(1, round(min(height, width) / 8))
    normalize = Normalize(mean, std)
    return Benchmark(
        name=name,
        n_tasks=len(counts),
        classes_per_task=counts,
        class_order=tuple(range(n_classes)),
        input_shape=(channels, height, width),
        mean=mean,
        std=std,
        train_x=train_x,
        train_y=torch.searchsorted(classes, train_y),
        test_x=test_x,
        test_y=torch.searchsorted(classes, test_y),
        defaults=defaults,
        train_transform=Compose(CropFlip((height, width), padding=padding, flip=True), normalize),
        test_transform=normalize,
        strong_transform=StrongAugment((height, width), mean, std),
        class_names=None if class_names is None else tuple(str(c) for c in class_names),
    )
