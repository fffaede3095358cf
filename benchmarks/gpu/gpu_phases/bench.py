"""Phases 4 and 8 of the GPU script (``bench``, ``compile``): ``xder-run bench`` in a mode of
:data:`~gpu_phases.modes.MODES`."""

from __future__ import annotations

import json
from typing import Any

import torch
from gpu_phases.common import METHODS, Script, checked, xder_run
from gpu_phases.modes import COMPILED_MODES, REPLAYING_METHODS_ONLY, settings_args


def bench(
    script: Script, device: torch.device, smoke: bool, benchmark: str, mode: str, methods=METHODS
) -> Any:
    """``xder-run bench`` of ``methods`` on ``benchmark`` at the paper's shapes in ``mode``
    (its settings, :data:`~gpu_phases.modes.MODES`; the compiled modes and those that change the
    replay's passes DER++ and X-DER only; smoke: two methods at width 8 in the modes other than
    float32): its figures (``bench-<benchmark>-<mode>.json``)."""
    path = script.out / f"bench-{benchmark}-{mode}.json"
    if mode in REPLAYING_METHODS_ONLY:
        methods = tuple(m for m in methods if m in ("derpp", "xder"))
    elif smoke and mode != "fp32":  # the other modes' paths with two methods (X-DER's bf16 and
        # step graphs: the correctness phase and the unit tests); a CPU's bf16 is slow
        methods = tuple(m for m in methods if m in ("sgd", "derpp"))
    args = [
        "bench", "--benchmark", benchmark, "--protocol", "full", "--methods", ",".join(methods),
        "--device", str(device), "--json", str(path), *settings_args(mode),
    ]  # fmt: skip
    if smoke:
        args += ["--width", "8", "--steps", "2", "--warmup", "1", "--no-epoch"]
    else:
        args += ["--steps", "20", "--warmup", "5"]
    limit = script.left() - (5 if mode in COMPILED_MODES else 0)
    cap = limit if smoke else 180 if mode in COMPILED_MODES else 150  # smoke: no cap of its own
    # torch's reasons for recompiling or not running a CUDA graph, into the log
    env = {"TORCH_LOGS": "recompiles,perf_hints,cudagraphs"} if mode in COMPILED_MODES else {}
    result = xder_run(args, script.out / "bench.log", timeout=min(cap, limit), env=env)
    checked(result, f"bench {benchmark} {mode}")
    return json.loads(path.read_text())
