"""A method's own training passes (``train_passes``): the loop's step order and the run's step
policy (precision, CUDA-graph marking), with gradients on whatever the caller's mode; the loop
hands each method the run's policy."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import xder_methods.core.passes as passes_module
from xder_methods import StepPolicy, TrainingSchedule, create_method, fit, train_passes


def test_each_step_is_the_loops_order_under_the_policys_precision() -> None:
    """Two steps of plain SGD (lr 0.5) on ``(w * x).sum()``: each loss computed under bf16
    autocast (the policy's), its gradient x zeroed before, not added to the last; before_step
    sees the step's gradient before the step; the batches are read one a step."""
    w = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.5)
    seen: list[tuple[str, object]] = []

    def batches():
        for x in ([1.0, 2.0], [3.0, -1.0]):
            seen.append(("batch", w.detach().tolist()))
            yield torch.tensor(x)

    def loss(x: Tensor) -> Tensor:
        seen.append(("autocast", (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))))
        return (w * x).sum()

    def before_step() -> None:
        assert w.grad is not None
        seen.append(("grad", w.grad.tolist()))

    with torch.no_grad():  # a pass called from a no-grad end_task trains too
        steps = train_passes(
            batches(),
            loss,
            optimizer,
            policy=StepPolicy("bf16"),
            device=torch.device("cpu"),
            before_step=before_step,
        )
    assert steps == 2
    bf16 = ("autocast", (True, torch.bfloat16))
    assert seen == [
        ("batch", [0.0, 0.0]),
        bf16,
        ("grad", [1.0, 2.0]),
        ("batch", [-0.5, -1.0]),  # read after the first step
        bf16,
        ("grad", [3.0, -1.0]),  # zeroed first: not [4, 1]
    ]
    assert w.detach().tolist() == [-2.0, -0.5]


def test_fp32_runs_without_autocast_and_marks_steps_only_for_cuda_graphs(monkeypatch) -> None:
    marks: list[bool] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(True))
    w = torch.zeros(1, requires_grad=True)
    enabled: list[bool] = []

    def loss(_: int) -> Tensor:
        enabled.append(torch.is_autocast_enabled("cpu"))
        return w.sum()

    optimizer = torch.optim.SGD([w], lr=0.1)
    train_passes(range(3), loss, optimizer, policy=StepPolicy(), device=torch.device("cpu"))
    assert (enabled, marks) == ([False] * 3, [])
    train_passes(range(2), loss, optimizer, policy=StepPolicy(cuda_graphs=True), device=torch.device("cpu"))
    assert marks == [True, True]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_loop_hands_the_method_the_runs_policy_for_its_own_passes(
    precision, stream, transforms, tiny_net, setting_of, monkeypatch
) -> None:
    """LwF's warm-up (task 1) trains through train_passes with the policy of the schedule fit
    was given."""
    policies: list[StepPolicy] = []
    original = passes_module.train_passes

    def spy(batches, loss, optimizer, *, policy, device, before_step=None):
        policies.append(policy)
        return original(batches, loss, optimizer, policy=policy, device=device, before_step=before_step)

    monkeypatch.setattr("xder_methods.methods.lwf.train_passes", spy)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    setting = setting_of(stream)
    method = create_method(
        "lwf", net=tiny_net(setting.num_classes), setting=setting, transforms=transforms, generator=generator
    )
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=2, precision=precision)
    fit(method, stream, schedule, generator=generator, threads=1)
    assert policies == [StepPolicy(precision, False)]
    assert method.step_policy == schedule.step_policy
