"""oEWC: the Fisher against a float64 per-item loop, the penalty by hand, the online accumulation,
what the penalty does, training, resume and the step's host synchronisations."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from xder_methods import (
    Batch,
    Callback,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
    Transforms,
    apply_step,
    create_method,
    fit,
)
from xder_methods.methods.ewc_on import OnlineEWCConfig, ewc_penalty, fisher_diagonal
from xder_methods.parts.gradients import flat_parameters


def build(stream, transforms, tiny_net, setting_of, seed=0, batchnorm=False, **config):
    torch.manual_seed(seed)
    return create_method(
        "ewc_on",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=OnlineEWCConfig(**config),
        generator=torch.Generator().manual_seed(seed),
    )


def task_data(stream, task) -> TaskData:
    rows = stream.task(task).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], task)


@pytest.fixture
def plain(transforms) -> Transforms:
    """No augmentation: the Fisher's inputs are known to the reference loop."""
    return Transforms(train=transforms.test, test=transforms.test)


# ------------------------------------------------------------------------------- pure functions


def test_fisher_diagonal_by_hand() -> None:
    grads = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    log_likelihoods = torch.log(torch.tensor([0.5, 0.25]))
    # Item 0: 0.5 * (1, 4) = (0.5, 2); item 1: 0.25 * (9, 0.25) = (2.25, 0.0625).
    expected = torch.tensor([(0.5 + 2.25) / 2, (2.0 + 0.0625) / 2])
    torch.testing.assert_close(fisher_diagonal(grads, log_likelihoods), expected)
    # A chunk of a task of 10 items: the same sum over 10.
    torch.testing.assert_close(fisher_diagonal(grads, log_likelihoods, count=10), expected * 2 / 10)
    # Per-parameter shapes: (B, 2, 1) gradients give a (2, 1) diagonal.
    torch.testing.assert_close(fisher_diagonal(grads[:, :, None], log_likelihoods), expected[:, None])


def test_ewc_penalty_by_hand() -> None:
    params = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    anchors = torch.tensor([0.0, 2.0, 5.0])
    fisher = torch.tensor([0.5, 3.0, 0.25])
    # 2 * (0.5 * 1 ** 2 + 3 * 0 ** 2 + 0.25 * (-2) ** 2) = 2 * 1.5 = 3; no factor 1/2.
    penalty = ewc_penalty(params, anchors, fisher, 2.0)
    assert penalty.item() == pytest.approx(3.0)
    penalty.backward()
    # d/dtheta = 2 * lambda * F * (theta - theta*) = (2, 0, -2).
    torch.testing.assert_close(params.grad, torch.tensor([2.0, 0.0, -2.0]))


def fisher_reference(net, x, y, num_seen) -> torch.Tensor:
    """Float64, one item at a time with torch.autograd.grad, in eval mode (running statistics)."""
    net = copy.deepcopy(net).double().eval()
    params = list(net.parameters())
    total = [torch.zeros_like(p) for p in params]
    for i in range(x.shape[0]):
        logits = net(x[i : i + 1].double())
        log_p = torch.log_softmax(logits[0, :num_seen], dim=0)[y[i]]
        grads = torch.autograd.grad(log_p, params)
        for t, g in zip(total, grads, strict=True):
            t += math.exp(log_p.item()) * g**2
    return torch.cat([t.reshape(-1) for t in total]) / x.shape[0]


def test_fisher_matches_a_float64_per_item_loop(stream, plain, tiny_net, setting_of) -> None:
    method = build(stream, plain, tiny_net, setting_of, batchnorm=True, fisher_chunk_size=5)
    bn = method.net.body[2]
    with torch.no_grad():  # running statistics far from a batch's: eval mode must be what is used
        bn.running_mean.copy_(torch.linspace(-1, 1, 16))
        bn.running_var.copy_(torch.linspace(0.5, 2, 16))
    method.train(True)
    state = {k: v.clone() for k, v in method.net.state_dict().items()}
    data = task_data(stream, 1)  # 24 items: chunks of 5, the last of 4
    fisher = method.task_fisher(data)
    expected = fisher_reference(method.net, plain.test(data.x_raw), data.y, num_seen=4)
    torch.testing.assert_close(fisher.double(), expected, rtol=1e-4, atol=1e-9)
    assert fisher.abs().sum() > 0
    # Outputs of unseen classes (4, 5) are outside the softmax: their classifier rows get no Fisher.
    classifier_weight = fisher[-(16 * 6 + 6) : -6].reshape(6, 16)
    assert torch.count_nonzero(classifier_weight[4:]) == 0
    assert torch.count_nonzero(classifier_weight[:4]) > 0
    # Nothing of the network changed, and its mode is back.
    assert all(torch.equal(state[k], v) for k, v in method.net.state_dict().items())
    assert method.net.training


