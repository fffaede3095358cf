"""What makes X-DER X-DER: the behaviours docs/xder.md describes."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest
import torch
import torch.fx.experimental._config as fx_config
from torch.overrides import TorchFunctionMode

from xder_methods import (
    XDER,
    Batch,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
    Transforms,
    XDERConfig,
    create_method,
    fit,
    frozen_batchnorm_stats,
    regular_simplex,
)
from xder_methods.parts.selection import class_balanced_quotas, first_occurrence, rank_within_class


def make_xder(stream, transforms, tiny_net, setting_of, batchnorm=True, seed=0, **config) -> XDER:
    torch.manual_seed(seed)
    base = {"buffer_size": 20, "minibatch_size": 4, "simclr_batch_size": 4}
    return create_method(
        "xder",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=XDERConfig(**(base | config)),
        generator=torch.Generator().manual_seed(seed),
    )


def task_data(stream, t) -> TaskData:
    rows = stream.task(t).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], t)


def batch(stream, transforms, t, n=6) -> Batch:
    rows = stream.task(t).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, t)


def exact(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A transform without randomness (uint8 -> [0, 1]), so that expected outputs can be computed."""
    return x.float() / 255


def class_counts(method: XDER) -> list[int]:
    labels = method.buffer.labels[: len(method.buffer)]
    return torch.bincount(labels, minlength=6).tolist()


# ------------------------------------------------------------------------------- pure helpers


def test_first_occurrence_rank_and_quotas() -> None:
    assert first_occurrence(torch.tensor([3, 1, 3, 2, 1])).tolist() == [True, True, False, True, False]
    assert rank_within_class(torch.tensor([1, 0, 1, 1, 0]), 2).tolist() == [0, 0, 1, 2, 1]
    quotas = class_balanced_quotas(11, 3, torch.Generator().manual_seed(0), "cpu")
    assert sorted(quotas.tolist()) == [3, 4, 4]
    assert class_balanced_quotas(9, 3, None, "cpu").tolist() == [3, 3, 3]


def test_regular_simplex_geometry() -> None:
    vertices = regular_simplex(6, torch.float64)
    assert vertices.shape == (6, 5)
    gram = vertices @ vertices.T
    torch.testing.assert_close(gram.diagonal(), torch.ones(6, dtype=torch.float64))
    off = gram[~torch.eye(6, dtype=torch.bool)]
    torch.testing.assert_close(off, torch.full_like(off, -1 / 5))
    torch.testing.assert_close(vertices.sum(0), torch.zeros(5, dtype=torch.float64))


# ------------------------------------------------------------------------------- the stream


def test_stream_cross_entropy_sends_no_gradient_to_past_or_future_heads(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, lambda_=0.0, eta=0.0)
    method.begin_task(1)
    out = method.observe(batch(stream, transforms, 1))
    out.loss.backward()
    grad = method.net.classifier.weight.grad
    assert torch.count_nonzero(grad[2:4]) > 0
    assert torch.count_nonzero(grad[:2]) == 0  # past head
    assert torch.count_nonzero(grad[4:]) == 0  # future head


def test_ce_future_heads_variant_trains_future_logits(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, lambda_=0.0, eta=0.0, future_heads="ce")
    method.observe(batch(stream, transforms, 0)).loss.backward()
    assert torch.count_nonzero(method.net.classifier.weight.grad[2:]) > 0


# ------------------------------------------------------------------------------- the buffer


