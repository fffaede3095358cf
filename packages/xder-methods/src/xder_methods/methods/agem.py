"""A-GEM (``agem``): Averaged GEM (Chaudhry, Ranzato, Rohrbach & Elhoseiny, "Efficient Lifelong
Learning with A-GEM", ICLR 2019).

GEM's K constraints, one per past task, become one: the stream gradient ``g`` may not increase
the loss on a random minibatch of the whole episodic memory to first order. The projection then
has a closed form (paper Eq. 11), computed on the device without a host synchronisation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.protocols import Batch, ContinualSetting, Scenario, StepOutput, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.gradients import assign_gradients, flatten_gradients
from xder_methods.parts.replay import ReplayConfig
from xder_methods.parts.task_memory import EpisodicMemory

__all__ = ["AGEM", "AGEMConfig", "project_agem"]


@dataclass(frozen=True, kw_only=True)
class AGEMConfig(ReplayConfig):
    """Attributes:
    buffer_size: episodic memory size M, split evenly among the tasks (``M // n_tasks`` examples
        each); 200 (DER paper Table 2, Split CIFAR-10, the smaller of its buffers 200 and 500).
    minibatch_size: memory examples drawn per step for the reference gradient; 32 (mammoth
        ``best_args``, ``seq-cifar10`` ``agem``, buffers 200 and 500).
    """

    buffer_size: int = 200
    minibatch_size: int = 32


def project_agem(gradient: Tensor, reference: Tensor) -> Tensor:
    """A-GEM's projection (paper Eq. 11)::

        g~ = g - (<g, g_ref> / <g_ref, g_ref>) g_ref   if <g, g_ref> < 0,   else g

    chosen with ``torch.where`` on the dot product, so no value is read back to the host.
    A zero ``g_ref`` has ``<g, g_ref> = 0``: ``g`` is kept.

    Args:
        gradient: (P,) g, the stream gradient.
        reference: (P,) g_ref, the gradient on a memory minibatch.

    Returns:
        (P,) g~, with ``<g~, g_ref> >= 0`` (``= 0`` up to rounding where it projected).
    """
    dot = gradient @ reference
    # Where dot < 0, <g_ref, g_ref> > 0; the other branch's 0/0 is discarded by the where.
    scale = torch.where(dot < 0, dot / (reference @ reference), torch.zeros_like(dot))
    return gradient - scale * reference


@register_method("agem", AGEMConfig)
class AGEM(EpisodicMemory[AGEMConfig]):
    """Averaged Gradient Episodic Memory (Chaudhry et al., ICLR 2019).

    Update, with ``g`` the gradient of the stream loss and ``g_ref`` the gradient of the loss on
    ``minibatch_size`` examples drawn uniformly from the whole episodic memory::

        g~ = g - (g^T g_ref / g_ref^T g_ref) g_ref   if g^T g_ref < 0,   else g

    and SGD steps along ``g~`` (:func:`project_agem`). :meth:`observe` returns the stream loss
    and computes ``g_ref`` (``torch.autograd.grad``: the parameters' ``.grad`` is untouched);
    :meth:`after_backward` projects the gradient the loop has just computed, in place.
    No host synchronisation: the branch is a ``torch.where`` on the device.

    The episodic memory is GEM's (:class:`~xder_methods.parts.task_memory.EpisodicMemory`, the
    base of both): at each task's end, ``buffer_size // n_tasks`` examples drawn uniformly from
    the task's training set, unaugmented, in rows of their own.

    Checked against the paper and the DER paper's code (mammoth ``models/agem.py``,
    ``utils/buffer.py``); where they differ:

    * Memory: the A-GEM paper fills a fixed share of the memory per task (its code: a ring
      buffer per task, or the task's examples at its end); mammoth's ``agem`` (the DER paper's
      A-GEM row) adds ``buffer_size // n_tasks`` uniformly drawn examples of each task at the
      task's end. Followed: mammoth. (mammoth's ``agem_r``, a reservoir memory filled from the
      stream, is a method of its own: :class:`~xder_methods.methods.agem_r.AGEMR`.)
    * Losses: the A-GEM paper's benchmarks are task-incremental, each loss over the task's own
      outputs; mammoth takes the cross-entropy over all outputs, for the stream batch and the
      memory minibatch (weakly augmented, drawn without replacement). Followed: mammoth (the
      Class-IL numbers depend on it).
    * Branch: mammoth reads ``g^T g_ref < 0`` back to the host (``.item()``) to choose; here
      ``torch.where`` chooses on the device: the same update, no synchronisation.
    * Order and BatchNorm: as mammoth, the stream pass comes before the memory pass (train
      mode: BatchNorm updates its running statistics twice per step from task 1 on).

    Protocol values (DER paper, Split CIFAR-10, mammoth ``best_args``, buffers 200 and 500):
    lr 0.03, no momentum or weight decay, batch 32, 50 epochs; minibatch_size 32. Where the
    run differs, it is the loop's, not this class's (a fresh SGD optimiser per task: the same
    without momentum).

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): it stores each task's share of the memory at the task's end,
    which a general stream never has.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": (
            "it stores each task's share of its memory at the task's end, and a general stream "
            "has no task ends"
        ),
    }

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: AGEMConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self._reference: Tensor | None = None  # (P,) g_ref, from observe to after_backward

    def observe(self, batch: Batch) -> StepOutput:
        loss = F.cross_entropy(self.net(batch.x), batch.y)
        terms = {"ce": loss.detach()}
        if len(self.buffer):
            sample = self.buffer.sample(self.config.minibatch_size, self.generator)
            reference = F.cross_entropy(self.net(self.reference_view(sample.examples)), sample.labels)
            params = self.trained_parameters()
            grads = torch.autograd.grad(reference, params, allow_unused=True)
            self._reference = flatten_gradients(params, grads)
            terms["reference_ce"] = reference.detach()
        return StepOutput(loss, terms)

    def reference_view(self, examples: Tensor) -> Tensor:
        """The network's input for the memory minibatch (examples as stored): weakly augmented
        and normalised (``transforms.train``), as mammoth's ``agem``."""
        return self.transforms.train(examples, self.generator)

    def after_backward(self) -> None:
        reference, self._reference = self._reference, None
        if reference is None:
            return
        params = self.trained_parameters()
        gradient = flatten_gradients(params, [p.grad for p in params])
        assign_gradients(params, project_agem(gradient, reference))
