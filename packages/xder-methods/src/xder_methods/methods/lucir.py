"""LUCIR (``lucir``): Learning a Unified Classifier Incrementally via Rebalancing (Hou et al.,
CVPR 2019; X-DER paper Sec. 5.2).

The parts (LUCIR Sec. 3):

1. Cosine normalisation: the network's classifier is replaced by a :class:`CosineHead`,
   ``logits = sigma * cos(f(x), theta_c)`` with a learnable scale sigma; cross-entropy over the
   seen classes on the stream and the replayed exemplars.
2. Less-forget constraint (Eq. 6): ``1 - cos(f*(x), f(x))`` between the features of the frozen
   previous model f* and of the current one, on every item, weighted by
   ``lambda = lambda_base * sqrt(|C_o| / |C_n|)`` (old and new classes of the task). With the same
   number of classes per task this is ``lambda_base * sqrt(t)``, as in mammoth.
3. Inter-class separation (margin ranking, Eq. 7): for each item of an old class, its
   ground-truth cosine must exceed each of the top-``k`` cosines of the new classes by
   ``margin``.
4. Weight imprinting: a new class's weight starts as the normalised mean of the normalised
   features of its examples, scaled by the mean norm of the old classes' weights.
5. Class-balanced fine-tuning after each task: ``epochs_fitting`` epochs of the classifier alone
   on the (class-balanced) memory, lr ``lr_fitting`` divided by 10 after the first 10 batches
   (``lr_fitting_milestones``, counted in batches over the whole fine-tuning, as the authors'
   per-batch ``MultiStepLR([10])``), weight decay ``weight_decay_fitting``.

The memory is iCaRL's herding memory (:func:`xder_methods.parts.selection.update_herding_buffer`);
prediction is the cosine classifier's output (the "CNN" classifier of the paper, as mammoth).

Protocol values of the X-DER paper (App. "Hyperparameter Choice", Split CIFAR-100, M = 500 and
2000): lr 0.03, momentum 0.9, weight decay 0; they belong to the training schedule (presets).
The fine-tuning momentum and weight decay (``momentum_fitting``, ``weight_decay_fitting``) are that
table's, which mammoth reuses (the presets repeat them).

Deviations from the paper and from the authors' code (mammoth, which the X-DER paper ran):
    - replay: LUCIR and mammoth append the exemplars to the task's training set; here each step
      joins its share of them (``replay = "merged"``, as iCaRL's: every exemplar once an epoch,
      spread over the epoch's stream batches, weakly augmented) and takes one loss over the
      union (``replay = "joined"``: ``minibatch_size`` exemplars with every batch, as ER);
    - imprinting needs the new classes' data before training, which ``begin_task`` does not
      receive: each new class is imprinted at the first step of its task whose stream batch
      contains it, from the (detached, train-mode, augmented) features of that batch's items of
      the class, just before they are classified. LUCIR and mammoth average over all the class's
      training examples (mammoth: augmented, eval mode);
    - the cross-entropy spans the seen classes (the paper's growing classifier); mammoth's spans
      all pre-allocated classes, future ones included;
    - margin ranking: the hard negatives are the top-k cosines of the current task's classes
      (mammoth takes them over every class after the old ones, future ones included); the hinge
      is averaged over the (old item, negative) pairs, as LUCIR's and mammoth's code do (Eq. 7-8
      sum over the k negatives: k times larger); ``k`` is capped at the number of new classes;
    - as in LUCIR's and mammoth's code, the old classes' weights are frozen (lr 0 there;
      detached and left out of the optimiser here); future classes' weights are unused;
    - class-balanced fine-tuning trains the current task's weights and sigma (mammoth's
      trainable classifier parameters) with cross-entropy over the seen classes plus the margin
      ranking term (the less-forget term has no gradient w.r.t. the classifier), on weakly
      augmented memory batches of ``fitting_batch_size``, BatchNorm in train mode with frozen
      statistics; its lr schedule is mammoth's (``lr_fitting`` for 10 batches, then a tenth:
      ``lr_fitting_milestones = ()`` keeps ``lr_fitting`` throughout), and so is its weight
      decay. mammoth's fine-tuning also takes the memory's left-over rows (zero images
      labelled 0, see :mod:`xder_methods.methods.icarl`); here only the stored exemplars.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.errors import check_settings
from xder_methods.core.passes import train_passes
from xder_methods.core.protocols import (
    Backbone,
    Batch,
    ContinualSetting,
    Scenario,
    StepOutput,
    TaskBudget,
    TaskData,
    Transforms,
)
from xder_methods.core.registry import register_method
from xder_methods.core.schedule import shuffled_batches
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.heads import CosineHead
from xder_methods.parts.losses import at_least_float32
from xder_methods.parts.networks import eval_features, frozen_batchnorm_stats
from xder_methods.parts.replay import ExemplarReplayConfig, MergedReplay, prefill_reservoir, replay_exemplars
from xder_methods.parts.selection import class_mean_features, update_herding_buffer
from xder_methods.parts.teacher import PreviousModelTeacher

__all__ = [
    "LUCIR",
    "LUCIRConfig",
    "fitting_learning_rate",
    "imprinted_weights",
    "less_forget_distance",
    "margin_ranking_loss",
]


@dataclass(frozen=True, kw_only=True)
class LUCIRConfig(ExemplarReplayConfig):
    """LUCIR's hyperparameters; defaults from the X-DER paper's App. "Hyperparameter Choice",
    Split CIFAR-100 (the same at M = 500 and 2000) unless noted.

    Attributes:
        buffer_size: memory size M, 500.
        replay: ``merged`` (default, the authors' code: the exemplars' share of a training set
            they are merged into) or ``joined`` (``minibatch_size`` with every stream batch).
        minibatch_size: exemplars replayed per step with ``replay = "joined"``, 32.
        lambda_base: base weight of the less-forget constraint, 5.
        k: hard negatives (top-k new-class cosines) of the margin ranking loss, 2.
        margin: the margin ranking loss's margin m, 0.5.
        lambda_mr: weight of the margin ranking loss, 1 (LUCIR's and mammoth's code; not in the
            table).
        epochs_fitting: epochs of class-balanced fine-tuning after each task, 20 (0: none).
        lr_fitting: its learning rate, 0.01 (0, in the paper's miniImageNet grid: no fine-tuning).
        momentum_fitting: its SGD momentum, 0.9 (the table's LUCIR momentum, reused by mammoth).
        weight_decay_fitting: its SGD weight decay, 0 (the table's LUCIR weight decay, reused by
            mammoth).
        lr_fitting_milestones: batches of the fine-tuning (counted over all its epochs) after
            which its lr is multiplied by ``lr_fitting_gamma``: (10,), mammoth's per-batch
            ``MultiStepLR``; () keeps it constant.
        lr_fitting_gamma: that factor, 0.1.
        fitting_batch_size: its batch size, 32 (the Split CIFAR-100 batch size mammoth reuses).
        imprint: initialise new classes' weights by imprinting (mammoth's default).
        forward_batch_size: batch size of no-gradient forward passes at task end (herding);
            memory only.
    """

    lambda_base: float = 5.0
    k: int = 2
    margin: float = 0.5
    lambda_mr: float = 1.0
    epochs_fitting: int = 20
    lr_fitting: float = 0.01
    momentum_fitting: float = 0.9
    weight_decay_fitting: float = 0.0
    lr_fitting_milestones: tuple[int, ...] = (10,)
    lr_fitting_gamma: float = 0.1
    fitting_batch_size: int = 32
    imprint: bool = True
    forward_batch_size: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            (self.lambda_base >= 0, f"method.lambda_base must be >= 0, got {self.lambda_base}"),
            (self.k >= 1, f"method.k must be >= 1, got {self.k}"),
            (self.margin >= 0, f"method.margin must be >= 0, got {self.margin}"),
            (self.lambda_mr >= 0, f"method.lambda_mr must be >= 0, got {self.lambda_mr}"),
            (self.epochs_fitting >= 0, f"method.epochs_fitting must be >= 0, got {self.epochs_fitting}"),
            (self.lr_fitting >= 0, f"method.lr_fitting must be >= 0, got {self.lr_fitting}"),
            (
                self.momentum_fitting >= 0,
                f"method.momentum_fitting must be >= 0, got {self.momentum_fitting}",
            ),
            (
                self.weight_decay_fitting >= 0,
                f"method.weight_decay_fitting must be >= 0, got {self.weight_decay_fitting}",
            ),
            (
                all(m >= 1 for m in self.lr_fitting_milestones)
                and list(self.lr_fitting_milestones) == sorted(set(self.lr_fitting_milestones)),
                "method.lr_fitting_milestones must be increasing batch counts >= 1, "
                f"got {self.lr_fitting_milestones}",
            ),
            (self.lr_fitting_gamma > 0, f"method.lr_fitting_gamma must be > 0, got {self.lr_fitting_gamma}"),
            (self.fitting_batch_size >= 2, "method.fitting_batch_size must be >= 2"),
            (self.forward_batch_size >= 1, "method.forward_batch_size must be >= 1"),
        ]
        check_settings(checks)


# ---------------------------------------------------------------------------------------------
# Pure functions


def fitting_learning_rate(batches_done: int, lr: float, milestones: Sequence[int], gamma: float) -> float:
    """The fine-tuning's lr after ``batches_done`` batches: ``lr * gamma ** (milestones <=
    batches_done)``, a ``MultiStepLR`` stepped once per batch (the authors' code)."""
    return lr * gamma ** bisect.bisect_right(list(milestones), batches_done)


def less_forget_distance(features: Tensor, teacher_features: Tensor) -> Tensor:
    """LUCIR's less-forget constraint per item (Eq. 6): ``1 - cos(f*(x), f(x))``, ``(B, D) -> (B,)``.

    The teacher's features are constants."""
    return 1.0 - F.cosine_similarity(
        at_least_float32(features), at_least_float32(teacher_features.detach()), dim=1
    )


def margin_ranking_loss(cosines: Tensor, labels: Tensor, *, num_old: int, k: int, margin: float) -> Tensor:
    """LUCIR's inter-class separation (Eq. 7), averaged over (old item, hard negative) pairs.

    For each item of an old class (``label < num_old``), with ``g`` its ground-truth cosine and
    ``n_1 >= ... >= n_k`` the k largest cosines among the new classes ``[num_old, C)``:
    ``sum_j max(0, margin - g + n_j)``; the result is the sum over old items divided by
    ``k * (number of old items)`` (0 when the batch has none). No host synchronisation.

    Args:
        cosines: (B, C) unscaled cosine scores over the seen classes (old then new).
        labels: (B,) global labels.
        num_old: number of old classes.
        k: hard negatives per item (capped at the number of new classes).
        margin: m.
    """
    k = min(k, cosines.shape[1] - num_old)
    if num_old == 0 or k <= 0:
        return cosines.sum() * 0.0
    is_old = (labels < num_old).to(cosines.dtype)
    ground_truth = cosines.gather(1, labels.view(-1, 1))  # (B, 1)
    hard = cosines[:, num_old:].topk(k, dim=1).values  # (B, k)
    hinge = F.relu(margin - ground_truth + hard).sum(dim=1)
    return (hinge * is_old).sum() / (is_old.sum() * k).clamp(min=1)


def imprinted_weights(
    features: Tensor, labels: Tensor, start: int, end: int, old_weights: Tensor
) -> tuple[Tensor, Tensor]:
    """Weight imprinting (LUCIR Sec. 3.2, after Qi et al. 2018) for the classes ``[start, end)``.

    Each class's weight is the normalised mean of the normalised features of its rows, times the
    mean L2 norm of the rows of ``old_weights``.

    Args:
        features: (N, D) features of examples of the new classes.
        labels: (N,) their labels, in ``[start, end)``.
        old_weights: (n_old, D) the old classes' weights (their mean norm is the scale).

    Returns:
        ``(weights, present)``: (end - start, D) imprinted weights and (end - start,) bool, True
        for the classes with at least one row (other rows are zero).
    """
    means, present = class_mean_features(features, labels - start, end - start)
    scale = at_least_float32(old_weights).norm(dim=1).mean()
    return means * scale, present


# ---------------------------------------------------------------------------------------------


def _head_parameter_ids(net: nn.Module) -> set[int]:
    """Ids of the parameters ``net.forward_head`` uses (found by one backward pass in eval mode)."""
    backbone = cast(Backbone, net)  # a method's network is a Backbone (not checkable on nn.Module)
    params = [p for p in net.parameters() if p.requires_grad]
    was_training = net.training
    net.train(False)
    try:
        with torch.enable_grad():
            probe = torch.zeros(2, int(backbone.num_features), device=params[0].device, requires_grad=True)
            grads = torch.autograd.grad(backbone.forward_head(probe).sum(), params, allow_unused=True)
    finally:
        net.train(was_training)
    return {id(p) for p, g in zip(params, grads, strict=True) if g is not None}


@register_method("lucir", LUCIRConfig)
class LUCIR(PreviousModelTeacher[LUCIRConfig]):
    """LUCIR: cosine classifier, less-forget feature distillation, margin ranking, imprinting,
    class-balanced fine-tuning and a herding memory (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the cosine head's new classes are imprinted and balanced
    against the old ones per task (a Domain-IL task brings no new classes), the teacher and
    exemplars renewed at each task's end (a general stream has none).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "its cosine head imprints each task's new classes and balances them against the old "
            "ones, and a domain-il task brings no new classes"
        ),
        "general": (
            "it distils from the previous task's model and rebuilds its exemplars at each task's "
            "end, and a general stream has no task ends"
        ),
    }

    imprinted: Tensor  # the buffer registered in __init__, declared for the type checker

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: LUCIRConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        num_features = int(cast(Backbone, net).num_features)
        self.head = CosineHead(num_features, setting.classes_per_task, generator, self.device)
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)
        self.merged = MergedReplay()
        self.register_buffer(
            "imprinted", torch.zeros(setting.num_classes, dtype=torch.bool, device=self.device)
        )
        self._net_head_ids = _head_parameter_ids(net)

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    def less_forget_weight(self, task: int) -> float:
        """``lambda_base * sqrt(|C_o| / |C_n|)`` for ``task`` (0 at task 0)."""
        num_old, num_seen = self.setting.class_range(task)
        return self.config.lambda_base * math.sqrt(num_old / (num_seen - num_old))

    def optimizer_parameters(self) -> Iterator[nn.Parameter]:
        """The backbone (not the network's own classifier), the current task's class weights and
        sigma."""
        yield from (p for p in self.net.parameters() if id(p) not in self._net_head_ids)
        yield self.head.weights[self.current_task]
        yield self.head.sigma

    @torch.no_grad()
    def _imprint(self, features: Tensor, labels: Tensor, task: int) -> None:
        """Imprint the task's classes present in the batch that are not imprinted yet."""
        start, end = self.setting.class_range(task)
        old = self.head.weight()[:start]
        weights, present = imprinted_weights(features, labels, start, end, old)
        fresh = present & ~self.imprinted[start:end]
        block = self.head.weights[task]
        block.copy_(torch.where(fresh[:, None], weights.to(block.dtype), block))
        self.imprinted[start:end] |= fresh

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> None:
        """Spread the exemplars over the task's epoch (:class:`~xder_methods.parts.replay.MergedReplay`)."""
        self.merged.plan(data.y.shape[0], budget.batch_size, budget.drop_last)

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows into the memory by reservoir sampling
        (:func:`~xder_methods.parts.replay.prefill_reservoir`): a memory of the right size and
        classes, not herded: :meth:`end_task` would also fine-tune the network."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        cfg, t = self.config, batch.task
        num_old, num_seen = self.setting.class_range(t)
        x, y = replay_exemplars(batch, self.buffer, cfg, self.merged, self.transforms.train, self.generator)
        n_stream, n = batch.y.shape[0], y.shape[0]
        features = cast(Backbone, self.net).forward_features(x).flatten(1)
        if t >= 1 and cfg.imprint:
            self._imprint(features[:n_stream].detach(), batch.y, t)
        cosines = self.head.cosines(features, trainable_task=t)[:, :num_seen]
        ce = F.cross_entropy(self.head.sigma * cosines, y, reduction="none")
        loss = ce.mean()
        stream = ce[:n_stream].sum() / n
        terms = {"ce": loss.detach()}
        if t >= 1:
            with torch.no_grad():
                teacher_features = cast(Backbone, self.teacher).forward_features(x).flatten(1)
            less_forget = self.less_forget_weight(t) * less_forget_distance(features, teacher_features)
            ranking = cfg.lambda_mr * margin_ranking_loss(
                cosines, y, num_old=num_old, k=cfg.k, margin=cfg.margin
            )
            loss = loss + less_forget.mean() + ranking
            stream = stream + less_forget[:n_stream].sum() / n
            terms |= {"less_forget": less_forget.mean().detach(), "margin_ranking": ranking.detach()}
        groups = {"stream": stream, "buffer": loss - stream} if n > n_stream else {}
        return StepOutput(loss, terms, groups)

    def end_task(self, task: int, data: TaskData) -> None:
        cfg = self.config
        per_class = cfg.buffer_size // self.seen_classes(task)
        features = eval_features(self.net, data.x_raw, self.transforms.test, cfg.forward_batch_size)
        update_herding_buffer(self.buffer, data, features, per_class)
        if cfg.epochs_fitting and cfg.lr_fitting > 0 and len(self.buffer) >= 2:
            self.fit_classifier(task)

    def fit_classifier(self, task: int) -> None:
        """Class-balanced fine-tuning of the current task's weights and sigma on the memory."""
        cfg = self.config
        num_old, num_seen = self.setting.class_range(task)
        optimizer = torch.optim.SGD(
            [self.head.weights[task], self.head.sigma],
            lr=cfg.lr_fitting,
            momentum=cfg.momentum_fitting,
            weight_decay=cfg.weight_decay_fitting,
        )
        items = self.buffer.all()

        def batches() -> Iterator[Tensor]:
            """The memory's batches, the lr of each set after the step before it."""
            done = 0
            for _ in range(cfg.epochs_fitting):
                for rows in shuffled_batches(
                    len(self.buffer),
                    cfg.fitting_batch_size,
                    drop_last=False,
                    generator=self.generator,
                    device=self.device,
                ):
                    if done:
                        lr = fitting_learning_rate(
                            done, cfg.lr_fitting, cfg.lr_fitting_milestones, cfg.lr_fitting_gamma
                        )
                        for group in optimizer.param_groups:
                            group["lr"] = lr
                    yield rows
                    done += 1

        def loss(rows: Tensor) -> Tensor:
            with torch.no_grad():
                x = self.transforms.train(items.examples[rows], self.generator)
                features = cast(Backbone, self.net).forward_features(x).flatten(1)
            labels = items.labels[rows]
            cosines = self.head.cosines(features, trainable_task=task)[:, :num_seen]
            value = F.cross_entropy(self.head.sigma * cosines, labels)
            return value + cfg.lambda_mr * margin_ranking_loss(
                cosines, labels, num_old=num_old, k=cfg.k, margin=cfg.margin
            )

        was_training = self.training
        self.train(True)
        with frozen_batchnorm_stats(self.net):
            train_passes(batches(), loss, optimizer, policy=self.step_policy, device=self.device)
        for parameter in (self.head.weights[task], self.head.sigma):
            parameter.grad = None
        self.train(was_training)

    def predict(self, x: Tensor) -> Tensor:
        """(B, num_classes) scaled cosine scores."""
        scores: Tensor = self.head(cast(Backbone, self.net).forward_features(x).flatten(1))
        return scores
