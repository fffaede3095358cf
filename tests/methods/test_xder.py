"""What makes X-DER X-DER: the behaviours docs/xder.md describes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from xder_methods import (
    XDER,
    Batch,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
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
        method._update_future_past(
            index, keep, method.buffer.logits[:n].clone(), fresh, torch.zeros(n, dtype=torch.long), 1, 6
        )
        changed = (method.buffer.logits[:n, 2:] != before).any(dim=1)
        updated_per_visit.append(float(changed.float().mean()))
    # Visit k updates with probability 1/k (the stored value is uniform over the visits); the
    # ground truth (100) is far above the fresh values, so nothing is attenuated.
    for k, rate in enumerate(updated_per_visit, start=1):
        assert abs(rate - 1 / k) < 0.04, (k, rate)
    assert method.visits[:n].tolist() == [4.0] * n


def test_duplicated_buffer_draws_count_as_one_visit(stream, transforms, tiny_net, setting_of) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.begin_task(1)
    index = torch.tensor([5, 5, 7])
    keep = first_occurrence(index)
    method._update_future_past(
        index, keep, torch.ones(3, 6), torch.ones(3, 6), torch.zeros(3, dtype=torch.long), 1, 6
    )
    assert method.visits[5] == 1
    assert method.visits[7] == 1


# ------------------------------------------------------------------------ future preparation


def test_future_preparation_leaves_batchnorm_statistics_alone(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make_xder(stream, transforms, tiny_net, setting_of)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    bn = method.net.body[2]
    before = (bn.running_mean.clone(), bn.running_var.clone(), int(bn.num_batches_tracked))
    loss = method._future_preparation(batch(stream, transforms, 1), 1, 6)
    assert float(loss.detach()) > 0
    assert torch.equal(bn.running_mean, before[0])
    assert torch.equal(bn.running_var, before[1])
    assert int(bn.num_batches_tracked) == before[2]
    assert bn.track_running_stats  # restored afterwards


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
