"""What makes LwF itself: the softened-softmax distillation from a frozen copy of the previous model."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods import (
    Batch,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
    batch_bounds,
    create_method,
    fit,
)
from xder_methods.methods.lwf import LwF, LwFConfig, distillation_loss, smooth_probabilities, warm_up_head


def make(stream, transforms, tiny_net, setting_of, *, seed=0, batchnorm=False, **config) -> LwF:
    torch.manual_seed(seed)
    method = create_method(
        "lwf",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=LwFConfig(**config),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, LwF)
    return method


def batch(stream, transforms, task: int, n: int = 6, seed: int = 1) -> Batch:
    rows = stream.task(task).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(
        transforms.train(x_raw, torch.Generator().manual_seed(seed)), stream.train_y[rows], x_raw, task
    )


def perturb(net: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))


def mammoth_formula(logits: Tensor, teacher_logits: Tensor, tau: float) -> Tensor:
    """The reference's composition, literally: -mean(sum(smooth(soft(old)) * log(smooth(soft(new)))))."""

    def smooth(p: Tensor) -> Tensor:
        powered = p ** (1 / tau)
        return powered / powered.sum(1).unsqueeze(1)

    return -torch.mean(torch.sum(smooth(teacher_logits.softmax(1)) * torch.log(smooth(logits.softmax(1))), 1))


# ------------------------------------------------------------------------------ pure functions


def test_smooth_probabilities_by_hand() -> None:
    # tau 2: sqrt(0.64) = 0.8, sqrt(0.36) = 0.6, sum 1.4 -> 4/7, 3/7. tau 1 leaves a distribution alone.
    p = torch.tensor([[0.64, 0.36], [0.5, 0.5]], dtype=torch.float64)
    expected = torch.tensor([[4 / 7, 3 / 7], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(smooth_probabilities(p, 2.0), expected)
    torch.testing.assert_close(smooth_probabilities(p, 1.0), p)
    # softmax(z) softened by tau is softmax(z / tau).
    z = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(smooth_probabilities(z.softmax(1), 3.0), (z / 3.0).softmax(1))


def test_distillation_loss_by_hand() -> None:
    # tau 2. Row 0: teacher [0, 0] -> y' = [1/2, 1/2]; student [2 ln 3, 0] -> softmax([ln 3, 0]) =
    # [3/4, 1/4]; loss -(1/2 ln 3/4 + 1/2 ln 1/4) = 1/2 ln(16/3).
    # Row 1: teacher [2 ln 2, 0] -> softmax [4/5, 1/5] -> sqrt [2, 1]/sqrt(5) -> y' = [2/3, 1/3];
    # student [0, 0] -> [1/2, 1/2]; loss -(2/3 + 1/3) ln 1/2 = ln 2. Mean over the two rows.
    logits = torch.tensor([[2 * math.log(3), 0.0], [0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0], [2 * math.log(2), 0.0]])
    expected = (0.5 * math.log(16 / 3) + math.log(2)) / 2
    assert distillation_loss(logits, teacher, 2.0).item() == pytest.approx(expected, rel=1e-6)
    assert mammoth_formula(logits, teacher, 2.0).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0, 4.0])
def test_distillation_loss_matches_the_reference_formula_and_kl_div(tau) -> None:
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(5, 4, generator=g, dtype=torch.float64)
    teacher = 3 * torch.randn(5, 4, generator=g, dtype=torch.float64)
    loss = distillation_loss(logits, teacher, tau)
    torch.testing.assert_close(loss, mammoth_formula(logits, teacher, tau))
    # A cross-entropy = KL(y' || yhat') + H(y'): KL from F.kl_div, the entropy written out.
    targets = (teacher / tau).softmax(1)
    kl = F.kl_div((logits / tau).log_softmax(1), targets, reduction="batchmean")
    entropy = -(targets * targets.log()).sum(1).mean()
    torch.testing.assert_close(loss, kl + entropy)


