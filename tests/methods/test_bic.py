"""What makes BiC BiC: the newest task's bias layer, distillation from a corrected teacher weighed
as mammoth (1 / (t + 1), tau^2) or the BiC paper (n_old / n_seen), a held-out part of the memory,
and state that survives checkpoints."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xder_methods import Batch, MethodConfigError, TaskData, TrainingSchedule, create_method, fit
from xder_methods.methods.bic import (
    BiC,
    BiCConfig,
    bias_correct,
    bic_distillation_loss,
    distillation_weight,
    distillation_weights,
    holdout_size,
    interleaved_order,
    task_balanced_mask,
)


def make_bic(stream, transforms, tiny_net, setting_of, batchnorm=False, seed=0, **config) -> BiC:
    torch.manual_seed(seed)
    base = {"buffer_size": 20, "minibatch_size": 4, "epochs_bic": 5, "bias_batch_size": 4}
    return create_method(
        "bic",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=BiCConfig(**(base | config)),
        generator=torch.Generator().manual_seed(seed),
    )


def task_data(stream, t) -> TaskData:
    rows = stream.task(t).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], t)


def batch(stream, transforms, t, n=6) -> Batch:
    rows = stream.task(t).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, t)


def finish(method: BiC, stream, t: int) -> None:
    """Run task t's end and the next task's start and preparation, as the loop does."""
    method.end_task(t, task_data(stream, t))
    method.begin_task(t + 1)
    if t + 1 < stream.n_tasks:
        method.prepare_task(
            t + 1, task_data(stream, t + 1), TrainingSchedule(epochs=1, batch_size=4, lr=0.1).budget
        )


# ------------------------------------------------------------------------------- pure functions


def test_bias_correct_changes_only_the_newest_task_by_hand() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.0, -1.0, -2.0, 1.0, 0.5, 0.0]])
    alpha = torch.tensor(2.0, requires_grad=True)
    beta = torch.tensor(0.5, requires_grad=True)
    out = bias_correct(logits, alpha, beta, 2, 4)
    expected = torch.tensor([[1.0, 2.0, 6.5, 8.5, 5.0, 6.0], [0.0, -1.0, -3.5, 2.5, 0.5, 0.0]])
    torch.testing.assert_close(out.detach(), expected)
    assert logits[0, 2] == 3.0  # input untouched
    out.sum().backward()
    assert float(alpha.grad) == pytest.approx(3.0 + 4.0 - 2.0 + 1.0)  # sum of the corrected logits
    assert float(beta.grad) == pytest.approx(4.0)  # two rows x two columns


def test_distillation_weight_is_old_over_seen() -> None:
    assert distillation_weight(0, 2) == 0.0
    assert distillation_weight(2, 4) == 0.5
    assert distillation_weight(4, 6) == pytest.approx(2 / 3)
    assert distillation_weight(90, 100) == pytest.approx(0.9)  # not mammoth's 1 / (t + 1) = 0.1


def test_distillation_weights_of_each_objective() -> None:
    # Split CIFAR-100, 10 classes a task, tau 2: mammoth's ratio distillation / CE is
    # tau^2 / t at task t (4 at task 1, 0.44 at task 9); the BiC paper's is t (1 and 9).
    assert distillation_weights("mammoth", 0, 0, 10, 2.0) == (0.0, 1.0)
    assert distillation_weights("bic", 0, 0, 10, 2.0) == (0.0, 1.0)
    assert distillation_weights("mammoth", 1, 10, 20, 2.0) == (0.5, 4.0)
    lam, scale = distillation_weights("mammoth", 9, 90, 100, 2.0)
    assert (lam, scale) == (pytest.approx(0.1), 4.0)
    assert lam * scale / (1 - lam) == pytest.approx(4 / 9)
    assert distillation_weights("bic", 1, 10, 20, 2.0) == (0.5, 1.0)
    assert distillation_weights("bic", 9, 90, 100, 2.0) == (pytest.approx(0.9), 1.0)
    assert BiCConfig().objective == "mammoth"


def test_distillation_targets_at_temperature_tau_by_a_float64_loop() -> None:
    g = torch.Generator().manual_seed(3)
    student = torch.randn(5, 6, generator=g, dtype=torch.float64) * 3
    teacher = torch.randn(5, 6, generator=g, dtype=torch.float64) * 3
    n_old, tau = 4, 2.0
    expected = []
    for i in range(5):
        z_t = sum(math.exp(teacher[i, j].item() / tau) for j in range(n_old))
        z_s = sum(math.exp(student[i, j].item() / tau) for j in range(n_old))
        value = 0.0
        for k in range(n_old):
            target = math.exp(teacher[i, k].item() / tau) / z_t
            value -= target * (student[i, k].item() / tau - math.log(z_s))
        expected.append(value)
    per_item = bic_distillation_loss(student, teacher, n_old, tau, reduction="none")
    torch.testing.assert_close(per_item, torch.tensor(expected, dtype=torch.float64))
    mean = bic_distillation_loss(student, teacher, n_old, tau)
    assert float(mean) == pytest.approx(sum(expected) / 5)


def test_memory_layout_helpers_by_hand() -> None:
    assert holdout_size(500, 0.1) == 50
    assert holdout_size(200, 0.1) == 20
    assert holdout_size(10, 0.1) == 1
    assert holdout_size(10, 0.0) == 0
    labels = torch.tensor([1, 1, 0, 1, 2, 0])
    order = interleaved_order(labels, 3)
    assert labels[order].tolist() == [1, 0, 2, 1, 0, 1]  # every prefix balanced to within one
    assert order.tolist() == [0, 2, 4, 1, 5, 3]
    tasks = torch.tensor([0, 0, 1, 0, 1, 1, 1])
    assert task_balanced_mask(tasks, 2, 3).tolist() == [True, True, True, False, True, False, False]


def test_config_validation_names_the_key() -> None:
    with pytest.raises(MethodConfigError, match=r"method\.tau"):
        BiCConfig(tau=0)
    with pytest.raises(MethodConfigError, match=r"method\.holdout_fraction"):
        BiCConfig(holdout_fraction=1.0)
    with pytest.raises(MethodConfigError, match=r"method\.epochs_bic"):
        BiCConfig(epochs_bic=-1)
    defaults = BiCConfig()
    assert (defaults.buffer_size, defaults.minibatch_size, defaults.tau, defaults.epochs_bic) == (
        500,
        32,
        2.0,
        250,
    )
    assert defaults.holdout_fraction == 0.1


# ------------------------------------------------------------------------------- the method


def test_predict_applies_the_newest_task_bias_layer_only(stream, transforms, tiny_net, setting_of) -> None:
    method = make_bic(stream, transforms, tiny_net, setting_of)
    method.begin_task(1)
    method.bias_alpha.copy_(torch.tensor([3.0, 2.0, 5.0]))
    method.bias_beta.copy_(torch.tensor([1.0, 0.5, 7.0]))
    method.eval()
    x = transforms.test(stream.test_x)
    raw = method.net(x)
    out = method.predict(x)
    torch.testing.assert_close(out[:, 2:4], 2.0 * raw[:, 2:4] + 0.5)
    torch.testing.assert_close(out[:, :2], raw[:, :2])  # task 0's layer is not applied
    torch.testing.assert_close(out[:, 4:], raw[:, 4:])  # nor the future task's


def test_teacher_is_a_frozen_copy_in_eval_mode(stream, transforms, tiny_net, setting_of) -> None:
    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.begin_task(0)
    method.observe(batch(stream, transforms, 0))
    finish(method, stream, 0)
    for mine, theirs in zip(
        method.net.state_dict().values(), method.teacher.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(mine, theirs)
    method.train(True)
    assert method.net.training
    assert not method.teacher.training
    assert not any(p.requires_grad for p in method.teacher.parameters())
    optimised = {id(p) for p in method.optimizer_parameters()}
    assert not optimised & {id(p) for p in method.teacher.parameters()}


def expected_step(method: BiC, b: Batch, state) -> torch.Tensor:
    """BiC's step loss recomputed independently from the generator state before ``observe``."""
    g = method.generator
    g.set_state(state)
    rows = torch.randperm(len(method.buffer), generator=g)[: method.config.minibatch_size]
    x = torch.cat([b.x, method.transforms.train(method.buffer.examples[rows], g)])
    y = torch.cat([b.y, method.buffer.labels[rows]])
    t = b.task
    n_old, n_seen = 2 * t, 2 * (t + 1)
    # mammoth: lambda = 1 / (t + 1) and the distillation times tau^2 = 4; BiC: n_old / n_seen.
    lam, scale = (1 / (t + 1), 4.0) if method.config.objective == "mammoth" else (n_old / n_seen, 1.0)
    logits = method.net(x)
    teacher = method.teacher(x)
    if t >= 2:  # the teacher's task t - 1 logits go through that task's bias layer
        alpha, beta = method.bias_alpha[t - 1], method.bias_beta[t - 1]
        teacher = torch.cat(
            [teacher[:, : n_old - 2], alpha * teacher[:, n_old - 2 : n_old] + beta, teacher[:, n_old:]], 1
        )
    target = F.softmax(teacher[:, :n_old] / 2.0, dim=1)
    kd = -(target * F.log_softmax(logits[:, :n_old] / 2.0, dim=1)).sum(1).mean()
    ce = F.cross_entropy(logits[:, :n_seen], y)
    return ((1 - lam) * ce + lam * scale * kd).detach()


