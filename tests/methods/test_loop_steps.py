"""The loop's pieces one at a time, on a learner written against the protocol alone: a step
(train_step, run_step, apply_step), an epoch (run_epoch), the optimisers, the gradient-norm
probes, the evaluation after a task, the loop's state and snapshot, and fit's thread setting."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

import xder_methods.core.graphs as graphs_module
import xder_methods.core.loop as loop_module
import xder_methods.core.threads as threads_module
from xder_methods import (
    Batch,
    Callback,
    ContinualMethod,
    ContinualSetting,
    CpuShare,
    FitState,
    StepNotReplayable,
    StepOutput,
    StepPolicy,
    TrainingSchedule,
    Transforms,
    apply_step,
    create_method,
    fit,
    run_epoch,
    run_step,
    train_step,
)
from xder_methods.core.loop import _evaluate_all, _group_grad_norms, make_optimizer


def as_float(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    return x.float()


class Linear(nn.Module):
    """A learner written against the protocol alone (no MethodBase; its own network, without
    ``manual_optimization``): logits ``x.flatten(1) @ weight.T``; its loss is the batch mean of the
    logit of the batch's task (its gradient: the batch's mean input, in that row of the weight),
    logged doubled as the term "logit" and given as the one group "stream"; its steps are declared
    replayable (one graph key). It records what each observe and predict saw (in underscored
    lists, which a replayed step may change), and after_step returns ``_after_step``."""

    training_data = "task"
    manual_optimization = False
    step_policy = StepPolicy()
    forgetting_defined = True

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.optimizer: torch.optim.Optimizer | None = None
        self.weight = nn.Parameter(weight.clone())
        self.transforms = Transforms(train=as_float, test=self._test_transform)
        self._observed: list[dict] = []
        self._predicted: list[dict] = []
        self._test_storages: list[int] = []
        self._after_step: dict[str, Tensor] | None = None

    @property
    def device(self) -> torch.device:
        return self.weight.device

    @property
    def net(self) -> nn.Module:
        return self  # its own network

    def graph_key(self):
        return "always the same step"

    def replay_memory(self) -> None:
        return None

    def _test_transform(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._test_storages.append(x.untyped_storage().data_ptr())
        return x.float()

    def begin_task(self, task: int) -> None: ...

    def prepare_task(self, task, data, budget) -> None: ...

    def end_task(self, task, data) -> None: ...

    def prefill(self, task, data) -> None: ...

    def after_backward(self) -> None: ...

    def after_step(self, optimizer):
        return self._after_step

    def optimizer_parameters(self):
        return self.parameters()

    def observe(self, batch: Batch) -> StepOutput:
        self._observed.append(
            {
                "x": batch.x_raw.clone(),
                "y": batch.y.clone(),
                "autocast": torch.is_autocast_enabled("cpu"),
                "dtype": torch.get_autocast_dtype("cpu"),
                "cache": torch.is_autocast_cache_enabled(),
            }
        )
        logit = (batch.x.flatten(1) @ self.weight.T)[:, batch.task].mean()
        return StepOutput(logit, {"logit": 2 * logit.detach()}, {"stream": logit})

    def predict(self, x: Tensor) -> Tensor:
        self._predicted.append({"training": self.training, "autocast": torch.is_autocast_enabled("cpu")})
        return x.flatten(1).float() @ self.weight.T


@dataclass
class Data:
    """A stream given by its tensors; task t owns the classes of ``classes_per_task[t]``."""

    classes_per_task: tuple[int, ...]
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    val_x: Tensor | None = None
    val_y: Tensor | None = None
    scenario: str = "class-il"
    test_task: Tensor | None = None
    val_task: Tensor | None = None
    train_segment: Tensor | None = None

    @property
    def n_tasks(self) -> int:
        return len(self.classes_per_task)


def two_inputs(n: int = 5) -> Data:
    """Rows ``2**i * (3, 4)`` (norm 5 * 2**i: no row's norm is the mean of two others'), one task
    of two classes."""
    train_x = 2.0 ** torch.arange(n)[:, None] * torch.tensor([3.0, 4.0])
    y = torch.zeros(n, dtype=torch.int64)
    return Data((2,), train_x, y, train_x, y)


def loop_of(method, data, schedule: TrainingSchedule) -> FitState:
    """The loop's state at a task's start, with plain SGD at the schedule's lr."""
    loop = FitState(method, data, schedule, torch.Generator().manual_seed(0))
    loop.optimizer = torch.optim.SGD(method.parameters(), lr=schedule.lr)
    return loop


