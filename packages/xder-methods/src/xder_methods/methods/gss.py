"""GSS (``gss``): gradient-based sample selection, greedy variant (Aljundi, Lin, Goujaud & Bengio,
NeurIPS 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, ContinualSetting, StepOutput, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.gradients import per_example_gradients
from xder_methods.parts.replay import ReplayConfig, prefill_reservoir

__all__ = [
    "EMPTY_BUFFER_SCORE",
    "GSS",
    "GSSConfig",
    "ScoredBuffer",
    "gss_replacement",
    "gss_scores",
]

EMPTY_BUFFER_SCORE = 0.1
"""Score of the items offered while the buffer is still empty (nothing to compare them with): the
paper leaves it undefined; 0.1 is the authors' code's (mammoth ``utils/gss_buffer.py``)."""

CandidateGradient = Literal["hybrid", "item", "batch"]


@dataclass(frozen=True, kw_only=True)
class GSSConfig(ReplayConfig):
    """Attributes:
    buffer_size: memory size M (200: DER paper Table 2, Split CIFAR-10; it also reports 500).
    minibatch_size: buffer items replayed with each stream batch (32: mammoth ``best_args``,
        ``seq-cifar10`` ``gss``, buffers 200 and 500).
    gss_minibatch_size: n, the random buffer items whose gradients each incoming item is
        compared with (32: same table; the GSS paper's "n" of Alg. 2).
    batch_num: optimisation steps per stream batch, each with a fresh buffer draw (1: same
        table; the GSS paper's ``n_iter``).
    candidate_gradient: the gradients an incoming item is scored with (see :class:`GSS`).
        ``hybrid`` (default, the DER paper's code): the stream batch's mean-loss gradient gives
        the batch one score, which gates replacement (``< 1``) and is stored for the items that
        fill free slots; each item's own gradient gives the score that decides its replacement
        and is stored when it replaces. ``item`` (the GSS paper's Alg. 2): the item's own score
        everywhere. ``batch``: the batch score everywhere.
    """

    buffer_size: int = 200
    minibatch_size: int = 32
    gss_minibatch_size: int = 32
    batch_num: int = 1
    candidate_gradient: CandidateGradient = "hybrid"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gss_minibatch_size < 1:
            raise MethodConfigError(f"method.gss_minibatch_size must be >= 1, got {self.gss_minibatch_size}")
        if self.batch_num < 1:
            raise MethodConfigError(f"method.batch_num must be >= 1, got {self.batch_num}")
        if self.candidate_gradient not in ("hybrid", "item", "batch"):
            raise MethodConfigError(
                f"method.candidate_gradient must be hybrid, item or batch, got {self.candidate_gradient!r}"
            )


def gss_scores(candidate_grads: Tensor, buffer_grads: Tensor, eps: float = 1e-8) -> Tensor:
    """GSS score of each candidate: its largest cosine similarity to the buffer gradients, plus 1
    (GSS paper Alg. 2; the +1 makes it a positive weight, in ``[0, 2]``).

    ``cos(g, G) = <g, G> / max(|g| |G|, eps)`` (a zero gradient is similar to nothing: cosine 0).

    Args:
        candidate_grads: (K, P) flattened gradients of the incoming items.
        buffer_grads: (n, P) flattened gradients of the buffer items they are compared with, n >= 1.

    Returns:
        (K,) scores ``max_j cos(candidate_k, buffer_j) + 1``.
    """
    if buffer_grads.shape[0] == 0:
        raise ValueError("gss_scores needs at least one buffer gradient")
    dots = candidate_grads @ buffer_grads.T  # (K, n)
    norms = candidate_grads.norm(dim=1)[:, None] * buffer_grads.norm(dim=1)[None, :]
    scores: Tensor = (dots / norms.clamp_min(eps)).amax(dim=1) + 1
    return scores


def gss_replacement(
    buffer_scores: Tensor,
    candidate_scores: Tensor,
    choice_draws: Tensor,
    accept_draws: Tensor,
    gate_scores: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Greedy replacement into a full buffer (GSS paper Alg. 2), the candidates offered one at a
    time in order, each seeing the scores left by the ones before it.

    Candidate k with score ``c_k`` may enter only if its gate score ``b_k < 1`` (its gradient
    points away from every compared buffer gradient; ``b = c`` unless ``gate_scores`` is given,
    as the DER paper's code gates with the batch's score); then slot i is drawn with
    probability ``C_i / sum_j C_j``
    (the inverse CDF at ``choice_draws[k]``) and replaced if ``accept_draws[k] < C_i / (C_i +
    c_k)``, taking ``C_i <- c_k``. Deterministic given the draws; no host synchronisation (the
    decisions stay on the device: a rejected candidate's slot is ``M``, the buffer's scratch row).

    Args:
        buffer_scores: (M,) the stored scores ``C`` of a full buffer (>= 0).
        candidate_scores: (K,) the candidates' scores ``c``.
        choice_draws: (K,) uniform draws on [0, 1): which slot each candidate may replace.
        accept_draws: (K,) uniform draws on [0, 1): whether it replaces it.
        gate_scores: (K,) the scores ``b`` compared with 1 (None: ``candidate_scores``).

    Returns:
        ``(slots, scores)``: (K,) int64 slot of each candidate, ``M`` where it does not enter
        (rejected, or overwritten by a later candidate of the same call); (M,) the scores after.
    """
    capacity, dtype = buffer_scores.shape[0], buffer_scores.dtype
    scores = buffer_scores.clone()
    c = candidate_scores.to(dtype)
    u = accept_draws.to(dtype)
    # u < C / (C + c)  <=>  C (1 - u) > u c  <=>  C > u c / (1 - u)  (u < 1); infinite when c >= 1.
    # Vectorised here, so that the loop below only compares.
    gate = c if gate_scores is None else gate_scores.to(dtype)
    thresholds = torch.where(gate < 1, u * c / (1 - u), torch.full_like(c, torch.inf))
    chosen_slots, taken = [], []
    # Sequential by nature: each decision depends on the scores the previous one left. A loop of
    # a few small device ops per candidate, never a read-back.
    for choice, threshold, value in zip(
        choice_draws.to(dtype).split(1), thresholds.split(1), c.split(1), strict=True
    ):
        cdf = scores.cumsum(0)
        # right=True: u * total in [cdf[i-1], cdf[i]) picks i, so a zero score is never picked.
        chosen = torch.searchsorted(cdf, choice * cdf[-1:], right=True).clamp_(max=capacity - 1)
        current = scores[chosen]
        take = current > threshold
        scores.scatter_(0, chosen, torch.where(take, value, current))
        chosen_slots.append(chosen)
        taken.append(take)
    if not taken:
        return torch.zeros(0, dtype=torch.int64, device=scores.device), scores
    slot = torch.where(torch.cat(taken), torch.cat(chosen_slots), capacity)
    # A later candidate that takes the same slot overwrites the earlier one: discard the earlier.
    later = torch.ones(slot.shape[0], slot.shape[0], dtype=torch.bool, device=slot.device).triu(1)
    shadowed = ((slot[:, None] == slot[None, :]) & later).any(dim=1)
    return torch.where(shadowed, torch.full_like(slot, capacity), slot), scores


class ScoredBuffer(Buffer):
    """A :class:`~xder_methods.parts.buffer.Buffer` that also keeps each item's GSS score:
    ``scores: (M + 1,)`` float32 (registered, in ``state_dict``; row M is scratch)."""

    scores: Tensor

    def __init__(
        self,
        capacity: int,
        example_shape: tuple[int, ...],
        example_dtype: torch.dtype = torch.uint8,
        num_logits: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(capacity, example_shape, example_dtype, num_logits, device)
        self.register_buffer("scores", torch.zeros(capacity + 1, device=device))

    def write_scored(
        self, slots: Tensor, examples: Tensor, labels: Tensor, scores: Tensor, task_labels: int
    ) -> None:
        """Store items and their scores at ``slots`` (``capacity`` = discard)."""
        self.write(slots, examples, labels, task_labels=task_labels)
        self.scores.index_copy_(0, slots, scores.to(self.scores.dtype))


@register_method("gss", GSSConfig)
class GSS(MethodBase[GSSConfig]):
    """Gradient-based Sample Selection, greedy variant (GSS-Greedy; Aljundi, Lin, Goujaud &
    Bengio, "Gradient based sample selection for online continual learning", NeurIPS 2019), as
    run in the DER paper (Buzzega et al., NeurIPS 2020, Table 2).

    Each step is ER's: one cross-entropy (over all outputs) on the stream batch joined with
    ``minibatch_size`` buffer items (weakly augmented), ``batch_num`` times with a fresh buffer
    draw. After the step, each stream item ``(x_k, y_k)`` (unaugmented) is offered to the buffer:
    with ``g_k = grad_theta CE(f(x_k), y_k)`` and ``G_j`` the gradients of ``n =
    gss_minibatch_size`` random buffer items,

        ``c_k = max_j <g_k, G_j> / (|g_k| |G_j|) + 1``;

    while the buffer is not full, the item is added with score ``C <- c_k``; once full, if
    ``c_k < 1``, a slot ``i ~ C_i / sum_j C_j`` is drawn and the item replaces it with probability
    ``C_i / (C_i + c_k)``, setting ``C_i <- c_k``. The buffer thus keeps items whose gradients point
    in different directions (low scores stay; high scores are the ones likely replaced). That is
    the GSS paper's policy (``candidate_gradient="item"``). The DER paper's code runs a hybrid
    (``"hybrid"``, the default), with ``c_B = max_j cos(g_B, G_j) + 1`` the score of ``g_B``, the
    gradient of the stream batch's mean loss: ``c_B`` is the score stored for the items that fill
    free slots, and the gate (``c_B < 1``) for all items of the batch; an item that passes the
    gate is then accepted with probability ``C_i / (C_i + c_k)`` with its own ``c_k``, which is
    what is stored when it replaces.

    Checked against the GSS paper (Alg. 2) and the DER paper's code (mammoth ``models/gss.py``,
    ``utils/gss_buffer.py``); point by point:

    * Candidate gradient: the paper scores each incoming sample with its own gradient. mammoth
      (``utils/gss_buffer.py`` of the DER paper's release) scores the batch once with the
      gradient of its mean loss: while the buffer fills, that batch score is what each item is
      stored with; once full, it is the gate (``batch_c < 1``) for every item of the batch, and
      an item past the gate is scored with its own gradient, which decides the replacement and
      is stored. Followed: mammoth's (``candidate_gradient="hybrid"``, the default and the
      ``paper`` preset's, behind the DER paper's Table 2); ``"item"`` is the GSS paper's policy,
      ``"batch"`` the batch score everywhere.
    * Buffer subset: in Alg. 2 a fresh random subset per incoming sample; mammoth draws one
      subset of ``gss_minibatch_size`` items per stream batch (it caches their gradients). Here
      one per stream batch, as mammoth: per-item subsets would cost B times the gradients.
    * Scoring gradients: computed in eval mode (BatchNorm with its running statistics), as
      mammoth; the paper is silent. It is also what lets one vectorised pass
      (:func:`~xder_methods.parts.gradients.per_example_gradients`, ``torch.func.vmap``) score
      every item: each item its own batch of one. Loss: cross-entropy over all outputs; gradient
      over every parameter (both as mammoth). Scored after the optimisation step(s) on the batch
      (at the end of :meth:`observe`, which takes them: ``manual_optimization``), as both the
      paper ("update, then select") and mammoth do.
    * Scoring inputs: the unaugmented examples through the test transform (normalisation only).
      Mammoth feeds its un-normalised ``not_aug_inputs`` tensors; the paper's samples are as
      received. Here the network sees them as it sees its training inputs, minus augmentation.
    * Empty buffer: the first batch's items get score 0.1 (:data:`EMPTY_BUFFER_SCORE`, mammoth's;
      the paper leaves it undefined).
    * Within a batch the items are offered one at a time, each decision seeing the scores the
      previous ones left (as mammoth's loop and Alg. 2); the first items fill the remaining free
      slots, the rest go through replacement.
    * The ``< 1`` gate (only items whose gradient has a negative cosine with every compared
      buffer gradient may replace): in both the paper and mammoth, on the item's score in the
      paper and on the batch's in mammoth.
    * Replay draws: mammoth walks through a random permutation of the buffer, drawn once per
      stream batch, in chunks of ``minibatch_size`` (one chunk per ``batch_num`` iteration,
      wrapping); the same here. With ``batch_num = 1`` this is a uniform draw without
      replacement, as ER's.
    * Randomness: the draws come from ``self.generator`` (mammoth: numpy's global RNG).

    Host synchronisation: none. The accept/replace decisions depend on the scores, but they are
    made on the device (inverse-CDF ``searchsorted`` and writes of rejected items to the buffer's
    scratch row, :func:`gss_replacement`); the buffer's fill level is a host count of items
    offered. The price is a few small kernels per stream item in the replacement loop (it is
    sequential: each decision sees the scores the previous one left), plus the per-item
    gradients: ``(B + n, P)`` floats for a network of P parameters (64 x 11M x 4 bytes = 2.8 GB
    for the paper's ResNet-18 at B = n = 32). Measured on this project's CPU runner, one step
    (observe, backward, SGD step, buffer update; batch 32 plus 32 replayed) costs 4 to 5 times
    ER's on the tests' TinyNet and 2.5 to 3 times on ``resnet18-cifar`` width 8.

    DER paper settings (mammoth ``best_args``, ``seq-cifar10``, buffers 200 and 500): lr 0.03,
    ``minibatch_size = gss_minibatch_size = 32``, ``batch_num = 1``.
    """

    manual_optimization = True

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: GSSConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = ScoredBuffer.for_setting(config.buffer_size, setting, self.device)
        # Within one step's observe only (never across a checkpoint).
        self._replay_order: Tensor | None = None
        self._replay_position = 0

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows into the memory by reservoir sampling
        (:func:`~xder_methods.parts.replay.prefill_reservoir`): a memory of the right size and
        classes, not scored: GSS's rule needs a gradient per item against the buffer."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        """``batch_num`` optimiser steps on the batch (:attr:`manual_optimization`), each on the
        stream batch joined with the next chunk of one buffer permutation, then the stream batch
        offered to the buffer (:meth:`store`)."""
        size = len(self.buffer)
        self._replay_position = 0
        self._replay_order = (
            torch.randperm(size, generator=self.generator, device=self.device) if size else None
        )
        x, y = self._joined(batch)
        loss = F.cross_entropy(self.net(x), y, reduction="none").mean()
        self.step(loss)
        for _ in range(self.config.batch_num - 1):
            x, y = self._joined(batch)
            self.step(F.cross_entropy(self.net(x), y))
        self.store(batch)
        ce = loss.detach()
        return StepOutput(ce, {"ce": ce})

    def _joined(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """The stream batch followed by the next chunk of this step's buffer permutation."""
        order = self._replay_order
        if order is None:
            return batch.x, batch.y
        start = self._replay_position
        end = min(start + self.config.minibatch_size, order.shape[0])
        self._replay_position = end if end < order.shape[0] else 0
        sample = self.buffer.gather(order[start:end])
        x = torch.cat([batch.x, self.transforms.train(sample.examples, self.generator)])
        return x, torch.cat([batch.y, sample.labels])

    @torch.no_grad()
    def candidate_scores(self, x_raw: Tensor, y: Tensor) -> Tensor:
        """(B,) the scores that decide the replacement of stream items ``(x_raw (B, ...) as
        stored, y (B,))``: the items' own (``hybrid``, ``item``) or the batch's (``batch``)."""
        item, batch = self.offer_scores(x_raw, y)
        return batch if self.config.candidate_gradient == "batch" else item

    @torch.no_grad()
    def offer_scores(self, x_raw: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """GSS scores of stream items ``(x_raw (B, ...) as stored, y (B,))`` against one random
        subset of ``gss_minibatch_size`` buffer items: ``(item, batch)``, each (B,), the score of
        each item's own gradient and that of the batch's mean loss (the same for every item);
        :data:`EMPTY_BUFFER_SCORE` while the buffer is empty. ``item`` is not computed (returned
        as ``batch``) where the policy never reads it (``batch``)."""
        size = len(self.buffer)
        if size == 0:
            empty = torch.full((y.shape[0],), EMPTY_BUFFER_SCORE, device=y.device)
            return empty, empty
        index = torch.randperm(size, generator=self.generator, device=self.device)
        sample = self.buffer.gather(index[: self.config.gss_minibatch_size])
        x = self.transforms.test(torch.cat([x_raw, sample.examples.to(x_raw.dtype)]))
        was_training = self.net.training
        self.net.eval()
        try:
            grads, _ = per_example_gradients(
                self.net, F.cross_entropy, x, torch.cat([y, sample.labels]), trainable_only=True
            )
        finally:
            self.net.train(was_training)
        flat = torch.cat([g.flatten(1) for g in grads.values()], dim=1)  # (B + n, P)
        candidates, compared = flat[: y.shape[0]], flat[y.shape[0] :]
        # The mean loss's gradient is the mean of the items' (eval mode: items independent).
        batch = gss_scores(candidates.mean(dim=0, keepdim=True), compared).expand(y.shape[0])
        if self.config.candidate_gradient == "batch":
            return batch, batch
        return gss_scores(candidates, compared), batch

    @torch.no_grad()
    def store(self, batch: Batch) -> None:
        """Offer the stream batch (unaugmented) to the buffer by GSS-Greedy."""
        buffer, n = self.buffer, batch.y.shape[0]
        if buffer.capacity == 0:
            buffer.count_offered(n)
            return
        item, batch_score = self.offer_scores(batch.x_raw, batch.y)
        policy = self.config.candidate_gradient
        # Stored while filling and compared with 1: the batch's score (hybrid, batch) or the item's.
        gate = item if policy == "item" else batch_score
        size = len(buffer)
        fill = min(n, buffer.capacity - size)
        if fill:
            slots = torch.arange(size, size + fill, device=item.device)
            buffer.write_scored(slots, batch.x_raw[:fill], batch.y[:fill], gate[:fill], batch.task)
            buffer.set_size(size + fill)
        if fill < n:
            draws = torch.rand(2, n - fill, generator=self.generator, device=item.device)
            slots, new_scores = gss_replacement(
                buffer.scores[:-1], item[fill:], draws[0], draws[1], gate_scores=gate[fill:]
            )
            buffer.write(slots, batch.x_raw[fill:], batch.y[fill:], task_labels=batch.task)
            buffer.scores[:-1] = new_scores
        buffer.count_offered(n)
