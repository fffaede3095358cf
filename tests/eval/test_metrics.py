"""Metrics on accuracy matrices worked out by hand (X-DER paper Sec. 5.1; Lopez-Paz & Ranzato)."""

from __future__ import annotations

import numpy as np
import pytest

from xder_eval import (
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
)

# Rows: accuracy on tasks 0..t after training task t.
R = [
    [90.0],
    [60.0, 80.0],
    [50.0, 70.0, 95.0],
]


def test_final_average_accuracy() -> None:
    assert final_average_accuracy(R) == pytest.approx((50 + 70 + 95) / 3)


def test_average_accuracy_curve() -> None:
    assert average_accuracy_curve(R) == pytest.approx([90.0, 70.0, 215 / 3])


def test_final_forgetting_by_hand() -> None:
    # task 0: max(90, 60) - 50 = 40; task 1: max(80) - 70 = 10; FF = (40 + 10) / 2.
    assert final_forgetting(R) == pytest.approx(25.0)


def test_forgetting_uses_the_best_earlier_accuracy_not_the_first() -> None:
    rows = [[50.0], [70.0, 60.0], [40.0, 60.0, 99.0]]
    # task 0 peaked after task 1: 70 - 40 = 30; task 1: 60 - 60 = 0.
    assert final_forgetting(rows) == pytest.approx(15.0)


def test_backward_transfer_by_hand() -> None:
    # (50 - 90) + (70 - 80) = -50, over 2 tasks.
    assert backward_transfer(R) == pytest.approx(-25.0)


def test_square_matrix_ignores_untrained_entries() -> None:
    square = [
        [90.0, 55.0, 40.0],
        [60.0, 80.0, 45.0],
        [50.0, 70.0, 95.0],
    ]
    assert final_average_accuracy(square) == final_average_accuracy(R)
    assert final_forgetting(square) == final_forgetting(R)
    assert backward_transfer(square) == backward_transfer(R)
    assert final_forgetting(np.array(square)) == pytest.approx(25.0)
    # A run stopped after 2 of 3 tasks (train.tasks) whose rows hold all 3: task 2 was never trained.
    stopped = [[90.0, 10.0, 10.0], [60.0, 80.0, 10.0]]
    assert final_average_accuracy(stopped) == pytest.approx((60 + 80) / 2)


def test_forward_transfer_by_hand() -> None:
    square = [
        [90.0, 55.0, 40.0],
        [60.0, 80.0, 45.0],
        [50.0, 70.0, 95.0],
    ]
    baseline = [50.0, 50.0, 50.0]
    # (a_1^0 - b_1) + (a_2^1 - b_2) = (55 - 50) + (45 - 50) = 0.
    assert forward_transfer(square, baseline) == pytest.approx(0.0)
    assert forward_transfer(square, [0.0, 40.0, 35.0]) == pytest.approx(12.5)


@pytest.mark.skipif(
    np.finfo(np.longdouble).eps == np.finfo(np.float64).eps, reason="long double is float64 here"
)
def test_forward_transfer_reads_the_baseline_in_float64_as_the_matrix() -> None:
    """Matrix and baseline are both read as float64: when each task's accuracy before its training
    equals its baseline, FWT is exactly 0, whatever the float width they come in. A baseline kept in
    long double would leave float64's rounding of 100/3 in every term (33.333333333333335701... -
    33.333333333333333333... = 2.4e-15)."""
    thirds = np.full((3, 3), 100, dtype=np.longdouble) / 3
    assert forward_transfer(thirds, thirds[0]) == 0.0


def test_forward_transfer_needs_the_future_columns() -> None:
    with pytest.raises(ValueError, match="square"):
        forward_transfer(R, [0.0, 0.0, 0.0])


def test_single_task_and_malformed_matrices() -> None:
    assert final_average_accuracy([[42.0]]) == 42.0
    with pytest.raises(ValueError, match="two tasks"):
        final_forgetting([[42.0]])
    with pytest.raises(ValueError, match="two tasks"):
        backward_transfer([[42.0]])
    with pytest.raises(ValueError, match="row 1"):
        final_average_accuracy([[1.0], [2.0]])
    with pytest.raises(ValueError, match="empty"):
        final_average_accuracy([])
