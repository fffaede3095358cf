"""xder-eval: the paper's metrics as pure functions, and plots of runs.

Accuracy-matrix metrics keep the matrices' unit (percent). Metrics of model outputs (ECE, SS-ERR,
SS-NLL, F1, pointing accuracy) return fractions in [0, 1], the unit of the probabilities they are
computed from (SS-NLL: nats).
"""

from xder_eval.calibration import ReliabilityBins, expected_calibration_error, reliability_bins
from xder_eval.metrics import (
    AccuracyMatrix,
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
)
from xder_eval.multilabel import multilabel_f1, secondary_target_f1
from xder_eval.plots import plot_accuracy_curves, plot_accuracy_matrix, plot_reliability_diagram
from xder_eval.pointing import PointingResult, pointing_accuracy
from xder_eval.secondary import secondary_superclass_log_probs, superclass_error, superclass_nll

__all__ = [
    "AccuracyMatrix",
    "PointingResult",
    "ReliabilityBins",
    "average_accuracy_curve",
    "backward_transfer",
    "expected_calibration_error",
    "final_average_accuracy",
    "final_forgetting",
    "forward_transfer",
    "multilabel_f1",
    "plot_accuracy_curves",
    "plot_accuracy_matrix",
    "plot_reliability_diagram",
    "pointing_accuracy",
    "reliability_bins",
    "secondary_superclass_log_probs",
    "secondary_target_f1",
    "superclass_error",
    "superclass_nll",
]
