"""SI: the importance and the surrogate by hand, the path integral against a float64 loop of SGD
steps, zero importance where nothing moves, the path integral as the loss decrease, training,
resume and the step's host synchronisations."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from xder_methods import (
    Batch,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
    apply_step,
    create_method,
    fit,
)
from xder_methods.methods.si import SIConfig, path_contribution, si_importance, si_penalty


def build(stream, transforms, tiny_net, setting_of, seed=0, batchnorm=False, **config):
    torch.manual_seed(seed)
    return create_method(
        "si",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=SIConfig(**config),
        generator=torch.Generator().manual_seed(seed),
    )


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def batches(stream, transforms, task, size=6, count=4) -> list[Batch]:
    rows = stream.task(task).train
    out = []
    for i in range(count):
        index = rows[(i * size) % rows.shape[0] :][:size]
        x = stream.train_x[index]
        out.append(Batch(transforms.test(x), stream.train_y[index], x, task))
    return out


# ------------------------------------------------------------------------------- pure functions


def test_si_importance_by_hand() -> None:
    omega = torch.tensor([2.0, 0.0, -1.0, 3.0])
    delta = torch.tensor([1.0, 0.0, 2.0, -0.5])
    # 2 / (1 + 1) = 1; 0 / (0 + 1) = 0; -1 / (4 + 1) = -0.2; 3 / (0.25 + 1) = 2.4.
    expected = torch.tensor([1.0, 0.0, -0.2, 2.4])
    torch.testing.assert_close(si_importance(omega, delta, xi=1.0), expected)
    # xi 0.5: 2 / 1.5, 0 / 0.5, -1 / 4.5, 3 / 0.75.
    torch.testing.assert_close(si_importance(omega, delta, xi=0.5), torch.tensor([4 / 3, 0.0, -2 / 9, 4.0]))


def test_si_penalty_and_path_contribution_by_hand() -> None:
    params = torch.tensor([1.0, -1.0, 0.5], requires_grad=True)
    anchors = torch.tensor([0.0, 1.0, 0.5])
    importance = torch.tensor([2.0, 0.25, 7.0])
    # 0.5 * (2 * 1 + 0.25 * 4 + 7 * 0) = 0.5 * 3 = 1.5; gradient 2 c Omega (theta - theta*) = (2, -0.5, 0).
    penalty = si_penalty(params, anchors, importance, c=0.5)
    assert penalty.item() == pytest.approx(1.5)
    penalty.backward()
    torch.testing.assert_close(params.grad, torch.tensor([2.0, -0.5, 0.0]))
    # -g * (after - before): -(1 * -0.1), -(-2 * 0.3), -(0.5 * 0) = (0.1, 0.6, 0).
    gradient = torch.tensor([1.0, -2.0, 0.5])
    before, after = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([-0.1, 0.3, 1.0])
    torch.testing.assert_close(path_contribution(gradient, before, after), torch.tensor([0.1, 0.6, 0.0]))


def test_config_rejects_out_of_range_settings() -> None:
    with pytest.raises(MethodConfigError, match="xi"):
        SIConfig(xi=0.0)
    with pytest.raises(MethodConfigError, match="path_gradient"):
        SIConfig(path_gradient="both")  # type: ignore[arg-type]
    with pytest.raises(MethodConfigError, match="grad_clip"):
        SIConfig(grad_clip=0.0)


# --------------------------------------------------------------- the path integral, independently


@pytest.mark.parametrize("grad_clip", [float("inf"), 0.05])
def test_task_0_path_integral_matches_a_float64_sgd_loop(
    grad_clip, stream, transforms, tiny_net, setting_of
) -> None:
    """Plain SGD (the DER paper's protocol), default ``total`` form: omega is mammoth's
    ``sum_t lr * clip(g_t) ** 2``, computed here in float64 from the reference's own steps."""
    lr, xi = 0.2, 0.7
    method = build(stream, transforms, tiny_net, setting_of, xi=xi, grad_clip=grad_clip)
    reference = copy.deepcopy(method.net).double()
    params = list(reference.parameters())
    start = flat(params).detach().clone()
    omega = torch.zeros_like(start)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=lr)
    method.begin_task(0)
    for batch in batches(stream, transforms, 0):
        apply_step(method, method.observe(batch).loss, optimizer)
        loss = F.cross_entropy(reference(batch.x.double())[:, :2], batch.y)
        grads = [g.clamp(-grad_clip, grad_clip) for g in torch.autograd.grad(loss, params)]
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p -= lr * g
        omega += lr * flat(grads) ** 2
    torch.testing.assert_close(method.omega.double(), omega, rtol=1e-4, atol=1e-8)
    assert omega.abs().sum() > 0
    method.end_task(0, TaskData(stream.train_x[:0], stream.train_y[:0], 0))
    end = flat(params).detach()
    expected = omega / ((end - start) ** 2 + xi)
    torch.testing.assert_close(method.importance.double(), expected, rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(method.anchors.double(), end, rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(method.omega) == 0


def test_task_1_paper_form_with_momentum_matches_a_float64_loop(
    stream, transforms, tiny_net, setting_of
) -> None:
    """``task`` form (the paper's) under SGD with momentum 0.9 and a non-zero surrogate: omega sums
    ``-g_task * (theta_after - theta_before)``, g_task the cross-entropy's gradient alone and the
    step the reference's own momentum update of the total loss's gradient."""
    lr, momentum, c = 0.1, 0.9, 2.0
    method = build(
        stream, transforms, tiny_net, setting_of, c=c, path_gradient="task", grad_clip=float("inf")
    )
    method.begin_task(0)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.3)
    for batch in batches(stream, transforms, 0):
        apply_step(method, method.observe(batch).loss, optimizer)
    method.end_task(0, TaskData(stream.train_x[:0], stream.train_y[:0], 0))
    assert method.importance.abs().sum() > 0
    anchors, importance = method.anchors.double(), method.importance.double()

    method.begin_task(1)
    reference = copy.deepcopy(method.net).double()
    params = list(reference.parameters())
    velocity = [torch.zeros_like(p) for p in params]
    omega = torch.zeros_like(anchors)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=lr, momentum=momentum)
    for batch in batches(stream, transforms, 1):
        apply_step(method, method.observe(batch).loss, optimizer)
        ce = F.cross_entropy(reference(batch.x.double())[:, :4], batch.y)
        task_grads = torch.autograd.grad(ce, params, retain_graph=True)
        total = ce + c * (importance * (flat(params) - anchors) ** 2).sum()
        total_grads = torch.autograd.grad(total, params)
        before = flat(params).detach().clone()
        with torch.no_grad():
            for p, v, g in zip(params, velocity, total_grads, strict=True):
                v.mul_(momentum).add_(g)
                p -= lr * v
        omega += -flat(task_grads) * (flat(params).detach() - before)
    torch.testing.assert_close(method.omega.double(), omega, rtol=1e-3, atol=1e-7)