def test_distillation_loss_is_finite_where_the_literal_formula_is_not_and_spares_the_teacher() -> None:
    # Student probabilities underflow to 0 in float32: log(smooth(softmax)) is -inf there.
    logits = torch.tensor([[200.0, -200.0]], requires_grad=True)
    teacher = torch.tensor([[0.0, 0.0]], requires_grad=True)
    assert not torch.isfinite(mammoth_formula(logits, teacher, 2.0))
    loss = distillation_loss(logits, teacher, 2.0)
    assert loss.item() == pytest.approx(100.0, rel=1e-5)  # -(1/2)(0) - (1/2)(-200) = 100
    loss.backward()
    assert teacher.grad is None  # the teacher's outputs are constants
    assert logits.grad is not None
    assert torch.isfinite(logits.grad).all()


def test_config_defaults_and_checks() -> None:
    assert (LwFConfig().alpha, LwFConfig().tau, LwFConfig().warmup_epochs) == (3.0, 2.0, None)
    with pytest.raises(MethodConfigError, match=r"method\.alpha"):
        LwFConfig(alpha=-1.0)
    with pytest.raises(MethodConfigError, match=r"method\.tau"):
        LwFConfig(tau=0.0)
    with pytest.raises(MethodConfigError, match=r"method\.warmup_epochs"):
        LwFConfig(warmup_epochs=-1)


# ------------------------------------------------------------------------------ the method


def test_task_zero_is_plain_cross_entropy_over_the_seen_classes(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make(stream, transforms, tiny_net, setting_of)
    method.begin_task(0)
    perturb(method.teacher)  # were the teacher consulted in task 0, the loss would show it
    step = batch(stream, transforms, 0)
    out = method.observe(step)
    expected = F.cross_entropy(method.net(step.x)[:, :2], step.y)
    torch.testing.assert_close(out.loss, expected)
    assert set(out.terms) == {"ce"}


def test_later_tasks_add_alpha_times_the_distillation_on_past_classes(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make(stream, transforms, tiny_net, setting_of, alpha=2.5, tau=3.0)
    method.begin_task(1)
    perturb(method.net)  # the student now differs from its teacher
    step = batch(stream, transforms, 1)
    out = method.observe(step)
    logits, old = method.net(step.x), method.teacher(step.x)
    ce = F.cross_entropy(logits[:, :4], step.y)  # classes seen in task 1: 0..3
    distill = mammoth_formula(logits[:, :2], old[:, :2], 3.0)  # past classes: 0, 1
    torch.testing.assert_close(out.loss, ce + 2.5 * distill)
    torch.testing.assert_close(out.terms["distillation"], distill.detach())
    # Future classes (4, 5) get no gradient; past and current ones do.
    out.loss.backward()
    grad = method.net.classifier.weight.grad
    assert grad[4:].abs().sum() == 0
    assert grad[:2].abs().sum() > 0
    assert grad[2:4].abs().sum() > 0


def past_class_drift(alpha: float, stream, transforms, tiny_net, setting_of) -> float:
    """KL(teacher || student) of the softened past-class softmax on task-1 inputs after 10 steps of
    task 1 (the teacher: the network after 10 steps of task 0)."""
    method = make(stream, transforms, tiny_net, setting_of, alpha=alpha)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.5)
    for task in (0, 1):  # task 0 gives the teacher a past-class opinion worth keeping
        method.begin_task(task)
        for step in range(10):
            out = method.observe(batch(stream, transforms, task, n=12, seed=step))
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
    x = transforms.test(stream.train_x[stream.task(1).train])
    with torch.no_grad():
        student = (method.net(x)[:, :2] / 2).log_softmax(1)
        teacher = (method.teacher(x)[:, :2] / 2).log_softmax(1)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean").item()


def test_distillation_keeps_past_class_outputs_close_to_the_teacher(
    stream, transforms, tiny_net, setting_of
) -> None:
    # The same seed, data and steps: only alpha differs. Without distillation the new task's
    # cross-entropy pushes the past classes' outputs apart from the teacher's; with it, they stay.
    free = past_class_drift(0.0, stream, transforms, tiny_net, setting_of)
    held = past_class_drift(20.0, stream, transforms, tiny_net, setting_of)
    # The distillation sees the past classes' softmax only (invariant to a common shift of their
    # logits), so the drift is measured on it. Measured: free 0.15, held 0.0006.
    assert free > 0.05
    assert held < free / 20, (held, free)


def test_teacher_is_a_frozen_copy_taken_at_begin_task(stream, transforms, tiny_net, setting_of) -> None:
    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True)
    perturb(method.net)
    method.begin_task(1)
    method.train(True)
    assert not method.teacher.training
    assert all(not p.requires_grad for p in method.teacher.parameters())
    for key, value in method.net.state_dict().items():
        assert torch.equal(method.teacher.state_dict()[key], value)
    teacher_ids = {id(p) for p in method.teacher.parameters()}
    assert not teacher_ids & {id(p) for p in method.optimizer_parameters()}
    before = {k: v.clone() for k, v in method.teacher.state_dict().items()}
    optimizer = torch.optim.SGD(list(method.optimizer_parameters()), lr=0.5)
    for _ in range(3):
        out = method.observe(batch(stream, transforms, 1))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert all(p.grad is None for p in method.teacher.parameters())
    for key, value in method.teacher.state_dict().items():  # weights and BatchNorm statistics
        assert torch.equal(value, before[key])
    assert not torch.equal(method.net.classifier.weight, method.teacher.classifier.weight)