W0 = torch.tensor([[1.0, -2.0], [0.5, 0.25]])
X = torch.tensor([[1.0, 2.0], [3.0, -1.0]])  # batch mean (2, 0.5)
LOGIT0 = ((1.0 * 1 - 2.0 * 2) + (1.0 * 3 - 2.0 * -1)) / 2  # mean of row 0 of the weight . x: 1.0


# ---------------------------------------------------------------------------------------------
# A step.


def test_train_step_steps_a_plugin_without_manual_optimization_and_returns_its_loss_and_terms() -> None:
    """A learner without ``manual_optimization`` is stepped by the loop: SGD (lr 0.5) moves row 0
    of the weight by -lr times the batch's mean input; the step returns observe's loss (the mean
    logit 0, 1.0), its terms and those after_step returns, and no gradient norms unless asked."""
    method = Linear(W0)
    method._after_step = {"extra": torch.tensor(3.0)}
    assert isinstance(method, ContinualMethod)
    loop = loop_of(method, two_inputs(), TrainingSchedule(lr=0.5))
    result = train_step(loop, X, torch.tensor([0, 1]), task=0)
    assert LOGIT0 == 1.0
    assert result.loss is not None
    assert result.loss.item() == pytest.approx(LOGIT0)
    assert not result.loss.requires_grad
    assert {k: v.item() for k, v in result.terms.items()} == pytest.approx(
        {"logit": 2 * LOGIT0, "extra": 3.0}
    )
    assert result.norms == {}
    expected = W0.clone()
    expected[0] -= 0.5 * torch.tensor([2.0, 0.5])
    torch.testing.assert_close(method.weight.detach(), expected)
    assert method.optimizer is None  # handed its optimiser only with manual_optimization


def test_train_step_probes_the_groups_only_when_asked() -> None:
    """With ``probe`` the step's groups' gradient norms come back: |(2, 0.5)| = sqrt(4.25)."""
    method = Linear(W0)
    loop = loop_of(method, two_inputs(), TrainingSchedule(lr=0.5))
    result = train_step(loop, X, torch.tensor([0, 1]), task=0, probe=True)
    assert result.norms["stream"].item() == pytest.approx(math.sqrt(4.25))


def test_run_step_probes_only_when_asked() -> None:
    """run_step as bench calls it (no ``probe``): a plain step, no gradient norms; and the step is
    the loop's (the weight moves as by hand)."""
    method = Linear(W0)
    loop = loop_of(method, two_inputs(), TrainingSchedule(lr=0.5))
    result = run_step(loop, X, torch.tensor([0, 1]), task=0)
    assert result.norms == {}
    assert result.loss is not None
    assert result.loss.item() == pytest.approx(LOGIT0)
    torch.testing.assert_close(method.weight.detach()[0], W0[0] - 0.5 * torch.tensor([2.0, 0.5]))


@pytest.mark.parametrize("step_graph", [False, True])
def test_train_step_observes_under_bf16_autocast_keeping_the_casts_unless_recorded(step_graph) -> None:
    """``precision = "bf16"``: observe runs under bf16 autocast on the generator's device, with the
    weights' casts kept for the step unless the step is recorded (``step_graph``); fp32: none."""
    method = Linear(W0)
    schedule = TrainingSchedule(lr=0.5, precision="bf16", step_graph=step_graph)
    train_step(loop_of(method, two_inputs(), schedule), X, torch.tensor([0, 1]), task=0)
    seen = method._observed[-1]
    assert (seen["autocast"], seen["dtype"], seen["cache"]) == (True, torch.bfloat16, not step_graph)
    train_step(loop_of(method, two_inputs(), TrainingSchedule(lr=0.5)), X, torch.tensor([0, 1]), task=0)
    assert method._observed[-1]["autocast"] is False


