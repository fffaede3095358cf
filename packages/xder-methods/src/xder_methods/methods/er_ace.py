"""ER-ACE (``er_ace``): Experience Replay with Asymmetric Cross-Entropy (Caccia et al., "New
Insights on Reducing Abrupt Representation Change in Online Continual Learning", ICLR 2022).

Each step takes two cross-entropies on two separate forward passes:

* stream: ``CE(mask(f(x)), y)`` where ``mask`` sends to -inf the logits of every class absent from
  the stream batch (from task 1 on; during task 0, of every class not yet seen), so that the
  incoming classes are only contrasted with each other and the logits of past classes receive no
  gradient from new data (:func:`asymmetric_mask`, :func:`masked_cross_entropy`);
* replay: ``CE(f(aug(x_M))[:, :seen], y_M)`` on an independent batch of ``minibatch_size`` buffer
  items, one softmax over all the classes seen so far.

The stream batch then enters a reservoir buffer (unaugmented), as in ER.

Hyperparameters: none besides the buffer. The X-DER paper's App. "Hyperparameter Choice" (Split
CIFAR-100, M = 500 and 2000) selects lr 0.03, momentum 0, weight decay 0: those belong to the
benchmark protocol (``TrainingSchedule``) and the CLI presets, not to this config.

Deviations from the authors' code (Caccia et al.'s release and mammoth's ``er_ace``; also in
docs/methods.md, "What the competitors compute"):

* both codes leave the logits of the classes not yet seen (labels from the largest seen one on)
  UNMASKED in the stream term, so that future classes are pushed down by new data; here they are
  masked like every other absent class;
* both codes take the replay cross-entropy over all outputs, future classes included; here it
  spans the classes seen so far (tasks 0..t);
* "seen classes" are the classes of tasks 0..t (the problem setting), where the authors track the
  labels observed so far; the two agree once every class of the task has appeared in a batch;
* task 0: Caccia et al. (task-free) mask from the first step; mammoth applies no mask during task 0
  (a plain cross-entropy over all outputs); here task 0's stream term is a softmax over its own
  classes;
* replay starts as soon as the buffer holds items (Caccia et al.'s task-free code and this
  project's ER); mammoth replays only from task 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from xder_methods.core.protocols import Batch, Scenario, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.methods.er import ER
from xder_methods.parts.losses import (
    asymmetric_mask,
    asymmetric_refusals,
    masked_cross_entropy,
    seen_class_cross_entropy,
)
from xder_methods.parts.replay import ReplayConfig

__all__ = ["ERACE", "ERACEConfig"]


@dataclass(frozen=True, kw_only=True)
class ERACEConfig(ReplayConfig):
    """ER-ACE has only the buffer settings (M = 500, 32 replayed items per step on Split
    CIFAR-100). The paper's table selects lr 0.03, momentum 0 and weight decay 0 (benchmark
    protocol, not this config)."""


@register_method("er_ace", ERACEConfig)
class ERACE(ER[ERACEConfig]):
    """Experience Replay with Asymmetric Cross-Entropy (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the asymmetric cross-entropy keeps the new classes' loss off
    the past classes' logits (a Domain-IL task brings no new classes) and masks from the second
    task on (a general stream is one task: it would be plain ER), as the authors' code lists it
    (class-il, task-il).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = asymmetric_refusals("ER")

    def observe(self, batch: Batch) -> StepOutput:
        num_seen = self.seen_classes(batch.task)
        logits = self.net(batch.x)
        mask = asymmetric_mask(batch.y, logits.shape[1], task=batch.task, num_seen=num_seen)
        stream = masked_cross_entropy(logits, batch.y, mask)
        terms = {"ce": stream.detach()}
        groups = {"stream": stream}
        loss = stream
        if len(self.buffer):
            sample = self.buffer.sample(self.config.minibatch_size, self.generator)
            replayed = self.net(self.transforms.train(sample.examples, self.generator))
            replay = seen_class_cross_entropy(replayed, sample.labels, num_seen)
            terms["buffer_ce"] = replay.detach()
            groups["buffer"] = replay
            loss = loss + replay
        self.buffer.add_reservoir(batch.x_raw, batch.y, task_labels=batch.task, generator=self.generator)
        return StepOutput(loss, terms, groups)
