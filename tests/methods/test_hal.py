"""HAL: the ring buffer's slots, the anchors' objective and the anchoring loss by hand, the
memory (the DER paper's whole-stream reservoir, or per-task rings), the memory fine-tuning and
the anchoring step against independent computations, the learned anchors, training, resume,
host syncs."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from xder_methods import (
    Batch,
    OpCounter,
    TaskData,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
)
from xder_methods.core.errors import MethodConfigError
from xder_methods.methods.hal import HAL, HALConfig, anchor_loss, anchor_objective
from xder_methods.parts.buffer import Buffer


def to_float(x, generator=None):
    return x.float() / 255


def build(stream, tiny_net, setting_of, transforms, seed: int = 0, **config) -> HAL:
    torch.manual_seed(seed)
    method = create_method(
        "hal",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=HALConfig(**({"buffer_size": 12, "minibatch_size": 4, "steps_on_anchors": 20} | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, HAL)
    return method


def task_data(stream, task: int) -> TaskData:
    rows = stream.task(task).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], task)


# ------------------------------------------------------------------------------ pure functions


def test_anchor_objective_by_hand() -> None:
    finetuned = torch.tensor([[0.0, 0.0]])  # CE on class 0: -log(1/2) = log 2
    current = torch.tensor([[math.log(3.0), 0.0]])  # softmax (3/4, 1/4): CE -log(3/4) = log(4/3)
    features, phi = torch.tensor([[1.0, 2.0]]), torch.tensor([0.0, 1.0])  # squared distance 1 + 1
    value = anchor_objective(finetuned, current, features, torch.tensor([0]), phi, gamma=0.5)
    # log 2 - log(4/3) - 0.5 * 2 = log(3/2) - 1
    torch.testing.assert_close(value, torch.tensor([math.log(1.5) - 1.0]))


def test_anchor_objective_is_per_anchor() -> None:
    g = torch.Generator().manual_seed(0)
    fin, cur, feat = (
        torch.randn(3, 4, generator=g),
        torch.randn(3, 4, generator=g),
        torch.randn(3, 5, generator=g),
    )
    labels, phi = torch.tensor([1, 2, 3]), torch.randn(5, generator=g)
    together = anchor_objective(fin, cur, feat, labels, phi, 0.1)
    alone = [
        anchor_objective(fin[i : i + 1], cur[i : i + 1], feat[i : i + 1], labels[i : i + 1], phi, 0.1)
        for i in range(3)
    ]
    torch.testing.assert_close(together, torch.cat(alone))


def test_anchor_loss_by_hand() -> None:
    new = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    old = torch.tensor([[0.0, 0.0], [0.0, 1.0]], requires_grad=True)
    loss = anchor_loss(new, old, lambda_=0.2)
    # squared differences 1, 4, 0, 1: mean 6 / 4 = 1.5, times 0.2 = 0.3
    torch.testing.assert_close(loss, torch.tensor(0.3))
    loss.backward()
    # d/d old of 0.2 * mean((new - old)^2) = -0.2 * 2 * (new - old) / 4
    torch.testing.assert_close(old.grad, -0.1 * (new - old.detach()))


# ------------------------------------------------------------------------------- the anchors


def test_one_anchor_per_class_learned_at_each_task_end(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, tiny_net, setting_of, transforms)
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1)
    fit(method, stream, schedule, generator=method.generator)
    # After task 0: anchors of classes 0 and 1, none yet for classes 2..5.
    assert bool(method.anchors[:2].abs().flatten(1).sum(1).gt(0).all())
    assert torch.count_nonzero(method.anchors[2:]) == 0
    assert method.active_anchors(1).shape == (2, 1, 2, 2)
    assert method.active_anchors(0).shape[0] == 0
    method.begin_task(1)
    method.end_task(1, task_data(stream, 1))
    assert bool(method.anchors[:4].abs().flatten(1).sum(1).gt(0).all())
    assert not torch.equal(method.anchors[2], method.anchors[3])
    assert torch.count_nonzero(method.anchors[4:]) == 0


def test_anchors_climb_their_objective(stream, transforms, tiny_net, setting_of) -> None:
    """From the same state, the anchors after ``steps_on_anchors`` SGD steps score higher on the
    objective than the uniform draws they start from (``steps_on_anchors = 0``)."""
    trained = build(stream, tiny_net, setting_of, transforms)
    fit(
        trained,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1),
        generator=trained.generator,
    )
    trained.begin_task(1)
    for step in range(3):  # fill task 1's ring and phi
        rows = stream.task(1).train[8 * step : 8 * step + 8]
        x = stream.train_x[rows]
        trained.optimizer = torch.optim.SGD(trained.net.parameters(), lr=0.1)
        trained.observe(Batch(transforms.train(x), stream.train_y[rows], x, 1))
    state, g_state = trained.state_dict(), trained.generator.get_state()

    anchors = {}
    for steps in (0, 20):
        method = build(stream, tiny_net, setting_of, transforms, steps_on_anchors=steps)
        method.load_state_dict(state)
        method.generator.set_state(g_state)
        method.end_task(1, task_data(stream, 1))
        anchors[steps] = method.anchors[2:4].clone()
    method.generator.set_state(g_state)
    finetuned = method.finetuned_copy()  # the same fine-tuned copy: the same draws from the same state
    current = method.net.eval()

    def objective(e):
        features = current.forward_features(e)
        return anchor_objective(
            finetuned(e), current.forward_head(features), features, torch.tensor([2, 3]), method.phi, 0.1
        )

    with torch.no_grad():
        assert bool((objective(anchors[20]) > objective(anchors[0])).all())
        assert bool(((anchors[0] >= 0) & (anchors[0] < 1)).all())  # uniform in [0, 1)


# -------------------------------------------------------------------------------- behaviour


def test_the_anchoring_step_is_taken_from_the_pre_step_weights(stream, tiny_net, setting_of) -> None:
    """One task-1 step (``observe``, which takes both optimiser steps) ends at
    ``theta - lr * (grad CE + grad lambda_ mean((f_tmp(E) - f_theta(E))^2))`` at the pre-step
    ``theta``, ``f_tmp`` the anchors' logits after the cross-entropy step: computed here
    independently with ``functional_call``. Then ``phi`` is the stream features' mean at the
    final weights, weighted ``1 - beta`` (it restarted from zero with the task)."""
    transforms = Transforms(train=to_float, test=to_float)
    lr, lambda_, beta = 0.1, 5.0, 0.3
    method = build(stream, tiny_net, setting_of, transforms, minibatch_size=12, lambda_=lambda_, beta=beta)
    fit(method, stream, TrainingSchedule(epochs=2, batch_size=8, lr=lr, tasks=1), generator=method.generator)
    method.begin_task(1)
    rows = stream.task(1).train[:8]
    x_raw, y = stream.train_x[rows], stream.train_y[rows]
    memory = method.buffer.all()  # minibatch >= buffer: every item is replayed (order-free mean)
    x_all = torch.cat([to_float(x_raw), to_float(memory.examples)])
    y_all = torch.cat([y, memory.labels])
    anchors = method.active_anchors(1)
    theta = {k: v.detach().clone() for k, v in method.net.named_parameters()}

    def logits(params, inputs):
        return functional_call(method.net, params, (inputs,))

    params = {k: v.clone().requires_grad_(True) for k, v in theta.items()}
    g_ce = torch.autograd.grad(F.cross_entropy(logits(params, x_all), y_all), list(params.values()))
    theta_tmp = {k: v - lr * g for (k, v), g in zip(theta.items(), g_ce, strict=True)}
    f_old, f_tmp = logits(theta, anchors).detach(), logits(theta_tmp, anchors).detach()
    penalty = lambda_ * (f_tmp - logits(params, anchors)).pow(2).mean()
    g_anchor = torch.autograd.grad(penalty, list(params.values()))
    expected = {k: v - lr * (a + b) for (k, v), a, b in zip(theta.items(), g_ce, g_anchor, strict=True)}

    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=lr)
    out = method.observe(Batch(to_float(x_raw), y, x_raw, 1))
    for name, p in method.net.named_parameters():
        torch.testing.assert_close(p.detach(), expected[name])
    assert set(out.terms) == {"ce", "anchor"}
    with torch.no_grad():
        features = method.net.forward_features(to_float(x_raw)).mean(0)
        torch.testing.assert_close(method.phi, (1 - beta) * features)
        f_final = method.net(anchors)
    # What this first-order step does to the anchors (mammoth's, and the HAL paper's Alg. 1 read
    # with a stop-gradient on f_tmp): its gradient at theta pulls f_theta(E) towards f_tmp(E), so
    # the anchors end further from their pre-step outputs than the cross-entropy step alone left
    # them, not closer. Measured here so that a change of that behaviour shows.
    assert float((f_final - f_old).norm()) > float((f_tmp - f_old).norm())


def test_during_the_first_task_only_phi_is_added(stream, tiny_net, setting_of) -> None:
    transforms = Transforms(train=to_float, test=to_float)
    method = build(stream, tiny_net, setting_of, transforms, beta=0.5)
    method.begin_task(0)
    rows = stream.task(0).train[:8]
    x = stream.train_x[rows]
    reference = copy.deepcopy(method.net)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    F.cross_entropy(reference(to_float(x)), stream.train_y[rows]).backward()
    reference_opt.step()  # the cross-entropy step alone
    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    out = method.observe(Batch(to_float(x), stream.train_y[rows], x, 0))
    assert set(out.terms) == {"ce"}
    for p, q in zip(method.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(method.phi, 0.5 * method.net.forward_features(to_float(x)).mean(0))
    # The whole-stream reservoir of 12 takes all 8 items, in rows 0..7.
    assert len(method.buffer) == 8
    assert torch.equal(method.buffer.examples[:8], x)


# ------------------------------------------------------------------------------------- memory


def offer_task(method: HAL, stream, task: int, batches: int, size: int = 6) -> None:
    """Offer ``batches`` stream batches of ``task`` to the memory (no training step)."""
    method.begin_task(task)
    rows = stream.task(task).train
    for b in range(batches):
        chunk = rows[(b * size) % rows.shape[0] :][:size]
        x = stream.train_x[chunk]
        method.store(Batch(x.float() / 255, stream.train_y[chunk], x, task))


def test_the_paper_memory_is_one_reservoir_over_the_whole_stream(
    stream, transforms, tiny_net, setting_of
) -> None:
    """The DER paper's HAL (its code asks for a ring, but that buffer inserts by reservoir):
    during task 0 the memory fills all ``buffer_size`` rows (a ring would keep
    ``buffer_size // n_tasks``), nothing is reset at a task's start, and items enter at the slots
    of reservoir sampling over every item offered so far, as a plain reservoir buffer fed the
    same batches with the same draws."""
    method = build(stream, tiny_net, setting_of, transforms, buffer_size=12)
    assert method.config.memory == "reservoir"
    reference = Buffer(12, stream.train_x.shape[1:])
    g = torch.Generator().manual_seed(5)
    method.generator.manual_seed(5)
    offer_task(method, stream, 0, 3)  # 18 items of task 0
    assert len(method.buffer) == 12
    assert set(method.buffer.labels[:12].tolist()) <= {0, 1}
    offer_task(method, stream, 1, 4)  # 24 items of task 1: they share the 12 rows with task 0's
    assert method.buffer.num_seen == 42
    for task, batches in ((0, 3), (1, 4)):
        rows = stream.task(task).train
        for b in range(batches):
            chunk = rows[(b * 6) % rows.shape[0] :][:6]
            reference.add_reservoir(
                stream.train_x[chunk], stream.train_y[chunk], task_labels=task, generator=g
            )
    assert torch.equal(method.buffer.examples[:12], reference.examples[:12])
    assert torch.equal(method.buffer.labels[:12], reference.labels[:12])
    assert torch.equal(method.buffer.task_labels[:12], reference.task_labels[:12])
    assert 0 < int((method.buffer.task_labels[:12] == 1).sum()) < 12


def test_the_ring_memory_keeps_each_task_latest_items_in_its_own_rows(
    stream, transforms, tiny_net, setting_of
) -> None:
    """``memory = "ring"``: task t owns rows ``[4t, 4t + 4)`` of a 12-row memory over 3 tasks
    and keeps its 4 latest items there; earlier tasks' rows are never touched."""
    method = build(stream, tiny_net, setting_of, transforms, buffer_size=12, memory="ring")
    offer_task(method, stream, 0, 2)  # 12 items: rows 0..3 hold items 8..11
    rows0 = stream.task(0).train
    assert len(method.buffer) == 4
    assert torch.equal(method.buffer.examples[:4], stream.train_x[rows0[:12]][[8, 9, 10, 11]])
    kept = method.buffer.examples[:4].clone()
    offer_task(method, stream, 1, 1)  # 6 items: rows 4..7 hold items 2..5 (items 0 and 1 overwritten)
    rows1 = stream.task(1).train
    assert len(method.buffer) == 8
    assert torch.equal(method.buffer.examples[:4], kept)
    assert torch.equal(method.buffer.examples[4:8], stream.train_x[rows1[:6]][[4, 5, 2, 3]])
    assert method.buffer.task_labels[:8].tolist() == [0] * 4 + [1] * 4


def test_config_rejects_an_unknown_memory() -> None:
    with pytest.raises(MethodConfigError, match="memory"):
        HALConfig(memory="fifo")  # type: ignore[arg-type]


def test_the_memory_fine_tuning_is_one_sgd_step_on_a_buffer_batch(
    stream, transforms, tiny_net, setting_of
) -> None:
    """The copy that estimates forgetting is the network after ``finetuning_epochs`` (1) SGD
    steps at the anchors' lr on ``finetuning_batch_size`` augmented buffer items, recomputed here
    with autograd from the same draws; it is not the network itself."""
    method = build(stream, tiny_net, setting_of, transforms, buffer_size=12, finetuning_batch_size=5)
    offer_task(method, stream, 0, 2)
    state = method.generator.get_state()
    finetuned = method.finetuned_copy()

    g = torch.Generator()
    g.set_state(state)
    index = torch.randperm(len(method.buffer), generator=g)[:5]
    x = transforms.train(method.buffer.examples[index], g)
    params = list(method.net.parameters())
    loss = F.cross_entropy(method.net(x), method.buffer.labels[index])
    grads = torch.autograd.grad(loss, params)
    expected = [p.detach() - method.anchor_lr() * grad for p, grad in zip(params, grads, strict=True)]
    got = list(finetuned.parameters())
    for e, f in zip(expected, got, strict=True):
        torch.testing.assert_close(f, e)
    assert any(not torch.equal(f, p) for f, p in zip(got, params, strict=True))
    assert not finetuned.training
    assert not any(p.requires_grad for p in got)


def test_hal_trains_task_zero(stream, transforms, tiny_net, setting_of) -> None:
    def at_chance(num_classes: int):
        torch.manual_seed(1)  # the registry-wide test's untrained net (50% on task 0)
        return tiny_net(num_classes)

    method = build(stream, at_chance, setting_of, transforms, steps_on_anchors=100)
    history = fit(
        method, stream, TrainingSchedule(epochs=6, batch_size=8, lr=0.1), generator=torch.Generator()
    )
    assert history.class_il[0][0] >= 75.0, history.class_il


def test_a_step_has_no_host_sync(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, tiny_net, setting_of, transforms)
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1), generator=method.generator)
    method.begin_task(1)
    rows = stream.task(1).train[:6]
    x = stream.train_x[rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, 1)
    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    with OpCounter() as counter:
        method.observe(batch)  # the replay step, the anchoring step, phi
    assert counter.host_syncs == 0, counter.syncs


def test_the_anchors_take_the_training_lr_unless_given_one(stream, transforms, tiny_net, setting_of) -> None:
    """mammoth fine-tunes and learns the anchors at its training lr: unset, ``anchor_lr`` follows
    the lr of the last step (0.03, the DER paper's, before any step); given, it is used."""
    method = build(stream, tiny_net, setting_of, transforms)
    assert method.anchor_lr() == 0.03
    fit(
        method,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.07, tasks=1),
        generator=torch.Generator(),
    )
    assert method.anchor_lr() == 0.07
    clone = build(stream, tiny_net, setting_of, transforms)
    clone.load_state_dict(method.state_dict())  # a resumed run keeps it
    assert clone.anchor_lr() == 0.07
    assert build(stream, tiny_net, setting_of, transforms, anchor_lr=0.2).anchor_lr() == 0.2
