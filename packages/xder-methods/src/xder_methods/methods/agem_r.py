"""A-GEM-R (``agem_r``): A-GEM whose memory is a reservoir over the whole stream, a baseline of
the DER paper (Buzzega et al., "Dark Experience for General Continual Learning", NeurIPS 2020;
the authors' code: mammoth ``models/agem_r.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from xder_methods.core.protocols import Batch, Scenario, StepOutput, TaskData
from xder_methods.core.registry import register_method
from xder_methods.methods.agem import AGEM, AGEMConfig
from xder_methods.parts.replay import prefill_reservoir

__all__ = ["AGEMR", "AGEMRConfig"]


@dataclass(frozen=True, kw_only=True)
class AGEMRConfig(AGEMConfig):
    """Attributes:
    buffer_size: memory size M, one reservoir over the whole stream (no per-task share); 200
        (the smallest of the DER paper's buffers 200, 500 and 5120).
    minibatch_size: memory examples drawn per step for the reference gradient; 32 (mammoth
        ``best_args``, ``seq-cifar10`` ``agem_r``, every buffer).
    """

    buffer_size: int = 200
    minibatch_size: int = 32


@register_method("agem_r", AGEMRConfig)
class AGEMR(AGEM):
    """A-GEM with a reservoir memory (mammoth ``agem_r``, run in the DER paper).

    The step is A-GEM's (:class:`~xder_methods.methods.agem.AGEM`): ``g`` the gradient of the
    stream loss, ``g_ref`` that of the loss on ``minibatch_size`` examples drawn uniformly from the
    memory, and SGD along

        g~ = g - (g^T g_ref / g_ref^T g_ref) g_ref   if g^T g_ref < 0,   else g

    (:func:`~xder_methods.methods.agem.project_agem`, the one owner of the formula). What differs
    is the memory: after every step the stream batch (unaugmented) is offered to the buffer by
    reservoir sampling (:meth:`~xder_methods.parts.buffer.Buffer.add_reservoir`), so the memory
    is a uniform sample of everything seen so far, filled during the first task already (the
    first step, with an empty memory, is plain SGD); nothing happens at a task's end. It needs no
    task boundaries.

    Checked against the DER paper's code (mammoth ``models/agem_r.py``, ``models/agem.py``'s
    ``project``, ``utils/buffer.py``); where this differs:

    * Memory minibatch view: mammoth's ``agem_r`` draws it without a transform
      (``buffer.get_data(minibatch_size)``, unlike its ``agem``), so the network sees the stored
      ``not_aug_inputs``: unaugmented and, on Split CIFAR-10, not normalised either (the stored
      tensors are ``ToTensor()`` of the image, the stream's are normalised). Here: unaugmented,
      through the test transform (normalisation only), so that the network sees the memory as
      it sees its training inputs, minus augmentation (as GSS's scoring inputs here). On
      benchmarks without normalisation (mammoth's MNIST ones) the two are the same.
    * Branch: mammoth reads ``g^T g_ref < 0`` back to the host; here ``torch.where`` chooses on
      the device (A-GEM's, the same update).
    * Insertion: mammoth offers the batch to the reservoir after the optimiser step; here at the
      end of :meth:`observe`, after the memory minibatch is drawn and before the step. The
      reference gradient is computed before the insertion, so the step is the same; only the
      order of the random draws differs (they come from ``self.generator``, mammoth's from
      numpy's global state).
    * Losses: cross-entropy over all outputs for the stream batch and the memory minibatch, as
      mammoth. Order and BatchNorm as A-GEM's: the stream pass, then the memory pass (train mode).

    Protocol values (mammoth ``best_args``, ``seq-cifar10``, buffers 200, 500 and 5120): lr 0.03,
    batch 32, minibatch_size 32, 50 epochs, no momentum (the ``paper`` preset).

    Scenarios: every one (it needs no task boundaries; A-GEM's refusal of ``general`` is
    lifted).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {}

    def observe(self, batch: Batch) -> StepOutput:
        """A-GEM's step (the stream loss; the reference gradient on a memory minibatch, projected
        against in :meth:`after_backward`), then the stream batch offered to the reservoir."""
        out = super().observe(batch)
        self.buffer.add_reservoir(batch.x_raw, batch.y, task_labels=batch.task, generator=self.generator)
        return out

    def reference_view(self, examples: Tensor) -> Tensor:
        """The memory minibatch unaugmented, normalised by the test transform (mammoth: the
        stored tensors as they are; see the class's docstring)."""
        return self.transforms.test(examples)

    def end_task(self, task: int, data: TaskData) -> None:
        """Nothing: the memory fills from the stream (A-GEM stores the task's share here)."""

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows offered to the reservoir, as the stream offers them
        (:func:`~xder_methods.parts.replay.prefill_reservoir`)."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)