def test_train_without_an_argument_is_train_mode_with_the_teacher_in_eval(
    stream, transforms, tiny_net, setting_of
) -> None:
    """``train()`` means ``train(True)``, as for any module (``eval()`` is ``train(False)``)."""
    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.eval()
    assert not method.training
    assert not method.net.training
    assert not method.teacher.training
    assert method.train() is method
    assert method.training
    assert method.net.training
    assert not method.teacher.training


def test_teacher_lives_in_the_state_dict(stream, transforms, tiny_net, setting_of) -> None:
    method = make(stream, transforms, tiny_net, setting_of)
    perturb(method.net)
    method.begin_task(1)
    perturb(method.net)
    state = method.state_dict()
    assert any(key.startswith("teacher.") for key in state)
    clone = make(stream, transforms, tiny_net, setting_of, seed=5)
    clone.load_state_dict(state)
    assert clone.current_task == 1
    for key, value in method.teacher.state_dict().items():
        assert torch.equal(clone.teacher.state_dict()[key], value)
    step = batch(stream, transforms, 1)
    torch.testing.assert_close(clone.observe(step).loss, method.observe(step).loss)


def test_a_step_has_no_host_synchronisation(stream, transforms, tiny_net, setting_of) -> None:
    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.begin_task(1)
    step = batch(stream, transforms, 1)
    with OpCounter() as counter:
        method.observe(step).loss.backward()
    assert counter.host_syncs == 0, counter.syncs


def test_without_distillation_and_warm_up_it_is_fine_tuning(stream, transforms, tiny_net, setting_of) -> None:
    # alpha 0 and no warm-up leave the seen-class cross-entropy alone: the same run as FT (``sgd``),
    # step for step.
    import xder_methods.methods.sgd  # noqa: F401  (registers sgd)

    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1)
    histories = []
    for name, config in (("lwf", LwFConfig(alpha=0.0, warmup_epochs=0)), ("sgd", None)):
        torch.manual_seed(0)
        method = create_method(
            name,
            net=tiny_net(6, batchnorm=True),
            setting=setting_of(stream),
            transforms=transforms,
            config=config,
            generator=torch.Generator().manual_seed(0),
        )
        histories.append(fit(method, stream, schedule, generator=torch.Generator().manual_seed(0)))
    assert histories[0].class_il == histories[1].class_il
    assert histories[0].task_il == histories[1].task_il


# ------------------------------------------------------------------------------ the warm-up


