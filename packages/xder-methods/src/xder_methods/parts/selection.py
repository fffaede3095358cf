"""Exemplar selection: herding, class means and nearest-mean scores (iCaRL), ranks within a
class and class-balanced quotas (X-DER, RPC, BiC), the herding memory update."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.protocols import (
    TaskData,
)
from xder_methods.parts.buffer import Buffer
from xder_methods.parts.losses import (
    at_least_float32,
)

__all__ = [
    "class_balanced_quotas",
    "class_mean_features",
    "first_occurrence",
    "herding",
    "nearest_mean_scores",
    "rank_within_class",
    "update_herding_buffer",
]


def first_occurrence(index: Tensor) -> Tensor:
    """(N,) bool: True where ``index[j]`` did not occur at any position before j."""
    earlier = torch.ones(index.shape[0], index.shape[0], dtype=torch.bool, device=index.device).tril(-1)
    return ~((index[:, None] == index[None, :]) & earlier).any(dim=1)


def rank_within_class(labels: Tensor, num_classes: int) -> Tensor:
    """(N,) int64: how many earlier rows share each row's label (0 for the first of a class)."""
    one_hot = F.one_hot(labels, num_classes)
    return (one_hot.cumsum(dim=0) * one_hot).sum(dim=1) - 1


def class_balanced_quotas(
    free: int, n_classes: int, generator: torch.Generator | None, device: torch.device | str | None
) -> Tensor:
    """Share ``free`` slots among ``n_classes`` classes: ``free // n`` each, and one more for
    ``free % n`` classes drawn at random (the authors' end-of-task insertion)."""
    quotas = torch.full((n_classes,), free // n_classes, dtype=torch.int64, device=device)
    extra = free - (free // n_classes) * n_classes
    lucky = torch.randperm(n_classes, generator=generator, device=device)[:extra]
    quotas[lucky] += 1
    return quotas


def herding(features: Tensor, k: int) -> Tensor:
    """iCaRL's exemplar selection (Alg. 4): greedily, the example whose addition brings the
    running mean of the chosen (L2-normalised) features closest to the class mean.

    With ``f_i = features_i / ||features_i||`` and ``mu = mean_i f_i``, step j picks
    ``argmin_i || mu - (f_i + sum_{chosen} f) / j ||`` over the examples not yet chosen.

    Args:
        features: (N, D) features of the examples of ONE class.
        k: number of exemplars wanted.

    Returns:
        (min(k, N),) int64 row indices, in selection (priority) order.
    """
    n = features.shape[0]
    k = min(k, n)
    unit = F.normalize(features.double(), dim=1)
    target = unit.mean(dim=0)
    running = torch.zeros_like(target)
    taken = torch.zeros(n, dtype=torch.bool, device=features.device)
    chosen = torch.zeros(k, dtype=torch.int64, device=features.device)
    for j in range(k):
        cost = (target - (running + unit) / (j + 1)).pow(2).sum(dim=1)
        pick = cost.masked_fill(taken, float("inf")).argmin().view(1)
        chosen[j : j + 1] = pick
        running = running + unit.index_select(0, pick)[0]
        taken.index_fill_(0, pick, True)
    return chosen


def class_mean_features(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Per class, the L2-normalised mean of the L2-normalised features (iCaRL Alg. 1).

    Args:
        features: (N, D).
        labels: (N,) int64 in ``[0, num_classes)``.

    Returns:
        ``(means, present)``: (num_classes, D) float means (zero rows for absent classes) and
        (num_classes,) bool, True where the class has at least one row.
    """
    unit = F.normalize(at_least_float32(features), dim=1)
    sums = torch.zeros(num_classes, unit.shape[1], device=unit.device, dtype=unit.dtype).index_add_(
        0, labels, unit
    )
    counts = torch.bincount(labels, minlength=num_classes)[:num_classes]
    return F.normalize(sums, dim=1), counts > 0


def nearest_mean_scores(features: Tensor, class_means: Tensor, has_mean: Tensor) -> Tensor:
    """Nearest-mean-of-exemplars scores: minus the Euclidean distance of the normalised feature to
    each class mean, ``-inf`` for classes without a mean (argmax = the nearest mean).

    Args:
        features: (B, D) raw features.
        class_means: (C, D) normalised class means.
        has_mean: (C,) bool.

    Returns:
        (B, C) scores.
    """
    unit = F.normalize(at_least_float32(features), dim=1)
    distance = torch.cdist(unit, at_least_float32(class_means))
    return (-distance).masked_fill(~has_mean[None, :], float("-inf"))


def update_herding_buffer(buffer: Buffer, data: TaskData, features: Tensor, per_class: int) -> None:
    """iCaRL's memory update at the end of a task (Alg. 2, 4, 5), in place.

    Every stored class is cut to its first ``per_class`` items (rows hold each class's exemplars
    in herding order); then each class of ``data`` gets ``per_class`` exemplars chosen by
    :func:`herding` on ``features``. Rows stay grouped by class in herding order.

    Args:
        buffer: the memory (its rows ``0 .. len - 1`` are rewritten).
        data: all training rows of the finished task (stored unaugmented).
        features: (N, D) features of ``data.x_raw``.
        per_class: m, exemplars per class.
    """
    with torch.no_grad():
        kept = 0
        if len(buffer):
            stored = buffer.all()
            num_classes = int(stored.labels.max()) + 1
            rows = torch.nonzero(rank_within_class(stored.labels, num_classes) < per_class).flatten()
            kept = rows.shape[0]
            items = buffer.gather(rows)
            buffer.write(
                torch.arange(kept, device=rows.device), items.examples, items.labels, None, items.task_labels
            )
        picked = []
        for label in torch.unique(data.y).tolist():
            rows = torch.nonzero(data.y == label).flatten()
            picked.append(rows[herding(features[rows], per_class)])
        index = torch.cat(picked) if picked else data.y[:0]
        size = kept + index.shape[0]
        if size > buffer.capacity:
            raise ValueError(f"{size} exemplars do not fit a memory of {buffer.capacity}")
        slots = torch.arange(kept, size, device=index.device)
        buffer.write(slots, data.x_raw[index], data.y[index], None, data.task)
        buffer.set_size(size)
        buffer.num_seen = size
