"""GDumb (``gdumb``): Greedy sampler and Dumb learner (Prabhu et al., "GDumb: A Simple Approach
that Questions Our Progress in Continual Learning", ECCV 2020).

GDumb takes no gradient step on the stream. Its greedy sampler fills a class-balanced memory
(:func:`greedy_class_balanced_slots`): an incoming example is stored while the memory has room;
once it is full, an example of class y enters only if class y holds fewer than
``M / |classes seen so far|`` items, replacing a random item of the currently largest class. When
the model must be evaluated (here: in ``end_task``, which the loop follows with evaluation), a
FRESH network (the weights it had at construction) is trained from scratch on the memory only,
and ``predict`` uses that network.

The fitting (:meth:`GDumb.fit_buffer`), as in the GDumb paper and code: SGD (momentum, weight
decay), ``epochs_fitting`` epochs over the shuffled memory, weak augmentation, a warm-up epoch at
``lr_max / 10``, then cosine annealing with warm restarts (SGDR, T_0 = 1 epoch, T_mult = 2) between
``lr_max`` and ``lr_min`` (:func:`gdumb_learning_rate`), CutMix (:func:`cutmix`) of every batch
(``cutmix_probability`` 1) with ``lambda ~ Beta(alpha, alpha)``, ONE box per batch (every
item gets the same box, pasted from a random permutation of the batch), the label weights set to
the exact pasted area, and gradient-norm clipping at ``clip_grad_norm``.

Defaults: the X-DER paper's App. "Hyperparameter Choice" (Split CIFAR-100, M = 500): lr_max 0.05,
lr_min 0.0005, alpha_cutmix 1, epochs_fitting 250, momentum 0.9, weight decay 1e-6 (the table's
mom/wd columns, which for GDumb can only be the fitting's: it never steps on the stream; M = 2000
selects momentum 0). CutMix on every batch: the X-DER paper's code (mammoth's ``cutmix_data``)
takes a ``cutmix_prob`` argument (0.5) but never reads it, so every batch of its fitting is
CutMix-ed; GDumb's own code mixes a batch with probability 0.5 (``cutmix_probability = 0.5``).
From GDumb's code: gradient clipping at 10, the warm-up epoch (mammoth has it too). Batch size
32: the benchmark's (the X-DER paper fixes the batch size per dataset for all methods, and mammoth
fits with the stream batch size); GDumb's code used 16.

Deviations:

* mammoth's ``gdumb`` stores the stream by reservoir sampling; this module implements GDumb's
  greedy class-balanced sampler (docs/methods.md). Ties for the largest class go to the
  lowest label. The sampler is inherently sequential: it runs on the host over the batch's labels
  (one read-back per step; GDumb has no training step to stall);
* mammoth fits the network only after the LAST task (earlier rows of its accuracy matrix come from
  the untrained network); here the fit runs after every task, as the GDumb paper evaluates
  (``fit_after="last_task"`` gives mammoth's behaviour, the same final accuracy at 1/T of the cost,
  and no forgetting measure);
* mammoth does not clip gradients; GDumb's code clips the norm at 10 (kept). GDumb's code trains
  in float16; here the network keeps its own precision;
* CutMix acts on dims 2 and 3 (H, W of images; T, V of skeleton sequences) and is skipped for
  inputs with fewer than 4 dims; ``lambda ~ Beta(alpha, alpha)`` is drawn with
  :func:`sample_symmetric_beta` from the method's generator (torch's Beta sampler takes no
  generator);
* the last partial batch of an epoch is kept, except that a final batch of one item joins the
  previous one (BatchNorm); a memory of fewer than 2 items is not fitted.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError, check_settings
from xder_methods.core.passes import train_passes
from xder_methods.core.protocols import (
    Batch,
    ContinualSetting,
    MethodConfig,
    Scenario,
    StepOutput,
    TaskData,
    Transforms,
)
from xder_methods.core.registry import register_method
from xder_methods.core.schedule import TrainingSchedule, check_protocol_fields, shuffled_batches
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.replay import prefill_reservoir

__all__ = [
    "GDumb",
    "GDumbConfig",
    "cutmix",
    "cutmix_box",
    "cutmix_cross_entropy",
    "gdumb_learning_rate",
    "greedy_class_balanced_slots",
    "paste_box",
    "sample_symmetric_beta",
]


@dataclass(frozen=True, kw_only=True)
class GDumbConfig(MethodConfig):
    """GDumb's settings (defaults: X-DER paper App. "Hyperparameter Choice", Split CIFAR-100,
    M = 500, unless noted).

    Attributes:
        buffer_size: memory size M, 500 (a benchmark's protocol fills it, ``FILLED_BY_PROTOCOL``:
            :func:`~xder_methods.core.schedule.protocol_fields`; its replay batch GDumb has not).
        epochs_fitting: epochs of each fit on the memory, 250.
        batch_size: fitting batch size, 32 (the benchmark's; GDumb's paper used 16).
        lr_max: SGDR's maximum learning rate, 0.05.
        lr_min: SGDR's minimum learning rate, 0.0005.
        momentum: SGD momentum of the fitting, 0.9 (M = 2000: 0).
        weight_decay: weight decay of the fitting, 1e-6.
        cutmix_alpha: CutMix's Beta(alpha, alpha) parameter, 1.
        cutmix_probability: probability that a batch is CutMix-ed, 1 (the X-DER paper's code
            mixes every batch; GDumb's code: 0.5).
        clip_grad_norm: gradient-norm clipping of the fitting, 10 (GDumb code); None: off.
        fit_after: ``every_task`` (fit before every evaluation, as in the GDumb paper) or
            ``last_task`` (mammoth: only after the last task).
    """

    FILLED_BY_PROTOCOL = ("buffer_size",)
    buffer_size: int = 500
    epochs_fitting: int = 250
    batch_size: int = 32
    lr_max: float = 0.05
    lr_min: float = 0.0005
    momentum: float = 0.9
    weight_decay: float = 1e-6
    cutmix_alpha: float = 1.0
    cutmix_probability: float = 1.0
    clip_grad_norm: float | None = 10.0
    fit_after: Literal["every_task", "last_task"] = "every_task"

    def __post_init__(self) -> None:
        check_protocol_fields(self)
        checks = [
            (self.epochs_fitting >= 0, f"method.epochs_fitting must be >= 0, got {self.epochs_fitting}"),
            (self.batch_size >= 1, f"method.batch_size must be >= 1, got {self.batch_size}"),
            (self.lr_max > 0, f"method.lr_max must be > 0, got {self.lr_max}"),
            (0 <= self.lr_min <= self.lr_max, f"method.lr_min must be in [0, lr_max], got {self.lr_min}"),
            (self.momentum >= 0, f"method.momentum must be >= 0, got {self.momentum}"),
            (self.weight_decay >= 0, f"method.weight_decay must be >= 0, got {self.weight_decay}"),
            (self.cutmix_alpha > 0, f"method.cutmix_alpha must be > 0, got {self.cutmix_alpha}"),
            (
                0 <= self.cutmix_probability <= 1,
                f"method.cutmix_probability must be in [0, 1], got {self.cutmix_probability}",
            ),
            (
                self.clip_grad_norm is None or self.clip_grad_norm > 0,
                f"method.clip_grad_norm must be > 0 or unset, got {self.clip_grad_norm}",
            ),
            (
                self.fit_after in ("every_task", "last_task"),
                f"method.fit_after must be every_task or last_task, got {self.fit_after!r}",
            ),
        ]
        check_settings(checks)

    def check_schedule(self, schedule: TrainingSchedule) -> None:
        """``last_task`` fits only at the benchmark's last task: a stream shortened by
        ``train.tasks`` would never fit."""
        if schedule.tasks is not None and self.fit_after == "last_task":
            raise MethodConfigError(
                "train.tasks cannot shorten gdumb with method.fit_after = 'last_task': it trains only at "
                "the benchmark's last task; pick another method.fit_after or drop train.tasks"
            )


# ---------------------------------------------------------------------------------------------
# The greedy sampler


def greedy_class_balanced_slots(
    stored_labels: Tensor,
    incoming: Tensor,
    seen: Tensor,
    capacity: int,
    uniforms: Tensor,
) -> tuple[Tensor, int]:
    """GDumb's greedy class-balanced sampler (Prabhu et al., Alg. 1) for a batch, in order.

    Item j of class y, after adding y to the seen classes: if the memory has room it takes the
    next free row; else, if class y holds fewer than ``capacity / |seen|`` items, it replaces
    a random item of the currently largest class (ties: the lowest label), the
    ``floor(uniforms[j] * count)``-th of that class's rows in row order; else it is discarded.
    When a later item of the batch replaces an earlier one, the earlier is marked discarded, so
    that writing all items at their slots leaves the memory the sequential process leaves.

    Args:
        stored_labels: (size,) labels of the filled rows ``0 .. size - 1``.
        incoming: (B,) labels of the batch, in stream order.
        seen: (C,) bool, the classes seen before this batch.
        capacity: M.
        uniforms: (B,) floats in [0, 1), one per item.

    Returns:
        ``(slots, size)``: (B,) int64 rows (``capacity``: discarded) and the new number of filled
        rows. The inputs are not modified.
    """
    labels = stored_labels.tolist()
    size = len(labels)
    num_classes = seen.shape[0]
    seen_classes = set(torch.nonzero(seen).flatten().tolist())
    rows: list[list[int]] = [[] for _ in range(num_classes)]
    for row, label in enumerate(labels):
        rows[label].append(row)
    slots = [capacity] * incoming.shape[0]
    writer: dict[int, int] = {}
    for j, (label, u) in enumerate(zip(incoming.tolist(), uniforms.tolist(), strict=True)):
        seen_classes.add(label)
        if size < capacity:
            row = size
            size += 1
        elif len(rows[label]) * len(seen_classes) < capacity:
            largest = max(range(num_classes), key=lambda c: len(rows[c]))
            victims = rows[largest]
            row = victims.pop(min(int(u * len(victims)), len(victims) - 1))
        else:
            continue
        if row in writer:
            slots[writer[row]] = capacity
        writer[row] = j
        slots[j] = row
        bisect.insort(rows[label], row)
    return torch.tensor(slots, dtype=torch.int64), size


# ---------------------------------------------------------------------------------------------
# The fitting: learning rate and CutMix


def gdumb_learning_rate(epoch: int, lr_max: float, lr_min: float) -> float:
    """Learning rate of 0-based fitting ``epoch`` (GDumb's schedule).

    Epoch 0 is a warm-up at ``lr_max / 10``; from epoch 1, SGDR (Loshchilov & Hutter) with
    T_0 = 1 and T_mult = 2 stepped once per epoch: with ``k = epoch - 1``, cycle
    ``n = floor(log2(k + 1))`` of length ``2^n`` starts at ``k = 2^n - 1``, and
    ``lr = lr_min + (lr_max - lr_min) (1 + cos(pi * (k - 2^n + 1) / 2^n)) / 2``. This equals
    ``torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(T_0=1, T_mult=2)`` stepped from epoch
    2 on, as the GDumb code does.
    """
    if epoch == 0:
        return 0.1 * lr_max
    k = epoch - 1
    period = 1 << ((k + 1).bit_length() - 1)
    position = k - (period - 1)
    return lr_min + (lr_max - lr_min) * (1.0 + math.cos(math.pi * position / period)) / 2.0


def _standard_gamma(
    shape: float,
    n: int,
    generator: torch.Generator | None,
    device: torch.device | str | None,
    candidates: int = 32,
) -> Tensor:
    """n draws of Gamma(shape, 1) by Marsaglia & Tsang's method, vectorised: ``candidates``
    proposals per draw (each accepted with probability > 0.95), the first accepted one kept."""
    boosted = shape + 1.0 if shape < 1.0 else shape
    d = boosted - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    z = torch.randn(n, candidates, generator=generator, device=device, dtype=torch.float64)
    u = torch.rand(n, candidates, generator=generator, device=device, dtype=torch.float64)
    v = (1.0 + c * z) ** 3
    accepted = (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp(min=1e-300)))
    first = accepted.to(torch.int8).argmax(dim=1, keepdim=True)
    draws = d * v.gather(1, first).squeeze(1)
    if shape < 1.0:  # Gamma(a) = Gamma(a + 1) * U^(1/a)
        boost = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        draws = draws * boost.pow(1.0 / shape)
    return draws


def sample_symmetric_beta(
    alpha: float, generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> Tensor:
    """One draw of Beta(alpha, alpha) from ``generator``: ``X / (X + Y)``, X, Y ~ Gamma(alpha).

    Returns:
        A float64 scalar tensor on ``device``.
    """
    if alpha == 1.0:  # Beta(1, 1) is uniform: one draw instead of Gamma proposals
        return torch.rand((), generator=generator, device=device, dtype=torch.float64)
    x, y = _standard_gamma(alpha, 2, generator, device)
    ratio: Tensor = x / (x + y)
    return ratio


def cutmix_box(
    lam: Tensor, center_h: Tensor, center_w: Tensor, height: int, width: int
) -> tuple[Tensor, ...]:
    """CutMix's box for mixing ratio ``lam`` (Yun et al., ICCV 2019, as GDumb's code draws it).

    The cut sides are ``floor(height * sqrt(1 - lam))`` and ``floor(width * sqrt(1 - lam))``; the
    box spans half of each on either side of the centre (integer halves), clipped to the image.

    Args:
        lam: scalar in [0, 1].
        center_h: integer scalar, the box centre's row.
        center_w: integer scalar, the box centre's column.

    Returns:
        ``(top, bottom, left, right)``: int64 scalars, rows ``[top, bottom)``, columns
        ``[left, right)``.
    """
    ratio = torch.sqrt(1.0 - lam)
    half_h = torch.floor(height * ratio).long() // 2
    half_w = torch.floor(width * ratio).long() // 2
    top = (center_h - half_h).clamp(0, height)
    bottom = (center_h + half_h).clamp(0, height)
    left = (center_w - half_w).clamp(0, width)
    right = (center_w + half_w).clamp(0, width)
    return top, bottom, left, right


def paste_box(
    x: Tensor, partner: Tensor, top: Tensor, bottom: Tensor, left: Tensor, right: Tensor
) -> tuple[Tensor, Tensor]:
    """Paste the box of ``x[partner]`` into ``x`` (dims 2 and 3 are the box's rows and columns).

    Args:
        x: (B, C, H, W, ...).
        partner: (B,) the item each row takes its patch from.

    Returns:
        ``(mixed, weight)``: the new (B, C, H, W, ...) tensor and the weight of the ORIGINAL
        label, ``1 - box area / (H W)`` (the partner's label weighs ``1 - weight``).
    """
    height, width = x.shape[2], x.shape[3]
    rows = torch.arange(height, device=x.device)
    cols = torch.arange(width, device=x.device)
    inside = ((rows >= top) & (rows < bottom))[:, None] & ((cols >= left) & (cols < right))[None, :]
    mask = inside.view(1, 1, height, width, *([1] * (x.dim() - 4)))
    mixed = torch.where(mask, x[partner], x)
    weight = 1.0 - inside.sum().to(torch.float32) / (height * width)
    return mixed, weight


def cutmix(
    x: Tensor, y: Tensor, *, alpha: float, probability: float, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CutMix one batch, one box for the whole batch, with probability ``probability``.

    Draws (always, in this order, so that the random stream does not depend on the outcome): the
    coin, ``lam ~ Beta(alpha, alpha)``, the partner permutation, the box centre.

    Args:
        x: (B, C, H, W, ...) augmented inputs; with fewer than 4 dims nothing is mixed.
        y: (B,) labels.

    Returns:
        ``(mixed, y, y_partner, weight)``: the loss is
        ``weight * CE(f(mixed), y) + (1 - weight) * CE(f(mixed), y_partner)``
        (:func:`cutmix_cross_entropy`); ``weight`` is 1 for a batch left unmixed.
    """
    one = torch.ones((), device=x.device)
    if x.dim() < 4:
        return x, y, y, one
    device = x.device
    apply = torch.rand((), generator=generator, device=device) < probability
    lam = sample_symmetric_beta(alpha, generator, device)
    partner = torch.randperm(x.shape[0], generator=generator, device=device)
    height, width = x.shape[2], x.shape[3]
    center_h = torch.randint(0, height, (), generator=generator, device=device)
    center_w = torch.randint(0, width, (), generator=generator, device=device)
    box = cutmix_box(lam, center_h, center_w, height, width)
    mixed, weight = paste_box(x, partner, *box)
    return torch.where(apply, mixed, x), y, y[partner], torch.where(apply, weight, one)


def cutmix_cross_entropy(logits: Tensor, labels: Tensor, partner_labels: Tensor, weight: Tensor) -> Tensor:
    """``weight * CE(logits, labels) + (1 - weight) * CE(logits, partner_labels)`` (batch means)."""
    return weight * F.cross_entropy(logits, labels) + (1 - weight) * F.cross_entropy(logits, partner_labels)


# ---------------------------------------------------------------------------------------------


class _StateSnapshot(nn.Module):
    """A frozen copy of a module's state dict, held as registered buffers (so it travels with the
    method's ``state_dict`` and ``.to(device)`` without adding parameters)."""

    def __init__(self, state: Mapping[str, Tensor]) -> None:
        super().__init__()
        self.names = list(state)
        for i, value in enumerate(state.values()):
            self.register_buffer(f"tensor_{i}", value.detach().clone())

    def state(self) -> dict[str, Tensor]:
        return {name: getattr(self, f"tensor_{i}") for i, name in enumerate(self.names)}


@register_method("gdumb", GDumbConfig)
class GDumb(MethodBase[GDumbConfig]):
    """Greedy sampler and dumb learner (see the module docstring).

    State: the memory (``buffer``), the classes seen (``seen``), the network's initial weights
    (``initial_state``) and the network trained at the last fit (``net``), all in ``state_dict``.

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the greedy sampler balances classes, not input distributions:
    once every class holds its share no later example enters, so in Domain-IL the memory keeps
    the first task's inputs and in a general stream each class's earliest examples, not the
    stream's later rotations (the authors' code lists it for class-il and task-il only).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "its sampler balances classes only: once each class holds its share no later example "
            "enters, so the memory would keep the first task's inputs only"
        ),
        "general": (
            "its sampler balances classes only: once each class holds its share no later example "
            "enters, so the memory would keep each class's earliest examples, not the stream's "
            "later ones"
        ),
    }

    seen: Tensor  # the buffer registered in __init__, declared for the type checker

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: GDumbConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)
        self.register_buffer("seen", torch.zeros(setting.num_classes, dtype=torch.bool, device=self.device))
        self.initial_state = _StateSnapshot(net.state_dict())

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    @property
    def forgetting_defined(self) -> bool:
        """With ``fit_after="last_task"`` the earlier rows come from the untrained network."""
        return self.config.fit_after == "every_task"

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows into the memory by reservoir sampling
        (:func:`~xder_methods.parts.replay.prefill_reservoir`): a memory of the right size and
        classes, not GDumb's greedy balance: :meth:`end_task` would also train from scratch."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        self.offer(batch.x_raw, batch.y, batch.task)
        return StepOutput(None)

    @torch.no_grad()
    def offer(self, x_raw: Tensor, y: Tensor, task: int) -> None:
        """Pass a stream batch through the greedy sampler (one read-back of the labels)."""
        buffer = self.buffer
        size, batch_size = len(buffer), y.shape[0]
        uniforms = torch.rand(batch_size, generator=self.generator, device=y.device, dtype=torch.float64)
        packed = torch.cat([buffer.labels[:size].double(), y.double(), uniforms, self.seen.double()]).cpu()
        stored, incoming, uniforms, seen = packed.split([size, batch_size, batch_size, self.seen.shape[0]])
        slots, new_size = greedy_class_balanced_slots(
            stored.long(), incoming.long(), seen.bool(), buffer.capacity, uniforms
        )
        buffer.write(slots.to(y.device), x_raw, y, task_labels=task)
        buffer.set_size(new_size)
        buffer.count_offered(batch_size)
        self.seen.index_fill_(0, y, True)

    def end_task(self, task: int, data: TaskData) -> None:
        if self.config.fit_after == "last_task" and task < self.setting.n_tasks - 1:
            return
        self.reset_network()
        if len(self.buffer) >= 2:
            self.fit_buffer()

    @torch.no_grad()
    def reset_network(self) -> None:
        """Give the network back the weights (and BatchNorm statistics) it had at construction."""
        self.net.load_state_dict(self.initial_state.state())

    def fit_buffer(self) -> None:
        """Train the network on the memory only (GDumb's dumb learner; see the module docstring)."""
        cfg, n = self.config, len(self.buffer)
        examples, labels = self.buffer.examples[:n], self.buffer.labels[:n]
        optimizer = torch.optim.SGD(
            self.net.parameters(), lr=cfg.lr_max, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )

        def batches() -> Iterator[Tensor]:
            """Each epoch's batches, its lr set before its first."""
            for epoch in range(cfg.epochs_fitting):
                for group in optimizer.param_groups:
                    group["lr"] = gdumb_learning_rate(epoch, cfg.lr_max, cfg.lr_min)
                yield from shuffled_batches(
                    n, cfg.batch_size, drop_last=False, generator=self.generator, device=labels.device
                )

        def loss(index: Tensor) -> Tensor:
            x = self.transforms.train(examples[index], self.generator)
            x, y, y_partner, weight = cutmix(
                x,
                labels[index],
                alpha=cfg.cutmix_alpha,
                probability=cfg.cutmix_probability,
                generator=self.generator,
            )
            return cutmix_cross_entropy(self.net(x), y, y_partner, weight)

        def clip() -> None:
            if cfg.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.net.parameters(), cfg.clip_grad_norm)

        was_training = self.net.training
        self.net.train(True)
        train_passes(
            batches(), loss, optimizer, policy=self.step_policy, device=self.device, before_step=clip
        )
        optimizer.zero_grad(set_to_none=True)
        self.net.train(was_training)