@pytest.mark.parametrize("objective", ["mammoth", "bic"])
def test_loss_is_lambda_weighted_distillation_from_the_corrected_teacher(
    objective, stream, transforms, tiny_net, setting_of
) -> None:
    # Joined replay: expected_step redraws minibatch_size items as join_replay does.
    method = make_bic(
        stream, transforms, tiny_net, setting_of, epochs_bic=0, objective=objective, replay="joined"
    )
    method.begin_task(0)
    out0 = method.observe(batch(stream, transforms, 0))
    assert set(out0.terms) == {"ce"}  # lambda = 0 on the first task
    finish(method, stream, 0)
    with torch.no_grad():  # a teacher different from the student
        for p in method.net.parameters():
            p.add_(0.3)
    b = batch(stream, transforms, 1)
    state = method.generator.get_state()
    out = method.observe(b)
    assert set(out.terms) == {"ce", "distill"}
    torch.testing.assert_close(out.loss.detach(), expected_step(method, b, state))

    method.end_task(1, task_data(stream, 1))
    method.bias_alpha[1] = 3.0  # task 1's bias layer, as if trained
    method.bias_beta[1] = -1.0
    method.begin_task(2)
    with torch.no_grad():
        for p in method.net.parameters():
            p.sub_(0.2)
    b = batch(stream, transforms, 2)
    state = method.generator.get_state()
    out = method.observe(b)
    expected = expected_step(method, b, state)
    torch.testing.assert_close(out.loss.detach(), expected)
    method.bias_alpha[1], method.bias_beta[1] = 1.0, 0.0
    assert not torch.allclose(expected, expected_step(method, b, state))  # the correction matters
    torch.testing.assert_close(out.groups["stream"] + out.groups["buffer"], out.loss)


