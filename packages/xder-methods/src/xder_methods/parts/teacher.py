"""A method that keeps a frozen copy of the network from the end of the previous task (LwF,
LwF.MC, iCaRL, LUCIR, BiC): its base class."""

from __future__ import annotations

import torch
from torch import nn

from xder_methods.core.base import ConfigT, MethodBase
from xder_methods.core.protocols import ContinualSetting, Transforms
from xder_methods.parts.networks import frozen_copy

__all__ = ["PreviousModelTeacher"]


class PreviousModelTeacher(MethodBase[ConfigT]):
    """A method with a teacher: a frozen copy of the network as it was when the current task
    began (LwF.MC, iCaRL, LwF, LUCIR, BiC). Registered from the start, so that every
    ``state_dict`` has the same keys; refreshed at ``begin_task`` of every task t >= 1; in eval
    mode even while the method trains."""

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: ConfigT,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.teacher = frozen_copy(net)

    def train(self, mode: bool = True) -> PreviousModelTeacher[ConfigT]:
        super().train(mode)
        self.teacher.train(False)
        return self

    def begin_task(self, task: int) -> None:
        super().begin_task(task)
        if task >= 1:
            self.teacher.load_state_dict(self.net.state_dict())