def test_parameters_that_never_move_get_zero_importance(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    method.net.body[1].bias.requires_grad_(False)  # frozen: no gradient, never stepped
    fit(
        method, stream, TrainingSchedule(epochs=2, batch_size=8, lr=0.1, tasks=1), generator=torch.Generator()
    )
    names = [name for name, _ in method.net.named_parameters()]
    sizes = [p.numel() for p in method.net.parameters()]
    importance = dict(zip(names, method.importance.split(sizes), strict=True))
    assert torch.count_nonzero(importance["body.1.bias"]) == 0
    # Task 0's softmax spans classes 0 and 1: the rows of classes 2-5 get no gradient.
    weight = importance["classifier.weight"].reshape(6, 16)
    assert torch.count_nonzero(weight[2:]) == 0
    assert torch.count_nonzero(importance["classifier.bias"][2:]) == 0
    assert (weight[:2] > 0).any()
    assert (importance["body.1.weight"] > 0).any()


# ------------------------------------------------------------------------------------ behaviour


def test_the_path_integral_adds_up_to_the_loss_decrease(stream, transforms, tiny_net, setting_of) -> None:
    """What SI is (paper Eq. 2-3): along a training path, sum_k omega_k is the decrease of the
    task's loss, each parameter credited with its share (to first order in the step size)."""
    method = build(stream, transforms, tiny_net, setting_of, path_gradient="task", grad_clip=float("inf"))
    batch = batches(stream, transforms, 0, size=24, count=1)[0]  # the whole task: gradient descent
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.05)
    method.begin_task(0)
    start = method.observe(batch).loss.item()
    for _ in range(100):
        apply_step(method, method.observe(batch).loss, optimizer)
    end = method.observe(batch).loss.item()
    assert start - end > 0.3  # measured: 0.4167, and sum omega 0.4169
    assert method.omega.sum().item() == pytest.approx(start - end, rel=0.01)


@pytest.mark.parametrize("path_gradient", ["total", "task"])
def test_a_task_1_step_has_no_host_sync(path_gradient, stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True, path_gradient=path_gradient)
    method.begin_task(0)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1, momentum=0.9)
    apply_step(method, method.observe(batches(stream, transforms, 0)[0]).loss, optimizer)
    method.end_task(0, TaskData(stream.train_x[:0], stream.train_y[:0], 0))
    method.begin_task(1)
    batch = batches(stream, transforms, 1)[0]
    with OpCounter() as counter:  # observe, backward, clipping, the step and the path integral
        apply_step(method, method.observe(batch).loss, optimizer)
    assert counter.host_syncs == 0, counter.syncs


def test_importance_accumulates_over_tasks(stream, transforms, tiny_net, setting_of) -> None:
    """Guards ``Omega += omega / (delta ** 2 + xi)`` at each task's end (paper Eq. 5, summed over
    tasks, as the authors' code does): after task 1, the importance is the sum of task 0's and
    task 1's contributions, each computed here from the path integral and the parameters captured
    around the task, not task 1's alone."""
    xi = 0.7
    method = build(stream, transforms, tiny_net, setting_of, xi=xi, grad_clip=float("inf"))
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.2)
    start = flat(method.net.parameters()).detach().clone()
    expected = torch.zeros_like(start, dtype=torch.float64)
    contributions = []
    for task in (0, 1):
        method.begin_task(task)
        for batch in batches(stream, transforms, task):
            apply_step(method, method.observe(batch).loss, optimizer)
        end = flat(method.net.parameters()).detach().clone()
        omega = method.omega.double().clone()
        contributions.append(omega / ((end.double() - start.double()) ** 2 + xi))
        expected += contributions[-1]
        method.end_task(task, TaskData(stream.train_x[:0], stream.train_y[:0], task))
        start = end
    assert all(float(c.abs().sum()) > 1e-3 for c in contributions)
    torch.testing.assert_close(method.importance.double(), expected, rtol=1e-5, atol=1e-8)
    # Task 0's share is not negligible: the sum differs from task 1's contribution alone.
    assert not torch.allclose(method.importance.double(), contributions[1], rtol=1e-3, atol=1e-6)
