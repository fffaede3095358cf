"""Fixed output geometries a method can put after the network's own classifier."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["regular_simplex"]


def regular_simplex(num_classes: int, dtype: torch.dtype = torch.float32) -> Tensor:
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
    return vertices.to(dtype)
