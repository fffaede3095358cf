"""The one shallow helper base class of the methods: shared plumbing, no training logic."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor, nn

from xder_methods.protocols import Batch, ContinualSetting, StepOutput, TaskData, Transforms

__all__ = ["MethodBase", "frozen_batchnorm_stats"]


@contextlib.contextmanager
def frozen_batchnorm_stats(module: nn.Module) -> Iterator[None]:
    """Inside the block, BatchNorm layers in train mode normalise with the batch statistics but
    leave their running statistics (and ``num_batches_tracked``) untouched."""
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.track_running_stats for m in layers]
    for m in layers:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m, value in zip(layers, saved, strict=True):
            m.track_running_stats = value


class MethodBase(nn.Module):
    """Holds the network, the problem setting, the transforms, the config and the generator.

    Being an ``nn.Module``, a method's ``state_dict`` holds everything it owns (network, replay
    buffer, teacher, counters), so checkpoints and resume work for every method alike.
    """

    training_data: Literal["task", "cumulative", "none"] = "task"

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: Any,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.net = net
        self.setting = setting
        self.transforms = transforms
        self.config = config
        self.generator = generator
        self.current_task = 0

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def seen_classes(self, task: int | None = None) -> int:
        """Number of classes seen up to and including ``task`` (default: the current task)."""
        return self.setting.class_range(self.current_task if task is None else task)[1]

    def begin_task(self, task: int) -> None:
        self.current_task = task

    def observe(self, batch: Batch) -> StepOutput:
        raise NotImplementedError

    def end_task(self, task: int, data: TaskData) -> None:
        """Called once after the last epoch of ``task``; nothing by default."""

    def predict(self, x: Tensor) -> Tensor:
        """Logits over all classes, ``(B, num_classes)``; the loop restricts them for Class-IL."""
        return self.net(x)

    def optimizer_parameters(self) -> Iterator[nn.Parameter]:
        """What the loop's per-task SGD optimises (the network by default)."""
        return self.net.parameters()

    def get_extra_state(self) -> dict[str, Any]:
        return {"current_task": self.current_task}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.current_task = int(state["current_task"])
