"""The statistics over seeds of the sweep's and the experiments' summaries, and their number
formats: the mean and the sample standard deviation, which is undefined below two seeds (shown as
the mean alone, never as ``± 0.00``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["fmt", "fmt_stat", "mean_std"]


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The mean and the sample standard deviation (None below two values); None, None of none.

    >>> mean_std([1.0, 3.0]), mean_std([2.0]), mean_std([])
    ((2.0, 1.4142135623730951), (2.0, None), (None, None))
    """
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def fmt(value: float | None, digits: int = 2) -> str:
    """``12.34``; ``-`` for None or a value that is not finite."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def fmt_stat(mean: float | None, std: float | None) -> str:
    """``mean ± std`` (``mean`` alone without a std, ``-`` without a mean)."""
    if mean is None:
        return "-"
    return fmt(mean) if std is None else f"{fmt(mean)} ± {fmt(std)}"
