"""The GPU checks: ``pytest -m gpu tests/gpu`` on a machine with CUDA (the GPU script's ``tests``
phase runs them so; the default test run deselects the ``gpu`` marker).

``XDER_TEST_DEVICE`` names the device (``cuda`` by default). ``XDER_TEST_DEVICE=cpu`` runs the same
code on the CPU at a toy width (the GPU script's smoke run, ``nox -s gpu``), so that the checks
work the first time a GPU is at hand; there every comparison with the CPU holds by construction and
proves only that the code runs. Without a CUDA device and without that setting, each check fails:
a GPU check that finds no GPU has checked nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch


@pytest.fixture(scope="session")
def device() -> torch.device:
    name = os.environ.get("XDER_TEST_DEVICE", "cuda")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(
            "no CUDA device: the gpu checks need one (XDER_TEST_DEVICE=cpu runs their code on the CPU)"
        )
    return torch.device(name)


@pytest.fixture(scope="session")
def width(device: torch.device) -> int:
    """The backbone's width: the paper's 64 on a GPU, 8 for the CPU's run of the same code."""
    return 64 if device.type == "cuda" else 8


@contextlib.contextmanager
def planted_draws() -> Iterator[None]:
    """Every ``torch.rand``, ``torch.randint`` and ``torch.randperm`` given a generator draws from
    a CPU twin of that generator (seeded with its initial seed, the first time it is met) and
    moves the result to the generator's device: a step on the CPU and one on a GPU then see the
    same draws."""
    twins: dict[int, torch.Generator] = {}
    originals = {name: getattr(torch, name) for name in ("rand", "randint", "randperm")}

    def twin(generator: torch.Generator) -> torch.Generator:
        if id(generator) not in twins:
            twins[id(generator)] = torch.Generator().manual_seed(generator.initial_seed())
        return twins[id(generator)]

    def wrap(name: str) -> Callable[..., torch.Tensor]:
        original = originals[name]

        def draw(*args: Any, generator: torch.Generator | None = None, device: Any = None, **kw: Any):
            if generator is None:
                return original(*args, device=device, **kw)
            value = original(*args, generator=twin(generator), device="cpu", **kw)
            return value.to(device if device is not None else generator.device)

        return draw

    for name in originals:
        setattr(torch, name, wrap(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)


@pytest.fixture(name="planted_draws")
def planted_draws_fixture() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """:func:`planted_draws`, for the tests of this folder."""
    return planted_draws
