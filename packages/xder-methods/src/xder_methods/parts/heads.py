"""Classifier heads and output geometries a method puts after (or instead of) the network's own
classifier.

They live here, not in xder-models, because xder-methods imports nothing but torch (docs/development.md):
a method builds the head it needs on ``net.forward_features``. The others are pure functions: the
bias-correction layer in BiC's module (:func:`xder_methods.methods.bic.bias_correct`) and the
nearest-mean-of-exemplars scores among the selection parts
(:func:`xder_methods.parts.selection.nearest_mean_scores`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.parts.losses import at_least_float32

__all__ = ["CosineHead", "polytope_logits", "regular_simplex"]


def regular_simplex(num_classes: int, dtype: torch.dtype | None = None) -> Tensor:
    """Vertices of a regular simplex centred at the origin: ``(K, K - 1)``, unit rows, pairwise
    dot product ``-1 / (K - 1)`` (the fixed classifier of RPC, Pernici et al., ICPR 2020).

    The network's first K - 1 outputs are read as a point of R^{K-1}; its logits are the dot
    products with these K fixed vertices, so every class, seen or not, is equally far from the
    others.
    """
    if num_classes < 2:
        raise ValueError("a simplex classifier needs at least two classes")
    n = num_classes - 1
    vertices = torch.zeros(n + 1, n, dtype=torch.float64)
    vertices[:n] = torch.eye(n, dtype=torch.float64)
    vertices[n] = (1.0 - (n + 1.0) ** 0.5) / n
    vertices -= vertices.mean(dim=0, keepdim=True)
    vertices /= vertices[0].norm()
    return vertices.to(torch.get_default_dtype() if dtype is None else dtype)


def polytope_logits(outputs: Tensor, vertices: Tensor) -> Tensor:
    """Logits through a fixed polytope: ``outputs[:, :D] @ vertices.T``.

    Args:
        outputs: (B, >= D) network outputs; only the first D = ``vertices.shape[1]`` are used.
        vertices: (K, D) fixed class vectors (a regular simplex has D = K - 1).

    Returns:
        (B, K) logits.
    """
    dim = vertices.shape[1]
    return outputs[:, :dim] @ vertices.to(outputs.dtype).T


class CosineHead(nn.Module):
    """Cosine classifier with a learnable scale (LUCIR Sec. 3.1): ``sigma * cos(f, theta_c)``.

    One weight block per task (``weights[t]: (c_t, D)``) so that the optimiser can hold the
    current task's block only; sigma starts at 1 and the weights uniform in ``+-1/sqrt(D)`` (as
    in LUCIR's and mammoth's code).
    """

    def __init__(
        self,
        num_features: int,
        classes_per_task: tuple[int, ...],
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(num_features)
        draw_device = generator.device if generator is not None else None
        self.weights = nn.ParameterList(
            nn.Parameter(
                torch.empty(c, num_features, device=draw_device)
                .uniform_(-bound, bound, generator=generator)
                .to(device)
            )
            for c in classes_per_task
        )
        self.sigma = nn.Parameter(torch.ones(1, device=device))

    def weight(self, trainable_task: int | None = None) -> Tensor:
        """(C, D) all class weights; with ``trainable_task`` only that task's block keeps its
        gradient (the others are detached)."""
        blocks = [
            w if trainable_task is None or k == trainable_task else w.detach()
            for k, w in enumerate(self.weights)
        ]
        return torch.cat(blocks)

    def cosines(self, features: Tensor, trainable_task: int | None = None) -> Tensor:
        """(B, C) unscaled cosines between the features and every class weight."""
        return F.linear(
            F.normalize(at_least_float32(features), dim=1), F.normalize(self.weight(trainable_task), dim=1)
        )

    def forward(self, features: Tensor) -> Tensor:
        return self.sigma * self.cosines(features)