def test_run_step_keys_the_recorded_steps_by_the_task() -> None:
    """With ``step_graph`` (on the CPU: every would-be replay checked against the record), four
    steps of task 0 record its step (three warm-up steps first); a step of task 1 on the same
    optimiser is not replayed from task 0's record, although the method's graph key is the same:
    it reads another logit, a different computation. Its own warm-up begins."""
    method = Linear(W0)
    loop = loop_of(method, two_inputs(), TrainingSchedule(lr=0.5, step_graph=True))
    y = torch.tensor([0, 1])
    for _ in range(4):
        run_step(loop, X, y, task=0)
    assert loop.graphs is not None
    assert (loop.graphs.records, loop.graphs.replays) == (1, 0)
    run_step(loop, X, y, task=1)  # a replay of task 0's record would raise StepNotReplayable
    assert (loop.graphs.records, loop.graphs.replays) == (1, 0)
    run_step(loop, X, y, task=0)
    assert (loop.graphs.records, loop.graphs.replays) == (1, 1)
    with pytest.raises(StepNotReplayable):  # what a replay across tasks would be (the check works)
        loop.graphs.step(lambda x, y: train_step(loop, x, y, task=1), X, y, 0)


def test_run_step_records_cuda_steps_with_the_runs_generator(monkeypatch) -> None:
    """On a CUDA device the step graphs' backend is made with the run's generator (registered
    with each capture, so that every replay draws fresh numbers from it); the CUDA backend is
    stood in for here (no GPU), and the method says it is on CUDA."""
    made: list = []

    class FakeCudaGraphs:
        def __init__(self, generator, device) -> None:
            made.append((generator, device))

    monkeypatch.setattr(graphs_module, "CudaGraphs", FakeCudaGraphs)
    monkeypatch.setattr(Linear, "device", property(lambda self: torch.device("cuda", 0)))
    monkeypatch.setattr(Linear, "graph_key", lambda self: None)  # no replay: eager steps
    method = Linear(W0)
    loop = loop_of(method, two_inputs(), TrainingSchedule(lr=0.5, step_graph=True))
    run_step(loop, X, torch.tensor([0, 1]), task=0)
    assert len(made) == 1
    assert made[0][0] is loop.generator
    assert made[0][1] == torch.device("cuda", 0)


class _Hooks:
    def after_backward(self) -> None: ...

    def after_step(self, optimizer):
        return None


def test_apply_step_drops_earlier_gradients() -> None:
    """apply_step zeroes the gradients to None, not to zeros: a parameter its loss does not reach
    keeps no gradient, so SGD's weight decay leaves it alone (a zero gradient would still decay
    it: b - lr * wd * b = 1.9), and an earlier gradient does not add up."""
    net = nn.Linear(1, 1)
    with torch.no_grad():
        net.weight.fill_(1.0)
        net.bias.fill_(2.0)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5, weight_decay=0.1)
    net.weight.grad, net.bias.grad = torch.full((1, 1), 3.0), torch.full((1,), 3.0)  # leftovers
    assert apply_step(_Hooks(), (2 * net.weight).sum(), optimizer) is None
    assert net.bias.grad is None
    assert net.bias.item() == 2.0
    assert net.weight.item() == pytest.approx(1.0 - 0.5 * (2.0 + 0.1 * 1.0))


# ---------------------------------------------------------------------------------------------
# The optimisers and the gradient norms.


def test_sgd_takes_the_schedules_lr_momentum_and_weight_decay() -> None:
    """Two SGD steps on the loss (3, 4) . w from w = (1, -2), by hand: d = g + wd w, the momentum
    buffer b = d, then b = m b + d, w -= lr b (lr 0.1, momentum 0.5, weight decay 0.01)."""
    method = Linear(torch.tensor([[1.0, -2.0]]))
    schedule = TrainingSchedule(lr=0.1, momentum=0.5, weight_decay=0.01)
    optimizer = make_optimizer(method.optimizer_parameters(), schedule)
    assert isinstance(optimizer, torch.optim.SGD)
    g = torch.tensor([3.0, 4.0], dtype=torch.float64)
    w = torch.tensor([1.0, -2.0], dtype=torch.float64)
    buffer = None
    for _ in range(2):
        optimizer.zero_grad()
        (method.weight[0] * g.float()).sum().backward()
        optimizer.step()
        d = g + 0.01 * w
        buffer = d if buffer is None else 0.5 * buffer + d
        w = w - 0.1 * buffer
        torch.testing.assert_close(method.weight.detach()[0].double(), w)


