"""xder-eval: the paper's metrics as pure functions, plots of runs, and reports over many runs.

Accuracy-matrix metrics keep the matrices' unit (percent). Metrics of model outputs (ECE, SS-ERR,
SS-NLL, F1, pointing accuracy) return fractions in [0, 1], the unit of the probabilities they are
computed from (SS-NLL: nats).
"""

from xder_eval.analyses import (
    DEFAULT_SHOTS,
    BufferTraining,
    class_mean_logits,
    curve_auc,
    fewshot_curve,
    fisher_trace,
    head_bias_fractions,
    nearest_neighbour_accuracy,
    noisy_loss,
    train_on_buffer,
)
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
from xder_eval.published import Comparison, PublishedResult, compare_to_published, preset_entry_name
from xder_eval.report import (
    GroupKey,
    GroupSummary,
    Report,
    ReportColumn,
    ReportRow,
    RunProblem,
    RunRecord,
    SeedStats,
    SettingSummary,
    build_report,
    file_token,
    group_runs,
    plot_report_curves,
    plot_report_matrix,
    report_csv,
    report_dict,
    report_markdown,
    report_problems,
    summarize_group,
)
from xder_eval.secondary import secondary_superclass_log_probs, superclass_error, superclass_nll

__all__ = [
    "DEFAULT_SHOTS",
    "AccuracyMatrix",
    "BufferTraining",
    "Comparison",
    "GroupKey",
    "GroupSummary",
    "PointingResult",
    "PublishedResult",
    "ReliabilityBins",
    "Report",
    "ReportColumn",
    "ReportRow",
    "RunProblem",
    "RunRecord",
    "SeedStats",
    "SettingSummary",
    "average_accuracy_curve",
    "backward_transfer",
    "build_report",
    "class_mean_logits",
    "compare_to_published",
    "curve_auc",
    "expected_calibration_error",
    "fewshot_curve",
    "file_token",
    "final_average_accuracy",
    "final_forgetting",
    "fisher_trace",
    "forward_transfer",
    "group_runs",
    "head_bias_fractions",
    "multilabel_f1",
    "nearest_neighbour_accuracy",
    "noisy_loss",
    "plot_accuracy_curves",
    "plot_accuracy_matrix",
    "plot_reliability_diagram",
    "plot_report_curves",
    "plot_report_matrix",
    "pointing_accuracy",
    "preset_entry_name",
    "reliability_bins",
    "report_csv",
    "report_dict",
    "report_markdown",
    "report_problems",
    "secondary_superclass_log_probs",
    "secondary_target_f1",
    "summarize_group",
    "superclass_error",
    "superclass_nll",
    "train_on_buffer",
]
