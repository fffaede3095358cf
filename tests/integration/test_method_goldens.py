"""Golden numbers of every registered method, to the bit: a change to xder-methods that is meant
to move no number (a refactor) must leave them all identical.

* Accuracy matrices (Class-IL and Task-IL) of every method on ``seq-digits``, one epoch a task,
  one thread, seeds 0 and 1: with its config's defaults (GDumb's fitting shortened,
  :data:`CHEAPER`), and once (seed 0) with each other value of each of its modes (a ``Literal``
  or ``bool`` field). The network is a small convolutional
  one with BatchNorm, in float64: the matrices then depend on the code, not on the CPU's vector
  width (float64 rounding differences stay far below any argmax margin after one epoch).
* The ops, launches, host syncs and images of one training step of every method, as ``xder-run
  bench`` counts them on ``seq-digits`` (its synthetic data, the real backbone, float32).

A commit that has to move a number says why and rewrites the file:
``XDER_WRITE_GOLDENS=1 uv run pytest tests/integration/test_method_goldens.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from xder_data import load_benchmark
from xder_methods import (
    ContinualSetting,
    MethodConfigError,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
    list_methods,
    method_config_class,
)

GOLDENS = Path(__file__).with_name("method_goldens.json")
WRITE = os.environ.get("XDER_WRITE_GOLDENS") == "1"
SEEDS = (0, 1)
# Settings that only make a run cheaper, in every run of the method: GDumb's fitting from scratch
# after each task takes 250 epochs by default.
CHEAPER: dict[str, dict[str, Any]] = {"gdumb": {"epochs_fitting": 5}}


class SmallNet(nn.Module):
    """(B, 1, 8, 8) -> 10 logits: conv, BatchNorm, ReLU, pool, a 32-feature layer, a linear head.
    Casts its input to its own dtype (the transforms give float32)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * 4 * 4, 32),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(32, num_classes)
        self.num_features = 32

    def forward_features(self, x: Tensor) -> Tensor:
        return self.body(x.to(self.classifier.weight.dtype))

    def forward_head(self, features: Tensor) -> Tensor:
        return self.classifier(features)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


def mode_variants(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``name``'s config overrides: each non-default value of each ``Literal`` or ``bool`` field."""
    config = method_config_class(name)
    hints = typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        kind = hints[field.name]
        if typing.get_origin(kind) is typing.Literal:
            values: tuple[Any, ...] = typing.get_args(kind)
        elif kind is bool:
            values = (False, True)
        else:
            continue
        for value in values:
            if value != field.default:
                yield f"{field.name}={value}", {field.name: value}


def runs() -> list[tuple[str, str, dict[str, Any], int]]:
    """(method, variant, overrides, seed) of every golden training run."""
    out = []
    for name in list_methods():
        out += [(name, "defaults", {}, seed) for seed in SEEDS]
        out += [(name, variant, overrides, 0) for variant, overrides in mode_variants(name)]
    return out


@pytest.fixture(scope="module")
def digits():
    return load_benchmark("seq-digits")


@pytest.fixture
def float64_one_thread() -> Iterator[None]:
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)


def train(bench: Any, name: str, overrides: dict[str, Any], seed: int) -> dict[str, Any]:
    """One epoch a task of ``name`` on ``bench``: its matrices, or the error its config raises."""
    torch.manual_seed(seed)
    net = SmallNet(bench.num_classes)
    generator = torch.Generator().manual_seed(seed)
    transforms = Transforms(bench.train_transform, bench.test_transform, bench.strong_transform)
    try:
        config = method_config_class(name)(**{**CHEAPER.get(name, {}), **overrides})
        method = create_method(
            name,
            net=net,
            setting=ContinualSetting(bench.classes_per_task, bench.input_shape),
            transforms=transforms,
            config=config,
            generator=generator,
        )
        schedule = TrainingSchedule(epochs=1, batch_size=32, lr=0.05, drop_last=True, record_every=0)
        history = fit(method, bench, schedule, generator=generator)
    except MethodConfigError as error:
        return {"error": str(error)}
    return {"class_il": history.class_il, "task_il": history.task_il}


def golden_file() -> dict[str, Any]:
    return json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {"matrices": {}, "bench": {}}


def check(section: str, key: str, value: Any) -> None:
    if WRITE:
        data = golden_file()
        data[section][key] = value
        GOLDENS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return
    expected = golden_file()[section].get(key)
    assert expected is not None, f"no golden for {key}: rewrite the file (module docstring) and say why"
    assert value == expected, f"{key} moved: {value} != golden {expected}"


@pytest.mark.parametrize(("name", "variant", "overrides", "seed"), runs(), ids=lambda v: str(v))
def test_the_accuracy_matrices_stay_golden(
    digits, float64_one_thread, name: str, variant: str, overrides: dict[str, Any], seed: int
) -> None:
    check("matrices", f"{name} {variant} seed {seed}", train(digits, name, overrides, seed))


def test_the_step_op_counts_stay_golden(tmp_path: Path) -> None:
    from xder_cli.runs.bench import BenchOptions, run_bench

    threads = torch.get_num_threads()
    try:
        options = BenchOptions(
            methods=tuple(list_methods()),
            benchmark="seq-digits",
            device="cpu",
            steps=1,
            warmup=0,
            epoch=False,
        )
        results = run_bench(options)
    finally:
        torch.set_num_threads(threads)
    counts = {
        row["method"]: {
            key: row[key]
            for key in ("ops_per_step", "launches_per_step", "host_syncs_per_step", "images_per_step")
        }
        for row in results["methods"]
    }
    assert sorted(counts) == list_methods()
    for name, value in counts.items():
        check("bench", name, value)


@pytest.mark.parametrize("name", ["der", "derpp", "derpp_ace", "xder"])
def test_grouped_replay_forward_has_the_golden_matrices_of_separate(name: str) -> None:
    """``replay_forward = "grouped"`` is ``separate``'s computation in one pass: its golden
    accuracy matrices (checked against a run above) are those of the default, ``separate``."""
    matrices = golden_file()["matrices"]
    assert matrices[f"{name} replay_forward=grouped seed 0"] == matrices[f"{name} defaults seed 0"]
    assert matrices[f"{name} replay_forward=joint seed 0"] != matrices[f"{name} defaults seed 0"]