def test_bias_layer_training_changes_only_alpha_and_beta(stream, transforms, tiny_net, setting_of) -> None:
    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True, epochs_bic=20)
    method.begin_task(0)
    method.observe(batch(stream, transforms, 0))
    finish(method, stream, 0)
    method.observe(batch(stream, transforms, 1))
    method.train(True)
    before = {k: v.clone() for k, v in method.state_dict().items() if isinstance(v, torch.Tensor)}
    data = task_data(stream, 1)
    examples = torch.cat([method.holdout.all().examples, data.x_raw[:4]])
    labels = torch.cat([method.holdout.all().labels, data.y[:4]])
    method.fit_bias_layer(1, examples, labels)
    after = method.state_dict()
    changed = {k for k, v in before.items() if not torch.equal(v, after[k])}
    assert changed == {"bias_alpha", "bias_beta"}  # backbone, BN statistics, teacher, memory untouched
    assert method.bias_alpha[0] == 1.0
    assert method.bias_alpha[2] == 1.0
    assert method.bias_alpha[1] != 1.0
    assert method.bias_beta[1] != 0.0
    assert method.training
    assert method.net.training


def test_the_bias_layer_descends_its_cross_entropy(stream, transforms, tiny_net, setting_of) -> None:
    """Stage 2 replayed here from the same draws: Adam (lr 1e-3) on ``(alpha, beta)`` from
    ``(1, 0)``, minimising the cross-entropy over the seen classes of the eval-mode logits with
    ``alpha * o + beta`` on the newest task's columns (written out): the same ``alpha`` and
    ``beta``, and a lower validation loss than the identity's."""
    method = make_bic(stream, transforms, tiny_net, setting_of, epochs_bic=4)
    method.begin_task(0)
    finish(method, stream, 0)
    data = task_data(stream, 1)
    examples, labels = data.x_raw[:10], data.y[:10]
    examples = torch.cat([method.holdout.all().examples, examples])
    labels = torch.cat([method.holdout.all().labels, labels])
    state = method.generator.get_state()
    method.fit_bias_layer(1, examples, labels)

    g = torch.Generator()
    g.set_state(state)
    alpha = torch.ones((), requires_grad=True)
    beta = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.Adam([alpha, beta], lr=1e-3)
    method.net.eval()

    def loss_of(o, y, a, b):
        return F.cross_entropy(torch.cat([o[:, :2], a * o[:, 2:4] + b], dim=1), y)

    for _ in range(4):
        order = torch.randperm(labels.shape[0], generator=g)
        for first in range(0, labels.shape[0], 4):
            rows = order[first : first + 4]
            with torch.no_grad():
                o = method.net(transforms.train(examples[rows], g))[:, :4]
            optimizer.zero_grad()
            loss_of(o, labels[rows], alpha, beta).backward()
            optimizer.step()
    torch.testing.assert_close(method.bias_alpha[1], alpha.detach())
    torch.testing.assert_close(method.bias_beta[1], beta.detach())
    with torch.no_grad():
        o = method.net(transforms.test(examples))[:, :4]
        assert loss_of(o, labels, alpha, beta) < loss_of(o, labels, 1.0, 0.0)