def test_radam_takes_the_schedules_lr_and_weight_decay() -> None:
    """RAdam's first step is plain (its variance is not yet tractable, rho_1 = 1 <= 5): w -= lr
    times the bias-corrected first moment, i.e. the gradient plus wd w (lr 0.1, wd 0.01)."""
    method = Linear(torch.tensor([[1.0, -2.0]]))
    optimizer = make_optimizer(
        method.optimizer_parameters(), TrainingSchedule(lr=0.1, weight_decay=0.01, optimizer="radam")
    )
    assert isinstance(optimizer, torch.optim.RAdam)
    (method.weight[0] * torch.tensor([3.0, 4.0])).sum().backward()
    optimizer.step()
    w = torch.tensor([1.0, -2.0], dtype=torch.float64)
    expected = w - 0.1 * (torch.tensor([3.0, 4.0], dtype=torch.float64) + 0.01 * w)
    torch.testing.assert_close(method.weight.detach()[0].double(), expected)


def test_group_gradient_norms_skip_constant_groups_and_parameters_a_group_does_not_reach() -> None:
    """A group with no graph is skipped (the others still count); a group reaching one of the
    optimised parameters only has the norm of that one's gradient: |(3, 4)| = 5; a group reaching
    both: |(2 w, 2, 2)| = sqrt(4 + 0 + 4 + 4)."""
    a = nn.Parameter(torch.tensor([1.0, 0.0]))
    b = nn.Parameter(torch.tensor([5.0, 6.0]))
    optimizer = torch.optim.SGD([a, b], lr=0.1)
    groups = {
        "constant": torch.tensor(2.0),
        "a only": (a * torch.tensor([3.0, 4.0])).sum(),
        "both": a.pow(2).sum() + 2 * b.sum(),
    }
    norms = _group_grad_norms(groups, optimizer)
    assert set(norms) == {"a only", "both"}
    assert norms["a only"].item() == pytest.approx(5.0)
    assert norms["both"].item() == pytest.approx(math.sqrt(12.0))


# ---------------------------------------------------------------------------------------------
# An epoch.


