"""The pure functions that shape a benchmark: its class order (:func:`resolve_class_order`,
:func:`remap_labels`, :func:`with_class_order`), its tasks' rows (:func:`task_indices`), its
validation split (:func:`validation_split`, :func:`with_validation`) and the scenario it runs in
(:func:`check_scenario`, :func:`with_scenario`). Nothing is rewritten in place: a shaped
benchmark is a new :class:`~xder_data.benchmark.Benchmark`. Public names are re-exported by
:mod:`xder_data.benchmark`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from xder_data.errors import BenchmarkOptionError, ClassOrderError

if TYPE_CHECKING:
    from xder_data.benchmark import Benchmark

__all__ = [
    "VALIDATION_SEED",
    "ClassOrderSpec",
    "check_scenario",
    "remap_labels",
    "resolve_class_order",
    "task_indices",
    "validation_split",
    "with_class_order",
    "with_scenario",
    "with_validation",
]

ClassOrderSpec = Literal["natural", "reversed", "random"] | Sequence[int]
VALIDATION_SEED = 0
"""Seed of the validation split: fixed, so that every trial of a grid search sees the same split."""


def resolve_class_order(spec: ClassOrderSpec, n_classes: int, seed: int = 0) -> tuple[int, ...]:
    """Turn a class-order spec into an explicit permutation.

    Args:
        spec: ``"natural"`` (0..C-1), ``"reversed"``, ``"random"`` (a permutation drawn from
            ``numpy.random.default_rng(seed)``), or an explicit permutation of ``range(C)``.
        n_classes: C.
        seed: used by ``"random"`` only.

    Returns:
        ``order`` with ``order[i]`` = the original class that becomes label i.
    """
    if isinstance(spec, str):
        if spec == "natural":
            return tuple(range(n_classes))
        if spec == "reversed":
            return tuple(range(n_classes - 1, -1, -1))
        if spec == "random":
            return tuple(int(c) for c in np.random.default_rng(seed).permutation(n_classes))
        raise ClassOrderError(
            f"unknown class order {spec!r}: use natural, reversed, random or a permutation "
            f"such as [{', '.join(map(str, range(min(n_classes, 3))))}, ...]"
        )
    order = tuple(int(c) for c in spec)
    if sorted(order) != list(range(n_classes)):
        raise ClassOrderError(
            f"class order {list(order)} is not a permutation of 0..{n_classes - 1}: "
            f"list each of the {n_classes} classes exactly once"
        )
    return order


def remap_labels(labels: Tensor, class_order: Sequence[int]) -> Tensor:
    """Map original labels to positions in ``class_order`` (label ``class_order[i]`` -> i)."""
    inverse = torch.empty(len(class_order), dtype=torch.int64)
    inverse[torch.as_tensor(class_order, dtype=torch.int64)] = torch.arange(len(class_order))
    return inverse.to(labels.device)[labels.long()]


def task_indices(labels: Tensor, class_start: int, class_end: int) -> Tensor:
    """Row indices (ascending) whose label lies in ``[class_start, class_end)``."""
    mask = (labels >= class_start) & (labels < class_end)
    return torch.nonzero(mask, as_tuple=False).flatten()


def validation_split(labels: Tensor, fraction: float, seed: int = VALIDATION_SEED) -> tuple[Tensor, Tensor]:
    """Stratified hold-out: for each class, ``round(fraction * n_c)`` of its rows go to validation.

    Per class (ascending label), the class's row indices in ascending order are permuted by one
    ``numpy.random.default_rng(seed)``; the first ``round(fraction * n_c)`` are validation.

    Returns:
        ``(train_rows, val_rows)``, each sorted ascending.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1), got {fraction}")
    labels_np = labels.cpu().numpy()
    rng = np.random.default_rng(seed)
    train_rows, val_rows = [], []
    for c in np.unique(labels_np):
        rows = rng.permutation(np.flatnonzero(labels_np == c))
        n_val = round(fraction * len(rows))
        val_rows.append(rows[:n_val])
        train_rows.append(rows[n_val:])
    train = torch.from_numpy(np.sort(np.concatenate(train_rows))).to(labels.device)
    val = torch.from_numpy(np.sort(np.concatenate(val_rows))).to(labels.device)
    return train, val