def test_the_loop_never_trains_on_the_withheld_rows(stream, transforms, tiny_net, setting_of) -> None:
    """From task 1 on, BiC withholds as many random rows of the task as its memory holds out
    (here 2 of 24); the loop's epochs skip them, and stage 2 validates on them."""
    method = make_bic(stream, transforms, tiny_net, setting_of, epochs_bic=1)
    withheld: dict[int, torch.Tensor] = {}
    observed: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    prepare, observe = method.prepare_task, method.observe

    def spy_prepare(task, data, schedule):
        rows = prepare(task, data, schedule)
        withheld[task] = data.x_raw[method.withheld].clone()
        assert rows is None if task == 0 else torch.equal(rows, method.withheld)
        return rows

    def spy_observe(b):
        observed[b.task].append(b.x_raw.clone())
        return observe(b)

    method.prepare_task = spy_prepare  # type: ignore[method-assign]
    method.observe = spy_observe  # type: ignore[method-assign]
    fit(
        method,
        stream,
        TrainingSchedule(epochs=2, batch_size=4, lr=0.1, tasks=2, drop_last=False),
        generator=method.generator,
    )
    assert withheld[0].shape[0] == 0  # nothing withheld in the first task
    assert withheld[1].shape[0] == len(method.holdout) == 2
    seen = torch.cat(observed[1])
    assert seen.shape[0] == 2 * (24 - 2)  # two epochs of the 22 rows trained on
    for row in withheld[1]:
        assert not bool((seen == row).flatten(1).all(1).any())
    assert torch.cat(observed[0]).shape[0] == 2 * 24


