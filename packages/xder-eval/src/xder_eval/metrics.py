"""Continual-learning metrics as pure functions of an accuracy matrix (X-DER paper Sec. 5.1).

An accuracy matrix ``R`` is given as a list of rows: row t holds the accuracies on tasks 0..t
after training task t (rows of increasing length, as ``results.json`` stores Class-IL). A square
matrix (row t holding every task, seen or not) is accepted too; entries of tasks not yet trained
(column > row) are ignored except by :func:`forward_transfer`, which needs them. Accuracies are
in percent; the functions return floats in the same unit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "AccuracyMatrix",
    "average_accuracy_curve",
    "backward_transfer",
    "final_average_accuracy",
    "final_forgetting",
    "forward_transfer",
]

AccuracyMatrix = Sequence[Sequence[float]] | np.ndarray


def _rows(matrix: AccuracyMatrix) -> list[np.ndarray]:
    rows = [np.asarray(row, dtype=np.float64).ravel() for row in matrix]
    if not rows:
        raise ValueError("the accuracy matrix is empty")
    for t, row in enumerate(rows):
        if row.shape[0] < t + 1:
            raise ValueError(
                f"row {t} of the accuracy matrix needs at least {t + 1} entries, has {row.shape[0]}"
            )
    return rows


def final_average_accuracy(matrix: AccuracyMatrix) -> float:
    """FAA = (1/T) sum_i a_i^{T-1}: mean accuracy over all tasks after the last one."""
    rows = _rows(matrix)
    n_tasks = len(rows)
    return float(rows[-1][:n_tasks].mean())


def average_accuracy_curve(matrix: AccuracyMatrix) -> list[float]:
    """Mean accuracy over the seen tasks after each task: ``[mean(a_0..t^t) for t]`` (the paper's
    Fig. "accuracies")."""
    return [float(row[: t + 1].mean()) for t, row in enumerate(_rows(matrix))]


def final_forgetting(matrix: AccuracyMatrix) -> float:
    """FF = (1/(T-1)) sum_{j<T-1} f_j with f_j = max_{l in [j, T-2]} a_j^l - a_j^{T-1}.

    The paper writes the max over l in {0..T-2}; a task's accuracy exists only once it has been
    trained (l >= j), which is what the authors' code takes too (it pads untrained entries with 0).

    Raises:
        ValueError: fewer than two tasks.
    """
    rows = _rows(matrix)
    n_tasks = len(rows)
    if n_tasks < 2:
        raise ValueError("forgetting needs at least two tasks")
    drops = [max(rows[k][j] for k in range(j, n_tasks - 1)) - rows[-1][j] for j in range(n_tasks - 1)]
    return float(np.mean(drops))


def backward_transfer(matrix: AccuracyMatrix) -> float:
    """BWT = (1/(T-1)) sum_{i<T-1} (a_i^{T-1} - a_i^i) (Lopez-Paz & Ranzato, 2017).

    Raises:
        ValueError: fewer than two tasks.
    """
    rows = _rows(matrix)
    n_tasks = len(rows)
    if n_tasks < 2:
        raise ValueError("backward transfer needs at least two tasks")
    return float(np.mean([rows[-1][i] - rows[i][i] for i in range(n_tasks - 1)]))


def forward_transfer(matrix: AccuracyMatrix, baseline: Sequence[float] | np.ndarray) -> float:
    """FWT = (1/(T-1)) sum_{i>=1} (a_i^{i-1} - b_i) (Lopez-Paz & Ranzato, 2017).

    Args:
        matrix: a SQUARE matrix: row t holds every task's accuracy after training task t (the
            loop records it for Task-IL).
        baseline: b, each task's accuracy of the network at random initialisation.

    Raises:
        ValueError: fewer than two tasks, or a row without the future tasks' accuracies.
    """
    rows = _rows(matrix)
    n_tasks = len(rows)
    if n_tasks < 2:
        raise ValueError("forward transfer needs at least two tasks")
    if any(row.shape[0] < n_tasks for row in rows):
        raise ValueError("forward transfer needs a square matrix (accuracy on unseen tasks too)")
    b = np.asarray(baseline, dtype=np.float64).ravel()
    if b.shape[0] < n_tasks:
        raise ValueError(f"the baseline needs {n_tasks} entries, has {b.shape[0]}")
    return float(np.mean([rows[i - 1][i] - b[i] for i in range(1, n_tasks)]))
