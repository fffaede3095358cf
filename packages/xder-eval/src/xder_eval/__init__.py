"""xder-eval: metrics over accuracy matrices (pure functions) and plots of runs."""

from xder_eval.metrics import (
    AccuracyMatrix,
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
)
from xder_eval.plots import plot_accuracy_curves, plot_accuracy_matrix

__all__ = [
    "AccuracyMatrix",
    "average_accuracy_curve",
    "backward_transfer",
    "final_average_accuracy",
    "final_forgetting",
    "forward_transfer",
    "plot_accuracy_curves",
    "plot_accuracy_matrix",
]