def test_memory_holds_a_task_balanced_held_out_part_that_is_never_replayed(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make_bic(stream, transforms, tiny_net, setting_of, holdout_fraction=0.25)
    assert (method.holdout.capacity, method.buffer.capacity) == (5, 15)
    method.begin_task(0)
    method.observe(batch(stream, transforms, 0))
    assert len(method.buffer) == len(method.holdout) == 0  # filled at the end of the task only
    finish(method, stream, 0)
    held = method.holdout.labels[:5].tolist()
    assert sorted(held) in ([0, 0, 0, 1, 1], [0, 0, 1, 1, 1])
    replay = torch.bincount(method.buffer.labels[:15], minlength=2).tolist()
    assert sorted(replay) == [7, 8]

    seen = {}
    original = method.fit_bias_layer

    def spy(task, examples, labels):
        seen["labels"] = labels.clone()
        return original(task, examples, labels)

    method.fit_bias_layer = spy  # type: ignore[method-assign]
    finish(method, stream, 1)
    # Validation: the 5 held-out task-0 items plus as many task-1 rows, withheld from training
    # since prepare_task (the authors' code: 10% of the memory and as many new rows).
    assert seen["labels"][:5].tolist() == held
    assert seen["labels"].shape == (10,)
    assert set(seen["labels"][5:].tolist()) <= {2, 3}
    # Each part keeps capacity // 2 of task 0's earliest rows; task 1 takes the free slots.
    assert torch.bincount(method.holdout.task_labels[:5], minlength=2).tolist() == [2, 3]
    assert method.holdout.labels[:2].tolist() == held[:2]
    assert torch.bincount(method.buffer.task_labels[:15], minlength=2).tolist() == [7, 8]
    # Replay draws only from the replay part.

    def forbidden(*args, **kwargs):
        raise AssertionError("the held-out part was replayed")

    method.holdout.sample = forbidden  # type: ignore[method-assign]
    out = method.observe(batch(stream, transforms, 2))
    assert set(out.groups) == {"stream", "buffer"}


# ------------------------------------------------------------------------- state and resume


def test_state_dict_round_trips_teacher_and_bias_layers(stream, transforms, tiny_net, setting_of) -> None:
    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True)
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.05), generator=method.generator)
    assert all(method.bias_alpha[1:] != 1.0)  # trained at the end of tasks 1 and 2
    clone = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True, seed=7)
    clone.load_state_dict(method.state_dict())
    torch.testing.assert_close(clone.bias_alpha, method.bias_alpha)
    torch.testing.assert_close(clone.bias_beta, method.bias_beta)
    for mine, theirs in zip(
        clone.teacher.state_dict().values(), method.teacher.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(mine, theirs)
    assert len(clone.holdout) == len(method.holdout)
    assert torch.equal(clone.holdout.examples, method.holdout.examples)
    assert clone.current_task == 2
    x = transforms.test(stream.test_x)
    method.eval()
    clone.eval()
    torch.testing.assert_close(clone.predict(x), method.predict(x))


# 2 epochs per task: before task 0's end, mid-task 1, before task 1's end (its bias-layer fit)
@pytest.mark.parametrize("stop_after", [2, 3, 4])
def test_resume_equals_uninterrupted(
    stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True)
    full = fit(method, stream, schedule, generator=method.generator)

    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True)
    snapshot = snapshot_after(method, stream, schedule, method.generator, stop_after)
    torch.manual_seed(123)
    method = make_bic(stream, transforms, tiny_net, setting_of, batchnorm=True, seed=99)
    resumed = fit(method, stream, schedule, generator=method.generator, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il