def float64_warm_up(
    net, data: TaskData, new_classes, *, epochs, batch_size, lr, seed
) -> tuple[Tensor, Tensor]:
    """An independent replica of the warm-up: the features once (eval mode, no augmentation:
    the test transform draws nothing), then plain SGD on the head's new-class rows in float64,
    with the softmax cross-entropy's gradient written out, ``dL/dz = (softmax(z) - onehot) / B``,
    over the batches of one ``randperm`` per epoch from a generator seeded as the method's."""
    start, end = new_classes
    net.eval()
    with torch.no_grad():
        features = net.forward_features(data.x_raw.float() / 255).double()
    weight = net.classifier.weight.detach().double().clone()
    bias = net.classifier.bias.detach().double().clone()
    targets = F.one_hot(data.y - start, end - start).double()
    g = torch.Generator().manual_seed(seed)
    n = data.y.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=g)
        for begin, stop in batch_bounds(n, batch_size, drop_last=False):
            rows = order[begin:stop]
            f = features[rows]
            z = f @ weight[start:end].T + bias[start:end]
            dz = (z.softmax(1) - targets[rows]) / rows.shape[0]
            weight[start:end] -= lr * dz.T @ f
            bias[start:end] -= lr * dz.sum(0)
    return weight, bias


@pytest.mark.parametrize("batch_size", [24, 5])  # one batch per epoch; five, the last of four rows
def test_warm_up_head_matches_a_float64_replica_and_moves_nothing_else(
    batch_size, stream, transforms, tiny_net, setting_of
) -> None:
    torch.manual_seed(0)
    net = tiny_net(6, batchnorm=True)
    perturb(net)
    with torch.no_grad():  # BatchNorm's running statistics away from their initial values
        net.body[2].running_mean.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(3))
        net.body[2].running_var.uniform_(0.5, 2.0, generator=torch.Generator().manual_seed(4))
    net.train()
    rows = stream.task(1).train
    data = TaskData(stream.train_x[rows], stream.train_y[rows], 1)
    expected_weight, expected_bias = float64_warm_up(
        copy.deepcopy(net), data, (2, 4), epochs=3, batch_size=batch_size, lr=0.5, seed=5
    )
    before = copy.deepcopy(net.state_dict())
    warm_up_head(
        net,
        data,
        transforms.test,
        (2, 4),
        epochs=3,
        batch_size=batch_size,
        lr=0.5,
        drop_last=False,
        generator=torch.Generator().manual_seed(5),
    )
    assert net.training  # the mode is restored
    after = net.state_dict()
    torch.testing.assert_close(after["classifier.weight"].double(), expected_weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(after["classifier.bias"].double(), expected_bias, rtol=1e-5, atol=1e-6)
    assert not torch.equal(after["classifier.weight"][2:4], before["classifier.weight"][2:4])
    for name, value in before.items():  # the backbone, BatchNorm's statistics, the other classes
        if name.startswith("classifier."):
            assert torch.equal(after[name][:2], value[:2])
            assert torch.equal(after[name][4:], value[4:])
        else:
            assert torch.equal(after[name], value), name


def test_prepare_task_warms_up_later_tasks_for_the_task_epochs(
    stream, transforms, tiny_net, setting_of
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1)
    rows = stream.task(1).train
    data = TaskData(stream.train_x[rows], stream.train_y[rows], 1)

    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True)
    untouched = copy.deepcopy(method.state_dict())
    method.begin_task(0)
    method.prepare_task(
        0, TaskData(stream.train_x[:0], stream.train_y[:0], 0), schedule.budget
    )  # task 0: none
    method.begin_task(1)
    method.prepare_task(1, data, schedule.budget)

    by_hand = make(stream, transforms, tiny_net, setting_of, batchnorm=True)
    warm_up_head(
        by_hand.net,
        data,
        transforms.train,
        (2, 4),
        epochs=2,  # warmup_epochs None: the schedule's
        batch_size=8,
        lr=0.1,
        drop_last=False,
        generator=torch.Generator().manual_seed(0),  # the method's generator, as make seeds it
    )
    for name, value in by_hand.net.state_dict().items():
        assert torch.equal(method.net.state_dict()[name], value), name
    assert not torch.equal(method.net.classifier.weight, untouched["net.classifier.weight"])

    off = make(stream, transforms, tiny_net, setting_of, batchnorm=True, warmup_epochs=0)
    off.begin_task(1)
    off.prepare_task(1, data, schedule.budget)
    for name, value in off.net.state_dict().items():
        assert torch.equal(value, untouched["net." + name]), name
