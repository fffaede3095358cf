"""A method of your own, inline: experience replay, whole (docs/plugins.md). Train it with
``uv run xder-run train --plugin examples/my_er.py --method my_er``."""

from dataclasses import dataclass

import torch.nn.functional as F

from xder_methods import Batch, Buffer, MethodBase, ReplayConfig, StepOutput, register_method


@dataclass(frozen=True, kw_only=True)
class MyERConfig(ReplayConfig):  # buffer_size and minibatch_size, which the protocol fills
    buffer_size: int = 200


@register_method("my_er", MyERConfig)
class MyER(MethodBase):
    def __init__(self, net, setting, transforms, config, generator=None):
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)

    def replay_memory(self) -> Buffer:
        return self.buffer

    def observe(self, batch: Batch) -> StepOutput:
        loss = F.cross_entropy(self.net(batch.x), batch.y)
        if len(self.buffer) > 0:
            past = self.buffer.sample(self.config.minibatch_size, self.generator)
            replayed = self.transforms.train(past.examples, self.generator)
            loss = loss + F.cross_entropy(self.net(replayed), past.labels)
        self.buffer.add_reservoir(batch.x_raw, batch.y, generator=self.generator)
        return StepOutput(loss, {"ce": loss.detach()})
