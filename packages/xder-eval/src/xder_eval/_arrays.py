"""Input conversion shared by the metrics: numpy arrays or torch tensors (any device) in, numpy out."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


def to_numpy(value: Any, name: str, *, ndim: int | None = None) -> np.ndarray:
    """``value`` as a numpy array (a copy off the device for tensors), checked for its rank.

    Raises:
        ValueError: ``value`` does not have ``ndim`` dimensions.
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype in (torch.bfloat16, torch.float16):
            tensor = tensor.float()  # numpy has no bfloat16
        array = tensor.cpu().numpy()
    else:
        array = np.asarray(value)
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, has shape {tuple(array.shape)}")
    return array


def check_labels(labels: np.ndarray, n: int, n_classes: int, name: str = "labels") -> np.ndarray:
    """``labels`` as int64 after checking it holds ``n`` integer class ids in ``[0, n_classes)``.

    Raises:
        ValueError: wrong length, not integers, or an id out of range.
    """
    if labels.shape[0] != n:
        raise ValueError(f"{name} has {labels.shape[0]} entries, expected {n}")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer class ids, not {labels.dtype}")
    labels = labels.astype(np.int64)
    if n and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{name} must lie in [0, {n_classes}), got [{labels.min()}, {labels.max()}]")
    return labels
