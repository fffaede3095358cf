"""Class orders, task index views and validation splits: pure functions checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xder_data import (
    ClassOrderError,
    UnknownBenchmarkError,
    list_benchmarks,
    load_benchmark,
    remap_labels,
    resolve_class_order,
    task_indices,
    validation_split,
)


def test_named_class_orders() -> None:
    assert resolve_class_order("natural", 4) == (0, 1, 2, 3)
    assert resolve_class_order("reversed", 4) == (3, 2, 1, 0)
    expected = tuple(int(c) for c in np.random.default_rng(7).permutation(6))
    assert resolve_class_order("random", 6, seed=7) == expected
    assert resolve_class_order([2, 0, 1], 3) == (2, 0, 1)


@pytest.mark.parametrize("bad", ["sideways", [0, 0, 1], [0, 1], [1, 2, 3]])
def test_bad_class_orders_are_rejected(bad: object) -> None:
    with pytest.raises(ClassOrderError):
        resolve_class_order(bad, 3)  # type: ignore[arg-type]


def test_remap_labels_by_hand() -> None:
    # order (2, 0, 1): original class 2 becomes label 0, class 0 -> 1, class 1 -> 2.
    labels = torch.tensor([0, 1, 2, 2, 0])
    assert remap_labels(labels, (2, 0, 1)).tolist() == [1, 2, 0, 0, 1]


def test_task_indices() -> None:
    labels = torch.tensor([3, 0, 1, 2, 1, 3])
    assert task_indices(labels, 0, 2).tolist() == [1, 2, 4]
    assert task_indices(labels, 2, 4).tolist() == [0, 3, 5]


def test_validation_split_is_stratified_disjoint_and_fixed() -> None:
    labels = torch.tensor([0] * 10 + [1] * 20 + [2] * 5)
    train, val = validation_split(labels, 0.1)
    assert sorted(train.tolist() + val.tolist()) == list(range(35))
    assert torch.bincount(labels[val], minlength=3).tolist() == [1, 2, 0]  # round(0.5) == 0
    again_train, again_val = validation_split(labels, 0.1)
    assert torch.equal(val, again_val)
    assert torch.equal(train, again_train)


def test_unknown_benchmark_names_the_choices() -> None:
    with pytest.raises(UnknownBenchmarkError, match="seq-digits"):
        load_benchmark("seq-nonsense")
    assert "seq-digits" in list_benchmarks()


def test_secondary_labels_follow_validation_splits_and_class_orders() -> None:
    import dataclasses

    from xder_data import with_class_order, with_validation

    bench = load_benchmark("seq-digits")
    secondary = (bench.train_y + 1) % 10
    bench = dataclasses.replace(bench, train_secondary_y=secondary, test_secondary_y=(bench.test_y + 1) % 10)
    held = with_validation(bench, 0.1)
    assert torch.equal(held.train_secondary_y, (held.train_y + 1) % 10)
    assert torch.equal(held.val_secondary_y, (held.val_y + 1) % 10)
    flipped = with_class_order(held, "reversed")
    # Original class c becomes 9 - c, for primary and secondary labels alike.
    assert torch.equal(flipped.val_secondary_y, 9 - (held.val_y + 1) % 10)
    assert torch.equal(flipped.test_secondary_y, 9 - (bench.test_y + 1) % 10)


def test_benchmark_options_come_from_the_loader_keywords() -> None:
    import typing

    from xder_data import BenchmarkDefaults, benchmark_option_types, benchmark_options, register_benchmark
    from xder_data import benchmark as registry

    defaults = BenchmarkDefaults(epochs=1, batch_size=1, minibatch_size=1, lr=0.1)

    def loader(root, *, size: int = 3, label: UnresolvedName = None, progress=None):  # noqa: F821
        raise AssertionError("not loaded")

    register_benchmark("test-options", defaults=defaults)(loader)
    try:
        assert benchmark_options("test-options") == {"size": 3, "label": None}  # progress is no option
        # an annotation that does not resolve (a plugin's TYPE_CHECKING import): unchecked, not a crash
        assert benchmark_option_types("test-options") == {"size": typing.Any, "label": typing.Any}
        with pytest.raises(ValueError, match="'test-options' is already registered"):
            register_benchmark("test-options", defaults=defaults)(loader)
    finally:
        del registry._REGISTRY["test-options"]


def test_protocol_milestones_lie_within_the_epochs() -> None:
    """A protocol's lr milestones (integer or fractional epochs) each take effect: inside
    (0, epochs) and increasing (checked when the protocol is defined)."""
    from xder_data import BenchmarkDefaults

    base = {"epochs": 2, "batch_size": 1, "minibatch_size": 1, "lr": 0.1, "lr_schedule": "multistep"}
    assert BenchmarkDefaults(**base, milestones=(1.4, 1.8)).milestones == (1.4, 1.8)
    for bad in ((35, 45), (0, 1), (1.4, 2), (-0.5,)):
        with pytest.raises(ValueError, match="must lie within the epochs"):
            BenchmarkDefaults(**base, milestones=bad)
    with pytest.raises(ValueError, match="must be increasing"):
        BenchmarkDefaults(**base, milestones=(1.8, 1.4))
