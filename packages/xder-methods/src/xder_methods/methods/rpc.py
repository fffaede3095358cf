"""RPC (``rpc``): Experience Replay with a fixed Regular Polytope Classifier (Pernici et al.,
"Class-Incremental Learning with Pre-Allocated Fixed Classifiers", ICPR 2020).

The network's first K - 1 outputs (K = every class of the sequence, future ones included) are read
as a point of R^{K-1}; the logits are its dot products with the K vertices of a regular simplex
(:func:`~xder_methods.parts.heads.regular_simplex`, the construction X-DER's ``future_heads="rpc"`` uses):

    ``logits = f(x)[:, :K-1] @ V.T``,  ``V``: (K, K-1), unit rows, pairwise dot product -1/(K-1).

``V`` is a fixed buffer, never a parameter: every class, seen or not, keeps the same geometry.
``predict`` returns the polytope logits. Training is ER's (the stream batch and
``minibatch_size`` weakly augmented buffer items, one cross-entropy over ALL K classes, the
pre-allocated ones included) on the outputs ``training`` names, with the memory
``buffer_policy`` names:

* the X-DER paper's code (mammoth's ``rpc``, which produced its Table 1 row; the defaults and the
  ``paper`` preset): ``training="raw"``, the cross-entropy on the network's raw K outputs, the
  polytope used only to evaluate; ``buffer_policy="class_balanced"``, a memory filled at each
  task's end (every stored class shrunk to ``M // seen classes`` items, keeping the earliest,
  the free slots shared among the new classes), so nothing is replayed during task 0;
* the RPC paper's reading: ``training="polytope"``, the cross-entropy on the polytope logits
  (training and evaluation share one output space), and ``buffer_policy="reservoir"``, ER's
  memory filled from the stream.

Hyperparameters: only the buffer. The X-DER paper's App. "Hyperparameter Choice" (Split
CIFAR-100, M = 500 and 2000) selects lr 0.1, momentum 0, weight decay 0: benchmark protocol and
CLI presets, not this config.

Details:

* the new classes' items of the memory are random items of each class (mammoth: the first the
  shuffled loader yields, the same distribution);
* through the polytope the network's K-th output takes no part in the logits: with
  ``training="polytope"`` its weights receive no gradient (they stay in
  ``optimizer_parameters``, being a row of the network's own classifier).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, ContinualSetting, Scenario, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.methods.er import ER
from xder_methods.parts.heads import polytope_logits, regular_simplex
from xder_methods.parts.replay import ReplayConfig
from xder_methods.parts.selection import class_balanced_quotas, rank_within_class

__all__ = ["RPC", "RPCConfig"]


@dataclass(frozen=True, kw_only=True)
class RPCConfig(ReplayConfig):
    """Attributes:
    training: the outputs the cross-entropy is taken on: ``raw`` (default, the X-DER paper's
        code: the network's own K outputs) or ``polytope`` (the polytope logits ``predict``
        returns).
    buffer_policy: ``class_balanced`` (default, the X-DER paper's code: filled at each task
        end, every seen class holding ``M // seen`` items; no replay during task 0) or
        ``reservoir`` (ER's memory, filled from the stream).
    """

    training: Literal["raw", "polytope"] = "raw"
    buffer_policy: Literal["reservoir", "class_balanced"] = "class_balanced"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training not in ("raw", "polytope"):
            raise MethodConfigError(f"method.training must be raw or polytope, got {self.training!r}")
        if self.buffer_policy not in ("reservoir", "class_balanced"):
            raise MethodConfigError(
                f"method.buffer_policy must be reservoir or class_balanced, got {self.buffer_policy!r}"
            )


@register_method("rpc", RPCConfig)
class RPC(ER[RPCConfig]):
    """ER through a fixed Regular Polytope Classifier (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the class-balanced memory is filled at each task's end (a
    general stream has none) with the task's new classes (a Domain-IL task brings none), as the
    authors' code lists it (class-il, task-il).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "its memory shares its free slots among each task's new classes, and a domain-il task"
            " brings no new classes"
        ),
        "general": (
            "it fills its class-balanced memory at each task's end, and a general stream has no task ends"
        ),
    }

    polytope: Tensor

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: RPCConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        # A function of K only: kept out of the state dict, never optimised.
        self.register_buffer(
            "polytope", regular_simplex(setting.num_classes).to(self.device), persistent=False
        )

    def logits(self, x: Tensor) -> Tensor:
        """(B, K) the outputs trained on: the network's own (``raw``) or the polytope logits."""
        if self.config.training == "raw":
            logits: Tensor = self.net(x)
            return logits
        return self.predict(x)

    def predict(self, x: Tensor) -> Tensor:
        """(B, K) polytope logits of ``x``."""
        return polytope_logits(self.net(x), self.polytope)

    def store(self, batch: Batch) -> None:
        if self.config.buffer_policy == "reservoir":
            super().store(batch)

    def prefill(self, task: int, data: TaskData) -> None:
        """With the class-balanced memory, :meth:`end_task` (which fills it); else ER's."""
        if self.config.buffer_policy == "class_balanced":
            self.end_task(task, data)
        else:
            super().prefill(task, data)

    @torch.no_grad()
    def end_task(self, task: int, data: TaskData) -> None:
        if self.config.buffer_policy == "class_balanced":
            self._fill_class_balanced(task, data)

    def _fill_class_balanced(self, task: int, data: TaskData) -> None:
        """mammoth's end-of-task memory: shrink every stored class to ``M // seen`` items (keeping
        the earliest), then share the free slots among the new classes (random items of each)."""
        buffer, capacity = self.buffer, self.buffer.capacity
        start, end = self.setting.class_range(task)
        kept = 0
        if len(buffer):
            stored = buffer.all()
            rank = rank_within_class(stored.labels, self.setting.num_classes)
            rows = torch.nonzero(rank < capacity // end).flatten()
            kept = rows.shape[0]
            item = buffer.gather(rows)
            slots = torch.arange(kept, device=rows.device)
            buffer.write(slots, item.examples, item.labels, task_labels=item.task_labels)
        new_classes = end - start
        quotas = class_balanced_quotas(capacity - kept, new_classes, self.generator, data.y.device)
        order = torch.randperm(data.y.shape[0], generator=self.generator, device=data.y.device)
        local = data.y[order] - start
        picked = order[rank_within_class(local, new_classes) < quotas[local]]
        slots = torch.arange(kept, kept + picked.shape[0], device=picked.device)
        buffer.write(slots, data.x_raw[picked], data.y[picked], task_labels=task)
        buffer.set_size(kept + picked.shape[0])
        buffer.num_seen = len(buffer)
