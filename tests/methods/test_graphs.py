"""Whole-step CUDA graphs (``train.step_graph``): which methods opt in, when a step is recorded
and replayed, and the CPU's replay check, which must catch a step that a graph would get wrong."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods import (
    DER,
    ER,
    ERACE,
    RPC,
    XDER,
    Batch,
    Buffer,
    Callback,
    ContinualSetting,
    DERpp,
    FineTuning,
    MethodBase,
    StepOutput,
    TrainingSchedule,
    create_method,
    fit,
    method_config_class,
    reservoir_slots,
)
from xder_methods.core.graphs import CudaGraphs, ReplayCheck, StepGraphs, StepNotReplayable, StepResult


def _method(name, stream, transforms, tiny_net, setting_of, **config):
    torch.manual_seed(0)
    return create_method(
        name,
        net=tiny_net(sum(stream.classes_per_task), batchnorm=True),
        setting=setting_of(stream),
        transforms=transforms,
        config=method_config_class(name)(**config),
        generator=torch.Generator().manual_seed(0),
    )


def test_the_opt_in_is_declared_not_inherited() -> None:
    """ER, DER, DER++, X-DER and FT declare their steps replayable; a subclass that does not
    declare it again (RPC and ER-ACE change the step) is not, whatever its parent declared."""
    for cls in (ER, DER, DERpp, FineTuning, XDER):
        assert cls.graph_key is not MethodBase.graph_key, cls
    for cls in (RPC, ERACE):
        assert cls.graph_key is MethodBase.graph_key, cls


def test_the_opt_in_rule_on_classes_made_now() -> None:
    """The same rule on classes defined inside the test (``MethodBase.__init_subclass__`` runs
    when a class is made; the methods above were made at import): a class that defines graph_key
    keeps its own, its subclass that does not falls back to MethodBase's (None), not its parent's."""

    class Declares(MethodBase):
        def graph_key(self):
            return "declared"

    class Inherits(Declares):
        pass

    net, setting = torch.nn.Linear(1, 1), ContinualSetting((1,), (1,))
    assert Declares(net, setting, None, None).graph_key() == "declared"
    assert Inherits(net, setting, None, None).graph_key() is None


@pytest.mark.parametrize("name", ["sgd", "er", "derpp", "xder"])
def test_replay_checked_run_equals_a_plain_run(name, stream, transforms, tiny_net, setting_of) -> None:
    """With ``step_graph`` on a CPU, every step a GPU would replay (after the buffer fills) runs
    eagerly and passes the replay check, and the run's numbers are the plain run's, to the bit."""
    config = {} if name == "sgd" else {"buffer_size": 8, "minibatch_size": 4}
    histories, checks = [], []
    for step_graph in (False, True):
        method = _method(name, stream, transforms, tiny_net, setting_of, **config)
        schedule = TrainingSchedule(epochs=3, batch_size=4, lr=0.1, record_every=5, step_graph=step_graph)
        spy = StepGraphsSpy()
        histories.append(
            fit(method, stream, schedule, generator=torch.Generator().manual_seed(1), callbacks=[spy])
        )
        checks.append(spy.replays)
    assert histories[0].class_il == histories[1].class_il
    assert histories[0].task_il == histories[1].task_il
    # Per task 3 epochs x 6 steps; steps 0, 5, 10 and 15 of the task probe the gradient norms
    # (eagerly), leaving 14: 3 eager warm-up steps with one key, one recorded, 10 replayed and
    # checked. In task 0 the key of a method that fills its buffer from the stream (ER, DER++)
    # changes once more: its buffer of 8 is full after two batches of 4, the first of them a
    # probe, so one more step warms up: 9 replays. X-DER fills its buffer at a task's end.
    assert checks == [0, 29 if name in ("er", "derpp") else 30]


class StepGraphsSpy(Callback):
    """A callback that sums the replays of the loop's StepGraphs at each task's end."""

    def __init__(self) -> None:
        self.replays = 0

    def on_step(self, loop) -> None:
        self.last = loop.graphs

    def on_task_end(self, loop, record) -> None:
        assert loop.graphs is None  # closed (its memory freed) before the task's end
        graphs = getattr(self, "last", None)
        if graphs is not None:
            assert isinstance(graphs.backend, ReplayCheck)
            self.replays += graphs.replays
            assert graphs.replays == graphs.backend.checked
        self.last = None


@dataclass(frozen=True, kw_only=True)
class _CountingConfig:
    pass


class _PythonCounter(MethodBase):
    """Declares its step replayable but keeps a step count in Python that the step reads: a
    replay would bake the count in (the bug the buffer's device counter avoids)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0

    def graph_key(self):
        return ()

    def observe(self, batch) -> StepOutput:
        loss = F.cross_entropy(self.net(batch.x), batch.y) * (1.0 + 0.0 * self.steps)
        self.steps += 1
        return StepOutput(loss, {})


class _Collector(MethodBase):
    """Declares its step replayable but appends to a Python list each step: a replay would not."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.losses: list[Tensor] = []

    def graph_key(self):
        return ()

    def observe(self, batch) -> StepOutput:
        loss = F.cross_entropy(self.net(batch.x), batch.y)
        self.losses.append(loss.detach())
        return StepOutput(loss, {})


class _ScalarBaker(MethodBase):
    """Declares its step replayable, changes no attribute, but reads a Python scalar that moves:
    the reservoir's draw with a host-side count."""

    seen: ClassVar[list[int]] = [0]

    def graph_key(self):
        return ()

    def observe(self, batch) -> StepOutput:
        slots = reservoir_slots(self.seen[0], batch.y.shape[0], 4, self.generator)
        self.seen[0] += batch.y.shape[0]
        loss = F.cross_entropy(self.net(batch.x), batch.y) + 0.0 * slots.float().sum()
        return StepOutput(loss, {})


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_PythonCounter, "changed Python state.*steps: 0 -> 1.*graph_key stayed the same"),
        (_Collector, r"changed Python state.*len\(losses\): 0 -> 1"),
        (_ScalarBaker, "ran other ops"),
    ],
)
def test_the_replay_check_catches_a_step_a_graph_would_get_wrong(
    cls, message, stream, transforms, tiny_net, setting_of
) -> None:
    _ScalarBaker.seen = [0]
    method = cls(
        tiny_net(6), setting_of(stream), transforms, _CountingConfig(), torch.Generator().manual_seed(0)
    )
    schedule = TrainingSchedule(epochs=1, batch_size=4, lr=0.1, record_every=0, step_graph=True)
    with pytest.raises(StepNotReplayable, match=message):
        fit(method, stream, schedule, generator=torch.Generator().manual_seed(1))


