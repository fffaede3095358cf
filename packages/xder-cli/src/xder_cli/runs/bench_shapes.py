"""The benchmarks ``xder-run bench`` can measure: the shape of each one's synthetic data."""

from __future__ import annotations

__all__ = ["BENCH_SHAPES", "bench_benchmarks"]

BENCH_SHAPES: dict[str, tuple[tuple[int, ...], int, int, int]] = {
    "seq-cifar10": ((3, 32, 32), 2, 5, 5000),
    "seq-cifar100": ((3, 32, 32), 10, 10, 500),
    "seq-digits": ((1, 8, 8), 2, 5, 144),
    "seq-miniimg": ((3, 84, 84), 5, 20, 500),
    "seq-mnist": ((1, 28, 28), 2, 5, 6000),
    "seq-tinyimg": ((3, 64, 64), 20, 10, 500),
}
"""Synthetic data shaped like each benchmark: (input shape, classes per task, tasks, items per
class)."""


def bench_benchmarks() -> list[str]:
    """The benchmarks with bench shapes, sorted (``xder-run bench --benchmark``)."""
    return sorted(BENCH_SHAPES)