class StepLrs(Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_step(self, loop) -> None:
        self.lrs += [group["lr"] for group in loop.optimizer.param_groups]


def test_run_epoch_sets_the_epochs_lr_on_the_optimizer() -> None:
    """Cosine with 2 warm-up epochs: epoch 0 runs at lr (epoch + 1) / 2 = 0.05, whatever the
    optimiser was made with (0.1); each step moves row 0 of the weight by -0.05 times its input."""
    method = Linear(W0)
    data = two_inputs(3)
    schedule = TrainingSchedule(epochs=10, lr=0.1, lr_schedule="cosine", warmup_epochs=2, batch_size=1)
    loop = loop_of(method, data, schedule)
    steps = StepLrs()
    record = run_epoch(loop, 0, 0, torch.arange(3), [(0, 1), (1, 2), (2, 3)], [steps])
    assert steps.lrs == pytest.approx([0.05] * 3)
    assert (record.lr, record.last_lr) == pytest.approx((0.05, 0.05))
    moved = W0[0] - 0.05 * data.train_x.sum(0)
    torch.testing.assert_close(method.weight.detach()[0], moved)


def test_run_epoch_probes_every_record_every_steps_of_the_task_and_averages_the_norms() -> None:
    """Epoch 1 of a task of 5 steps an epoch (batches of one row), ``record_every = 3``: the task's
    steps 5..9 are probed where 3 divides them, steps 6 and 9, i.e. steps 1 and 4 of the epoch.
    A step's norm is that of its row (the gradient of the logit is the input); the record holds
    the mean of the two probed ones, and the epoch's mean loss (logit) and term (twice it)."""
    method = Linear(torch.zeros(2, 2))
    data = two_inputs(5)
    loop = loop_of(method, data, TrainingSchedule(lr=1e-3, batch_size=1, record_every=3, epochs=2))
    bounds = [(i, i + 1) for i in range(5)]
    record = run_epoch(loop, 0, 1, torch.arange(5), bounds)
    rows = [seen["x"][0] for seen in method._observed]
    assert sorted(float(r.norm()) for r in rows) == pytest.approx([5.0, 10.0, 20.0, 40.0, 80.0])
    expected = (float(rows[1].norm()) + float(rows[4].norm())) / 2
    assert record.grad_norms == pytest.approx({"stream": expected})
    # The logit (row 0 of the weight, zero at first, . x) by hand, the weight moving by -lr x.
    w, logits = torch.zeros(2, dtype=torch.float64), []
    for r in rows:
        logits.append(float(w @ r.double()))
        w -= 1e-3 * r.double()
    assert record.losses == pytest.approx({"loss": sum(logits) / 5, "logit": 2 * sum(logits) / 5})


class Clock(Callback):
    """A fake ``time.perf_counter`` that each step moves on by 2.5 s."""

    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now

    def on_step(self, loop) -> None:
        self.now += 2.5


def test_an_epoch_of_one_step_records_that_steps_loss_and_the_seconds_it_took(monkeypatch) -> None:
    """One batch of all five rows: the epoch's loss is that step's (the mean over one step), its
    term twice it, and its seconds the clock's advance over the epoch (one step: 2.5 s)."""
    method = Linear(W0)
    data = two_inputs(5)
    loop = loop_of(method, data, TrainingSchedule(lr=1e-3, batch_size=5, epochs=1))
    clock = Clock()
    monkeypatch.setattr(loop_module.time, "perf_counter", clock)
    record = run_epoch(loop, 0, 0, torch.arange(5), [(0, 5)], [clock])
    logit = float((data.train_x.double() @ W0[0].double()).mean())  # row 0: the task's logit
    assert record.steps == 1
    assert record.losses == pytest.approx({"loss": logit, "logit": 2 * logit})
    assert record.seconds == 2.5


def test_run_epoch_draws_its_permutation_on_the_generators_device_whatever_torchs_default() -> None:
    """The permutation is drawn on the generator's device (the CPU), not torch's default device
    (set here to meta, which has no data: a permutation drawn there could not be read). The
    epoch sees every row once."""
    method = Linear(torch.zeros(2, 2))
    data = two_inputs(4)
    loop = loop_of(method, data, TrainingSchedule(lr=1e-3, batch_size=2))
    rows = torch.arange(4)
    with torch.device("meta"):
        record = run_epoch(loop, 0, 0, rows, [(0, 2), (2, 4)])
    assert record.steps == 2
    seen = torch.cat([s["x"] for s in method._observed])
    assert sorted(seen[:, 0].tolist()) == [3.0, 6.0, 12.0, 24.0]
    assert all(s["x"].device.type == "cpu" for s in method._observed)


def test_run_epoch_copies_each_batch_to_the_generators_device(second_device) -> None:
    """Data kept off the training device (the generator's, the CPU here): the rows are indexed
    where the data are, and each batch, inputs and labels, is copied to the generator's device
    before its step; every row comes once, with its own label."""
    method = Linear(torch.zeros(2, 2))
    data = two_inputs(4)
    labels = torch.tensor([0, 1, 0, 1])
    elsewhere = second_device.Elsewhere
    away = Data((2,), elsewhere(data.train_x), elsewhere(labels), data.test_x, data.test_y)
    loop = loop_of(method, away, TrainingSchedule(lr=1e-3, batch_size=2))
    run_epoch(loop, 0, 0, torch.arange(4), [(0, 2), (2, 4)])
    for seen in method._observed:
        assert (type(seen["x"]), type(seen["y"])) == (Tensor, Tensor)
        assert seen["x"].device == seen["y"].device == torch.device("cpu")
    x = torch.cat([s["x"] for s in method._observed])
    y = torch.cat([s["y"] for s in method._observed])
    pairs = sorted(zip(x[:, 0].tolist(), y.tolist(), strict=True))
    assert pairs == [(3.0, 0), (6.0, 1), (12.0, 0), (24.0, 1)]


def test_run_epoch_indexes_data_held_in_host_memory_and_hands_the_step_batches_on_the_device(
    monkeypatch, second_device
) -> None:
    """Data held in host memory, the generator (and training) on a device (an emulated one, see
    :class:`OnTheDevice` in conftest.py): the permutation is drawn on the device, brought back to
    index the data where they are, and each batch is copied to the device for its step; every row
    comes once, with its own label."""
    steps: list[tuple[Tensor, Tensor]] = []

    def step(loop, x_raw, y, *, task, probe=False):
        steps.append((x_raw, y))
        return graphs_module.StepResult(None, {}, {})

    monkeypatch.setattr(loop_module, "run_step", step)
    data = two_inputs(4)
    data.train_y = torch.tensor([0, 1, 0, 1])
    generator = second_device.GeneratorThere().manual_seed(0)
    loop = FitState(Linear(W0), data, TrainingSchedule(batch_size=2), generator)
    loop.optimizer = torch.optim.SGD(loop.method.parameters(), lr=0.1)
    with second_device.OnTheDevice():
        record = run_epoch(loop, 0, 0, torch.arange(4), [(0, 2), (2, 4)])
    assert record.steps == 2
    elsewhere = second_device.Elsewhere
    assert all(isinstance(x, elsewhere) and isinstance(y, elsewhere) for x, y in steps)
    pairs = sorted((float(x.inner[i, 0]), int(y.inner[i])) for x, y in steps for i in range(2))
    assert pairs == [(3.0, 0), (6.0, 1), (12.0, 0), (24.0, 1)]


def test_evaluate_all_cuts_inputs_held_in_host_memory_by_labels_on_the_device(
    monkeypatch, second_device
) -> None:
    """A fit of the first of two tasks, the test inputs in host memory and their labels on the
    device (emulated, see :class:`OnTheDevice` in conftest.py): the rows of classes 0 and 1 are
    picked where each tensor is (the labels' mask brought to the inputs) before they are
    evaluated."""
    given: list[tuple[Tensor, Tensor]] = []

    def evaluate(method, x, y, setting, **kwargs):
        given.append((x, y))
        return loop_module.Evaluation([50.0], [50.0, 0.0], [[1, 0]])

    monkeypatch.setattr(loop_module, "evaluate", evaluate)
    x = torch.tensor([[10], [11], [12], [13], [14]], dtype=torch.uint8)
    labels = torch.tensor([0, 2, 1, 3, 1])
    data = Data((2, 2), x, labels, x, second_device.Elsewhere(labels))
    loop = FitState(Linear(TABLE.T), data, TrainingSchedule(tasks=1), torch.Generator())
    with second_device.OnTheDevice():
        test, val = _evaluate_all(loop, 1)
    (x_given, y_given) = given[0]
    assert x_given.tolist() == [[10], [12], [14]]
    assert isinstance(y_given, second_device.Elsewhere)
    assert y_given.inner.tolist() == [0, 1, 1]
    assert (test.class_il, test.task_il, test.head_counts, val) == ([50.0], [50.0], [[1]], None)


# ---------------------------------------------------------------------------------------------
# The evaluation after a task.

# Logits by input row: the method's weight is their transpose, each input a one-hot row.
TABLE = torch.tensor(
    [
        [5.0, 1.0, 9.0, 0.0],
        [0.0, 1.0, 0.0, 3.0],
        [0.0, 8.0, 1.0, 2.0],
        [0.0, 0.0, 1.0, 2.0],
    ]
)


def one_hot(kinds: list[int]) -> Tensor:
    return torch.eye(4, dtype=torch.uint8)[kinds]


def table_data(val: bool | str = True) -> Data:
    test_x, test_y = one_hot([0, 1, 2, 3]), torch.tensor([0, 1, 2, 3])
    val_x, val_y = one_hot([3, 2, 0]), torch.tensor([3, 3, 1])
    data = Data((2, 2), test_x, test_y, test_x, test_y)
    if val is True:
        data.val_x, data.val_y = val_x, val_y
    elif val == "x only":
        data.val_x = val_x
    return data


def test_evaluate_all_on_test_and_validation_by_hand() -> None:
    """Both tasks seen. Test rows: label 0 -> class 2 (task 0's mistake to task 1's head; Task-IL
    0, right), label 1 -> 3 (Task-IL 1, right), label 2 -> 1 (Task-IL 3, wrong), label 3 -> 3
    (right). Validation rows: (kind 3, label 3) right, (kind 2, label 3) -> 1 (Task-IL 3, right),
    (kind 0, label 1) -> 2 (Task-IL 0, wrong). The method predicts in eval mode under the
    schedule's bf16 autocast and is back in training mode after; every test batch is a view of
    the stream's own tensors (all tasks trained: none filtered, so none copied)."""
    method = Linear(TABLE.T)
    data = table_data()
    loop = FitState(method, data, TrainingSchedule(precision="bf16"), torch.Generator())
    test, val = _evaluate_all(loop, 2)
    assert (test.class_il, test.task_il, test.head_counts) == ([0.0, 50.0], [100.0, 50.0], [[0, 2], [1, 0]])
    assert val is not None
    assert (val.class_il, val.task_il, val.head_counts) == ([0.0, 50.0], [0.0, 100.0], [[0, 1], [1, 0]])
    assert method._predicted == [{"training": False, "autocast": True}] * 2
    assert method.training
    storages = {data.test_x.untyped_storage().data_ptr(), data.val_x.untyped_storage().data_ptr()}
    assert set(method._test_storages) == storages


def test_evaluate_all_without_validation_labels_has_no_validation() -> None:
    """Validation inputs without labels: no validation evaluation; the test one is as before."""
    method = Linear(TABLE.T)
    loop = FitState(method, table_data("x only"), TrainingSchedule(), torch.Generator())
    test, val = _evaluate_all(loop, 2)
    assert val is None
    assert test.class_il == [0.0, 50.0]
    assert method._predicted == [{"training": False, "autocast": False}]


# ---------------------------------------------------------------------------------------------
# The loop's state.


def test_fit_state_starts_at_the_first_epoch_of_the_first_task() -> None:
    """A new state: the setting of the stream (its tasks' classes, one row's shape), position task
    0 epoch 0 with no step counted, no optimiser and no recorded steps; its snapshot says so."""
    data = Data((2, 3), torch.zeros(6, 1, 2, 5), torch.zeros(6), torch.zeros(2, 1, 2, 5), torch.zeros(2))
    loop = FitState(Linear(W0), data, TrainingSchedule(), torch.Generator())
    assert loop.setting == ContinualSetting((2, 3), (1, 2, 5))
    assert (loop.task, loop.epoch, loop.steps_per_epoch) == (0, 0, 0)
    assert loop.optimizer is None
    assert loop.graphs is None
    snapshot = loop.snapshot()
    assert snapshot["position"] == {"task": 0, "epoch": 0}
    assert snapshot["optimizer"] is None


class Positions(Callback):
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_fit_start(self, loop) -> None:
        self.seen.append(("fit", loop.task, loop.epoch, loop.steps_per_epoch, loop.optimizer))

    def on_task_start(self, loop) -> None:
        self.seen.append(("task", loop.task, loop.epoch))


def _sgd(stream, tiny_net, setting_of, transforms, seed=0):
    torch.manual_seed(seed)
    method = create_method(
        "sgd",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        generator=torch.Generator().manual_seed(seed),
    )
    return method, torch.Generator().manual_seed(seed)


def test_a_snapshot_holds_the_cuda_generators_once_cuda_is_in_use(monkeypatch) -> None:
    """The CUDA generators' states are saved when CUDA is initialised; before, they are not read
    (reading them would initialise CUDA in a CPU run). torch.cuda is stood in for (no GPU)."""
    loop = FitState(Linear(W0), two_inputs(), TrainingSchedule(), torch.Generator())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [torch.tensor([5, 6], dtype=torch.uint8)])
    assert [s.tolist() for s in loop.snapshot()["cuda_rng"]] == [[5, 6]]

    def initialise():
        raise AssertionError("read the CUDA generators before CUDA was in use")

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", initialise)
    assert loop.snapshot()["cuda_rng"] == []


