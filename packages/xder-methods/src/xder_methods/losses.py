"""Loss terms as pure functions: tensors in, a new tensor out, inputs never modified.

Weights (alpha, beta, lambda, eta) are applied by the caller.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

__all__ = ["logit_matching_loss", "seen_class_cross_entropy"]


def seen_class_cross_entropy(logits: Tensor, labels: Tensor, num_seen: int) -> Tensor:
    """Cross-entropy with one softmax over the first ``num_seen`` classes, mean over the batch.

    Args:
        logits: (B, C).
        labels: (B,) global labels, all ``< num_seen``.
        num_seen: columns ``[0, num_seen)`` take part; later (unseen) classes are left out.
    """
    return F.cross_entropy(logits[:, :num_seen], labels)


def logit_matching_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """DER's logit replay term without its weight: ``mean((logits - targets) ** 2)``.

    The mean runs over the batch AND the classes, as in the authors' code (``F.mse_loss``);
    the paper's Eq. 5 writes a squared L2 norm (a sum over classes), which differs by the factor
    C that the published alpha values absorb.

    Args:
        logits: (B, C) current outputs.
        targets: (B, C) stored logits (treated as constants).
    """
    return F.mse_loss(logits, targets.detach())