def test_end_task_accumulates_the_fisher_online_and_moves_the_anchors(
    stream, plain, tiny_net, setting_of
) -> None:
    method = build(stream, plain, tiny_net, setting_of, gamma=0.5)
    first = method.task_fisher(task_data(stream, 0))
    method.end_task(0, task_data(stream, 0))
    torch.testing.assert_close(method.fisher, first)
    torch.testing.assert_close(method.anchors, flat_parameters(method.net.parameters()).detach())
    with torch.no_grad():
        for p in method.net.parameters():
            p.add_(0.1)
    second = method.task_fisher(task_data(stream, 1))
    method.end_task(1, task_data(stream, 1))
    torch.testing.assert_close(method.fisher, 0.5 * first + second)
    torch.testing.assert_close(method.anchors, flat_parameters(method.net.parameters()).detach())


def test_config_rejects_out_of_range_settings() -> None:
    with pytest.raises(MethodConfigError, match="lambda_"):
        OnlineEWCConfig(lambda_=-1.0)
    with pytest.raises(MethodConfigError, match="fisher_chunk_size"):
        OnlineEWCConfig(fisher_chunk_size=0)


# ------------------------------------------------------------------------------------ behaviour


def test_the_penalty_adds_its_gradient_and_holds_important_weights(
    make_stream, plain, tiny_net, setting_of
) -> None:
    stream = make_stream(classes_per_task=(2, 2))

    def fit_and_drift(lambda_: float) -> float:
        """Fisher-weighted squared distance travelled in task 1 from the end of task 0."""
        method = build(stream, plain, tiny_net, setting_of, lambda_=lambda_)
        seen: dict[str, torch.Tensor] = {}

        class AtTask1(Callback):
            def on_task_start(self, loop) -> None:
                if loop.task == 1:
                    seen["fisher"], seen["anchors"] = method.fisher.clone(), method.anchors.clone()

        schedule = TrainingSchedule(epochs=3, batch_size=8, lr=0.1)
        fit(method, stream, schedule, generator=torch.Generator(), callbacks=[AtTask1()])
        theta = flat_parameters(method.net.parameters()).detach()
        return float((seen["fisher"] * (theta - seen["anchors"]) ** 2).sum())

    # FT (lambda 0) walks away from task 0's solution along its important directions; a large
    # lambda holds it there (measured: 16 times less at 30; 2 lr lambda max F < 2 keeps SGD stable).
    assert fit_and_drift(30.0) < 0.2 * fit_and_drift(0.0)

    # In task 1 the loss is CE + the penalty, whose gradient is 2 lambda F (theta - theta*).
    method = build(stream, plain, tiny_net, setting_of, lambda_=3.0)
    method.end_task(0, task_data(stream, 0))
    with torch.no_grad():
        for p in method.net.parameters():
            p.add_(0.05)
    method.begin_task(1)
    rows = stream.task(1).train[:6]
    x = plain.train(stream.train_x[rows])
    out = method.observe(Batch(x, stream.train_y[rows], stream.train_x[rows], 1))
    assert set(out.terms) == {"ce", "penalty"}
    grads = torch.autograd.grad(out.loss, list(method.net.parameters()))
    ce = F.cross_entropy(method.net(x)[:, :4], stream.train_y[rows])
    ce_grads = torch.autograd.grad(ce, list(method.net.parameters()))
    theta = flat_parameters(method.net.parameters()).detach()
    expected = torch.cat([g.reshape(-1) for g in ce_grads]) + 2 * 3.0 * method.fisher * (
        theta - method.anchors
    )
    torch.testing.assert_close(torch.cat([g.reshape(-1) for g in grads]), expected)


def test_a_task_1_step_has_no_host_sync(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    rows = stream.task(1).train[:6]
    x = stream.train_x[rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, 1)
    with OpCounter() as counter:
        out = method.observe(batch)
        apply_step(method, out.loss, optimizer)
    assert counter.host_syncs == 0, counter.syncs
