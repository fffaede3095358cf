"""A benchmark of your own, inline: images read from a CSV file, six classes in three tasks, with a
protocol of its own sized for a CPU (docs/own-data.md, "A benchmark of your own"). Train on it with
``uv run xder-run train --plugin examples/my_benchmark.py --benchmark my-patterns --method derpp``.

The file, ``DATA_ROOT/my-patterns.csv`` (``--data-root``, ``data`` by default), holds one image a
row: ``split,label,p0,...,p63`` with ``split`` ``train`` or ``test`` and 64 greyscale pixels
(0-255) of an 8x8 image. Where it does not exist, the loader first writes a stand-in: 100 training
and 25 test images a class, each class a fixed random pattern plus noise (seed 0, so the same file
on every machine).
"""

import csv
from pathlib import Path

import numpy as np

from xder_data import Benchmark, BenchmarkDefaults, benchmark_from_tensors, register_benchmark

SIDE = 8
CLASSES = 6

# The protocol: what `xder-run train --benchmark my-patterns` runs unless told otherwise
# (--epochs, --buffer-size, --set train.lr=..., --set backbone.width=... override it).
MY_PATTERNS_PROTOCOL = BenchmarkDefaults(
    epochs=10,
    batch_size=32,
    minibatch_size=32,  # the replay batch
    lr=0.05,
    buffer_size=60,
    backbone="resnet18-cifar",
    backbone_options={"width": 8, "in_channels": 1},
    drop_last=True,  # no last batch of a few images: BatchNorm over a handful of 8x8 maps is unstable
)


def write_stand_in(path: Path, train_per_class: int = 100, test_per_class: int = 25) -> None:
    """Write the CSV file the loader reads, from generated images (a stand-in for your own export)."""
    rng = np.random.default_rng(0)
    patterns = rng.uniform(0, 1, (CLASSES, SIDE * SIDE))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["split", "label", *(f"p{i}" for i in range(SIDE * SIDE))])
        for split, per_class in (("train", train_per_class), ("test", test_per_class)):
            for label in range(CLASSES):
                noisy = patterns[label] + rng.normal(0, 0.25, (per_class, SIDE * SIDE))
                for pixels in np.rint(np.clip(noisy, 0, 1) * 255).astype(int):
                    writer.writerow([split, label, *pixels])
    partial.replace(path)  # whole or not at all


@register_benchmark("my-patterns", defaults=MY_PATTERNS_PROTOCOL)
def my_patterns(root: str | Path | None, *, tasks: int = 3) -> Benchmark:
    """The benchmark. ``root`` is --data-root; ``tasks`` is an option: --set benchmark.tasks=2."""
    path = Path(root if root is not None else "data") / "my-patterns.csv"
    if not path.exists():
        write_stand_in(path)
    with path.open(newline="") as rows:
        reader = csv.reader(rows)
        next(reader)  # the header
        split, labels, pixels = zip(*((row[0], int(row[1]), row[2:]) for row in reader), strict=True)
    images = np.array(pixels, dtype=np.uint8).reshape(-1, 1, SIDE, SIDE)  # (N, C, H, W)
    labels_array, train = np.array(labels), np.array(split) == "train"
    return benchmark_from_tensors(
        images[train],
        labels_array[train],
        images[~train],
        labels_array[~train],
        tasks=tasks,  # the distinct labels, in ascending order, split evenly into this many tasks
        class_names=[f"pattern {c}" for c in range(CLASSES)],
        name="my-patterns",
        defaults=MY_PATTERNS_PROTOCOL,  # the same object as the registry's
    )
