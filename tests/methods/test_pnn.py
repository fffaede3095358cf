"""PNN: a column per task fed by the earlier ones through lateral adapters (values worked by hand),
the earlier columns frozen, each class scored by its own task's column, Task-IL only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods import (
    PNN,
    Callback,
    ContinualSetting,
    MethodConfigError,
    PNNConfig,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
)


class ScalarMLP(nn.Module):
    """x (B, 1) -> fc1 -> ReLU -> fc2 -> ReLU -> classifier (4 classes): PNN's stages are
    ``(fc1 + ReLU, fc2, classifier)``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1, 1)
        self.fc2 = nn.Linear(1, 1)
        self.classifier = nn.Linear(1, 4)
        self.num_features = 1

    def pnn_stages(self) -> tuple[nn.Module, ...]:
        return nn.Sequential(self.fc1, nn.ReLU()), self.fc2, self.classifier

    def forward_features(self, x: Tensor) -> Tensor:
        return F.relu(self.fc2(F.relu(self.fc1(x))))

    def forward_head(self, features: Tensor) -> Tensor:
        return self.classifier(features)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


def identity(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    return x


IDENTITY = Transforms(train=identity, test=identity)


@pytest.fixture
def float64() -> Iterator[None]:
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)


def set_linear(layer: nn.Linear, weight: list[list[float]], bias: list[float]) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))


def set_adapter(adapter: nn.Module, alpha: float, weight: float, bias: float) -> None:
    with torch.no_grad():
        adapter.alpha.fill_(alpha)
        adapter.weight.fill_(weight)
        adapter.bias.fill_(bias)


def hand_set_pnn() -> PNN:
    """Two tasks of two classes; every weight set by hand (see the test)."""
    setting = ContinualSetting((2, 2), (1,), torch.float64, scenario="task-il")
    method = PNN(ScalarMLP(), setting, IDENTITY, PNNConfig(), torch.Generator().manual_seed(0))
    column0, column1 = method.column(0), method.column(1)
    set_linear(column0.fc1, [[1.5]], [0.0])
    set_linear(column0.fc2, [[-0.5]], [2.0])
    set_linear(column0.classifier, [[1.0], [2.0], [3.0], [4.0]], [0.0, 0.0, 0.0, 1.0])
    set_linear(column1.fc1, [[1.0]], [-1.0])
    set_linear(column1.fc2, [[0.5]], [0.0])
    set_linear(column1.classifier, [[1.0], [1.0], [1.0], [1.0]], [0.0, 0.0, 0.5, 0.0])
    into_fc2, into_logits = method.laterals[0]
    set_adapter(into_fc2, alpha=0.1, weight=2.0, bias=-0.2)
    set_linear(into_fc2.upper, [[3.0]], [-1.0])
    set_adapter(into_logits, alpha=0.2, weight=4.0, bias=-1.0)
    set_linear(into_logits.upper, [[1.0], [0.0], [-1.0], [2.0]], [0.0, 0.0, 0.0, 0.0])
    return method.eval()


def test_the_second_column_reads_the_first_through_its_laterals_worked_by_hand(float64) -> None:
    """x = 2 and x = -2.

    Column 0: h1 = relu(1.5 x) = 3 | 0; h2 = relu(-0.5 h1 + 2) = 0.5 | 2;
    logits0 = [1, 2, 3, 4] h2 + [0, 0, 0, 1] = [0.5, 1, 1.5, 3] | [2, 4, 6, 9].

    Column 1: g1 = relu(x - 1) = 1 | 0. Lateral into fc2: 3 relu(2 (0.1 h1) - 0.2) - 1
    = 3 relu(0.4) - 1 = 0.2 | 3 relu(-0.2) - 1 = -1; g2 = relu(0.5 g1 + 0 + lateral)
    = relu(0.7) = 0.7 | relu(-1) = 0. Lateral into the logits: [1, 0, -1, 2] relu(4 (0.2 h2) - 1)
    = [1, 0, -1, 2] relu(-0.6) = 0 | [1, 0, -1, 2] relu(0.6) = [0.6, 0, -0.6, 1.2];
    logits1 = [1, 1, 1, 1] g2 + [0, 0, 0.5, 0] + lateral = [0.7, 0.7, 1.2, 0.7] | [0.6, 0, -0.1, 1.2].

    predict: classes 0-1 (task 0) from column 0, 2-3 (task 1) from column 1.
    """
    method = hand_set_pnn()
    x = torch.tensor([[2.0], [-2.0]])
    logits0, logits1 = method.forward_columns(x, 1)
    torch.testing.assert_close(logits0, torch.tensor([[0.5, 1.0, 1.5, 3.0], [2.0, 4.0, 6.0, 9.0]]))
    torch.testing.assert_close(logits1, torch.tensor([[0.7, 0.7, 1.2, 0.7], [0.6, 0.0, -0.1, 1.2]]))
    torch.testing.assert_close(method.predict(x), torch.tensor([[0.5, 1.0, 1.2, 0.7], [2.0, 4.0, -0.1, 1.2]]))


