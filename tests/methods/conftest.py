"""Tiny networks and synthetic streams: xder-methods is tested with no sibling package."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from xder_methods import Batch, Callback, ContinualSetting, TaskData, Transforms, create_method, fit


class TinyNet(nn.Module):
    """A small backbone satisfying the protocol: (B, 1, 2, 2) -> (B, classes)."""

    def __init__(self, num_classes: int, batchnorm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten(), nn.Linear(4, 16)]
        if batchnorm:
            layers.append(nn.BatchNorm1d(16))
        layers.append(nn.ReLU())
        self.body = nn.Sequential(*layers)
        self.classifier = nn.Linear(16, num_classes)
        self.num_features = 16

    def pnn_stages(self) -> tuple[nn.Module, ...]:
        """Its features and its head, as PNN's stages (xder_methods.StagedBackbone)."""
        return self.body, self.classifier

    def forward_features(self, x: Tensor) -> Tensor:
        return self.body(x)

    def forward_head(self, features: Tensor) -> Tensor:
        return self.classifier(features)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


def to_float(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Test transform: uint8 -> [0, 1] float."""
    return x.float() / 255


def jitter(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Train transform: [0, 1] float plus per-sample noise from the generator."""
    return x.float() / 255 + 0.01 * torch.randn(x.shape, generator=generator)


@dataclass
class Split:
    class_start: int
    class_end: int
    train: Tensor
    test: Tensor
    val: Tensor | None = None


@dataclass
class Stream:
    """A synthetic class-incremental stream: each class is a noisy prototype image."""

    classes_per_task: tuple[int, ...]
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    val_x: Tensor | None = None
    val_y: Tensor | None = None
    scenario: str = "class-il"
    train_task: Tensor | None = None
    test_task: Tensor | None = None
    val_task: Tensor | None = None
    train_segment: Tensor | None = None

    @property
    def n_tasks(self) -> int:
        return len(self.classes_per_task)

    def task(self, t: int) -> Split:
        if self.scenario == "domain-il":  # every task holds every label; rows by their task
            assert self.train_task is not None
            assert self.test_task is not None
            train, test = (torch.nonzero(tasks == t).flatten() for tasks in (self.train_task, self.test_task))
            return Split(0, self.classes_per_task[0], train, test)
        start = sum(self.classes_per_task[:t])
        end = start + self.classes_per_task[t]

        def rows(y: Tensor) -> Tensor:
            return torch.nonzero((y >= start) & (y < end)).flatten()

        return Split(start, end, rows(self.train_y), rows(self.test_y))


def make_stream(classes_per_task=(2, 2, 2), per_class=12, test_per_class=6, seed=0) -> Stream:
    g = torch.Generator().manual_seed(seed)
    n_classes = sum(classes_per_task)
    prototypes = torch.randint(0, 256, (n_classes, 1, 2, 2), generator=g)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        y = torch.arange(n_classes).repeat_interleave(n)
        noise = torch.randint(-20, 21, (y.shape[0], 1, 2, 2), generator=g)
        x = (prototypes[y] + noise).clamp(0, 255).to(torch.uint8)
        return x, y

    train_x, train_y = draw(per_class)
    test_x, test_y = draw(test_per_class)
    return Stream(tuple(classes_per_task), train_x, train_y, test_x, test_y)


@pytest.fixture
def stream() -> Stream:
    return make_stream()


@pytest.fixture
def transforms() -> Transforms:
    return Transforms(train=jitter, test=to_float, strong=jitter)


def setting_of(stream: Stream) -> ContinualSetting:
    return ContinualSetting(
        stream.classes_per_task,
        tuple(stream.train_x.shape[1:]),
        scenario=stream.scenario,  # type: ignore[arg-type]
    )


TASK_GIVEN = frozenset({"pnn"})
"""The methods that run only with the task given at test time (task-il): the registry-wide tests
train them on the class-incremental stream as task-il (:func:`stream_for`)."""


def stream_for(name: str, stream: Stream) -> Stream:
    """``stream`` in the scenario method ``name`` runs in: task-il for :data:`TASK_GIVEN`."""
    return dataclasses.replace(stream, scenario="task-il") if name in TASK_GIVEN else stream


@pytest.fixture(name="stream_for")
def stream_for_fixture():
    return stream_for


@pytest.fixture(name="make_stream")
def make_stream_fixture():
    return make_stream


@pytest.fixture(name="tiny_net")
def tiny_net_fixture():
    return TinyNet


@pytest.fixture
def batchnorm_net():
    """A TinyNet (3 classes, BatchNorm) in train mode whose running statistics are drawn away from
    their initial values (seed 0), the BatchNorm layer, copies of its statistics, and an eval-mode
    copy of the network to compute expected outputs with."""
    torch.manual_seed(0)
    net = TinyNet(3, batchnorm=True).train(True)
    batchnorm = net.body[2]
    with torch.no_grad():
        batchnorm.running_mean.uniform_(-1, 1)
        batchnorm.running_var.uniform_(0.5, 2)
    statistics = [t.clone() for t in batchnorm.buffers()]
    return net, batchnorm, statistics, copy.deepcopy(net).eval()


@pytest.fixture(name="setting_of")
def setting_of_fixture():
    return setting_of


class _Interrupt(Exception):
    pass


class _SnapshotAndStop(Callback):
    """Takes the loop's snapshot at the end of the ``after_epochs``-th epoch, then stops the fit."""

    def __init__(self, after_epochs: int) -> None:
        self.after, self.seen, self.snapshot = after_epochs, 0, None

    def on_epoch_end(self, loop, record) -> None:
        self.seen += 1
        if self.seen == self.after:
            self.snapshot = loop.snapshot()
            raise _Interrupt


@pytest.fixture
def snapshot_after():
    """``snapshot_after(method, stream, schedule, generator, epochs)``: fit, interrupted at the end of
    its ``epochs``-th epoch; returns the loop's snapshot taken there (what a checkpoint holds)."""

    def run(method, stream, schedule, generator, epochs: int) -> dict:
        stopper = _SnapshotAndStop(epochs)
        with pytest.raises(_Interrupt):
            fit(method, stream, schedule, generator=generator, callbacks=[stopper])
        assert stopper.snapshot is not None
        return stopper.snapshot

    return run


@pytest.fixture
def in_second_task():
    """``in_second_task(name, stream, transforms, config, batchnorm=True)``: the method built on a
    TinyNet (seeded), its buffer filled from task 0 (X-DER by its end-of-task insertion, the others
    by one step on six task-0 items), and task 1 begun: ready for a task-1 step with replay."""

    def build(name: str, stream: Stream, transforms: Transforms, config, batchnorm: bool = True):
        torch.manual_seed(0)
        method = create_method(
            name,
            net=TinyNet(sum(stream.classes_per_task), batchnorm=batchnorm),
            setting=setting_of(stream),
            transforms=transforms,
            config=config,
            generator=torch.Generator().manual_seed(0),
        )
        rows = stream.task(0).train
        if name == "xder":
            method.end_task(0, TaskData(stream.train_x[rows], stream.train_y[rows], 0))
        else:
            x = stream.train_x[rows[:6]]
            method.observe(Batch(transforms.train(x), stream.train_y[rows[:6]], x, 0))
        method.begin_task(1)
        return method

    return build


# ---------------------------------------------------------------------------------------------
# A second device emulated on the CPU: data in host memory beside a run on a GPU, where the CPU
# is all there is.


class Elsewhere(Tensor):
    """Data held off the training device (a stand-in for host memory beside a GPU): it says it is
    on the meta device and keeps its values on the CPU; indexing it stays there, and only a copy
    (``.to`` a device) brings the values to a device, as a plain tensor."""

    @staticmethod
    def __new__(cls, inner: Tensor):
        return Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device="meta")

    def __init__(self, inner: Tensor) -> None:
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(lambda t: t.inner if isinstance(t, Elsewhere) else t, (args, kwargs or {}))
        out = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default:
            return out
        return tree_map(lambda t: Elsewhere(t) if isinstance(t, Tensor) else t, out)