def with_class_order(bench: Benchmark, spec: ClassOrderSpec, seed: int = 0) -> Benchmark:
    """The benchmark relabelled so that new label i is the current label ``order[i]``: task t
    then holds the current classes ``order[start_t:end_t]``.

    Orders are relative to the reader's own numbering ("natural"), and ``class_order`` composes:
    it keeps naming the class of the data's original ids that each label stands for (the
    identity for most readers; ``seq-ntu60`` numbers its classes in the paper's task order).
    """
    order = resolve_class_order(spec, bench.num_classes, seed)
    if order == tuple(range(bench.num_classes)):
        return bench
    changes: dict[str, Any] = {
        "class_order": tuple(bench.class_order[c] for c in order),
        "train_y": remap_labels(bench.train_y, order),
        "test_y": remap_labels(bench.test_y, order),
    }
    for name in ("val_y", "train_secondary_y", "test_secondary_y", "val_secondary_y"):
        labels = getattr(bench, name)
        if labels is not None:
            changes[name] = remap_labels(labels, order)
    if bench.coarse_labels is not None:
        changes["coarse_labels"] = bench.coarse_labels[torch.as_tensor(order)]
    if bench.class_names is not None:
        changes["class_names"] = tuple(bench.class_names[c] for c in order)
    return dataclasses.replace(bench, **changes)


def check_scenario(name: str, own: str, scenario: str) -> None:
    """Whether benchmark ``name``, of scenario ``own``, can run in ``scenario``: in its own, or a
    ``class-il`` benchmark as ``task-il`` (:func:`with_scenario`); readable before any data is
    (with :func:`~xder_data.benchmark.benchmark_scenario`).

    Raises:
        BenchmarkOptionError: any other change (a domain-il or general benchmark's tasks are not
            class-incremental; a task-il benchmark cannot hide the task again).
    """
    if scenario != own and not (own == "class-il" and scenario == "task-il"):
        raise BenchmarkOptionError(
            f"benchmark {name!r} is {own}: it cannot run as {scenario} "
            "(only a class-il benchmark runs as task-il)"
        )


def with_scenario(bench: Benchmark, scenario: str) -> Benchmark:
    """The benchmark run in ``scenario``: its own (``bench`` unchanged), or ``task-il`` for a
    ``class-il`` benchmark (the same tasks and rows, the task given at test time: Task-IL is its
    accuracy, and methods that need the task, such as PNN, accept it).

    Raises:
        BenchmarkOptionError: any other change (:func:`check_scenario`).
    """
    check_scenario(bench.name, bench.scenario, scenario)
    if scenario == bench.scenario:
        return bench
    return dataclasses.replace(bench, scenario="task-il")


def with_validation(bench: Benchmark, fraction: float = 0.1) -> Benchmark:
    """Hold out a stratified ``fraction`` of the training rows as the validation split (in
    ``domain-il`` stratified by task and label, each row keeping its task).

    Raises:
        BenchmarkOptionError: a ``general`` stream, whose rows are drawn in stream order (with
            replacement, for MNIST-360), has no split to hold out.
    """
    if bench.scenario == "general":
        raise BenchmarkOptionError(
            f"benchmark {bench.name!r} is a general stream, drawn in order and with replacement: it "
            "has no validation split (leave run.validation at 0)"
        )
    tasks = bench.train_task
    strata = bench.train_y if tasks is None else tasks * bench.num_classes + bench.train_y
    train_rows, val_rows = validation_split(strata, fraction)
    secondary = bench.train_secondary_y
    return dataclasses.replace(
        bench,
        train_x=bench.train_x[train_rows],
        train_y=bench.train_y[train_rows],
        val_x=bench.train_x[val_rows],
        val_y=bench.train_y[val_rows],
        train_secondary_y=None if secondary is None else secondary[train_rows],
        val_secondary_y=None if secondary is None else secondary[val_rows],
        train_task=None if tasks is None else tasks[train_rows],
        val_task=None if tasks is None else tasks[val_rows],
    )
