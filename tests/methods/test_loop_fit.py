"""fit's task loop by hand: the hooks' order and arguments, the state callbacks see, the history
against an evaluation computed here, the rows each task trains on, and resuming from a snapshot."""

from __future__ import annotations

import time

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F

import xder_methods.core.loop as loop_module
from xder_methods import (
    Callback,
    ContinualMethod,
    MethodConfigError,
    StepOutput,
    StepPolicy,
    TrainingSchedule,
    create_method,
    fit,
    method_config_class,
)
from xder_methods.core.graphs import StepResult
from xder_methods.core.loop import Evaluation, FitState


def _sgd(stream, transforms, tiny_net, setting_of, seed: int = 0, name: str = "sgd", **config):
    """A method on a seeded TinyNet and its generator (seeded too)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    method = create_method(
        name,
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=method_config_class(name)(**config),
        generator=generator,
    )
    return method, generator


def _indexed(make_stream, **kwargs):
    """A stream whose training row i carries i in its first pixel (every row told apart)."""
    stream = make_stream(**kwargs)
    stream.train_x[:, 0, 0, 0] = torch.arange(stream.train_x.shape[0], dtype=torch.uint8)
    return stream


def _with_val(make_stream):
    """The default stream with a validation split (another draw of the same classes)."""
    stream, other = make_stream(), make_stream(seed=1)
    stream.val_x, stream.val_y = other.test_x, other.test_y
    return stream


def _by_hand(net: nn.Module, x: Tensor, y: Tensor, classes_per_task, seen: int):
    """Class-IL of tasks 0..seen-1 (argmax over the seen classes), Task-IL of every task (argmax
    inside its own classes), in %, and the count of Class-IL mistakes by the task of the
    predicted class."""
    with torch.no_grad():
        logits = net(x.float() / 255)
    ends = torch.tensor(classes_per_task).cumsum(0).tolist()
    starts = [0, *ends[:-1]]
    seen_end = ends[seen - 1] if seen else ends[-1]
    class_il, task_il, heads = [], [], []
    for t, (start, end) in enumerate(zip(starts, ends, strict=True)):
        mine = (y >= start) & (y < end)
        rows, labels = logits[mine], y[mine]
        own = rows[:, start:end].argmax(1) + start
        task_il.append(100.0 * int((own == labels).sum()) / int(mine.sum()))
        if t < seen:
            pred = rows[:, :seen_end].argmax(1)
            class_il.append(100.0 * int((pred == labels).sum()) / int(mine.sum()))
            task_of_pred = [sum(1 for e in ends if e <= int(p)) for p in pred]
            wrong = (pred != labels).tolist()
            heads.append(
                [
                    sum(1 for w, u in zip(wrong, task_of_pred, strict=True) if w and u == v)
                    for v in range(len(ends))
                ]
            )
    return class_il, task_il, heads


class _Spy(Callback):
    """Records every hook: the loop object it was given and the loop's position and state there."""

    def __init__(self) -> None:
        self.loops: list[object] = []
        self.calls: list[tuple] = []
        self.records: list = []

    def on_fit_start(self, loop) -> None:
        self.loops.append(loop)
        self.calls.append(("fit_start", loop.task, loop.epoch))

    def on_task_start(self, loop) -> None:
        self.loops.append(loop)
        self.calls.append(
            ("task_start", loop.task, loop.epoch, loop.steps_per_epoch, loop.optimizer is not None)
        )

    def on_epoch_end(self, loop, record) -> None:
        self.loops.append(loop)
        self.calls.append(("epoch", loop.task, loop.epoch, record.task, record.epoch, record.steps))

    def on_task_end(self, loop, record) -> None:
        self.loops.append(loop)
        self.records.append(record)
        self.calls.append(("task_end", loop.task, loop.epoch, loop.optimizer is None, loop.graphs is None))

    def on_fit_end(self, loop) -> None:
        self.loops.append(loop)
        self.calls.append(("fit_end", loop.task, loop.epoch))


def _recording(method):
    """Wraps the method's task hooks and observe to record their arguments, in order."""
    calls: list[tuple] = []
    begin, prepare, observe, end = method.begin_task, method.prepare_task, method.observe, method.end_task

    def begin_task(task):
        calls.append(("begin", task))
        begin(task)

    def prepare_task(task, data, budget):
        calls.append(("prepare", task, data, budget))
        return prepare(task, data, budget)

    def observed(batch):
        if not calls or calls[-1][0] != "observe":
            calls.append(("observe", batch.task))
        return observe(batch)

    def end_task(task, data):
        calls.append(("end", task, data))
        end(task, data)

    method.begin_task, method.prepare_task = begin_task, prepare_task
    method.observe, method.end_task = observed, end_task
    return calls


