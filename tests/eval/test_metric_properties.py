"""The metrics on random accuracy matrices (hypothesis) against their definitions written out
with loops, and the relations between them (X-DER paper Sec. 5.1; Lopez-Paz & Ranzato, 2017)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xder_eval import (
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
)

accuracy = st.floats(0, 100, allow_nan=False)


@st.composite
def square(draw: st.DrawFn, min_tasks: int = 1) -> list[list[float]]:
    """A T x T matrix: row t, every task's accuracy after training task t (seen or not)."""
    tasks = draw(st.integers(min_tasks, 7))
    return [draw(st.lists(accuracy, min_size=tasks, max_size=tasks)) for _ in range(tasks)]


def triangle(matrix: list[list[float]]) -> list[list[float]]:
    """The rows as results.json stores Class-IL: row t holds tasks 0..t."""
    return [row[: t + 1] for t, row in enumerate(matrix)]


@given(square())
def test_final_average_accuracy_is_the_mean_of_the_last_row(matrix: list[list[float]]) -> None:
    tasks = len(matrix)
    expected = sum(matrix[-1][i] for i in range(tasks)) / tasks
    assert math.isclose(final_average_accuracy(matrix), expected, abs_tol=1e-9)
    assert math.isclose(final_average_accuracy(triangle(matrix)), expected, abs_tol=1e-9)


@given(square())
def test_the_average_accuracy_curve_is_each_row_s_mean_over_its_seen_tasks(matrix: list[list[float]]) -> None:
    expected = [sum(matrix[t][: t + 1]) / (t + 1) for t in range(len(matrix))]
    assert average_accuracy_curve(matrix) == pytest.approx(expected, abs=1e-9)
    assert average_accuracy_curve(triangle(matrix))[-1] == pytest.approx(final_average_accuracy(matrix))


@given(square(min_tasks=2))
def test_final_forgetting_against_its_definition(matrix: list[list[float]]) -> None:
    tasks = len(matrix)
    drops = []
    for j in range(tasks - 1):
        best = -math.inf
        for k in range(j, tasks - 1):  # after training task j, before the last
            best = max(best, matrix[k][j])
        drops.append(best - matrix[tasks - 1][j])
    expected = sum(drops) / (tasks - 1)
    assert math.isclose(final_forgetting(matrix), expected, abs_tol=1e-9)
    # Entries of untrained tasks (above the diagonal) play no part.
    assert math.isclose(final_forgetting(triangle(matrix)), expected, abs_tol=1e-9)


@given(square(min_tasks=2))
def test_backward_transfer_against_its_definition(matrix: list[list[float]]) -> None:
    tasks = len(matrix)
    expected = sum(matrix[tasks - 1][i] - matrix[i][i] for i in range(tasks - 1)) / (tasks - 1)
    assert math.isclose(backward_transfer(matrix), expected, abs_tol=1e-9)
    assert math.isclose(backward_transfer(triangle(matrix)), expected, abs_tol=1e-9)


@given(square(min_tasks=2))
def test_forgetting_is_at_least_minus_backward_transfer_and_equal_when_accuracy_only_falls(
    matrix: list[list[float]],
) -> None:
    """f_j = max_l a_j^l - a_j^T >= a_j^j - a_j^T: FF >= -BWT, with equality when each task is
    at its best right after its own training."""
    assert final_forgetting(matrix) >= -backward_transfer(matrix) - 1e-9
    falling = np.array(matrix, dtype=np.float64)
    for j in range(len(matrix)):
        falling[j:, j] = np.minimum.accumulate(falling[j:, j])  # never above a_j^j after task j
    assert math.isclose(final_forgetting(falling), -backward_transfer(falling), abs_tol=1e-9)


@given(square(min_tasks=2), st.data())
def test_forward_transfer_against_its_definition(matrix: list[list[float]], data: st.DataObject) -> None:
    tasks = len(matrix)
    baseline = data.draw(st.lists(accuracy, min_size=tasks, max_size=tasks))
    expected = sum(matrix[i - 1][i] - baseline[i] for i in range(1, tasks)) / (tasks - 1)
    assert math.isclose(forward_transfer(matrix, baseline), expected, abs_tol=1e-9)
    with pytest.raises(ValueError, match="square"):
        forward_transfer(triangle(matrix), baseline)
