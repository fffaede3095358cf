"""The statistics over seeds of the sweep's and the experiments' summaries, and their number
formats: the mean and the sample standard deviation, which is undefined below two seeds (shown as
the mean alone, never as ``± 0.00``). Each seed counts once: a sweep or an experiment plans one run
per (setting, seed), named after its seed, so its seeds must be distinct (:func:`check_distinct_seeds`;
the report's rule for runs of one seed found twice is :func:`xder_eval.count_each_seed_once`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xder_cli.runs.errors import SettingError, option
from xder_eval import seed_stats

__all__ = ["check_distinct_seeds", "fmt", "fmt_stat", "mean_std"]


def check_distinct_seeds(seeds: Sequence[int], named: str | None = None) -> None:
    """A sweep's or an experiment's seeds, each once: a planned run is named after its seed, so a
    seed given twice would be one run directory planned twice and its figures counted twice in the
    mean over seeds. ``named``: how the message names the seeds (default: the option ``seeds``).

    Raises:
        SettingError: a seed given more than once.
    """
    repeated = sorted({seed for seed in seeds if list(seeds).count(seed) > 1})
    if repeated:
        name = option("seeds") if named is None else named
        raise SettingError(
            f"{name} {','.join(map(str, seeds))}: seed {', '.join(map(str, repeated))} is given more than "
            "once; each seed is one run, counted once in the mean over seeds"
        )


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The mean and the sample standard deviation (None below two values); None, None of none:
    :func:`xder_eval.seed_stats`, the statistics the report uses, as a pair.

    >>> mean_std([1.0, 3.0]), mean_std([2.0]), mean_std([])
    ((2.0, 1.4142135623730951), (2.0, None), (None, None))
    """
    stats = seed_stats(values)
    return stats.mean, stats.std


def fmt(value: float | None, digits: int = 2) -> str:
    """``12.34``; ``-`` for None or a value that is not finite."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def fmt_stat(mean: float | None, std: float | None) -> str:
    """``mean ± std`` (``mean`` alone without a std, ``-`` without a mean)."""
    if mean is None:
        return "-"
    return fmt(mean) if std is None else f"{fmt(mean)} ± {fmt(std)}"