def test_restore_rng_sets_every_generator_from_cpu_copies(monkeypatch) -> None:
    """The run's generator continues as the saved one; the CUDA generators' states are set from
    CPU tensors (torch.cuda stood in for), and not at all where none were saved."""
    set_all: list = []
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_all.append)
    generator = torch.Generator().manual_seed(1)
    loop = FitState(Linear(W0), two_inputs(), TrainingSchedule(), generator)
    cuda = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    saved = torch.Generator().manual_seed(7)
    state = {"generator": saved.get_state(), "torch_rng": torch.get_rng_state(), "cuda_rng": cuda}
    loop.restore_rng(state)
    torch.testing.assert_close(torch.rand(3, generator=generator), torch.rand(3, generator=saved))
    assert len(set_all) == 1
    assert [(s.device.type, s.tolist()) for s in set_all[0]] == [("cpu", [1, 2]), ("cpu", [3])]
    loop.restore_rng({**state, "cuda_rng": []})
    assert len(set_all) == 1


# ---------------------------------------------------------------------------------------------
# fit.


def test_fit_callbacks_see_the_start_position(stream, tiny_net, setting_of, transforms) -> None:
    """on_fit_start sees task 0 epoch 0, no step counted and no optimiser yet; each task starts
    at its epoch 0."""
    method, g = _sgd(stream, tiny_net, setting_of, transforms)
    positions = Positions()
    fit(
        method,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=2),
        generator=g,
        callbacks=[positions],
    )
    assert positions.seen == [("fit", 0, 0, 0, None), ("task", 0, 0), ("task", 1, 0)]


