"""Loss terms as pure functions: tensors in, a new tensor out, inputs never modified.

Weights (alpha, beta, lambda, eta) are applied by the caller.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from xder_methods.core.protocols import Scenario

__all__ = [
    "at_least_float32",
    "future_constraint",
    "future_preparation_loss",
    "logit_matching_loss",
    "past_constraint",
    "rescale_logits",
    "seen_class_cross_entropy",
    "separated_cross_entropy",
    "violation_mean",
]

ConstraintForm = Literal["reference", "paper"]


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32 where it is in a narrower float (bf16 or fp16 under autocast), else
    ``x`` itself, with no op dispatched: float32 stays float32 and float64 stays float64."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def seen_class_cross_entropy(logits: Tensor, labels: Tensor, num_seen: int) -> Tensor:
    """Cross-entropy with one softmax over the first ``num_seen`` classes, mean over the batch.

    Args:
        logits: (B, C).
        labels: (B,) global labels, all ``< num_seen``.
        num_seen: columns ``[0, num_seen)`` take part; later (unseen) classes are left out.
    """
    return F.cross_entropy(logits[:, :num_seen], labels)


def logit_matching_loss(logits: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:
    """DER's logit replay term without its weight: ``mean((logits - targets) ** 2)``.

    The mean runs over the batch AND the classes, as in the authors' code (``F.mse_loss``);
    the paper's Eq. 5 writes a squared L2 norm (a sum over classes), which differs by the factor
    C that the published alpha values absorb.

    Args:
        logits: (B, C) current outputs.
        targets: (B, C) stored logits (treated as constants).
        mask: optional (B, C) bool: only these entries count (the mean is over them).
    """
    if mask is None:
        return F.mse_loss(logits, targets.detach())
    squared = (logits - targets.detach()).pow(2) * mask
    return squared.sum() / mask.sum().clamp(min=1)


def separated_cross_entropy(logits: Tensor, labels: Tensor, start: int, end: int) -> Tensor:
    """Cross-entropy over the columns ``[start, end)`` only (X-DER paper Eq. 10, S-CE).

    Args:
        logits: (B, C).
        labels: (B,) global labels, all in ``[start, end)``.

    Columns outside the range get no gradient: for the current task's head, past and future
    heads are neither pushed down nor up by the stream.
    """
    return F.cross_entropy(logits[:, start:end], labels - start)


def rescale_logits(
    stored: Tensor, fresh: Tensor, labels: Tensor, start: int, end: int, gamma: float
) -> Tensor:
    """Implant ``fresh[:, start:end]`` into ``stored``, attenuated below the ground truth
    (X-DER paper Eq. 7 and Alg. 2, "logits of future past").

    Per row i, with ``g = stored[i, labels[i]]`` and ``mx = max(fresh[i, start:end])``, the
    new slice is ``fresh[i, start:end] * min(gamma * g / mx, 1)``: unchanged when
    ``mx <= gamma * g``, else scaled so that its maximum is exactly ``gamma * g``. Columns outside
    ``[start, end)`` keep ``stored``.

    Deviations, both documented: rows with ``g <= 0`` keep ``stored`` entirely (Eq. 7 would flip
    signs there and cannot bring the maximum under g; the authors' code has no guard); the
    authors' code rescales only when ``mx > g``, which leaves maxima in ``(gamma g, g]`` above
    the paper's bound, whereas this function follows Eq. 7 / Alg. 2 (max ``<= gamma * g``).

    Args:
        stored: (N, C) logits in memory (ground-truth values are read here).
        fresh: (N, C) current outputs of the same items.
        labels: (N,) global labels.
        start: the first column to implant.
        end: the column after the last to implant.
        gamma: attenuation rate in [0, 1].

    Returns:
        A new (N, C) tensor; the inputs are not modified.
    """
    g = stored.gather(1, labels.view(-1, 1))  # (N, 1)
    part = fresh[:, start:end]
    top = part.max(dim=1, keepdim=True).values
    over = top > gamma * g
    scale = torch.where(over, gamma * g / torch.where(over, top, torch.ones_like(top)), torch.ones_like(top))
    implanted = stored.clone()
    implanted[:, start:end] = part * scale
    return torch.where(g > 0, implanted, stored)


def future_preparation_loss(
    logits: Tensor, labels: Tensor, *, head_size: int, first_future_head: int, tau: float
) -> Tensor:
    """Supervised contrastive loss on each future head (X-DER paper Eq. 8-9; Khosla et al., 2020).

    For every future head h (``first_future_head .. C // head_size - 1``) the head's logits of
    each view are L2-normalised, ``s_ik`` is the dot product of rows i and k among all N*V rows,
    and each anchor i contributes
    ``-(1/|P(i)|) * sum_{p in P(i)} log(exp(s_ip / tau) / sum_{k != i} exp(s_ik / tau))``
    with P(i) the other rows of the same label. The result is the mean over anchors (anchors with
    an empty P(i) are not counted) and then over heads.

    The authors' code computes the same: its ``SupConLoss`` (``reduction='sum'``) averages each
    item's V anchors, sums over the N items, and the caller divides by N and the number of heads,
    so the lambda of their tables applies here unchanged.

    Args:
        logits: (N, V, C) outputs of V strong views of N items.
        labels: (N,) labels of the items.
        head_size: classes per head.
        first_future_head: index of the first head to prepare (current task + 1).
        tau: temperature.

    Returns:
        A scalar; 0 (with a gradient path) when there is no future head.
    """
    n, views, classes = logits.shape
    n_heads = classes // head_size - first_future_head
    if n_heads <= 0:
        return logits.sum() * 0.0
    heads = logits[:, :, first_future_head * head_size : (first_future_head + n_heads) * head_size]
    heads = heads.reshape(n * views, n_heads, head_size).transpose(0, 1)  # (H, NV, c)
    z = F.normalize(heads, dim=-1)
    sim = torch.bmm(z, z.transpose(1, 2)) / tau  # (H, NV, NV)
    eye = torch.eye(n * views, dtype=torch.bool, device=logits.device)
    log_prob = sim - torch.logsumexp(sim.masked_fill(eye, float("-inf")), dim=-1, keepdim=True)
    row_labels = labels.repeat_interleave(views)
    positive = (row_labels[:, None] == row_labels[None, :]) & ~eye  # (NV, NV)
    n_positive = positive.sum(dim=1)
    per_anchor = -(log_prob * positive).sum(dim=-1) / n_positive.clamp(min=1)  # (H, NV)
    counted = (n_positive > 0).to(per_anchor.dtype)
    return ((per_anchor * counted).sum(dim=1) / counted.sum().clamp(min=1)).mean()


def violation_mean(violation: Tensor, weights: Tensor | None = None) -> Tensor:
    """Mean of the positive entries of ``violation`` (0 when none), without a host sync.

    ``weights`` (0/1 per row) drops rows, e.g. duplicated buffer items.
    """
    positive = violation > 0
    if weights is not None:
        positive = positive & (weights > 0)
    return (violation * positive).sum() / positive.sum().clamp(min=1)


def _own_head_max(logits: Tensor, labels: Tensor, head_size: int) -> Tensor:
    heads = logits[:, : (logits.shape[1] // head_size) * head_size].unflatten(1, (-1, head_size))
    own = heads[torch.arange(logits.shape[0], device=logits.device), labels // head_size]
    values: Tensor = own.max(dim=1).values
    return values


def past_constraint(
    logits: Tensor,
    *,
    task: int,
    head_size: int,
    margin: float,
    labels: Tensor | None = None,
    form: ConstraintForm = "reference",
) -> Tensor:
    """Keep past heads below the present one on stream items (X-DER Sec. 4.3; docs/xder.md, step 6).

    ``reference`` (the authors' code, the default): on ``p = softmax(logits[:, :(t+1)c])``,
    ``v = max(p_past).detach() + margin - max(p_present)``, averaged over the rows with v > 0
    (0 if none). ``paper`` (Eq. 11): on raw logits,
    ``max(0, max(logits_past) - logits[i, y_i] + margin)`` averaged over all rows (needs
    ``labels``).

    Args:
        logits: (B, C) outputs of current-task items; t = ``task`` >= 1.
    """
    past, seen = task * head_size, (task + 1) * head_size
    if form == "reference":
        p = logits[:, :seen].softmax(dim=1)
        v = p[:, :past].max(dim=1).values.detach() + margin - p[:, past:seen].max(dim=1).values
        return violation_mean(v)
    if labels is None:
        raise ValueError("the paper form of the past constraint needs the labels")
    gt = logits.gather(1, labels.view(-1, 1))[:, 0]
    return F.relu(logits[:, :past].max(dim=1).values - gt + margin).mean()


def future_constraint(
    logits: Tensor,
    labels: Tensor,
    *,
    task: int,
    head_size: int,
    margin: float,
    weights: Tensor | None = None,
    form: ConstraintForm = "reference",
) -> Tensor:
    """Keep future heads below each item's own head (X-DER Sec. 4.3; docs/xder.md, step 7).

    ``reference`` (default): on raw logits, nothing detached,
    ``v = max(logits[:, (t+1)c:]) + margin - max(logits of the item's own head label // c)``,
    averaged over the rows with v > 0 (0 if none). ``paper`` (Eq. 11): the threshold is the
    ground-truth logit, ``max(0, max(future) - logits[i, y_i] + margin)`` averaged over all rows.

    Args:
        logits: (B, C') outputs over the existing heads (future heads are ``(t+1)c .. C'``).
        labels: (B,) global labels (stream items of task t and buffer items of earlier tasks).
        weights: optional (B,) 0/1: rows to count (duplicated buffer items get 0).
    """
    future = logits[:, (task + 1) * head_size :].max(dim=1).values
    if form == "reference":
        return violation_mean(future + margin - _own_head_max(logits, labels, head_size), weights)
    gt = logits.gather(1, labels.view(-1, 1))[:, 0]
    hinge = F.relu(future - gt + margin)
    if weights is None:
        return hinge.mean()
    return (hinge * weights).sum() / weights.sum().clamp(min=1)


def asymmetric_mask(labels: Tensor, num_classes: int, *, task: int, num_seen: int) -> Tensor:
    """Columns the stream cross-entropy of ER-ACE keeps: ``(num_classes,)`` bool.

    From task 1 on, only the classes present in the stream batch; during task 0, the classes seen
    so far (``[0, num_seen)``).

    Args:
        labels: (B,) labels of the stream batch.
        num_classes: C, the width of the logits.
        task: the current task t.
        num_seen: classes of tasks 0..t.
    """
    if task == 0:
        return torch.arange(num_classes, device=labels.device) < num_seen
    present = torch.zeros(num_classes, dtype=torch.bool, device=labels.device)
    return present.scatter(0, labels, True)


def asymmetric_refusals(plain: str) -> dict[Scenario, str]:
    """Why a method whose stream term is the asymmetric cross-entropy (ER-ACE, DER++-ACE)
    refuses domain-il and general, for its ``refused_scenarios``; ``plain`` names the method it
    would be without the mask (a general stream is one task)."""
    return {
        "domain-il": (
            "its asymmetric cross-entropy keeps the new classes' loss off the past classes' "
            "logits, and a domain-il task brings no new classes"
        ),
        "general": (
            "its asymmetric cross-entropy masks from the second task on, and a general stream is "
            f"one task, so it would be plain {plain}"
        ),
    }


def masked_cross_entropy(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy with the columns where ``mask`` is False left out of the softmax.

    Args:
        logits: (B, C).
        labels: (B,), every label a kept column.
        mask: (C,) or (B, C) bool, True where a column takes part.

    Masked logits are replaced by -inf: they take no part in the softmax and receive exactly zero
    gradient.
    """
    return F.cross_entropy(logits.masked_fill(~mask, float("-inf")), labels)
