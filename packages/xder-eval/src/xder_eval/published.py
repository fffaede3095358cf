"""Published results, and our runs set beside them: is a difference larger than seed noise?

A :class:`PublishedResult` is one cell of a paper's table (a benchmark, a buffer size, a method or
one of its variants: FAA, FF, their standard deviations and the number of runs where the paper
gives them). This module holds no paper's numbers and reads no file: the caller (``xder-cli``,
which ships them as data) passes them in.

The difference test (:func:`compare_to_published`), for one metric (FAA or FF, in %):

* ``d = mean(ours) - published``, our mean over our ``n`` seeds;
* ``sigma``, the standard deviation of one run: **the published std where the paper gives one,
  else our sample std** (``ddof=1``; undefined below two seeds of ours);
* the standard error of ``d``: both means estimate the same method under the same protocol, so
  their runs share ``sigma``, and the two means' standard errors ``sigma / sqrt(n)`` and
  ``sigma / sqrt(n_p)`` combine in quadrature, as for the difference of two independent means:
  ``SE = sigma * sqrt(1/n + 1/n_p)``, with ``n_p`` the number of runs the paper averages **where
  it states it**; where it does not, the published value is taken as exact
  (``SE = sigma / sqrt(n)``), which makes the test stricter, never looser;
* the difference **exceeds two standard errors** when ``|d| > 2 * SE``. No judgement (None)
  where ``SE`` is undefined: no published value, none of ours, or one seed of ours and no
  published std.

Worked example: ours 60, 70, 80 (mean 70, sample std 10, n 3) against a published 80 with no
std and no run count: ``d = -10``, ``SE = 10 / sqrt(3) = 5.774``, ``2 SE = 11.55``: within.
Against 75 +- 3 over 10 runs: ``d = -5``, ``SE = 3 * sqrt(1/3 + 1/10) = 1.975``,
``2 SE = 3.95``: exceeded.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "PublishedResult", "compare_to_published", "preset_entry_name"]


@dataclass(frozen=True)
class PublishedResult:
    """One cell of a paper's table.

    Attributes:
        benchmark: the benchmark (its paper protocol).
        buffer_size: the buffer size of the column; None for a method without a buffer (FT, JT,
            LwF.MC), whose one value fills every buffer column of the benchmark.
        entry: the method's registry name (``derpp``), or a variant's preset entry name
            (``xder-rpc``: X-DER with RPC future heads).
        method: the registered method the entry runs (``xder`` for every X-DER variant).
        faa: final average accuracy (%) in the benchmark's own scenario: Class-IL, Domain-IL
            (Permuted and Rotated MNIST), a general stream's accuracy at its end (MNIST-360).
        ff: final forgetting (%, the same scenario's); None where the paper gives none (JT,
            GDumb: "-"; a general stream, one task).
        faa_std, ff_std: the paper's standard deviations over its runs; None where not given.
        task_il, task_il_std: the Task-IL final average accuracy (%) and its std, where the paper
            prints one (the DER paper's Table 2); else None.
        seeds: how many runs the paper's figures average, where it states it; else None.
        source: the paper and table, in words.
        row: the row's name in the paper (``"X-DER w/ RPC future heads"``).
    """

    benchmark: str
    buffer_size: int | None
    entry: str
    method: str
    faa: float
    ff: float | None = None
    faa_std: float | None = None
    ff_std: float | None = None
    task_il: float | None = None
    task_il_std: float | None = None
    seeds: int | None = None
    source: str = ""
    row: str = ""

    def matches(self, benchmark: str, buffer_size: int, method: str, preset: str) -> bool:
        """Whether runs of ``method`` with preset ``preset`` on ``benchmark`` at ``buffer_size``
        (0: no buffer) are this cell's: same benchmark, same buffer (a buffer-less entry matches
        buffer 0), and the same entry (:func:`preset_entry_name`)."""
        same_buffer = buffer_size == 0 if self.buffer_size is None else buffer_size == self.buffer_size
        return (
            self.benchmark == benchmark
            and same_buffer
            and self.method == method
            and self.entry == preset_entry_name(method, preset)
        )


def preset_entry_name(method: str, preset: str) -> str:
    """The table entry a run belongs to: the variant its preset names (``paper:xder-rpc`` ->
    ``xder-rpc``), else its method."""
    _, _, entry = preset.partition(":")
    return entry or method


@dataclass(frozen=True)
class Comparison:
    """Ours against a published value, for one metric (see the module docstring for the rule).

    Attributes:
        mean, std, n: ours over seeds (std None below two seeds; mean None without a value).
        published, published_std, published_seeds: the paper's value, std and run count (None
            where not given).
        difference: ``mean - published`` (None without a mean).
        sigma: the standard deviation of one run the test used; ``sigma_from`` says whose
            (``"published"`` or ``"ours"``; None: neither available).
        standard_error: ``sigma * sqrt(1/n + 1/n_p)`` (``1/n_p`` left out where the paper states
            no run count); None where undefined.
        exceeds_two_se: ``|difference| > 2 * standard_error``; None where undefined.
    """

    mean: float | None
    std: float | None
    n: int
    published: float
    published_std: float | None
    published_seeds: int | None
    difference: float | None
    sigma: float | None
    sigma_from: str | None
    standard_error: float | None
    exceeds_two_se: bool | None


def compare_to_published(
    ours: Sequence[float],
    published: float,
    *,
    published_std: float | None = None,
    published_seeds: int | None = None,
) -> Comparison:
    """Set our per-seed values of one metric beside a published value and judge the difference
    against two standard errors (module docstring).

    Args:
        ours: our value per seed (non-finite values are left out).
        published: the paper's value.
        published_std: the paper's standard deviation over its runs, where given.
        published_seeds: the number of runs the paper averages, where stated.

    Raises:
        ValueError: a negative published std, or a run count below one.
    """
    if published_std is not None and published_std < 0:
        raise ValueError(f"a published std is >= 0, got {published_std}")
    if published_seeds is not None and published_seeds < 1:
        raise ValueError(f"a published run count is >= 1, got {published_seeds}")
    values = [float(v) for v in ours if v is not None and math.isfinite(v)]
    n = len(values)
    mean = statistics.fmean(values) if values else None
    std = statistics.stdev(values) if n >= 2 else None
    sigma: float | None
    sigma_from: str | None
    if published_std is not None:
        sigma, sigma_from = published_std, "published"
    else:
        sigma, sigma_from = std, ("ours" if std is not None else None)
    difference = None if mean is None else mean - published
    standard_error = exceeds = None
    if sigma is not None and n >= 1:
        standard_error = sigma * math.sqrt(1 / n + (1 / published_seeds if published_seeds else 0.0))
        exceeds = abs(difference) > 2 * standard_error if difference is not None else None
    return Comparison(
        mean=mean,
        std=std,
        n=n,
        published=float(published),
        published_std=published_std,
        published_seeds=published_seeds,
        difference=difference,
        sigma=sigma,
        sigma_from=sigma_from,
        standard_error=standard_error,
        exceeds_two_se=exceeds,
    )
