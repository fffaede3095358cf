"""Constants of the run library that the command line states in its help and checks while it
parses: here, in a module that imports nothing, so that :mod:`xder_cli.catalogue` (the parsers'
names) reads them without loading the library; their modules take them from here
(``settings.LOGGERS``, the experiments' defaults, ``report.DEFAULT_REPORT_OUT``)."""

__all__ = [
    "CLASS_ORDER_METHODS",
    "EXPERIMENT_RUNS",
    "EXPERIMENT_SEEDS",
    "LOGGERS",
    "REPORT_OUT",
    "SENSITIVITY_METHOD",
]

LOGGERS = ("tensorboard", "wandb")
EXPERIMENT_SEEDS = (0, 1, 2)
EXPERIMENT_RUNS = "runs"
"""The folder of an experiment's runs, in its ``--out`` folder."""
CLASS_ORDER_METHODS = ("xder", "derpp", "er")
SENSITIVITY_METHOD = "xder"
REPORT_OUT = "report"
