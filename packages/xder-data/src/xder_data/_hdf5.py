"""Small HDF5 helpers shared by the readers that keep a decoded cache (CUB-200, ``folder``)."""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

__all__ = ["read_attr"]


def read_attr(handle: h5py.File, key: str) -> Any:
    """Attribute ``key`` of an open file as a plain Python value (bytes decoded as UTF-8, numpy
    scalars unwrapped), or None when it is absent."""
    value = handle.attrs.get(key)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.generic):
        return value.item()
    return value
