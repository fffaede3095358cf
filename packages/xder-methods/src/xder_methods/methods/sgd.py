"""FT (``sgd``): plain fine-tuning on each task in turn, the lower bound of the paper's Table 1."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xder_methods.core.base import MethodBase
from xder_methods.core.protocols import Batch, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.parts.losses import seen_class_cross_entropy

__all__ = ["FineTuning", "FineTuningConfig"]


@dataclass(frozen=True, kw_only=True)
class FineTuningConfig:
    """FT has no hyperparameters of its own (lr and epochs are the benchmark's protocol)."""


@register_method("sgd", FineTuningConfig)
class FineTuning(MethodBase[FineTuningConfig]):
    """Fine-tuning (FT), X-DER paper Sec. 5.2: cross-entropy on the current task, no remedy.

    The softmax spans the classes seen so far (docs/methods.md, "What the competitors compute").
    Deviation from the authors' code: mammoth's ``sgd`` takes the cross-entropy over all outputs,
    future classes included; under Class-IL evaluation over seen classes both forget alike.
    """

    def graph_key(self) -> Hashable | None:
        """Always replayable (:meth:`MethodBase.graph_key`): the step depends on the task only."""
        return ()

    def observe(self, batch: Batch) -> StepOutput:
        loss = seen_class_cross_entropy(self.net(batch.x), batch.y, self.seen_classes(batch.task))
        return StepOutput(loss, {"ce": loss.detach()})
