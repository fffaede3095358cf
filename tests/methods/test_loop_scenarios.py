"""The loop and the evaluation in each scenario, by hand: Domain-IL groups rows by their given task
and reports no Task-IL; a general stream is one task whose batches follow the stream's order and
never span two segments (JOINT's are shuffled); the setting's label ranges per scenario."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from xder_methods import (
    ContinualSetting,
    MethodConfigError,
    TrainingSchedule,
    create_method,
    evaluate,
    fit,
    method_config_class,
)


def test_the_setting_of_each_scenario() -> None:
    """class-il: contiguous label ranges; domain-il: every task owns every label; general: one
    task; Task-IL only where a task's classes are not all of them; Class-IL all but task-il."""
    cil = ContinualSetting((2, 3), (1, 2, 2))
    assert (cil.num_classes, cil.class_range(1), cil.task_of_class().tolist()) == (5, (2, 5), [0, 0, 1, 1, 1])
    dil = ContinualSetting((3, 3, 3), (1, 2, 2), scenario="domain-il")
    assert (dil.num_classes, dil.class_range(2), dil.task_of_class().tolist()) == (3, (0, 3), [0, 0, 0])
    reports = {
        s: (
            ContinualSetting((3,), (1,), scenario=s).reports_class_il,
            ContinualSetting((3,), (1,), scenario=s).reports_task_il,
        )
        for s in ("class-il", "task-il", "domain-il", "general")
    }
    assert reports == {
        "class-il": (True, True),
        "task-il": (False, True),
        "domain-il": (True, False),
        "general": (True, False),
    }
    with pytest.raises(ValueError, match="same classes"):
        ContinualSetting((2, 3), (1,), scenario="domain-il")
    with pytest.raises(ValueError, match="one task"):
        ContinualSetting((2, 3), (1,), scenario="general")


def test_require_refuses_in_one_line() -> None:
    setting = ContinualSetting((3,), (1,), scenario="general")
    setting.require("er", ("class-il", "general"), "unused")
    with pytest.raises(MethodConfigError) as raised:
        setting.require("lwf", ("class-il", "task-il"), "it distils the old classes at each task's start")
    assert str(raised.value) == (
        "lwf cannot run a general benchmark: it distils the old classes at each task's start "
        "(it runs class-il, task-il)"
    )


class _Fixed:
    """predict: row i's logits are ``table[x[i, 0]]`` (the first value of the row is its id)."""

    def __init__(self, table: Tensor) -> None:
        self.table = table

    def predict(self, x: Tensor) -> Tensor:
        return self.table[x[:, 0].long()]


def test_domain_il_accuracy_groups_rows_by_their_task() -> None:
    """Six rows of three classes, three per task (tasks given per row). Predictions (argmax over
    all three classes): task 0 rows (y 0, 1, 2) -> 0, 1, 0: 2 of 3 right; task 1 rows (y 2, 2, 1)
    -> 2, 0, 0: 1 of 3. After one task Domain-IL reports task 0 alone; no Task-IL, no heads."""
    logits = torch.tensor(
        [[5.0, 0, 0], [0, 5, 0], [4, 0, 3], [0, 0, 9], [7, 1, 2], [3, 2, 1]], dtype=torch.float64
    )
    x = torch.arange(6).view(6, 1)
    y = torch.tensor([0, 1, 2, 2, 2, 1])
    tasks = torch.tensor([0, 0, 0, 1, 1, 1])
    setting = ContinualSetting((3, 3), (1,), scenario="domain-il")
    method = _Fixed(logits)
    kwargs = {"transform": lambda x, g=None: x, "batch_size": 4, "tasks": tasks}
    one = evaluate(method, x, y, setting, seen_tasks=1, **kwargs)  # type: ignore[arg-type]
    two = evaluate(method, x, y, setting, seen_tasks=2, **kwargs)  # type: ignore[arg-type]
    assert one.class_il == pytest.approx([200 / 3])
    assert two.class_il == pytest.approx([200 / 3, 100 / 3])
    assert (two.task_il, two.head_counts) == ([], [])
    with pytest.raises(ValueError, match="task of each row"):
        evaluate(method, x, y, setting, seen_tasks=1, transform=lambda x, g=None: x)  # type: ignore[arg-type]


