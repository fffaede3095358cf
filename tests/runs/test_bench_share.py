"""Processes benched together (xder_cli.runs.bench_share): the ratio of a group's time to its
processes' time alone."""

from __future__ import annotations

import pytest

from xder_cli.runs.bench_share import share_ratio


@pytest.mark.parametrize(
    ("group", "processes", "alone", "ratio"),
    [(2.0, 2, 1.0, 1.0), (1.5, 2, 1.0, 0.75), (5.0, 2, 1.0, 2.5), (10.0, 4, 2.0, 1.25)],
)
def test_share_ratio(group: float, processes: int, alone: float, ratio: float) -> None:
    assert share_ratio(group, processes, alone) == pytest.approx(ratio)
