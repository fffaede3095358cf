"""The statistics over seeds that every report shares (``xder_eval.report.statistics``), worked out
by hand: the mean and sample standard deviation of per-seed values, the same per position of
sequences of unequal length, and a setting's summary from its accuracy matrices."""

from __future__ import annotations

import math

import pytest

import xder_eval
from xder_eval import SeedStats, columnwise_mean_std, seed_stats, summarize_setting


def test_seed_stats_is_the_mean_and_the_sample_std() -> None:
    stats = seed_stats([70.0, 72.0, 77.0])
    assert stats.mean == pytest.approx(73.0)
    # ddof=1: ((3^2 + 1^2 + 4^2) / 2) ** 0.5
    assert stats.std == pytest.approx(math.sqrt(13.0))
    assert stats.values == (70.0, 72.0, 77.0)
    assert stats.n == 3


def test_seed_stats_leaves_out_undefined_values_and_has_no_std_below_two() -> None:
    assert seed_stats([65.5, None, math.nan, math.inf]) == SeedStats(65.5, None, (65.5,))
    assert seed_stats([None]) == SeedStats(None, None, ())
    assert seed_stats([]) == SeedStats(None, None, ())


def test_columnwise_mean_std_counts_each_position_over_the_rows_that_reach_it() -> None:
    mean, std = columnwise_mean_std([[1.0, 2.0, 6.0], [3.0, math.nan], [5.0]])
    assert mean.tolist() == pytest.approx([3.0, 2.0, 6.0])
    assert std[0] == pytest.approx(2.0)  # 1, 3, 5
    assert math.isnan(std[1])
    assert math.isnan(std[2])
    mean, std = columnwise_mean_std([[math.nan], [math.nan]])
    assert math.isnan(mean[0])
    assert math.isnan(std[0])


def test_summarize_setting_by_hand() -> None:
    first = [[80.0], [60.0, 90.0]]  # FAA 75, FF 20, curve 80, 75
    second = [[70.0], [50.0, 70.0]]  # FAA 60, FF 20, curve 70, 60
    summary = summarize_setting([first, second])
    assert (summary.faa.mean, summary.ff.mean) == pytest.approx((67.5, 20.0))
    assert summary.faa.std == pytest.approx(math.sqrt(2 * 7.5**2))
    assert summary.ff.std == pytest.approx(0.0)
    assert summary.curve_mean == pytest.approx((75.0, 67.5))
    assert summary.curve_std == pytest.approx((math.sqrt(50.0), math.sqrt(2 * 7.5**2)))
    assert summary.matrix_mean == ((75.0,), (55.0, 80.0))  # exact halves
    undefined = summarize_setting([first, second], forgetting_defined=False)
    assert undefined.ff == SeedStats(None, None, ())
    one_task = summarize_setting([[[80.0]]])
    assert one_task.ff == SeedStats(None, None, ())
    assert one_task.curve_std == (None,)


def test_the_statistics_are_public_from_the_report_and_the_package() -> None:
    from xder_eval import report

    for name in ("seed_stats", "columnwise_mean_std", "summarize_setting", "count_each_seed_once"):
        assert name in report.__all__
        assert name in xder_eval.__all__
        assert getattr(report, name) is getattr(xder_eval, name)
        assert getattr(report, name).__module__ == "xder_eval.report.statistics"
        assert getattr(report, name).__doc__
