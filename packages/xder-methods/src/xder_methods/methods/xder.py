"""X-DER (``xder``): eXtended Dark Experience Replay (Boschini et al., TPAMI 2022).

Implements the paper's Sec. 4 and Alg. 1-2, with the facts the authors' public code adds, as
docs/xder.md describes them. Every ablation of the paper's Table 1 is a config field of this one
module: ``memory_update=False`` ("w/o memory update"), ``future_heads="none" | "ce" | "rpc"``
("w/o future heads", "w/ CE future heads", "w/ RPC future heads"), ``preallocated_heads``
(Sec. "Pre-allocation of Future Tasks") and ``constraint_form`` (the authors' constraints or
the paper's Eq. 11).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError, check_settings
from xder_methods.core.protocols import Batch, ContinualSetting, Scenario, StepOutput, TaskData, Transforms
from xder_methods.core.registry import register_method
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.heads import polytope_logits, regular_simplex
from xder_methods.parts.losses import (
    at_least_float32,
    future_constraint,
    future_preparation_loss,
    logit_matching_loss,
    past_constraint,
    rescale_logits,
    seen_class_cross_entropy,
    separated_cross_entropy,
)
from xder_methods.parts.networks import frozen_batchnorm_stats
from xder_methods.parts.replay import DarkReplayConfig, forward_parts
from xder_methods.parts.selection import class_balanced_quotas, first_occurrence, rank_within_class

__all__ = ["XDER", "XDERConfig"]


@dataclass(frozen=True, kw_only=True)
class XDERConfig(DarkReplayConfig):
    """X-DER's hyperparameters. Defaults: the paper's Split CIFAR-100, M = 500 row
    (App. "Hyperparameter Choice"; docs/xder.md); M = 2000 uses alpha 0.6, beta 0.9,
    eta 0.01, margin 0.2.

    Attributes:
        alpha: weight of the logit replay (DER) term, 0.3.
        beta: weight of the buffer cross-entropy over past classes, 0.8.
        gamma: attenuation of implanted logits (Eq. 7), 0.85.
        lambda_: weight of future preparation (Eq. 9), 0.05.
        eta: weight of the past and future constraints (Eq. 11), 0.001.
        margin: the constraints' margin m, 0.7.
        tau: SupCon temperature, 5.
        n_views: strong views per item for future preparation, 2.
        simclr_batch_size: stream items (at most) and buffer items used for future
            preparation, 64.
        memory_update: implant present/future logits into memory (online and at task end).
        future_heads: ``supcon`` (X-DER), ``ce`` (the stream cross-entropy spans the current and
            future heads, pushing future logits down), ``rpc`` (fixed regular-polytope
            classifier, no SupCon), ``none`` (a head appears when its task starts).
        preallocated_heads: t~: start with 1 + t~ heads and gain one per task (None: every
            head from the start, as in the paper's main results).
        constraint_form: ``reference`` (the authors' code, default) or ``paper`` (Eq. 11).
        forward_batch_size: batch size of the no-gradient forward passes at task end (the
            authors' code uses the stream batch size).
        replay_forward: ``separate`` (default, the authors' code: the stream batch and the two
            buffer batches each go through the network alone, so BatchNorm normalises the
            stream batch with the statistics of the current task's classes) or ``joint`` (one
            pass over the three, BatchNorm statistics over the mixed batch); see
            :class:`~xder_methods.parts.replay.DarkReplayConfig`, or ``grouped`` (the
            computation of ``separate`` in one pass, BatchNorm per batch). The future-preparation
            views are a pass of their own that leaves the running statistics alone, or, under
            ``grouped``, a batch of that one pass that does.
    """

    alpha: float = 0.3
    beta: float = 0.8
    gamma: float = 0.85
    lambda_: float = 0.05
    eta: float = 0.001
    margin: float = 0.7
    tau: float = 5.0
    n_views: int = 2
    simclr_batch_size: int = 64
    memory_update: bool = True
    future_heads: Literal["supcon", "ce", "rpc", "none"] = "supcon"
    preallocated_heads: int | None = None
    constraint_form: Literal["reference", "paper"] = "reference"
    forward_batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            (0.0 <= self.gamma <= 1.0, f"method.gamma must be in [0, 1], got {self.gamma}"),
            (self.tau > 0, f"method.tau must be > 0, got {self.tau}"),
            (self.n_views >= 2, f"method.n_views must be >= 2 (SupCon needs positives), got {self.n_views}"),
            (self.simclr_batch_size >= 1, "method.simclr_batch_size must be >= 1"),
            (self.forward_batch_size >= 2, "method.forward_batch_size must be >= 2"),
            (
                self.future_heads in ("supcon", "ce", "rpc", "none"),
                f"method.future_heads must be supcon, ce, rpc or none, got {self.future_heads!r}",
            ),
            (
                self.constraint_form in ("reference", "paper"),
                f"method.constraint_form must be reference or paper, got {self.constraint_form!r}",
            ),
            (
                self.preallocated_heads is None or self.preallocated_heads >= 0,
                "method.preallocated_heads must be >= 0",
            ),
            (
                not (self.future_heads == "none" and self.preallocated_heads not in (None, 0)),
                "method.future_heads = none keeps no future head: leave preallocated_heads unset",
            ),
        ]
        check_settings(checks)


# ---------------------------------------------------------------------------------------------
# Pure helpers of the buffer policy


# ---------------------------------------------------------------------------------------------


@register_method("xder", XDERConfig)
class XDER(MethodBase[XDERConfig]):
    """eXtended Dark Experience Replay (X-DER paper Sec. 4, Alg. 1-2; docs/xder.md).

    One training step of task t (c classes per head, heads are slices ``[k c, (k+1) c)``):

    1. stream: separated cross-entropy on the present head (past and future logits get no
       gradient; with ``future_heads="ce"`` it spans the present and future heads);
    2. from t >= 1 (the buffer is empty during task 0): ``alpha`` x MSE between the outputs of a
       weakly augmented buffer batch and its stored logits over ALL heads; ``beta`` x one
       cross-entropy over the past classes of an independent buffer batch; then, without
       gradient, the "future past" update: the two batches merged, each buffer index kept
       once, its visit counter incremented, and with probability 1/k on its k-th visit of the
       task its present and future heads implanted by :func:`~xder_methods.parts.losses.rescale_logits`;
    3. future preparation (future heads exist, ``future_heads="supcon"``): ``lambda_`` x SupCon
       on every future head over ``n_views`` strong views of up to ``simclr_batch_size`` stream
       items plus as many unaugmented buffer items, forwarded in train mode WITHOUT updating
       BatchNorm running statistics;
    4. past constraint on stream items (t >= 1) and future constraint on stream and
       de-duplicated buffer items, both weighted by ``eta``.

    At the end of task t (no gradient, BatchNorm in train mode with frozen statistics): every
    stored class shrinks to ``M // ((t+1) c)`` items (keeping the earliest); the free slots are
    shared among the new classes; new items are stored unaugmented with the logits of an
    augmented view, their past heads rescaled; the whole buffer is re-forwarded and the
    present and future heads of every past item implanted; visit counters reset.

    Deviations (also in docs/xder.md): the rescale follows Eq. 7 (max <= gamma g; the authors'
    code only rescales above g) and skips rows whose stored ground-truth logit is <= 0;
    duplicates and non-updated rows are written to a scratch row instead of being masked out,
    so that a step needs no host synchronisation.

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the past and future heads are the classes of past and future
    tasks (in Domain-IL every task has every class), the memory's logits updated at each task's
    boundaries (a general stream has none).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "its past and future heads are the classes of past and future tasks, and in domain-il"
            " every task has every class"
        ),
        "general": (
            "it updates its memory's logits and prepares its future heads at each task's "
            "boundaries, and a general stream has no task ends"
        ),
    }

    visits: Tensor  # the buffer registered in __init__, declared for the type checker

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: XDERConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        sizes = set(setting.classes_per_task)
        if len(sizes) != 1:
            raise MethodConfigError(
                "X-DER needs the same number of classes in every task (one head per task)"
            )
        self.head_size = sizes.pop()
        num_classes = setting.num_classes
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device, num_logits=num_classes)
        self.register_buffer("visits", torch.zeros(config.buffer_size + 1, device=self.device))
        self.polytope: Tensor | None
        if config.future_heads == "rpc":
            self.register_buffer("polytope", regular_simplex(num_classes).to(self.device), persistent=False)
        else:
            self.polytope = None
        if config.future_heads == "supcon" and transforms.strong is None:
            raise MethodConfigError(
                "X-DER's future preparation needs a strong augmentation for this benchmark"
            )

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    # ----------------------------------------------------------------------------- geometry

    def heads_available(self, task: int) -> int:
        """Heads that exist while training ``task``: all of them, or ``task + 1 + t~``."""
        n_tasks = self.setting.n_tasks
        extra = 0 if self.config.future_heads == "none" else self.config.preallocated_heads
        return n_tasks if extra is None else min(n_tasks, task + 1 + extra)

    def _valid_columns(self, task_labels: Tensor) -> Tensor:
        """Stored logits of an item are valid up to the heads that existed at its last update."""
        n_tasks = self.setting.n_tasks
        extra = 0 if self.config.future_heads == "none" else self.config.preallocated_heads
        heads = (
            torch.full_like(task_labels, n_tasks)
            if extra is None
            else (task_labels + 1 + extra).clamp(max=n_tasks)
        )
        return heads * self.head_size

    def logits(self, x: Tensor) -> Tensor:
        """Outputs over every class: the network's, or through the fixed polytope (``rpc``)."""
        out = self.net(x)
        if self.polytope is not None:
            out = polytope_logits(out, self.polytope)
        return at_least_float32(out)

    def predict(self, x: Tensor) -> Tensor:
        return self.logits(x)

    # ---------------------------------------------------------------------------------- step

    def begin_task(self, task: int) -> None:
        super().begin_task(task)
        self.visits.zero_()

    def graph_key(self) -> Hashable | None:
        """Replayable at a fixed buffer size (:meth:`MethodBase.graph_key`): the buffer fills
        only at a task's end, so within a task every step draws, updates and constrains alike
        (the heads, the constraints and the future preparation depend on the task, which the
        key of :class:`~xder_methods.core.graphs.StepGraphs` holds)."""
        return ("buffer", len(self.buffer))

    def observe(self, batch: Batch) -> StepOutput:
        cfg, c, t = self.config, self.head_size, batch.task
        available = self.heads_available(t) * c
        past, seen = t * c, (t + 1) * c
        has_future = available > seen
        prepare = has_future and cfg.future_heads == "supcon"
        # Every draw first, in the order of the authors' step (two buffer batches and their weak
        # views, the visits' coins, the future preparation's items and strong views), so that the
        # forward passes can be one (replay_forward = "grouped").
        samples = []
        if len(self.buffer):
            samples = [self.buffer.sample(cfg.minibatch_size, self.generator) for _ in range(2)]
        views = [self.transforms.train(sample.examples, self.generator) for sample in samples]
        coin = None
        if samples and cfg.memory_update:
            drawn = sum(sample.index.shape[0] for sample in samples)
            coin = torch.rand(drawn, generator=self.generator, device=self.device)
        parts = [batch.x, *views]
        if prepare:
            strong, strong_labels = self._strong_views(batch)
            parts.append(strong)
        out, *outputs = (
            part[:, :available]
            for part in forward_parts(
                self.logits,
                parts,
                cfg.replay_forward,
                network=self.net,
                frozen=[False] * (1 + len(views)) + [True] * prepare,
            )
        )
        ce_end = available if cfg.future_heads == "ce" else seen
        loss = separated_cross_entropy(out, batch.y, past, ce_end)
        terms: dict[str, Tensor] = {"ce": loss.detach()}
        groups = {"stream": loss}

        buffer_out = buffer_labels = keep = None
        if samples:
            (first, second), (out1, out2) = samples, outputs[:2]
            assert first.logits is not None
            assert second.logits is not None
            columns = torch.arange(available, device=out1.device)
            valid = columns[None, :] < self._valid_columns(first.task_labels)[:, None]
            der = cfg.alpha * logit_matching_loss(out1, first.logits[:, :available], valid)
            buffer_ce = cfg.beta * seen_class_cross_entropy(out2, second.labels, past)
            loss = loss + der + buffer_ce
            terms |= {"der": der.detach(), "buffer_ce": buffer_ce.detach()}
            groups["buffer"] = der + buffer_ce

            index = torch.cat([first.index, second.index])
            buffer_out = torch.cat([out1, out2])
            buffer_labels = torch.cat([first.labels, second.labels])
            keep = first_occurrence(index)
            if coin is not None:
                stored = torch.cat([first.logits, second.logits])
                self._update_future_past(
                    index, keep, coin, stored, buffer_out.detach(), buffer_labels, t, available
                )

        if prepare:
            fp = cfg.lambda_ * future_preparation_loss(
                outputs[-1].view(strong_labels.shape[0], cfg.n_views, available),
                strong_labels,
                head_size=c,
                first_future_head=t + 1,
                tau=cfg.tau,
            )
            loss = loss + fp
            terms["future_preparation"] = fp.detach()
        if t >= 1:
            pc = cfg.eta * past_constraint(
                out, task=t, head_size=c, margin=cfg.margin, labels=batch.y, form=cfg.constraint_form
            )
            loss = loss + pc
            terms["past_constraint"] = pc.detach()
        if has_future:
            rows, labels, weights = out, batch.y, None
            if buffer_out is not None and buffer_labels is not None and keep is not None:
                rows = torch.cat([out, buffer_out])
                labels = torch.cat([batch.y, buffer_labels])
                weights = torch.cat([torch.ones_like(batch.y, dtype=torch.bool), keep]).float()
            fc = cfg.eta * future_constraint(
                rows,
                labels,
                task=t,
                head_size=c,
                margin=cfg.margin,
                weights=weights,
                form=cfg.constraint_form,
            )
            loss = loss + fc
            terms["future_constraint"] = fc.detach()
        return StepOutput(loss, terms, groups)

    def _strong_views(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """Future preparation's inputs: ``n_views`` strong views (consecutive rows) of up to
        ``simclr_batch_size`` buffer items followed by as many stream items, and their labels."""
        cfg = self.config
        items, labels = batch.x_raw[: cfg.simclr_batch_size], batch.y[: cfg.simclr_batch_size]
        if len(self.buffer):
            drawn = self.buffer.sample(cfg.simclr_batch_size, self.generator)
            items = torch.cat([drawn.examples, items])
            labels = torch.cat([drawn.labels, labels])
        assert self.transforms.strong is not None
        return self.transforms.strong(items.repeat_interleave(cfg.n_views, dim=0), self.generator), labels

    def _update_future_past(
        self,
        index: Tensor,
        keep: Tensor,
        coin: Tensor,
        stored: Tensor,
        fresh: Tensor,
        labels: Tensor,
        task: int,
        available: int,
    ) -> None:
        """Online "future past" update (docs/xder.md, step 4): the k-th visit updates with probability
        1/k, when its ``coin`` (uniform in [0, 1), one per row of ``index``) is below 1/k."""
        with torch.no_grad():
            scratch = self.buffer.capacity
            visited = torch.where(keep, index, torch.full_like(index, scratch))
            self.visits.index_add_(0, visited, torch.ones_like(index, dtype=self.visits.dtype))
            chosen = keep & (coin * self.visits[index] < 1)
            full = F.pad(fresh, (0, stored.shape[1] - available))
            updated = rescale_logits(
                stored, full, labels, task * self.head_size, available, self.config.gamma
            )
            target = torch.where(chosen, index, torch.full_like(index, scratch))
            assert self.buffer.logits is not None  # X-DER's buffer always stores logits
            self.buffer.logits.index_copy_(0, target, updated)
            self.buffer.task_labels.index_copy_(0, target, torch.full_like(index, task))

    # ------------------------------------------------------------------------------ task end

    def _forward_all(self, examples: Tensor) -> Tensor:
        """Logits of augmented views, in train mode with BatchNorm statistics frozen."""
        with torch.no_grad():
            outputs = []
            for start in range(0, examples.shape[0], self.config.forward_batch_size):
                chunk = examples[start : start + self.config.forward_batch_size]
                outputs.append(self.logits(self.transforms.train(chunk, self.generator)))
            if not outputs:
                return torch.zeros(0, self.setting.num_classes, device=self.device)
            return torch.cat(outputs)

    def end_task(self, task: int, data: TaskData) -> None:
        cfg, c, t = self.config, self.head_size, task
        buffer, capacity = self.buffer, self.config.buffer_size
        available = self.heads_available(t) * c
        was_training = self.training
        self.train(True)
        with torch.no_grad(), frozen_batchnorm_stats(self.net):
            # 1. Shrink every stored class to M // ((t+1) c) items, keeping the earliest.
            kept = 0
            if t >= 1 and len(buffer):
                stored = buffer.all()
                rank = rank_within_class(stored.labels, self.setting.num_classes)
                rows = torch.nonzero(rank < capacity // ((t + 1) * c)).flatten()
                kept = rows.shape[0]
                item = buffer.gather(rows)
                buffer.write(
                    torch.arange(kept, device=rows.device),
                    item.examples,
                    item.labels,
                    item.logits,
                    item.task_labels,
                )
            # 2-3. Share the free slots among the new classes; insert unaugmented items with the
            # logits of an augmented view (past heads rescaled below the ground truth).
            quotas = class_balanced_quotas(capacity - kept, c, self.generator, self.device)
            order = torch.randperm(data.y.shape[0], generator=self.generator, device=data.y.device)
            labels = data.y[order]
            picked = order[rank_within_class(labels - t * c, c) < quotas[labels - t * c]]
            examples, labels = data.x_raw[picked], data.y[picked]
            logits = self._forward_all(examples)
            logits[:, available:] = 0.0
            if t >= 1:
                logits = rescale_logits(logits, logits, labels, 0, t * c, cfg.gamma)
            slots = torch.arange(kept, kept + labels.shape[0], device=labels.device)
            buffer.write(slots, examples, labels, logits, t)
            buffer.set_size(kept + labels.shape[0])
            buffer.num_seen = len(buffer)
            # 4. Implant the present and future heads of every past item.
            if cfg.memory_update and t >= 1 and kept:
                everything = buffer.all()
                assert everything.logits is not None  # X-DER's buffer always stores logits
                assert buffer.logits is not None
                shuffle = torch.randperm(len(buffer), generator=self.generator, device=self.device)
                fresh = torch.empty_like(everything.logits)
                fresh[shuffle] = self._forward_all(everything.examples[shuffle])
                updated = rescale_logits(
                    everything.logits, fresh, everything.labels, t * c, available, cfg.gamma
                )
                is_past = everything.labels < t * c
                buffer.logits[: len(buffer)] = torch.where(is_past[:, None], updated, everything.logits)
                buffer.task_labels[: len(buffer)] = torch.where(
                    is_past, torch.full_like(everything.task_labels, t), everything.task_labels
                )
        self.visits.zero_()
        self.train(was_training)
