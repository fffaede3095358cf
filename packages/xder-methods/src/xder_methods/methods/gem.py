"""GEM (``gem``): Gradient Episodic Memory (Lopez-Paz & Ranzato, "Gradient Episodic Memory for
Continual Learning", NeurIPS 2017).

Each step, the gradient ``g`` of the stream loss is compared with the gradient ``g_k`` of the
loss on the episodic memory of every past task ``k``; where it would increase one of them
(``<g, g_k> < 0``), it is replaced by the closest gradient that increases none (paper Eq. 8),
found through the dual quadratic program (Eq. 10-11), solved on the CPU with ``quadprog``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, ContinualSetting, Scenario, StepOutput, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.gradients import assign_gradients, flatten_gradients
from xder_methods.parts.replay import ReplayConfig
from xder_methods.parts.task_memory import EpisodicMemory

if TYPE_CHECKING:
    import numpy as np

__all__ = ["GEM", "GEMConfig", "project_gem"]


@dataclass(frozen=True, kw_only=True)
class GEMConfig(ReplayConfig):
    """Attributes:
    buffer_size: episodic memory size M, split evenly among the tasks (``M // n_tasks`` examples
        each); 200 (DER paper Table 2, Split CIFAR-10, the smaller of its buffers 200 and 500).
    minibatch_size: unused: GEM takes every memory example of every past task at each step (the
        authors' code drops the option from GEM's arguments).
    gamma: memory strength: the lower bound of the dual variables ``v`` of the projection QP
        (GEM paper Sec. 3, "adding a small constant gamma >= 0 to v*"; its code, and mammoth's
        ``--gamma``, write it as the constraint ``v >= gamma``); 0.5 (mammoth ``best_args``,
        ``seq-cifar10`` ``gem``, buffers 200 and 500).
    """

    buffer_size: int = 200
    gamma: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gamma < 0:
            raise MethodConfigError(f"method.gamma must be >= 0, got {self.gamma}")


# ---------------------------------------------------------------------------------------------
# Pure functions


def _to_host(values: Tensor) -> np.ndarray:
    """Read ``values`` back to the host as a NumPy array: the one host synchronisation of a GEM
    step (a named function, so that the step test counts its calls on a CPU, where the copy is
    no synchronisation)."""
    return values.to("cpu").numpy()


def _solve_dual(gram: np.ndarray, dots: np.ndarray, margin: float, eps: float) -> np.ndarray:
    """GEM's dual QP (paper Eq. 10-11) with the authors' margin and ridge:
    ``argmin_v 1/2 v^T (G G^T + eps I) v + (G g)^T v  s.t.  v >= margin``.

    Args:
        gram: (K, K) float64, ``G G^T``.
        dots: (K,) float64, ``G g``.

    Returns:
        (K,) float64 ``v``.
    """
    # Imported here: a machine without quadprog (GEM's only user) still imports xder_methods.
    import numpy as np
    import quadprog  # type: ignore[import-not-found,import-untyped,unused-ignore]  # lazy import

    k = dots.shape[0]
    quadratic = 0.5 * (gram + gram.T) + eps * np.eye(k)
    # quadprog minimises 1/2 v^T P v - a^T v subject to C^T v >= b.
    solution = quadprog.solve_qp(quadratic, -dots, np.eye(k), np.full(k, float(margin)))
    return np.asarray(solution[0], dtype=np.float64)


def project_gem(gradient: Tensor, memory_gradients: Tensor, margin: float, *, eps: float = 1e-3) -> Tensor:
    """GEM's projection of a gradient onto the cone of the memory gradients (paper Eq. 8-11).

    If ``G g >= 0`` (no memory loss would increase to first order), ``g`` itself is returned.
    Otherwise ``g~ = g + G^T v``, ``v`` the solution of the dual QP
    ``min_v 1/2 v^T (G G^T + eps I) v + g^T G^T v  s.t.  v >= margin`` (float64, on the CPU with
    ``quadprog``). With ``eps = 0`` this is the primal problem
    ``min_z ||z - (g + margin * G^T 1)||^2  s.t.  G z >= 0``: ``margin`` shifts the target toward
    every memory gradient before projecting onto the cone (the GEM authors' code, "memory
    strength"); ``eps`` (their 1e-3) keeps the QP strictly convex and softens each constraint
    to ``<z, g_k> >= -eps * v_k``.

    Host synchronisation: exactly one, reading back ``G G^T`` and ``G g`` (K^2 + K numbers;
    the QP needs nothing else); ``v`` goes back to the device without waiting, and ``g + G^T v``
    is formed there.

    Args:
        gradient: (P,) g, the stream gradient.
        memory_gradients: (K, P) G, one row per past task.
        margin: gamma >= 0, the lower bound of ``v``.
        eps: ridge added to ``G G^T`` (> 0 unless the rows of G are independent).

    Returns:
        (P,) the projected gradient, ``gradient``'s dtype and device.
    """
    memory = memory_gradients.double()
    g = gradient.double()
    k = memory.shape[0]
    host = _to_host(torch.cat([(memory @ memory.T).reshape(-1), memory @ g]))
    gram, dots = host[: k * k].reshape(k, k), host[k * k :]
    if (dots >= 0).all():
        return gradient
    v = _solve_dual(gram, dots, margin, eps)
    # v goes to the device without the host waiting, from page-locked memory on a GPU. Written
    # through a NumPy view: ``torch.from_numpy`` dispatches ``lift_fresh``, which OpCounter
    # counts as a blocking host copy (it is one for ``torch.tensor(values)``).
    staged = torch.empty(k, dtype=torch.float64, pin_memory=gradient.is_cuda)
    staged.numpy()[:] = v
    v_device = staged.to(device=gradient.device, non_blocking=True)
    return (g + v_device @ memory).to(gradient.dtype)


# ---------------------------------------------------------------------------------------------
# The method


@register_method("gem", GEMConfig)
class GEM(EpisodicMemory[GEMConfig]):
    """Gradient Episodic Memory (Lopez-Paz & Ranzato, NeurIPS 2017).

    Update, with ``g`` the gradient of the stream loss and ``G = [g_0; ...; g_{t-1}]`` the
    gradients of the losses on the memories of the past tasks (``t`` the current task)::

        g~ = g                 if G g >= 0
        g~ = g + G^T v*        otherwise, v* = argmin_{v >= gamma} 1/2 v^T (G G^T + eps I) v + g^T G^T v

    and SGD steps along ``g~`` (:func:`project_gem`). :meth:`observe` computes ``G`` (one
    forward and backward pass per past task, with ``torch.autograd.grad``, so the parameters'
    ``.grad`` is untouched) and returns the stream loss; :meth:`after_backward` projects the
    gradient the loop has just computed and writes it back into ``.grad``.

    Host synchronisation: one per step from task 1 on (none in task 0), the read-back of the
    K x K Gram matrix and the K dot products for the CPU QP (:func:`project_gem`); the QP
    cannot run on the device.

    Checked against the paper and the DER paper's code (mammoth ``models/gem.py``,
    ``utils/buffer.py``); where they differ:

    * Memory: the GEM paper's code keeps the last ``M / n_tasks`` examples of each task's stream
      (a ring buffer per task); mammoth stores, at each task's end, ``buffer_size // n_tasks``
      examples drawn uniformly from the task's training set, unaugmented, with their label and
      task. Followed: mammoth (the DER paper's numbers use that memory; over 50 epochs "the
      last examples seen" is just another uniform draw). Layout: task ``k`` owns a contiguous
      block of rows of a :class:`~xder_methods.parts.buffer.Buffer`
      (:class:`~xder_methods.parts.task_memory.TaskMemory`), so selecting a task's memory is a
      slice, with no host synchronisation (mammoth: ``unique`` and a boolean mask).
    * Losses: the GEM paper's CIFAR-100 runs are task-incremental, each loss over the task's
      own outputs; mammoth takes the cross-entropy over all outputs, for the stream batch and
      for each task's memory (every memory example of the task, weakly augmented anew at each
      step). Followed: mammoth (the Class-IL numbers depend on it; Task-IL evaluation masks
      the outputs itself).
    * Margin: the paper adds gamma to ``v*``; its code and mammoth bound the dual variables
      below, ``v >= gamma``, and add ``eps = 1e-3`` to the diagonal of ``G G^T``. Followed: the
      codes (the published gamma is theirs).
    * Violation test: mammoth tests ``G g < 0`` in float32 on the device; here in float64 on
      the host, after the read-back (differs only for a dot product within rounding of 0).
      mammoth forms ``g + G^T v`` in NumPy and copies all P numbers back; here ``v`` (K numbers)
      goes to the device and the sum is formed there in float64: the same numbers.
    * Order and BatchNorm: as mammoth, the memory passes (train mode, so BatchNorm updates its
      running statistics once per past task) come before the stream pass.

    Protocol values (DER paper, Split CIFAR-10, mammoth ``best_args``, buffers 200 and 500):
    lr 0.03, no momentum or weight decay, batch 32, 50 epochs; gamma 0.5. Where the run
    differs, it is the loop's, not this class's (a fresh SGD optimiser per task: the same
    without momentum).

    Scenarios: it runs class-il, task-il and domain-il, and refuses general
    (:attr:`refused_scenarios`): the memory is stored per task at the task's end and the step
    constrained per past task; a general stream has no task ends.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "general": (
            "it stores each task's memory at the task's end and constrains the step per past "
            "task, and a general stream has no task ends"
        ),
    }

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: GEMConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self._memory_gradients: Tensor | None = None  # (K, P), from observe to after_backward

    def memory_losses(self) -> list[Tensor]:
        """The cross-entropy (over all outputs) of each stored task's memory, weakly augmented."""
        losses = []
        for start, end in self.memory.blocks:
            if end > start:
                x = self.transforms.train(self.buffer.examples[start:end], self.generator)
                losses.append(F.cross_entropy(self.net(x), self.buffer.labels[start:end]))
        return losses

    def observe(self, batch: Batch) -> StepOutput:
        terms: dict[str, Tensor] = {}
        losses = self.memory_losses()
        if losses:
            params = self.trained_parameters()
            rows = []
            for loss in losses:
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                rows.append(flatten_gradients(params, grads))
            self._memory_gradients = torch.stack(rows)
            terms["memory_ce"] = torch.stack(losses).mean().detach()
        loss = F.cross_entropy(self.net(batch.x), batch.y)
        terms["ce"] = loss.detach()
        return StepOutput(loss, terms)

    def after_backward(self) -> None:
        memory, self._memory_gradients = self._memory_gradients, None
        if memory is None:
            return
        params = self.trained_parameters()
        gradient = flatten_gradients(params, [p.grad for p in params])
        projected = project_gem(gradient, memory, self.config.gamma)
        if projected is not gradient:
            assign_gradients(params, projected)
