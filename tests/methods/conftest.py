"""Tiny networks and synthetic streams: xder-methods is tested with no sibling package."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

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

    @property
    def n_tasks(self) -> int:
        return len(self.classes_per_task)

    def task(self, t: int) -> Split:
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
    return ContinualSetting(stream.classes_per_task, tuple(stream.train_x.shape[1:]))


@pytest.fixture(name="make_stream")
def make_stream_fixture():
    return make_stream


@pytest.fixture(name="tiny_net")
def tiny_net_fixture():
    return TinyNet


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
