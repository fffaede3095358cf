"""iCaRL (``icarl``): Incremental Classifier and Representation Learning (Rebuffi et al., CVPR 2017;
X-DER paper Sec. 5.2).

Three parts (iCaRL Sec. 2, Alg. 1-5):

1. Representation learning: LwF.MC's loss (:mod:`xder_methods.methods.lwf_mc`) over the stream AND the
   (augmented) exemplars: sigmoid binary cross-entropy over the seen classes, one-hot targets for
   the new classes, the frozen previous model's sigmoids for the old ones.
2. A herding memory: at the end of task t every class keeps ``m = M // (seen classes)``
   exemplars: the old classes are cut to their first m (herding order is a priority order), the
   new classes' m are chosen by :func:`herding` on the L2-normalised features of all their
   training examples.
3. Nearest-mean-of-exemplars classification: the class means of the normalised features of the
   exemplars (re-normalised), recomputed at the end of every task; :meth:`ICaRL.predict` returns
   minus the distance to each mean, ``-inf`` for classes without a mean.

Protocol values of the X-DER paper (App. "Hyperparameter Choice", Split CIFAR-100, M = 500 and
2000): lr 0.3, weight decay 1e-5, momentum 0; they belong to the training schedule (presets).

Deviations from the paper and from the authors' code (mammoth), which the X-DER paper ran:
    - replay: iCaRL and mammoth append the exemplars to the task's training set (each exemplar
      once per epoch, more steps per epoch); the loop here gives a method the task's stream
      batches only, so each step joins its share of the exemplars (``replay = "merged"``,
      :class:`~xder_methods.parts.replay.MergedReplay`: every exemplar once an epoch, ``M / S`` beside
      each of the epoch's S stream batches, weakly augmented) and takes one loss over the
      union: the exemplars' share of the training is the merged set's, the number of steps the
      stream's (``replay = "joined"``: ``minibatch_size`` exemplars with every batch, as ER);
    - features are L2-normalised for herding and for the class means, and the means
      re-normalised, as the paper says; mammoth uses raw features for both (and averages the
      per-batch means pairwise, not the true mean);
    - the class means use the exemplars only, without the horizontally flipped copies of the
      authors' original code (the benchmark's test transform is applied, nothing else);
    - herding picks without repetition; its target is the mean of the normalised features (not
      re-normalised, as in mammoth): the running mean of unit vectors can reach it exactly;
    - the binary cross-entropy is averaged over items and seen classes (mammoth), not summed;
    - the memory's ``M - m * (seen classes)`` left-over slots stay empty, as in the paper. In
      mammoth they hold zero images labelled 0, which its replay leaves out but its class means
      (``get_all_data``) count in class 0's mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
from torch import Tensor, nn

from xder_methods.core.errors import MethodConfigError
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
from xder_methods.methods.lwf_mc import LwFMC
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.networks import eval_features
from xder_methods.parts.replay import (
    ExemplarReplayConfig,
    MergedReplay,
    prefill_reservoir,
    replay_exemplars,
    stream_buffer_groups,
)
from xder_methods.parts.selection import (
    class_mean_features,
    nearest_mean_scores,
    update_herding_buffer,
)

__all__ = ["ICaRL", "ICaRLConfig"]


@dataclass(frozen=True, kw_only=True)
class ICaRLConfig(ExemplarReplayConfig):
    """Attributes:
    buffer_size: memory size M (500: the paper's Split CIFAR-100 M = 500 row).
    replay: ``merged`` (default, the authors' code: the exemplars' share of a training set they
        are merged into) or ``joined`` (``minibatch_size`` exemplars with every stream batch).
    minibatch_size: exemplars replayed per step with ``replay = "joined"`` (32 on Split
        CIFAR-100).
    forward_batch_size: batch size of the no-gradient forward passes at task end (herding, class
        means); a matter of memory only (eval mode: the results do not depend on it).
    """

    forward_batch_size: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.forward_batch_size < 1:
            raise MethodConfigError(f"method.forward_batch_size must be >= 1, got {self.forward_batch_size}")


# ---------------------------------------------------------------------------------------------
# Pure functions


# ---------------------------------------------------------------------------------------------
# End-of-task helpers (may synchronise with the host)


# ---------------------------------------------------------------------------------------------


@register_method("icarl", ICaRLConfig)
class ICaRL(LwFMC[ICaRLConfig]):
    """iCaRL: LwF.MC's distillation on the stream and replayed exemplars, a herding memory, and
    nearest-mean-of-exemplars prediction (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): the distillation, the exemplars and the nearest-mean classes
    are the old and new classes of each task (a Domain-IL task brings no new classes), rebuilt
    at each task's end (a general stream has none).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "domain-il": (
            "it distils the old classes' outputs, trains the new classes' and keeps exemplars of "
            "each new class, and a domain-il task brings no new classes"
        ),
        "general": (
            "it distils from the previous task's model and rebuilds its exemplars at each task's "
            "end, and a general stream has no task ends"
        ),
    }

    # Buffers registered in __init__, declared for the type checker.
    class_means: Tensor
    has_mean: Tensor

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: ICaRLConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)
        if config.buffer_size < setting.num_classes:
            raise MethodConfigError(
                f"method.buffer_size must be >= the number of classes ({setting.num_classes}): "
                "iCaRL's nearest-mean classifier needs an exemplar of every class"
            )
        self.buffer = Buffer.for_setting(config.buffer_size, setting, self.device)
        self.merged = MergedReplay()
        num_features = int(cast(Backbone, net).num_features)
        self.register_buffer(
            "class_means", torch.zeros(setting.num_classes, num_features, device=self.device)
        )
        self.register_buffer(
            "has_mean", torch.zeros(setting.num_classes, dtype=torch.bool, device=self.device)
        )

    def replay_memory(self) -> Buffer:
        """The memory it replays from: :attr:`buffer`."""
        return self.buffer

    def prepare_task(self, task: int, data: TaskData, budget: TaskBudget) -> None:
        """Spread the exemplars over the task's epoch (:class:`~xder_methods.parts.replay.MergedReplay`)."""
        self.merged.plan(data.y.shape[0], budget.batch_size, budget.drop_last)

    def prefill(self, task: int, data: TaskData) -> None:
        """The task's rows into the memory by reservoir sampling
        (:func:`~xder_methods.parts.replay.prefill_reservoir`): a memory of the right size and
        classes, not herded: :meth:`end_task` would also compute the class means."""
        prefill_reservoir(self.buffer, self.net, self.transforms.test, data, self.generator)

    def observe(self, batch: Batch) -> StepOutput:
        x, y = replay_exemplars(
            batch, self.buffer, self.config, self.merged, self.transforms.train, self.generator
        )
        per_item = self.distillation_loss_per_item(x, y, batch.task)
        loss = per_item.mean()
        n_stream = batch.y.shape[0]
        groups = stream_buffer_groups(per_item, n_stream) if y.shape[0] > n_stream else {}
        return StepOutput(loss, {"bce": loss.detach()}, groups)

    @torch.no_grad()
    def end_task(self, task: int, data: TaskData) -> None:
        per_class = self.config.buffer_size // self.seen_classes(task)
        features = eval_features(self.net, data.x_raw, self.transforms.test, self.config.forward_batch_size)
        update_herding_buffer(self.buffer, data, features, per_class)
        self.update_class_means()

    @torch.no_grad()
    def update_class_means(self) -> None:
        """Recompute the class means from the exemplars with the current network."""
        items = self.buffer.all()
        features = eval_features(
            self.net, items.examples, self.transforms.test, self.config.forward_batch_size
        )
        means, present = class_mean_features(features, items.labels, self.setting.num_classes)
        self.class_means.copy_(means)
        self.has_mean.copy_(present)

    def predict(self, x: Tensor) -> Tensor:
        """(B, num_classes) nearest-mean-of-exemplars scores (minus distances; -inf: no mean)."""
        features = cast(Backbone, self.net).forward_features(x).flatten(1)
        return nearest_mean_scores(features, self.class_means, self.has_mean)
