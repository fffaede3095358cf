"""The statistics over seeds of every report: one run per seed, the mean and the sample standard
deviation of per-seed values, and the same per position of curves and matrices of unequal length.

* :func:`count_each_seed_once`: which run of a seed counts where several share it.
* :func:`seed_stats`: mean and sample standard deviation (``ddof=1``; None below two values) of
  per-seed values, the values that are None or not finite left out (:class:`SeedStats`).
* :func:`columnwise_mean_std`: the same per position over sequences of unequal length.
* :func:`summarize_setting`: a group's statistics in one setting (Class-IL or Task-IL) from its
  accuracy matrices, one per seed (:class:`SettingSummary`).

Accuracies keep the unit of the matrices (percent in ``results.json``). This module reads no file
and knows no run directory: what a run is, and which runs form a group, is
:mod:`xder_eval.report.grouping`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TypeVar

import numpy as np

from xder_eval.metrics import average_accuracy_curve, final_average_accuracy, final_forgetting

__all__ = [
    "RepeatedSeed",
    "SeedStats",
    "SettingSummary",
    "columnwise_mean_std",
    "count_each_seed_once",
    "seed_stats",
    "summarize_setting",
]


@dataclass(frozen=True)
class SeedStats:
    """Mean and sample standard deviation (None below two values) of per-seed values."""

    mean: float | None
    std: float | None
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class SettingSummary:
    """One setting's (Class-IL or Task-IL) statistics of a group: FAA and FF over seeds, the mean
    and sample std of the accuracy-after-each-task curve (std None below two seeds), and the
    element-wise mean accuracy matrix (rows as ``results.json`` stores them)."""

    faa: SeedStats
    ff: SeedStats
    curve_mean: tuple[float, ...]
    curve_std: tuple[float | None, ...]
    matrix_mean: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class RepeatedSeed:
    """A seed that several complete runs of one group share: the run that counts
    (:func:`count_each_seed_once`) and those set aside, by path."""

    seed: int
    counted: str
    set_aside: tuple[str, ...]


_T = TypeVar("_T")


def _counting_order(path: str) -> tuple[str, str]:
    """The order in which runs of one seed are considered: folder name, then the whole path."""
    return (PurePath(path).name, path)


def count_each_seed_once(
    runs: Iterable[_T], seed: Callable[[_T], int], path: Callable[[_T], str]
) -> tuple[list[_T], list[RepeatedSeed]]:
    """One run per seed, the rule of every aggregate over seeds: of the runs sharing a seed, the
    one whose folder name (the last part of ``path``) sorts first counts, ties broken by the whole
    path; the others are set aside. ``xder-run train`` names a run's folder after its start time,
    so of its runs the earliest started counts. The rule reads only the paths: the same runs give
    the same choice in any order.

    Args:
        runs: the runs of one group (one configuration), complete.
        seed: a run's seed.
        path: a run's directory.

    Returns:
        The runs that count, by ascending seed, and for each seed run more than once (ascending)
        the run that counts and those set aside (in the rule's order).

    >>> runs = [("b/er-s0", 0), ("c/er-s1", 1), ("a/er-s0", 0)]
    >>> kept, repeated = count_each_seed_once(runs, seed=lambda r: r[1], path=lambda r: r[0])
    >>> kept, repeated
    ([('a/er-s0', 0), ('c/er-s1', 1)], [RepeatedSeed(seed=0, counted='a/er-s0', set_aside=('b/er-s0',))])
    """
    by_seed: dict[int, list[_T]] = defaultdict(list)
    for run in runs:
        by_seed[seed(run)].append(run)
    kept: list[_T] = []
    repeated: list[RepeatedSeed] = []
    for value in sorted(by_seed):
        ordered = sorted(by_seed[value], key=lambda run: _counting_order(path(run)))
        kept.append(ordered[0])
        if len(ordered) > 1:
            repeated.append(RepeatedSeed(value, path(ordered[0]), tuple(path(r) for r in ordered[1:])))
    return kept, repeated


def seed_stats(values: Sequence[float | None]) -> SeedStats:
    """The mean and the sample standard deviation (``ddof=1``) of per-seed ``values``, one value
    a seed; the values that are None or not finite (a metric undefined for that seed) are left out
    and the rest kept in order. The std is None below two values, both are None with none.

    >>> seed_stats([70.0, 72.0, None])
    SeedStats(mean=71.0, std=1.4142135623730951, values=(70.0, 72.0))
    >>> seed_stats([65.5])
    SeedStats(mean=65.5, std=None, values=(65.5,))
    """
    finite = tuple(float(v) for v in values if v is not None and math.isfinite(v))
    if not finite:
        return SeedStats(None, None, ())
    array = np.asarray(finite, dtype=np.float64)
    std = float(array.std(ddof=1)) if array.size >= 2 else None
    return SeedStats(float(array.mean()), std, finite)


def columnwise_mean_std(rows: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """The mean and the sample standard deviation (``ddof=1``) per position over ``rows``,
    sequences of possibly different lengths (curves of runs that stopped at different tasks): a
    position's statistics are over the rows long enough to have it, NaN values left out; the mean
    is NaN where no row has a value, the std NaN below two values.

    >>> mean, std = columnwise_mean_std([[1.0, 2.0], [3.0]])
    >>> mean.tolist(), std.tolist()
    ([2.0, 2.0], [1.4142135623730951, nan])
    """
    width = max(len(r) for r in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        grid[i, : len(r)] = np.asarray(r, dtype=np.float64)
    counts = np.sum(~np.isnan(grid), axis=0)
    sums = np.nansum(grid, axis=0)
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    squares = np.nansum((grid - mean) ** 2, axis=0)
    std = np.where(counts > 1, np.sqrt(squares / np.maximum(counts - 1, 1)), np.nan)
    return mean, std


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def summarize_setting(
    matrices: Sequence[list[list[float]]], forgetting_defined: bool = True
) -> SettingSummary:
    """A group's statistics in one setting (Class-IL or Task-IL) from its accuracy ``matrices``,
    one per seed (rows as ``results.json`` stores them, NaN for a missing value; at least one):
    FAA and FF over seeds (:func:`seed_stats`; FF of a matrix below two tasks, or of every matrix
    when ``forgetting_defined`` is False, is undefined and left out), the mean and std of the
    accuracy-after-each-task curve and the element-wise mean matrix
    (:func:`columnwise_mean_std`: runs of unequal length count where they reach).
    """
    faa = seed_stats([final_average_accuracy(m) for m in matrices])
    ff = seed_stats([final_forgetting(m) if len(m) >= 2 and forgetting_defined else None for m in matrices])
    mean, std = columnwise_mean_std([average_accuracy_curve(m) for m in matrices])
    n_rows = max(len(m) for m in matrices)
    matrix_mean = []
    for t in range(n_rows):
        row_mean, _ = columnwise_mean_std([m[t] for m in matrices if len(m) > t])
        matrix_mean.append(tuple(float(v) for v in row_mean))
    return SettingSummary(
        faa=faa,
        ff=ff,
        curve_mean=tuple(float(v) for v in mean),
        curve_std=tuple(_none_if_nan(v) for v in std),
        matrix_mean=tuple(matrix_mean),
    )