def test_the_first_column_is_the_backbone_itself(float64) -> None:
    method = hand_set_pnn()
    x = torch.linspace(-3, 3, 7)[:, None]
    torch.testing.assert_close(method.forward_columns(x, 0)[0], method.net(x))


def test_each_class_takes_its_own_tasks_column(tiny_net) -> None:
    """Three tasks, untrained columns (each column and adapter drawn differently): predict's
    classes of task t are column t's logits of those classes."""
    setting = ContinualSetting((2, 2, 2), (1, 2, 2), scenario="task-il")
    transforms = Transforms(train=lambda x, g=None: x.float(), test=lambda x, g=None: x.float())
    method = PNN(tiny_net(6), setting, transforms, PNNConfig(), torch.Generator().manual_seed(0))
    with torch.no_grad():
        for k in range(3):  # columns start from the same weights: give each its own head
            method.column(k).classifier.bias.copy_(torch.arange(6.0) * (k + 1))
    method.eval()
    x = torch.randn(5, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    columns = method.forward_columns(x, 2)
    predicted = method.predict(x)
    for task in range(3):
        own = slice(2 * task, 2 * task + 2)
        torch.testing.assert_close(predicted[:, own], columns[task][:, own])
        for other in set(range(3)) - {task}:
            assert not torch.allclose(predicted[:, own], columns[other][:, own])


def test_the_earlier_columns_stay_frozen_while_the_new_one_trains(make_stream, tiny_net, transforms) -> None:
    """Task 1 changes column 1 and its adapters, and nothing of column 0: its weights and its
    BatchNorm statistics are those it ended task 0 with (momentum SGD, two epochs)."""
    stream = dataclasses.replace(make_stream(classes_per_task=(2, 2)), scenario="task-il")
    setting = ContinualSetting(stream.classes_per_task, (1, 2, 2), scenario="task-il")
    torch.manual_seed(0)
    method = PNN(
        tiny_net(4, batchnorm=True), setting, transforms, PNNConfig(), torch.Generator().manual_seed(0)
    )
    states: dict[int, dict[str, Tensor]] = {}

    class AtTaskEnd(Callback):
        def on_task_end(self, loop, record) -> None:
            states[record.task] = {
                key: value.clone() for key, value in method.state_dict().items() if torch.is_tensor(value)
            }

    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    fit(method, stream, schedule, generator=torch.Generator().manual_seed(0), callbacks=[AtTaskEnd()])
    after0, after1 = states[0], states[1]
    column0 = [key for key in after0 if key.startswith("net.")]
    trained1 = [
        key for key in after0 if key.startswith(("columns.0.", "laterals.0.")) and "num_batches" not in key
    ]
    assert any("running_mean" in key for key in column0)
    for key in column0:
        torch.testing.assert_close(after1[key], after0[key], rtol=0, atol=0, msg=key)
    assert all(not torch.equal(after1[key], after0[key]) for key in trained1 if "running_var" not in key)
    assert trained1


def test_the_optimiser_gets_the_current_column_and_its_adapters_only(tiny_net, transforms) -> None:
    setting = ContinualSetting((2, 2, 2), (1, 2, 2), scenario="task-il")
    method = PNN(tiny_net(6), setting, transforms, PNNConfig(), torch.Generator().manual_seed(0))
    assert {id(p) for p in method.optimizer_parameters()} == {id(p) for p in method.net.parameters()}
    method.begin_task(2)
    expected = [*method.columns[1].parameters(), *method.laterals[1].parameters()]
    assert [id(p) for p in method.optimizer_parameters()] == [id(p) for p in expected]
    method.train(True)
    assert [method.column(k).training for k in range(3)] == [False, False, True]
    assert [adapters.training for adapters in method.laterals] == [False, True]


@pytest.mark.parametrize(
    ("scenario", "classes", "why"),
    [
        (
            "class-il",
            (2, 2),
            "it needs the task at test time; run a class-il benchmark with run.scenario=task-il",
        ),
        ("domain-il", (2, 2), "it needs the task at test time, and a column of its own per task's classes"),
        ("general", (4,), "it needs the task at test time, and task boundaries to add its columns"),
    ],
)
def test_pnn_refuses_every_scenario_but_task_il(scenario, classes, why, tiny_net, transforms) -> None:
    setting = ContinualSetting(classes, (1, 2, 2), scenario=scenario)
    with pytest.raises(MethodConfigError) as error:
        create_method("pnn", net=tiny_net(4), setting=setting, transforms=transforms)
    assert str(error.value) == f"pnn cannot run a {scenario} benchmark: {why} (it runs task-il)"
    with pytest.raises(MethodConfigError, match=f"cannot run a {scenario} benchmark"):  # before the backbone
        create_method("pnn", net=nn.Linear(4, 4), setting=setting, transforms=transforms)


def test_pnn_refuses_a_backbone_without_stages(transforms) -> None:
    setting = ContinualSetting((2, 2), (1, 2, 2), scenario="task-il")
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 4))
    with pytest.raises(MethodConfigError) as error:
        create_method("pnn", net=net, setting=setting, transforms=transforms)
    assert str(error.value) == (
        "pnn needs a backbone that gives its stages (pnn_stages: mnist-mlp and resnet18-cifar do), "
        "not Sequential"
    )