def test_buffer_is_empty_through_task_0_then_class_balanced(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.begin_task(0)
    for _ in range(3):
        method.observe(batch(stream, transforms, 0))
    assert len(method.buffer) == 0
    expected = {0: [10, 10, 0, 0, 0, 0], 1: [5, 5, 5, 5, 0, 0], 2: [3, 3, 3, 3, 4, 4]}
    for t in range(3):
        if t:
            method.begin_task(t)
            method.observe(batch(stream, transforms, t))
        method.end_task(t, task_data(stream, t))
        assert class_counts(method) == expected[t]  # M = 20, c = 2: the shrink and quotas of docs/xder.md


def test_shrink_keeps_the_earliest_items_of_each_class(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.end_task(0, task_data(stream, 0))
    before = method.buffer.all()
    first_five = {c: before.examples[before.labels == c][:5] for c in (0, 1)}
    method.begin_task(1)
    method.end_task(1, task_data(stream, 1))
    after = method.buffer.all()
    for c in (0, 1):
        assert torch.equal(after.examples[after.labels == c], first_five[c])


def test_new_items_get_train_mode_outputs_in_forward_batches(stream, tiny_net, setting_of) -> None:
    """docs/xder.md, end of a task, points 3-4: the views are forwarded in train mode, BatchNorm
    normalising each batch of ``forward_batch_size`` items (4 here; the items in the order they are
    inserted) by its own statistics, its running statistics untouched; the mode is restored."""
    transforms = Transforms(train=exact, test=exact, strong=exact)
    method = make_xder(stream, transforms, tiny_net, setting_of, forward_batch_size=4)
    method.eval()  # as the loop leaves it after evaluating
    norm = method.net.body[2]
    before = (norm.running_mean.clone(), norm.running_var.clone(), int(norm.num_batches_tracked))
    reference = copy.deepcopy(method.net).train()  # train mode: batch statistics

    method.end_task(0, task_data(stream, 0))

    x = exact(method.buffer.examples[:20])
    with torch.no_grad():
        expected = torch.cat([reference(x[i : i + 4]) for i in range(0, 20, 4)])
    torch.testing.assert_close(method.buffer.logits[:20], expected)
    assert torch.equal(norm.running_mean, before[0])
    assert torch.equal(norm.running_var, before[1])
    assert int(norm.num_batches_tracked) == before[2]
    assert not method.training


def test_a_memory_of_size_zero_stays_empty(stream, transforms, tiny_net, setting_of) -> None:
    """``buffer_size = 0`` (allowed): no item is inserted, and the task end forwards nothing (an
    empty (0, classes) output for no item)."""
    method = make_xder(stream, transforms, tiny_net, setting_of, buffer_size=0)
    for t in range(2):
        method.begin_task(t)
        assert set(method.observe(batch(stream, transforms, t)).terms) >= {"ce", "future_preparation"}
        method.end_task(t, task_data(stream, t))
        assert len(method.buffer) == 0
    assert method._forward_all(torch.zeros(0, 1, 2, 2, dtype=torch.uint8)).shape == (0, 6)


def test_prefill_leaves_the_memory_of_the_end_of_each_task(stream, transforms, tiny_net, setting_of) -> None:
    """``xder-run bench`` brings a method to the end of a task without training it
    (:meth:`MethodBase.prefill`); X-DER's memory fills at task ends, so prefill is its end_task:
    M = 20, c = 2: 10 items of each class of task 0, then 5 of each of tasks 0 and 1, all unaugmented
    rows of their task's data, the items of task 0 implanted at the end of task 1 (task label 1)."""
    method = make_xder(stream, transforms, tiny_net, setting_of)
    ended = make_xder(stream, transforms, tiny_net, setting_of)
    expected = {0: [10, 10, 0, 0, 0, 0], 1: [5, 5, 5, 5, 0, 0]}
    for t in range(2):
        method.prefill(t, task_data(stream, t))
        ended.end_task(t, task_data(stream, t))
        assert class_counts(method) == expected[t]
        assert method.buffer.task_labels[:20].tolist() == [t] * 20
        items = method.buffer.all()
        for x, y in zip(items.examples, items.labels, strict=True):
            assert any(torch.equal(x, row) for row in stream.train_x[stream.train_y == y])
        mine = dict(method.buffer.named_buffers())
        for key, value in ended.buffer.named_buffers():  # the same draws as end_task's
            assert torch.equal(mine[key], value), key
        assert len(method.buffer) == method.buffer.num_seen == 20


@pytest.mark.parametrize(
    ("bias", "expected"),
    [
        # Past logits 5 > gamma x ground truth 1: scaled by 0.5 x 1 / 5, their maximum exactly 0.5.
        ([5.0, 4.0, 1.0, 1.0, 0.0, 0.0], [0.5, 0.4, 1.0, 1.0, 0.0, 0.0]),
        # Past logits 0.4 <= 0.5: kept as the network gave them.
        ([0.4, 0.2, 1.0, 1.0, 0.0, 0.0], [0.4, 0.2, 1.0, 1.0, 0.0, 0.0]),
    ],
)
def test_new_items_are_unaugmented_and_their_past_heads_rescaled(
    bias, expected, stream, transforms, tiny_net, setting_of
) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, gamma=0.5)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    with torch.no_grad():  # every item's logits are the planted bias: ground truth 1 > 0
        method.net.classifier.weight.zero_()
        method.net.classifier.bias.copy_(torch.tensor(bias))
    method.end_task(1, task_data(stream, 1))
    items = method.buffer.all()
    new = items.labels >= 2
    assert int(new.sum()) == 10
    data = task_data(stream, 1)
    for x in items.examples[new]:
        assert any(torch.equal(x, row) for row in data.x_raw)  # stored as in the data, unaugmented
    assert (items.task_labels[new] == 1).all()
    torch.testing.assert_close(items.logits[new], torch.tensor([expected] * 10))


def _key(x: torch.Tensor, y: torch.Tensor) -> tuple[int, ...]:
    return (*x.flatten().tolist(), int(y))


def _train_two_tasks(
    method: XDER, stream, transforms, ground_truth: float | None = None
) -> dict[tuple[int, ...], torch.Tensor]:
    """Fill the buffer at the end of task 0 (its stored ground-truth logits set to
    ``ground_truth`` if given), train 5 steps of task 1, end task 1. Returns the stored logits
    after task 0, keyed by item."""
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    method.end_task(0, task_data(stream, 0))
    if ground_truth is not None:
        rows = torch.arange(len(method.buffer))
        method.buffer.logits[rows, method.buffer.labels[rows]] = ground_truth
    before = method.buffer.all()
    stored = {
        _key(x, y): z.clone() for x, y, z in zip(before.examples, before.labels, before.logits, strict=True)
    }
    method.begin_task(1)
    for _ in range(5):
        out = method.observe(batch(stream, transforms, 1))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    method.end_task(1, task_data(stream, 1))
    return stored


def test_future_past_logits_change_and_stay_below_gamma_times_ground_truth(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, gamma=0.85)
    # A small ground truth (0.05), so that implanting must attenuate most present/future heads.
    stored = _train_two_tasks(method, stream, transforms, ground_truth=0.05)
    items = method.buffer.all()
    old = items.labels < 2
    assert int(old.sum()) == 10
    attenuated = 0
    for x, y, z in zip(items.examples[old], items.labels[old], items.logits[old], strict=True):
        before = stored[_key(x, y)]
        assert float(before[y]) == float(z[y]) == pytest.approx(0.05)  # the ground truth is kept
        assert not torch.allclose(z[2:], before[2:])  # present and future heads implanted
        assert float(z[2:].max()) <= 0.85 * 0.05 + 1e-6
        attenuated += float(z[2:].max()) == pytest.approx(0.85 * 0.05)
    assert attenuated >= 5  # the bound was reached, not only respected
    assert (items.task_labels[old] == 1).all()  # updated during task 1


def test_without_memory_update_stored_logits_never_change(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, memory_update=False)
    stored = _train_two_tasks(method, stream, transforms)
    after = method.buffer.all()
    old = after.labels < 2
    assert int(old.sum()) == 10
    for x, y, z in zip(after.examples[old], after.labels[old], after.logits[old], strict=True):
        assert torch.equal(z, stored[_key(x, y)])


def test_online_update_probability_is_one_over_k(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, buffer_size=3000)
    n = 3000
    method.buffer.write(
        torch.arange(n),
        torch.zeros(n, 1, 2, 2, dtype=torch.uint8),
        torch.zeros(n, dtype=torch.long),
        torch.full((n, 6), 100.0),
        0,
    )
    method.buffer.set_size(n)
    method.begin_task(1)
    index = torch.arange(n)
    keep = torch.ones(n, dtype=torch.bool)
    updated_per_visit = []
    for k in range(1, 5):
        fresh = torch.full((n, 6), float(k))
        before = method.buffer.logits[:n, 2:].clone()
        coin = torch.rand(n, generator=method.generator)
        method._update_future_past(
            index, keep, coin, method.buffer.logits[:n].clone(), fresh, torch.zeros(n, dtype=torch.long), 1, 6
        )
        changed = (method.buffer.logits[:n, 2:] != before).any(dim=1)
        updated_per_visit.append(float(changed.float().mean()))
    # Visit k updates with probability 1/k (the stored value is uniform over the visits); the
    # ground truth (100) is far above the fresh values, so nothing is attenuated.
    for k, rate in enumerate(updated_per_visit, start=1):
        assert abs(rate - 1 / k) < 0.04, (k, rate)
    assert method.visits[:n].tolist() == [4.0] * n


def test_online_update_on_the_kth_visit_takes_a_coin_below_one_over_k(
    stream, transforms, tiny_net, setting_of
) -> None:
    """On its k-th visit a row is updated iff its coin (drawn by the step from the method's
    generator) is < 1/k. torch.rand draws multiples of 2^-24 in [0, 1): exactly 2^24 / k of them
    are below 1/k (k a power of 2), so the probability is exactly 1/k, and a coin of exactly 1/k
    must not update. Seed 354891 draws exactly 0.5 as its 86th uniform (found by search): row 85,
    on its second visit, stays."""
    n, seed = 86, 354891
    method = make_xder(stream, transforms, tiny_net, setting_of, buffer_size=n)
    stored = torch.full((n, 6), 100.0)  # the ground truth (100) is far above the fresh values: no attenuation
    method.buffer.write(
        torch.arange(n),
        torch.zeros(n, 1, 2, 2, dtype=torch.uint8),
        torch.zeros(n, dtype=torch.long),
        stored,
        0,
    )
    method.buffer.set_size(n)
    method.begin_task(1)
    method.visits[:n] = 1.0  # every row visited once already in this task: this is visit k = 2
    coins = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    assert float(coins[85]) == 0.5
    method._update_future_past(
        torch.arange(n),
        torch.ones(n, dtype=torch.bool),
        coins,
        stored.clone(),
        torch.full((n, 6), 3.0),
        torch.zeros(n, dtype=torch.long),
        1,
        6,
    )
    updated = (method.buffer.logits[:n, 2:] == 3.0).all(dim=1)
    assert updated.tolist() == (coins < 1 / 2).tolist()
    assert not updated[85]
    assert 30 < int(updated.sum()) < 56  # about half
    assert method.visits[:n].tolist() == [2.0] * n


def test_duplicated_buffer_draws_count_as_one_visit(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.begin_task(1)
    index = torch.tensor([5, 5, 7])
    keep = first_occurrence(index)
    method._update_future_past(
        index, keep, torch.rand(3), torch.ones(3, 6), torch.ones(3, 6), torch.zeros(3, dtype=torch.long), 1, 6
    )
    assert method.visits[5] == 1
    assert method.visits[7] == 1


# ------------------------------------------------------------------------ future preparation


@pytest.mark.parametrize(("mode", "updates"), [("separate", 3), ("grouped", 3), ("joint", 1)])
def test_future_preparation_leaves_batchnorm_statistics_alone(
    mode, updates, stream, transforms, tiny_net, setting_of
) -> None:
    """A task-1 step updates the running statistics once per pass of the stream and buffer
    batches (three passes, or one joint one), never for the strong views of future preparation,
    which are normalised with their own batch statistics all the same."""
    method = make_xder(stream, transforms, tiny_net, setting_of, replay_forward=mode)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    bn = method.net.body[2]
    before = int(bn.num_batches_tracked)
    out = method.observe(batch(stream, transforms, 1))
    assert float(out.terms["future_preparation"]) > 0
    assert int(bn.num_batches_tracked) - before == updates
    assert bn.track_running_stats  # restored afterwards
    assert "forward" not in vars(bn)


def test_frozen_batchnorm_stats_still_uses_batch_statistics(tiny_net) -> None:
    net = tiny_net(4, batchnorm=True).train()
    x = torch.randn(16, 1, 2, 2)
    with frozen_batchnorm_stats(net):
        frozen = net(x)
    assert torch.equal(net.body[2].running_mean, torch.zeros(16))
    torch.testing.assert_close(frozen, net(x))  # the same normalisation as a tracked train pass


def test_no_future_preparation_or_future_constraint_on_the_last_task(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(2)
    terms = method.observe(batch(stream, transforms, 2)).terms
    assert "future_preparation" not in terms
    assert "future_constraint" not in terms
    assert {"ce", "der", "buffer_ce", "past_constraint"} <= set(terms)


# ------------------------------------------------------------------------------------ variants


def test_heads_available_under_preallocation_and_none(stream, transforms, tiny_net, setting_of) -> None:
    full = make_xder(stream, transforms, tiny_net, setting_of)
    assert [full.heads_available(t) for t in range(3)] == [3, 3, 3]
    one = make_xder(stream, transforms, tiny_net, setting_of, preallocated_heads=1)
    assert [one.heads_available(t) for t in range(3)] == [2, 3, 3]
    none = make_xder(stream, transforms, tiny_net, setting_of, future_heads="none")
    assert [none.heads_available(t) for t in range(3)] == [1, 2, 3]
    terms = none.observe(batch(stream, transforms, 0)).terms
    assert "future_preparation" not in terms
    assert "future_constraint" not in terms


def test_rpc_variant_predicts_through_the_fixed_polytope(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, future_heads="rpc")
    x = transforms.test(stream.test_x[:4])
    raw = method.net(x)
    torch.testing.assert_close(method.predict(x), raw[:, :5] @ regular_simplex(6).T)
    assert "future_preparation" not in method.observe(batch(stream, transforms, 0)).terms


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"memory_update": False},
        {"future_heads": "ce"},
        {"future_heads": "rpc"},
        {"future_heads": "none"},
        {"preallocated_heads": 0},
        {"preallocated_heads": 1},
        {"constraint_form": "paper"},
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "xder",
)
def test_every_variant_runs_end_to_end(variant, stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of, **variant)
    history = fit(
        method, stream, TrainingSchedule(epochs=2, batch_size=6, lr=0.05), generator=torch.Generator()
    )
    assert [len(r) for r in history.class_il] == [1, 2, 3]
    assert len(method.buffer) == 20


@pytest.mark.parametrize(
    "bad",
    [
        {"gamma": 1.5},
        {"n_views": 1},
        {"future_heads": "many"},
        {"future_heads": "none", "preallocated_heads": 2},
    ],
)
def test_config_errors(bad) -> None:
    with pytest.raises(MethodConfigError):
        XDERConfig(**bad)


@pytest.mark.parametrize(
    ("setting", "edge", "past", "message"),
    [
        ("gamma", 0.0, -0.01, "method.gamma must be in [0, 1], got -0.01"),
        ("gamma", 1.0, 1.01, "method.gamma must be in [0, 1], got 1.01"),
        ("tau", 0.01, 0.0, "method.tau must be > 0, got 0.0"),
        ("n_views", 2, 1, "method.n_views must be >= 2 (SupCon needs positives), got 1"),
        ("simclr_batch_size", 1, 0, "method.simclr_batch_size must be >= 1"),
        ("forward_batch_size", 2, 1, "method.forward_batch_size must be >= 2"),
        ("preallocated_heads", 0, -1, "method.preallocated_heads must be >= 0"),
    ],
    ids=["gamma>=0", "gamma<=1", "tau>0", "n_views>=2", "simclr>=1", "forward>=2", "preallocated>=0"],
)
def test_each_bound_holds_at_its_edge_and_is_refused_past_it(setting, edge, past, message) -> None:
    assert getattr(XDERConfig(**{setting: edge}), setting) == edge
    with pytest.raises(MethodConfigError, match=f"^{re.escape(message)}$"):
        XDERConfig(**{setting: past})


def test_without_future_heads_nothing_can_be_preallocated() -> None:
    """``future_heads = none``: a head appears when its task starts, so t~ may only be left unset
    or 0 (the same: no head ahead of the current task)."""
    assert XDERConfig(future_heads="none").preallocated_heads is None
    assert XDERConfig(future_heads="none", preallocated_heads=0).preallocated_heads == 0
    message = "method.future_heads = none keeps no future head: leave preallocated_heads unset"
    for ahead in (1, 2):
        with pytest.raises(MethodConfigError, match=f"^{re.escape(message)}$"):
            XDERConfig(future_heads="none", preallocated_heads=ahead)
    assert XDERConfig(future_heads="ce", preallocated_heads=1).preallocated_heads == 1


def test_paper_defaults() -> None:
    config = XDERConfig()
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    # Every field, so that a new one must be added here: the paper's Split CIFAR-100, M = 500 row
    # (alpha 0.3, beta 0.8, gamma 0.85, lambda 0.05, eta 0.001, m 0.7, tau 5, 2 views, SimCLR
    # batch 64, minibatch 32) and the full X-DER of its main results (memory update, SupCon
    # future heads, all heads from the start, the authors' constraints, separate forwards, task-end
    # forwards in batches of 32, the stream batch of the authors' code).
    assert values == {
        "buffer_size": 500,
        "minibatch_size": 32,
        "replay_forward": "separate",
        "alpha": 0.3,
        "beta": 0.8,
        "gamma": 0.85,
        "lambda_": 0.05,
        "eta": 0.001,
        "margin": 0.7,
        "tau": 5.0,
        "n_views": 2,
        "simclr_batch_size": 64,
        "memory_update": True,
        "future_heads": "supcon",
        "preallocated_heads": None,
        "constraint_form": "reference",
        "forward_batch_size": 32,
    }


# -------------------------------------------------------------------------- no host sync


@pytest.mark.parametrize("task", [0, 1])
def test_one_step_has_no_host_synchronisation(task, stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    if task:
        method.end_task(0, task_data(stream, 0))
    method.begin_task(task)
    step_batch = batch(stream, transforms, task)
    with OpCounter() as counter:
        method.observe(step_batch).loss.backward()
    assert counter.host_syncs == 0, counter.syncs
    assert counter.total > 50


# -------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("variant", [{}, {"preallocated_heads": 1, "constraint_form": "paper"}])
def test_resume_mid_task_after_buffer_updates_equals_uninterrupted(
    variant, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=3, batch_size=6, lr=0.05, momentum=0.9)
    method = make_xder(stream, transforms, tiny_net, setting_of, **variant)
    full = fit(method, stream, schedule, generator=method.generator)
    final = {k: v.clone() for k, v in method.state_dict().items() if isinstance(v, torch.Tensor)}

    method = make_xder(stream, transforms, tiny_net, setting_of, **variant)
    # Stopped after the 5th epoch: task 1's second epoch, after the buffer was filled at the end
    # of task 0 and rewritten by task 1's online updates.
    snapshot = snapshot_after(method, stream, schedule, method.generator, 5)
    assert snapshot["position"] == {"task": 1, "epoch": 2}
    state = snapshot["method"]
    assert int(state["buffer._extra_state"]["size"]) == 20
    assert (state["buffer.task_labels"] == 1).any()  # implanted during task 1
    assert state["visits"].sum() > 0  # the visit counters of the task so far

    torch.manual_seed(123)  # the resumed process starts from other weights and RNG states
    method = make_xder(stream, transforms, tiny_net, setting_of, seed=99, **variant)
    resumed = fit(method, stream, schedule, generator=method.generator, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il
    after = method.state_dict()
    for key, value in final.items():  # buffer (examples, logits, task labels), visits, network
        assert torch.equal(after[key], value), key


# ------------------------------------------------------------------------ random draws, devices


def test_every_draw_comes_from_the_methods_generator(stream, transforms, tiny_net, setting_of) -> None:
    """ "Every random draw goes through ``self.generator``" (MethodBase): runs with the same
    generator seed and different global seeds are identical, through task 0's end (the odd slot's
    class, M = 21; the items picked; their augmented views), three steps of task 1 (both buffer draws
    and their views; future preparation's draw and strong views; the 1/k coins of rows drawn again)
    and task 1's end (the shuffled re-forward in batches of 8, with BatchNorm). Another generator
    seed changes each stage, so that the draws show."""

    def run(generator_seed: int, global_seed: int) -> list[torch.Tensor]:
        method = make_xder(stream, transforms, tiny_net, setting_of, buffer_size=21, forward_batch_size=8)
        method.generator = torch.Generator().manual_seed(generator_seed)
        torch.manual_seed(global_seed)
        stages = []

        def buffer_state() -> None:
            items = method.buffer.all()
            stages.extend([items.examples, items.labels, items.logits, items.task_labels])

        method.end_task(0, task_data(stream, 0))
        buffer_state()
        method.begin_task(1)
        for _ in range(3):
            out = method.observe(batch(stream, transforms, 1))
            stages.extend(value.detach() for value in out.terms.values())
        buffer_state()
        method.end_task(1, task_data(stream, 1))
        buffer_state()
        return stages

    first, again, other = run(0, 1), run(0, 2), run(5, 1)
    assert len(first) == len(again) == len(other)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first[2], other[2])  # the logits stored at task 0's end
    assert not torch.equal(first[-2], other[-2])  # those at task 1's end


class OffDevice(TorchFunctionMode):
    """Records every tensor a torch function returns on another device than ``device``."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.made: list[tuple[str, torch.device]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, tuple | list) else [out]:
            if isinstance(value, torch.Tensor) and value.device != self.device:
                self.made.append((getattr(func, "__name__", str(func)), value.device))
        return out


def test_the_step_and_the_task_end_stay_on_the_methods_device(stream, tiny_net, setting_of) -> None:
    """Device-agnostic: on torch's "meta" device (shapes, no values) X-DER makes no tensor
    anywhere else: not in the step, not at a task's end (a CPU index would still index a meta or
    CUDA tensor, so every tensor made is checked, not only the results), and its results (loss,
    terms, groups, buffer, visit counters, the task end's outputs, also for no item) are there. The
    task end selects rows with data-dependent shapes (nonzero), which meta can only fake: torch's
    switch makes nonzero assume every element non-zero (every row of the small data sets below is
    then kept or picked)."""
    meta = torch.device("meta")
    transforms = Transforms(train=exact, test=exact, strong=exact)  # jitter draws its noise on the CPU
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.to(meta)

    def data(t: int, n: int) -> TaskData:
        rows = stream.task(t).train[:n]
        return TaskData(stream.train_x[rows].to(meta), stream.train_y[rows].to(meta), t)

    first, second = data(0, 8), data(1, 6)
    step = Batch(exact(second.x_raw), second.y, second.x_raw, 1)
    none = torch.zeros(0, 1, 2, 2, dtype=torch.uint8, device=meta)
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True), OffDevice(meta) as off_device:
        method.end_task(0, first)
        method.begin_task(1)
        out = method.observe(step)
        method.end_task(1, second)
        empty = method._forward_all(none)
    assert off_device.made == []
    assert len(method.buffer) == 14
    assert set(out.terms) == {
        "ce",
        "der",
        "buffer_ce",
        "future_preparation",
        "past_constraint",
        "future_constraint",
    }
    for value in [out.loss, *out.terms.values(), *out.groups.values(), *method.buffer.buffers(), empty]:
        assert value.device == meta
    assert method.visits.device == meta
    assert empty.shape == (0, 6)