META, CPU = torch.device("meta"), torch.device("cpu")


class OnTheDevice(TorchDispatchMode):
    """Makes the meta device a second device that holds data, for the CPU to stand in for a GPU:
    a tensor made or copied there is an :class:`Elsewhere` (its values kept on the CPU), ops on
    it stay there, and a copy back to the CPU is a plain tensor. As torch's rules go, an op mixing
    it with a CPU tensor fails, except for CPU indices into it and CPU scalars; a CPU tensor
    indexed by indices held there, read or written, fails too."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        there = kwargs.get("device") == META
        if func is torch.ops.aten._to_copy.default:
            (source,) = args
            inner = source.inner if isinstance(source, Elsewhere) else source
            copy = func(inner, **{**kwargs, "device": CPU})
            return Elsewhere(copy) if there else copy
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        if not there and not any(isinstance(t, Elsewhere) for t in tensors):
            return func(*args, **kwargs)
        if func is torch.ops.aten.index.Tensor:
            if not isinstance(args[0], Elsewhere):
                raise RuntimeError(
                    "indices should be either on cpu or on the same device as the indexed tensor"
                )
        elif any(not isinstance(t, Elsewhere) and t.dim() > 0 for t in tensors):
            raise RuntimeError("Expected all tensors to be on the same device")
        args, kwargs = tree_map(lambda t: t.inner if isinstance(t, Elsewhere) else t, (args, kwargs))
        if there:
            kwargs["device"] = CPU
        return tree_map(lambda t: Elsewhere(t) if isinstance(t, Tensor) else t, func(*args, **kwargs))


class GeneratorThere(torch.Generator):
    """The run's generator on that second device (it draws on the CPU, where its values are)."""

    @property
    def device(self) -> torch.device:
        return META


class SecondDevice:
    """The emulated second device's pieces, as the ``second_device`` fixture hands them out (no
    folder of tests is importable by name): :class:`Elsewhere`, :class:`OnTheDevice`,
    :class:`GeneratorThere`."""

    Elsewhere = Elsewhere
    OnTheDevice = OnTheDevice
    GeneratorThere = GeneratorThere


@pytest.fixture
def second_device() -> type[SecondDevice]:
    return SecondDevice
