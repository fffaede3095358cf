"""Shared settings of the xder-models tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """Run each test on one intra-op thread, then restore the previous count.

    The tensors here are tiny, so threads only add synchronisation; and on CPUs shared with other
    jobs OpenMP's spin-waiting made this folder 3-4x slower with two threads than with one.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
