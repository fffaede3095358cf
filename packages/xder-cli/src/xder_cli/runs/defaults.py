"""Constants of the run library that the command line states in its help and checks while it
parses: here, in a module that imports nothing, so that :mod:`xder_cli.catalogue` (the parsers'
names) reads them without loading the library; their modules take them from here
(``settings.LOGGERS``, ``analyses.ANALYSES`` and ``RECORDED``, the experiments' defaults,
``report.DEFAULT_REPORT_OUT``)."""

__all__ = [
    "ANALYSES",
    "CLASS_ORDER_METHODS",
    "EXPERIMENT_RUNS",
    "EXPERIMENT_SEEDS",
    "LOGGERS",
    "RECORDED_ANALYSES",
    "REPORT_OUT",
    "SENSITIVITY_METHOD",
]

LOGGERS = ("tensorboard", "wandb")
ANALYSES = (
    "ece",
    "ss",
    "head_bias",
    "grad_norms",
    "buffer_logits",
    "future_fewshot_auc",
    "resources",
    "flatness",
    "fisher_trace",
    "buffer_informativeness",
    "pointing",
    "secondary_targets",
)
RECORDED_ANALYSES = ("grad_norms", "future_fewshot_auc")
"""Analyses that read what only a run trained with ``run.record_analyses`` records."""
EXPERIMENT_SEEDS = (0, 1, 2)
EXPERIMENT_RUNS = "runs"
"""The folder of an experiment's runs, in its ``--out`` folder."""
CLASS_ORDER_METHODS = ("xder", "derpp", "er")
SENSITIVITY_METHOD = "xder"
REPORT_OUT = "report"