def test_hooks_see_the_loop_and_its_position(stream, transforms, tiny_net, setting_of) -> None:
    """Every callback gets the fit's one FitState; at a task's start the position is (task, 0)
    with its optimiser and its steps per epoch (24 rows, batch 8: 3); after each epoch the next
    epoch; after the task, the next task's start with no optimiser and no recorded steps."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    spy = _Spy()
    fit(
        method,
        stream,
        TrainingSchedule(epochs=2, batch_size=8, lr=0.1),
        generator=g,
        callbacks=[spy],
        threads=1,
    )
    assert all(loop is spy.loops[0] for loop in spy.loops)
    assert isinstance(spy.loops[0], FitState)
    expected: list[tuple] = [("fit_start", 0, 0)]
    for t in range(3):
        expected += [("task_start", t, 0, 3, True), ("epoch", t, 1, t, 0, 3), ("epoch", t, 2, t, 1, 3)]
        expected += [("task_end", t + 1, 0, True, True)]
    expected += [("fit_end", 3, 0)]
    assert spy.calls == expected


def test_the_method_hooks_get_the_task_its_rows_and_budget(stream, transforms, tiny_net, setting_of) -> None:
    """begin_task(t), prepare_task(t, the task's training rows, the schedule's budget), the task's
    batches (labelled with t), end_task(t, the same rows), task after task."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    calls = _recording(method)
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, drop_last=False)
    fit(method, stream, schedule, generator=g, threads=1)
    assert [c[:2] for c in calls] == [
        (kind, t) for t in range(3) for kind in ("begin", "prepare", "observe", "end")
    ]
    for t in range(3):
        rows = torch.nonzero((stream.train_y >= 2 * t) & (stream.train_y < 2 * t + 2)).flatten()
        prepared, ended = calls[4 * t + 1], calls[4 * t + 3]
        assert prepared[3] == schedule.budget
        for data in (prepared[2], ended[2]):
            assert data.task == t
            torch.testing.assert_close(data.x_raw, stream.train_x[rows], rtol=0, atol=0)
            torch.testing.assert_close(data.y, stream.train_y[rows], rtol=0, atol=0)