class _Backend:
    """Stands in for CUDA graphs: counts warm-ups, records and replays, and runs each eagerly."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def warm(self, body, x_raw, y):
        self.calls.append("warm")
        return body(x_raw, y)

    def record(self, body, x_raw, y):
        self.calls.append("record")
        return object(), body(x_raw, y)

    def replay(self, recorded, body, x_raw, y):
        self.calls.append("replay")
        return None


class _Keyed:
    """A method stand-in whose graph key the test sets."""

    def __init__(self) -> None:
        self.key: object = ()

    def graph_key(self):
        return self.key


def test_step_graphs_warm_record_replay_and_evict() -> None:
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    method, backend = _Keyed(), _Backend()
    graphs = StepGraphs(method, optimizer, None, warmup=2, capacity=2, backend=backend)
    x, y = torch.zeros(4, 1, 2, 2), torch.zeros(4, dtype=torch.int64)
    fed: list[Tensor] = []

    def body(x_raw: Tensor, y_: Tensor) -> StepResult:
        fed.append(x_raw)
        param.grad = torch.ones(2)
        return StepResult(x_raw.sum(), {}, {})

    def run(n: int, task: int = 0, batch: Tensor = x) -> list[str]:
        backend.calls.clear()
        for _ in range(n):
            graphs.step(body, batch, y, task)
        return list(backend.calls)

    assert run(5) == ["warm", "warm", "record", "replay", "replay"]
    assert (graphs.records, graphs.replays) == (1, 2)
    assert fed[2] is not x  # recorded on a static copy of the batch
    # A replay copies the batch into the record's static input.
    run(1, batch=torch.ones(4, 1, 2, 2))
    assert fed[2].sum() == 16
    method.key = None  # not replayable now: eager (no warm-up either), whatever was recorded
    assert run(3) == []
    assert len(fed) == 3 + 3
    method.key = ()
    assert run(1) == ["replay"]
    optimizer.param_groups[0]["lr"] = 0.01  # a new lr is a new key
    assert run(4) == ["warm", "warm", "record", "replay"]
    assert run(3, task=1) == ["warm", "warm", "record"]  # a third key: the oldest goes
    assert len(graphs.graphs) == 2
    optimizer.param_groups[0]["lr"] = 0.1
    assert run(3, task=0) == ["warm", "warm", "record"]
    # A key interrupted by another starts its warm-up again.
    method.key = ("a",)
    run(1)
    method.key = ("b",)
    run(1)
    method.key = ("a",)
    assert run(2) == ["warm", "warm"]
    graphs.close()
    assert not graphs.graphs
    assert param.grad is None


def test_replay_restores_the_recorded_gradients() -> None:
    """A replay writes the record's gradient tensors; the parameters point at them afterwards
    even if an eager step put others there in between."""
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    graphs = StepGraphs(_Keyed(), optimizer, None, warmup=0, backend=_Backend())
    x, y = torch.zeros(1, 1), torch.zeros(1, dtype=torch.int64)
    grads = iter([torch.full((2,), 1.0), torch.full((2,), 2.0)])

    def body(x_raw: Tensor, y_: Tensor) -> StepResult:
        param.grad = next(grads)
        return StepResult(None, {}, {})

    graphs.step(body, x, y, 0)  # recorded
    recorded = param.grad
    param.grad = torch.full((2,), 9.0)  # an eager step's
    graphs.step(body, x, y, 0)  # replayed
    assert param.grad is recorded


def test_step_graph_settings() -> None:
    with pytest.raises(ValueError, match="leave compile off"):
        TrainingSchedule(step_graph=True, compile=True)
    with pytest.raises(ValueError, match="SGD's step only"):
        TrainingSchedule(step_graph=True, optimizer="radam")


def test_reservoir_reads_a_device_count_as_an_int() -> None:
    """The buffer's count of items offered lives on the device: the same slots as from an int,
    and the count moves without a Python attribute changing once the buffer is full."""
    for seen in (0, 3, 17, 250):
        a = reservoir_slots(seen, 8, 10, torch.Generator().manual_seed(seen))
        b = reservoir_slots(torch.tensor(seen), 8, 10, torch.Generator().manual_seed(seen))
        assert torch.equal(a, b)
    buffer = Buffer(4, (1,), torch.float32)
    for _ in range(3):
        buffer.add_reservoir(torch.zeros(3, 1), torch.zeros(3, dtype=torch.int64))
    assert (buffer.num_seen, len(buffer)) == (9, 4)
    buffer.count_offered(2)
    assert buffer.num_seen == 11
    buffer.num_seen = 5
    assert int(buffer.seen) == 5


class _FakeCuda:
    """Stands in for the torch.cuda calls of :class:`CudaGraphs` (no GPU here): it logs what
    the backend asks of CUDA; a capture runs the step's Python (torch records its kernels), a
    replay runs nothing."""

    def __init__(self, monkeypatch, fail: str | None = None) -> None:
        self.log: list[str] = []
        self.fail = fail
        self.default = torch.Generator()
        fake = self

        class Stream:
            made = 0

            def __init__(self, device=None) -> None:
                self.name = "side" if Stream.made else "default"
                Stream.made += 1
                fake.log.append("new stream")

            def wait_stream(self, other) -> None:
                fake.log.append(f"{self.name} waits for {other.name}")

        self.current = Stream()
        self.log.clear()

        class Graph:
            def register_generator_state(self, generator) -> None:
                fake.log.append("register generator")

            def replay(self) -> None:
                fake.log.append("replay")

        @contextlib.contextmanager
        def context(label: str):
            fake.log.append(f"enter {label}")
            yield
            if label == "capture" and fake.fail:
                raise RuntimeError(fake.fail)
            fake.log.append(f"exit {label}")

        for name, value in {
            "Stream": Stream,
            "current_stream": lambda device=None: fake.current,
            "stream": lambda stream: context(f"stream {stream.name}"),
            "CUDAGraph": Graph,
            "graph": lambda graph: context("capture"),
            "device": lambda device: contextlib.nullcontext(),
            "default_generators": (self.default,),
        }.items():
            monkeypatch.setattr(torch.cuda, name, value, raising=False)


def _counting_body(log: list[str], param: torch.nn.Parameter):
    def body(x_raw: Tensor, y: Tensor) -> StepResult:
        log.append("body")
        param.grad = torch.ones(2)
        return StepResult(x_raw.sum(), {}, {})

    return body


def test_cuda_backend_warms_on_a_side_stream_captures_with_the_generator_and_replays(monkeypatch) -> None:
    cuda = _FakeCuda(monkeypatch)
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    backend = CudaGraphs(torch.Generator(), torch.device("cuda", 0))
    graphs = StepGraphs(_Keyed(), optimizer, None, warmup=1, backend=backend)
    body = _counting_body(cuda.log, param)
    x, y = torch.zeros(2), torch.zeros(2, dtype=torch.int64)
    for _ in range(3):
        graphs.step(body, x, y, 0)
    assert cuda.log == [
        "new stream",
        # warm-up: the side stream waits for the batch, the step runs there, the stream waits back
        *[
            "side waits for default",
            "enter stream side",
            "body",
            "exit stream side",
            "default waits for side",
        ],
        # the recorded step: the run's generator registered, the step captured, then run once
        *["register generator", "enter capture", "body", "exit capture", "replay"],
        "replay",  # the third step: replayed, no Python of the step
    ]
    assert graphs.records == 1
    assert graphs.replays == 1
    # The default generator needs no registering (torch registers it with every capture).
    cuda.log.clear()
    CudaGraphs(cuda.default, torch.device("cuda", 0)).record(body, x, y)
    assert "register generator" not in cuda.log


def test_a_step_that_cannot_be_captured_runs_eagerly_with_a_warning(monkeypatch) -> None:
    cuda = _FakeCuda(monkeypatch, fail="operation not permitted when stream is capturing\nmore")
    param = torch.nn.Parameter(torch.zeros(2))
    graphs = StepGraphs(
        _Keyed(),
        torch.optim.SGD([param], lr=0.1),
        None,
        warmup=0,
        backend=CudaGraphs(None, torch.device("cuda")),
    )
    body = _counting_body(cuda.log, param)
    x, y = torch.zeros(2), torch.zeros(2, dtype=torch.int64)
    with pytest.warns(RuntimeWarning, match="could not be captured.*not permitted when stream is capturing$"):
        graphs.step(body, x, y, 0)
    graphs.step(body, x, y, 0)
    assert cuda.log[-4:] == ["enter capture", "body", "body", "body"]  # captured once, then eager
    assert graphs.records == 0
    assert list(graphs.refused.values()) == ["operation not permitted when stream is capturing"]


def test_a_warm_up_step_that_changes_python_state_under_the_same_key_is_refused(
    stream, transforms, tiny_net, setting_of
) -> None:
    """On any backend (here a stand-in for CUDA graphs, which cannot check ops), a declared
    replayable step whose Python state moves while its key stays is stopped at its warm-up."""
    method = _PythonCounter(tiny_net(6), setting_of(stream), transforms, _CountingConfig(), None)
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    graphs = StepGraphs(method, optimizer, None, backend=_Backend())
    x, y = stream.train_x[:4], stream.train_y[:4]

    def body(x_raw: Tensor, y_: Tensor) -> StepResult:
        out = method.observe(Batch(x_raw.float(), y_, x_raw, 0))
        return StepResult(out.loss.detach(), {}, {})

    with pytest.raises(StepNotReplayable, match=r"steps: 0 -> 1.*graph_key stayed the same"):
        graphs.step(body, x, y, 0)
    # A state change that moves the key too (a buffer filling up) is a new key, not an error.
    method.graph_key = lambda: ("steps", method.steps)  # type: ignore[method-assign]
    graphs.step(body, x, y, 0)


def test_the_replay_check_refuses_a_recorded_step_that_changes_python_state(
    stream, transforms, tiny_net, setting_of
) -> None:
    """ReplayCheck's own state check, for a step recorded without warm-up."""
    method = _PythonCounter(tiny_net(6), setting_of(stream), transforms, _CountingConfig(), None)

    def body(x_raw: Tensor, y_: Tensor) -> StepResult:
        out = method.observe(Batch(x_raw.float(), y_, x_raw, 0))
        return StepResult(out.loss.detach(), {}, {})

    with pytest.raises(StepNotReplayable, match=r"declared replayable, changed Python state.*steps: 0 -> 1"):
        ReplayCheck(method).record(body, stream.train_x[:4], stream.train_y[:4])
