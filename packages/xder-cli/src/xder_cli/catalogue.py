"""What ``xder-run``'s parsers name of the library before anything imports it.

``xder-run --help``, a command's ``--help`` and a usage mistake answer without importing the four
library packages or :mod:`xder_cli.runs` beyond its errors and plugins (they import torch:
seconds). What the parsers list and check of them is here: the names each registry holds when
no plugin has added to it (a :class:`Registry`) and two constants of :mod:`xder_data`
(:data:`COPIES`), copied, each naming its owner (``tests/cli/test_catalogue.py`` holds it equal
to the owner's value in a fresh interpreter, so that a name registered or a default changed
without its copy here fails there); and the constants of :mod:`xder_cli.runs` the help states, from
:mod:`xder_cli.runs.defaults`, their one definition (:data:`OWNED`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xder_cli.runs.defaults import (
    CLASS_ORDER_METHODS,
    EXPERIMENT_SEEDS,
    LOGGERS,
    REPORT_OUT,
    SENSITIVITY_METHOD,
)

__all__ = [
    "ANALYSES",
    "BACKBONES",
    "BENCHMARKS",
    "BENCH_BENCHMARKS",
    "CLASS_ORDER_METHODS",
    "COPIES",
    "DOWNLOADS",
    "EXPERIMENTS",
    "EXPERIMENT_SEEDS",
    "IMPORTERS",
    "LOGGERS",
    "METHODS",
    "MINIIMAGENET_FORMATS",
    "OWNED",
    "PROTOCOL_ALIASES",
    "RECORDED_ANALYSES",
    "REPORT_OUT",
    "SENSITIVITY_METHOD",
    "TABLE_PAPERS",
    "Registry",
]


@dataclass(frozen=True)
class Registry:
    """A registry a plugin may add to: ``lister``, the dotted name of the function listing it
    (its owner), and ``builtin``, what that function returns when no plugin has added to it."""

    lister: str
    builtin: tuple[str, ...]

    def names(self) -> list[str]:
        """The registry's names: its lister's once its module is imported (a plugin that registers a
        name has imported it, and a handler may have), else :attr:`builtin` (then the same)."""
        module, _, function = self.lister.rpartition(".")
        loaded = sys.modules.get(module)
        return list(getattr(loaded, function)()) if loaded is not None else list(self.builtin)


METHODS = Registry(
    "xder_methods.list_methods",
    (
        "agem",
        "agem_r",
        "bic",
        "der",
        "derpp",
        "derpp_ace",
        "er",
        "er_ace",
        "er_flat",
        "ewc_on",
        "fdr",
        "gdumb",
        "gem",
        "gss",
        "hal",
        "icarl",
        "joint",
        "lucir",
        "lwf",
        "lwf_mc",
        "mer",
        "pnn",
        "rpc",
        "sgd",
        "si",
        "xder",
    ),
)
BENCHMARKS = Registry(
    "xder_data.list_benchmarks",
    (
        "coco-stitch",
        "digits-360",
        "folder",
        "mnist-360",
        "perm-digits",
        "perm-mnist",
        "rot-digits",
        "rot-mnist",
        "seq-cifar10",
        "seq-cifar100",
        "seq-cub200",
        "seq-digits",
        "seq-miniimg",
        "seq-mnist",
        "seq-ntu60",
        "seq-tinyimg",
    ),
)
BACKBONES = Registry(
    "xder_models.list_backbones",
    (
        "efficientgcn-b0",
        "efficientgcn-b2",
        "efficientgcn-b4",
        "efficientnet-b2",
        "mnist-mlp",
        "resnet18",
        "resnet18-cifar",
    ),
)
IMPORTERS = Registry(
    "xder_data.list_importers",
    (
        "cifar10",
        "cifar100",
        "mnist",
        "tinyimagenet",
        "ntu60",
        "ntu60-stgcn",
        "ntu60-efficientgcn",
        "miniimagenet",
        "cub200",
        "coco-stitch",
    ),
)
DOWNLOADS = Registry("xder_data.list_downloads", ("cifar10", "cifar100", "mnist", "tinyimagenet"))
EXPERIMENTS = Registry(
    "xder_cli.runs.experiments.list_experiments", ("flatness", "class-order", "sensitivity", "table")
)
ANALYSES = Registry(
    "xder_cli.runs.analyses.list_analyses",
    (
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
    ),
)
RECORDED_ANALYSES = Registry("xder_cli.runs.analyses.recorded_analyses", ("grad_norms", "future_fewshot_auc"))
"""The analyses that read what only a run trained with ``run.record_analyses`` records."""
BENCH_BENCHMARKS = Registry(
    "xder_cli.runs.bench_shapes.bench_benchmarks",
    ("seq-cifar10", "seq-cifar100", "seq-digits", "seq-miniimg", "seq-mnist", "seq-tinyimg"),
)
"""The benchmarks ``xder-run bench`` has synthetic shapes for."""
TABLE_PAPERS = Registry("xder_cli.runs.published.table_papers", ("x-der", "der"))

PROTOCOL_ALIASES = {"paper": "full"}
MINIIMAGENET_FORMATS = ("csv", "pickle", "folders")

COPIES = {
    "PROTOCOL_ALIASES": "xder_data.PROTOCOL_ALIASES",
    "MINIIMAGENET_FORMATS": "xder_data.MINIIMAGENET_FORMATS",
}
"""Each constant copied here from a library package and its owner, by dotted name."""

OWNED = (
    "LOGGERS",
    "EXPERIMENT_SEEDS",
    "CLASS_ORDER_METHODS",
    "SENSITIVITY_METHOD",
    "REPORT_OUT",
)
"""The constants of :mod:`xder_cli.runs` the help states, from their one definition,
:mod:`xder_cli.runs.defaults` (a module that imports nothing)."""