def test_fit_resumes_with_the_threads_left_alone(
    stream, tiny_net, setting_of, transforms, snapshot_after
) -> None:
    """``threads=None`` (torch's count left to the caller) still resumes: from a snapshot after the
    first of task 0's two epochs, the run starts at task 0 epoch 1."""
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1)
    method, g = _sgd(stream, tiny_net, setting_of, transforms)
    snapshot = snapshot_after(method, stream, schedule, g, 1)
    method, g = _sgd(stream, tiny_net, setting_of, transforms, seed=99)
    positions = Positions()
    fit(method, stream, schedule, generator=g, callbacks=[positions], resume=snapshot, threads=None)
    assert [p for p in positions.seen if p[0] == "task"] == [("task", 0, 1), ("task", 1, 0), ("task", 2, 0)]


class Threads(Callback):
    def __init__(self) -> None:
        self.counts: set[int] = set()

    def on_step(self, loop) -> None:
        self.counts.add(torch.get_num_threads())


def test_fit_by_default_takes_the_fair_share_and_says_so(
    stream, tiny_net, setting_of, transforms, monkeypatch, tmp_path
) -> None:
    """By default (no count asked for, none in OMP_NUM_THREADS) a CPU fit takes the fair share:
    on 4 cores beside one other training run, 4 // 2 = 2 threads, and it warns, from fit's
    caller's line, with the numbers: 0 cores kept busy (the load left out), 1 other run."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("XDER_CPU_LOAD", "ignore")
    monkeypatch.setenv("XDER_CPU_SHARE_DIR", str(tmp_path))
    monkeypatch.setattr(threads_module, "machine_cores", lambda: 4)
    before = torch.get_num_threads()
    method, g = _sgd(stream, tiny_net, setting_of, transforms)
    threads = Threads()
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1)
    with CpuShare(tmp_path), pytest.warns(UserWarning, match="fit trains on") as caught:
        fit(method, stream, schedule, generator=g, callbacks=[threads])
    assert threads.counts == {2}
    assert torch.get_num_threads() == before
    (warning,) = [w for w in caught if "fit trains on" in str(w.message)]
    expected = (
        "fit trains on 2 CPU threads of 4 cores (0 kept busy by other programs, 1 other training "
        "runs here) and follows the share as they come and go; the numbers depend on the count: "
        "pass threads=2 to fix it"
    )
    assert str(warning.message) == expected
    assert warning.filename != loop_module.__file__  # attributed to fit's caller (stacklevel)
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut puts a frame of its own between the two
        assert warning.filename == __file__