def _marked(make_stream, **kwargs):
    """A stream whose training row i carries i in its first pixel."""
    stream = make_stream(**kwargs)
    stream.train_x[:, 0, 0, 0] = torch.arange(stream.train_x.shape[0], dtype=torch.uint8)
    return stream


def _method(stream, transforms, tiny_net, setting_of, name="sgd"):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    setting = setting_of(stream)
    method = create_method(
        name,
        net=tiny_net(setting.num_classes),
        setting=setting,
        transforms=transforms,
        config=method_config_class(name)(),
        generator=generator,
    )
    return method, generator


def _recorded(method) -> tuple[list[str], list[list[int]]]:
    """Wraps begin_task/end_task and observe: the hook calls, and each batch's row ids in order."""
    hooks: list[str] = []
    batches: list[list[int]] = []
    begin, end, observe = method.begin_task, method.end_task, method.observe

    def begin_task(task):
        hooks.append(f"begin {task}")
        begin(task)

    def end_task(task, data):
        hooks.append(f"end {task}")
        end(task, data)

    def observed(batch):
        batches.append(batch.x_raw[:, 0, 0, 0].tolist())
        return observe(batch)

    method.begin_task, method.end_task, method.observe = begin_task, end_task, observed
    return hooks, batches


def test_a_domain_il_task_trains_on_the_rows_of_its_task(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """Two tasks of the same two classes: rows 0..11 task 1, 12..23 task 0 (by their given task,
    not by label); each task trains on its own rows only, and the history has Domain-IL rows of
    one then two tasks and no Task-IL."""
    stream = _marked(make_stream, classes_per_task=(2,), per_class=12, test_per_class=4)
    stream.classes_per_task = (2, 2)
    stream.scenario = "domain-il"
    stream.train_task = torch.tensor([1] * 12 + [0] * 12)
    stream.test_task = torch.tensor([0, 1] * 4)
    method, g = _method(stream, transforms, tiny_net, setting_of)
    hooks, batches = _recorded(method)
    history = fit(
        method, stream, TrainingSchedule(batch_size=5, lr=0.1, drop_last=False), generator=g, threads=1
    )
    assert hooks == ["begin 0", "end 0", "begin 1", "end 1"]
    first = [r for b in batches[:3] for r in b]
    second = [r for b in batches[3:] for r in b]
    assert (sorted(first), sorted(second)) == (list(range(12, 24)), list(range(12)))
    assert [len(row) for row in history.class_il] == [1, 2]
    assert history.task_il == [[], []]


def test_a_general_stream_is_one_task_in_order_cut_by_segment(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """Segments of 5, 7 and 4 rows, batch 3, last partial batches kept: the batches follow the
    stream and restart at each segment (a last batch of one row joins the one before, as every
    epoch's: :func:`batch_bounds`); begin_task and end_task run once."""
    stream = _marked(make_stream, classes_per_task=(3,), per_class=6)
    stream.train_x, stream.train_y = stream.train_x[:16], stream.train_y[:16]
    stream.scenario = "general"
    stream.train_segment = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)
    method, g = _method(stream, transforms, tiny_net, setting_of)
    hooks, batches = _recorded(method)
    history = fit(
        method, stream, TrainingSchedule(batch_size=3, lr=0.1, drop_last=False), generator=g, threads=1
    )
    assert hooks == ["begin 0", "end 0"]
    assert batches == [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert (len(history.class_il), history.task_il) == (1, [[]])


def test_joint_on_a_general_stream_trains_on_it_shuffled(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """JOINT (every row so far) on the same stream: one pass over all 16 rows, shuffled, cut into
    plain batches of 3, the last of 4 (the segments are the stream's, not the offline learner's)."""
    stream = _marked(make_stream, classes_per_task=(3,), per_class=6)
    stream.train_x, stream.train_y = stream.train_x[:16], stream.train_y[:16]
    stream.scenario = "general"
    stream.train_segment = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)
    method, g = _method(stream, transforms, tiny_net, setting_of, name="joint")
    _, batches = _recorded(method)
    fit(method, stream, TrainingSchedule(batch_size=3, lr=0.1, drop_last=False), generator=g, threads=1)
    rows = [r for b in batches for r in b]
    assert [len(b) for b in batches] == [3, 3, 3, 3, 4]
    assert sorted(rows) == list(range(16))
    assert rows != list(range(16))
