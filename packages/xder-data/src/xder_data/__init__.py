"""xder-data: class-incremental benchmarks as device-resident tensors, and batched augmentation.

Benchmarks are registered by name and built with :func:`load_benchmark`; augmentations in
:mod:`xder_data.augment` act on whole batches with per-sample random parameters.
"""

from xder_data import digits as _digits  # noqa: F401  (registers seq-digits)
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment, Transform
from xder_data.benchmark import (
    Benchmark,
    BenchmarkDefaults,
    TaskSplit,
    benchmark_defaults,
    list_benchmarks,
    load_benchmark,
    register_benchmark,
    remap_labels,
    resolve_class_order,
    task_indices,
    validation_split,
    with_class_order,
    with_validation,
)
from xder_data.errors import (
    BenchmarkFormatError,
    ClassOrderError,
    DataError,
    DataNotFoundError,
    UnknownBenchmarkError,
)

__all__ = [
    "Benchmark",
    "BenchmarkDefaults",
    "BenchmarkFormatError",
    "ClassOrderError",
    "Compose",
    "CropFlip",
    "DataError",
    "DataNotFoundError",
    "Normalize",
    "StrongAugment",
    "TaskSplit",
    "Transform",
    "UnknownBenchmarkError",
    "benchmark_defaults",
    "list_benchmarks",
    "load_benchmark",
    "register_benchmark",
    "remap_labels",
    "resolve_class_order",
    "task_indices",
    "validation_split",
    "with_class_order",
    "with_validation",
]