def test_history_and_records_match_an_evaluation_by_hand(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """The untrained net's Task-IL, then after each task its Class-IL (seen tasks), Task-IL and
    head counts on the test and the validation splits, computed here from the net's logits, in
    the task's record and in the history; a record's seconds span the task (a fake clock that
    the callbacks advance: 1.25 s per epoch of task 0, 2.5 of task 1, 3.75 of task 2)."""
    stream = _with_val(make_stream)
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    cpt = stream.classes_per_task
    clock = [100.0]
    expected: dict[str, list] = {"init": [], "val_init": [], "tasks": []}

    class ByHand(Callback):
        def on_fit_start(self, loop) -> None:
            expected["init"] = _by_hand(method.net, stream.test_x, stream.test_y, cpt, 0)[1]
            expected["val_init"] = _by_hand(method.net, stream.val_x, stream.val_y, cpt, 0)[1]
            assert loop.history.random_init_task_il == pytest.approx(expected["init"])
            assert loop.history.val_random_init_task_il == pytest.approx(expected["val_init"])

        def on_epoch_end(self, loop, record) -> None:
            clock[0] += 1.25 * (record.task + 1)

        def on_task_end(self, loop, record) -> None:
            seen = record.task + 1
            test = _by_hand(method.net, stream.test_x, stream.test_y, cpt, seen)
            val = _by_hand(method.net, stream.val_x, stream.val_y, cpt, seen)
            expected["tasks"].append((test, val))
            assert record.task == loop.task - 1
            assert record.class_il == pytest.approx(test[0])
            assert record.task_il == pytest.approx(test[1])
            assert record.head_counts == test[2]
            assert record.val_class_il == pytest.approx(val[0])
            assert record.val_task_il == pytest.approx(val[1])
            assert record.seconds == 2 * 1.25 * seen

    monkey = pytest.MonkeyPatch()
    monkey.setattr(time, "perf_counter", lambda: clock[0])
    try:
        history = fit(
            method,
            stream,
            TrainingSchedule(epochs=2, batch_size=8, lr=0.1),
            generator=g,
            callbacks=[ByHand()],
            threads=1,
        )
    finally:
        monkey.undo()
    assert len(expected["tasks"]) == 3
    assert history.random_init_task_il == pytest.approx(expected["init"])
    assert history.val_random_init_task_il == pytest.approx(expected["val_init"])
    assert history.class_il == [pytest.approx(test[0]) for test, _ in expected["tasks"]]
    assert history.task_il == [pytest.approx(test[1]) for test, _ in expected["tasks"]]
    assert history.head_counts == [test[2] for test, _ in expected["tasks"]]
    assert history.val_class_il == [pytest.approx(val[0]) for _, val in expected["tasks"]]
    assert history.val_task_il == [pytest.approx(val[1]) for _, val in expected["tasks"]]


def test_without_a_validation_split_nothing_is_recorded_for_it(
    stream, transforms, tiny_net, setting_of
) -> None:
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    spy = _Spy()
    history = fit(
        method, stream, TrainingSchedule(batch_size=8, tasks=2), generator=g, callbacks=[spy], threads=1
    )
    assert history.val_random_init_task_il is None
    assert (history.val_class_il, history.val_task_il) == ([], [])
    assert [(r.val_class_il, r.val_task_il) for r in spy.records] == [(None, None)] * 2


@pytest.mark.parametrize("tasks", [1, 2, 3])
def test_any_number_of_first_tasks_in_range_trains(tasks, stream, transforms, tiny_net, setting_of) -> None:
    """``tasks`` from 1 to the stream's 3 tasks trains that many; 4 is refused."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    history = fit(method, stream, TrainingSchedule(batch_size=8, tasks=tasks), generator=g, threads=1)
    assert [len(row) for row in history.class_il] == list(range(1, tasks + 1))
    with pytest.raises(MethodConfigError, match="out of range"):
        fit(method, stream, TrainingSchedule(batch_size=8, tasks=4), generator=g, threads=1)


@pytest.mark.parametrize(("drop_last", "steps"), [(True, 2), (False, 3)])
def test_steps_per_epoch_follow_drop_last(drop_last, steps, stream, transforms, tiny_net, setting_of) -> None:
    """24 rows in batches of 10: 2 full batches, and with drop_last off the partial one of 4."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    spy = _Spy()
    schedule = TrainingSchedule(batch_size=10, lr=0.1, drop_last=drop_last, tasks=1)
    fit(method, stream, schedule, generator=g, callbacks=[spy], threads=1)
    assert spy.calls[1] == ("task_start", 0, 0, steps, True)
    assert spy.calls[2][-1] == steps


def _observed_rows(method) -> list[list[int]]:
    """Wraps observe: the row ids (first pixel of x_raw) of each task's batches, sorted."""
    seen: dict[int, list[int]] = {}
    observe = method.observe

    def observed(batch):
        seen.setdefault(batch.task, []).extend(batch.x_raw[:, 0, 0, 0].tolist())
        return observe(batch)

    method.observe = observed
    return seen


def _withholding(method, withheld) -> None:
    """Make ``method.prepare_task`` return ``withheld(task)`` after doing what it did."""
    prepare = method.prepare_task

    def prepare_task(task, data, budget):
        assert prepare(task, data, budget) is None
        return withheld(task)

    method.prepare_task = prepare_task


def test_withheld_rows_are_left_out_of_the_task(make_stream, transforms, tiny_net, setting_of) -> None:
    """The rows prepare_task(t, ...) returns are positions among task t's training rows: the
    task's epoch runs on the others (24 rows, 3 withheld per task, batch 7 without drop_last: 21
    rows)."""
    stream = _indexed(make_stream)
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    positions = {0: [0, 5, 23], 1: [1, 2, 3], 2: [10, 11, 20]}
    asked: list[int] = []

    def withheld_rows(task: int) -> Tensor:
        asked.append(task)
        return torch.tensor(positions[task])

    _withholding(method, withheld_rows)
    seen = _observed_rows(method)
    fit(method, stream, TrainingSchedule(batch_size=7, lr=0.1, drop_last=False), generator=g, threads=1)
    assert asked == [0, 1, 2]
    for t in range(3):
        rows = list(range(24 * t, 24 * (t + 1)))  # the stream's rows are by class, 12 a class
        kept = [r for i, r in enumerate(rows) if i not in positions[t]]
        assert sorted(seen[t]) == kept


def test_a_run_resumed_mid_task_withholds_the_rows_prepare_task_returned(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """The loop keeps the rows prepare_task withheld in its checkpoint: resumed after task 1's
    first of two epochs (prepare_task is not called again), its second epoch still leaves them
    out; the checkpoint taken at a task's end holds none."""
    stream = _indexed(make_stream)
    schedule = TrainingSchedule(epochs=2, batch_size=7, lr=0.1, drop_last=False)
    positions = {0: [0, 5, 23], 1: [1, 2, 3], 2: [10, 11, 20]}
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    _withholding(method, lambda task: torch.tensor(positions[task]))
    stopper = _Snapshot(3)  # after task 1's first epoch
    with pytest.raises(KeyboardInterrupt):
        fit(method, stream, schedule, generator=g, callbacks=[stopper], threads=1)
    assert stopper.snapshot is not None
    assert stopper.snapshot["withheld"].tolist() == positions[1]
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    asked: list[int] = []
    _withholding(method, lambda task: asked.append(task) or torch.tensor(positions[task]))
    seen = _observed_rows(method)
    fit(method, stream, schedule, generator=g, resume=stopper.snapshot, threads=1)
    assert asked == [2]
    for t in (1, 2):
        rows = list(range(24 * t, 24 * (t + 1)))
        kept = [r for i, r in enumerate(rows) if i not in positions[t]]
        assert sorted(seen[t]) == sorted(kept * (1 if t == 1 else 2))
    ended = _Snapshot(None)
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    _withholding(method, lambda task: torch.tensor(positions[task]))
    with pytest.raises(KeyboardInterrupt):
        fit(method, stream, schedule, generator=g, callbacks=[ended], threads=1)
    assert ended.snapshot is not None
    assert ended.snapshot["withheld"] is None


def test_cumulative_training_takes_every_task_so_far_and_withholds_nothing(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    """``training_data = "cumulative"``: task t trains on the rows of tasks 0..t, whatever
    prepare_task withholds (it applies to a task's own rows only); ``"none"``: no step at all."""
    stream = _indexed(make_stream)
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    method.training_data = "cumulative"
    _withholding(method, lambda task: torch.tensor([0, 1]))
    seen = _observed_rows(method)
    spy = _Spy()
    fit(method, stream, TrainingSchedule(batch_size=8, lr=0.1), generator=g, callbacks=[spy], threads=1)
    for t in range(3):
        assert sorted(seen[t]) == list(range(24 * (t + 1)))
    assert [c[3] for c in spy.calls if c[0] == "task_start"] == [3, 6, 9]

    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    method.training_data = "none"
    seen = _observed_rows(method)
    spy = _Spy()
    fit(method, stream, TrainingSchedule(batch_size=8, lr=0.1), generator=g, callbacks=[spy], threads=1)
    assert seen == {}
    assert [c[3] for c in spy.calls if c[0] == "task_start"] == [0, 0, 0]


class Plugin(nn.Module):
    """A method written against the protocol alone, not on MethodBase: each member of the
    contract written out; ``prepare_task`` returns ``withheld(task)`` (default: None)."""

    training_data = "task"
    manual_optimization = False
    step_policy = StepPolicy()

    def __init__(self, net: nn.Module, transforms, withheld=lambda task: None) -> None:
        super().__init__()
        self.net = net
        self.transforms = transforms
        self.withheld = withheld
        self.optimizer = None
        self.seen: dict[int, list[int]] = {}

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def forgetting_defined(self) -> bool:
        return True

    def begin_task(self, task: int) -> None: ...

    def prepare_task(self, task, data, budget) -> Tensor | None:
        return self.withheld(task)

    def observe(self, batch) -> StepOutput:
        self.seen.setdefault(batch.task, []).extend(batch.x_raw[:, 0, 0, 0].tolist())
        return StepOutput(F.cross_entropy(self.net(batch.x), batch.y))

    def after_backward(self) -> None: ...

    def after_step(self, optimizer) -> None:
        return None

    def end_task(self, task, data) -> None: ...

    def prefill(self, task, data) -> None: ...

    def predict(self, x: Tensor) -> Tensor:
        return self.net(x)

    def optimizer_parameters(self):
        return self.net.parameters()

    def graph_key(self) -> None:
        return None

    def replay_memory(self) -> None:
        return None


def test_a_plugin_that_withholds_nothing_trains_on_every_row(make_stream, transforms, tiny_net) -> None:
    stream = _indexed(make_stream)
    torch.manual_seed(0)
    method = Plugin(tiny_net(6), transforms)
    assert isinstance(method, ContinualMethod)
    schedule = TrainingSchedule(batch_size=8, lr=0.1)
    fit(method, stream, schedule, generator=torch.Generator().manual_seed(0), threads=1)
    assert {t: sorted(rows) for t, rows in method.seen.items()} == {
        t: list(range(24 * t, 24 * (t + 1))) for t in range(3)
    }


def test_data_held_in_host_memory_train_on_the_generators_device_less_the_withheld_rows(
    make_stream, transforms, tiny_net, second_device, monkeypatch
) -> None:
    """The stream's data in host memory, the generator (and training) on a device (emulated, see
    ``OnTheDevice`` in conftest.py) and a method that withholds rows, their positions kept on the
    device (as BiC keeps its own): each task's rows reach prepare_task and end_task copied to the
    device; the positions are brought to the rows to leave the withheld ones out; every other row
    of the task reaches the step once, on the device, with its own label (12 rows by class, 3 a
    class, two tasks of two classes; 2 of each task's 6 withheld, batches of 2: 2 steps a task).
    The step and the evaluations are stood in for (they would compute on the emulated device)."""
    elsewhere = second_device.Elsewhere
    stream = _indexed(make_stream, classes_per_task=(2, 2), per_class=3)
    positions = {0: [1, 4], 1: [0, 5]}
    held = {t: elsewhere(torch.tensor(p)) for t, p in positions.items()}
    method = Plugin(tiny_net(4), transforms, withheld=lambda task: held[task])
    calls = _recording(method)
    steps: list[tuple[int, Tensor, Tensor]] = []

    def step(loop, x_raw, y, *, task, probe=False):
        steps.append((task, x_raw, y))
        return StepResult(None, {}, {})

    def evaluate(method, x, y, setting, **kwargs):
        return Evaluation([], [0.0, 0.0], [])

    monkeypatch.setattr(loop_module, "run_step", step)
    monkeypatch.setattr(loop_module, "evaluate", evaluate)
    generator = second_device.GeneratorThere().manual_seed(0)
    with second_device.OnTheDevice():
        fit(method, stream, TrainingSchedule(batch_size=2, lr=0.1), generator=generator, threads=1)
    prepared = {c[1]: c[2] for c in calls if c[0] == "prepare"}
    ended = {c[1]: c[2] for c in calls if c[0] == "end"}
    assert sorted(prepared) == sorted(ended) == [0, 1]
    for t in range(2):
        rows = list(range(6 * t, 6 * (t + 1)))  # the task's rows (the stream's are by class)
        for data in (prepared[t], ended[t]):
            assert isinstance(data.x_raw, elsewhere)
            assert isinstance(data.y, elsewhere)
            assert data.x_raw.inner[:, 0, 0, 0].tolist() == rows
            assert data.y.inner.tolist() == [r // 3 for r in rows]
        batches = [(x, y) for task, x, y in steps if task == t]
        assert len(batches) == 2
        assert all(isinstance(x, elsewhere) and isinstance(y, elsewhere) for x, y in batches)
        seen = [
            pair
            for x, y in batches
            for pair in zip(x.inner[:, 0, 0, 0].tolist(), y.inner.tolist(), strict=True)
        ]
        kept = [r for i, r in enumerate(rows) if i not in positions[t]]
        assert sorted(seen) == [(r, r // 3) for r in kept]


def test_recorded_steps_are_released_at_each_task_end(stream, transforms, tiny_net, setting_of) -> None:
    """With step_graph the loop records the task's steps (on a CPU, ReplayCheck) and drops them
    before end_task: each task starts afresh, and the run trains every task."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    graphs: list[object] = []

    class Graphs(Callback):
        def on_epoch_end(self, loop, record) -> None:
            graphs.append(loop.graphs)

    spy = _Spy()
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, step_graph=True)
    fit(method, stream, schedule, generator=g, callbacks=[Graphs(), spy], threads=1)
    assert all(graph is not None for graph in graphs)
    assert len({id(graph) for graph in graphs}) == 3
    assert [c[-1] for c in spy.calls if c[0] == "task_end"] == [True] * 3


class _Snapshot(Callback):
    """Snapshots the loop after the ``epochs``-th epoch (or, with None, at task 0's end) and stops."""

    def __init__(self, epochs: int | None) -> None:
        self.epochs, self.seen, self.snapshot = epochs, 0, None

    def on_epoch_end(self, loop, record) -> None:
        self.seen += 1
        if self.seen == self.epochs:
            self.snapshot = loop.snapshot()
            raise KeyboardInterrupt

    def on_task_end(self, loop, record) -> None:
        if self.epochs is None:
            self.snapshot = loop.snapshot()
            raise KeyboardInterrupt


SCHEDULE = TrainingSchedule(epochs=3, batch_size=8, lr=0.1, momentum=0.9)


def _full_and_snapshot(stream, transforms, tiny_net, setting_of, epochs: int | None):
    """An uninterrupted fit's history and weights, and an identical fit's snapshot at a point."""
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    history = fit(method, stream, SCHEDULE, generator=g, threads=1)
    weights = [p.detach().clone() for p in method.net.parameters()]
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    stopper = _Snapshot(epochs)
    with pytest.raises(KeyboardInterrupt):
        fit(method, stream, SCHEDULE, generator=g, callbacks=[stopper], threads=1)
    assert stopper.snapshot is not None
    return history, weights, stopper.snapshot


@pytest.mark.parametrize(("epochs", "position"), [(4, (1, 1)), (5, (1, 2)), (None, (1, 0))])
def test_resume_continues_exactly(epochs, position, stream, transforms, tiny_net, setting_of) -> None:
    """Resumed in task 1 after its first or second of 3 epochs (momentum 0.9: the optimiser's
    state is restored there, and a fresh one starts task 2), or at task 0's end: the hooks run
    from the snapshot's position on, task 1 is set up again (begin_task) but not prepared when
    resumed inside it, and the end (weights, history) is the uninterrupted run's exactly."""
    full, weights, snapshot = _full_and_snapshot(stream, transforms, tiny_net, setting_of, epochs)
    assert (snapshot["position"]["task"], snapshot["position"]["epoch"]) == position
    torch.manual_seed(123)  # the resumed process starts from another global RNG state
    method, g = _sgd(stream, transforms, tiny_net, setting_of, seed=99)
    calls = _recording(method)
    spy = _Spy()
    resumed = fit(method, stream, SCHEDULE, generator=g, callbacks=[spy], resume=snapshot, threads=1)
    task, epoch = position
    prepared = [("begin", 1), ("prepare", 1)] if epoch == 0 else [("begin", 1)]
    assert [c[:2] for c in calls] == [
        *prepared,
        ("observe", 1),
        ("end", 1),
        ("begin", 2),
        ("prepare", 2),
        ("observe", 2),
        ("end", 2),
    ]
    assert spy.calls[:2] == [("fit_start", task, epoch), ("task_start", task, epoch, 3, True)]
    assert [c[2:5] for c in spy.calls if c[0] == "epoch"] == [
        *[(e + 1, 1, e) for e in range(epoch, 3)],
        *[(e + 1, 2, e) for e in range(3)],
    ]
    for p, w in zip(method.net.parameters(), weights, strict=True):
        torch.testing.assert_close(p.detach(), w, rtol=0, atol=0)
    assert resumed == full


@pytest.mark.parametrize("bad", [{}, {"format": "xder-checkpoint-v0"}])
def test_resume_refuses_what_is_not_a_checkpoint(bad, stream, transforms, tiny_net, setting_of) -> None:
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    with pytest.raises(ValueError, match="not an xder checkpoint"):
        fit(method, stream, SCHEDULE, generator=g, resume=bad, threads=1)


def test_the_withheld_mask_is_made_on_the_rows_device(make_stream, transforms, tiny_net, setting_of) -> None:
    """The mask that drops the withheld rows is on the device of the task's rows (the stream's),
    not on torch's default device: here the meta device is the default while the first task is
    set up (from on_fit_start to on_task_start; the evaluation before needs real tensors), as in
    a run under ``torch.set_default_device("cuda")`` with the stream in host memory."""
    stream = _indexed(make_stream)
    method, g = _sgd(stream, transforms, tiny_net, setting_of)
    _withholding(method, lambda task: torch.tensor([2, 3], device=stream.train_y.device))
    seen = _observed_rows(method)

    class MetaWhileSettingUp(Callback):
        def on_fit_start(self, loop) -> None:
            torch.set_default_device("meta")

        def on_task_start(self, loop) -> None:
            torch.set_default_device(None)

    try:
        fit(
            method,
            stream,
            TrainingSchedule(batch_size=11, lr=0.1, tasks=1),
            generator=g,
            callbacks=[MetaWhileSettingUp()],
            threads=1,
        )
    finally:
        torch.set_default_device(None)
    assert sorted(seen[0]) == [r for r in range(24) if r not in (2, 3)]
