"""Phase 5 of the GPU script (``step_graph``): whole training steps recorded as CUDA graphs
against eager ones, and the mode the pack phase and the full run train in."""

from __future__ import annotations

import time
from typing import Any

import torch
from gpu_phases.common import Script, checked, epoch_seconds, run_results, xder_run

# How far (FAA points) the replayed run may fall from the eager one before the full run leaves
# step graphs out. Deterministic float32 should give equal matrices; this allows for an atomic
# add whose order still varies.
STEP_GRAPH_FAA_TOLERANCE = 2.0


def step_graph_check(script: Script, device: torch.device, smoke: bool) -> dict[str, Any]:
    """DER++ on Split CIFAR-10, 2 tasks of 1 epoch (smoke: 2 epochs at width 8 and a buffer of 20,
    which the smoke's few images fill, so that steps are replayed), deterministic algorithms,
    float32: eagerly, then with ``train.step_graph`` (see the module docstring, phase 7). Float32,
    because under bf16 autocast the two differ by design: a recorded step keeps no cache of cast
    weights, so the gradients of DER++'s three forward passes add up in float32 rather than in
    bf16."""
    common = [
        "train", "--method", "derpp", "--benchmark", "seq-cifar10", "--protocol", "full",
        "--buffer-size", "20" if smoke else "200", "--seed", "0", "--data-root", str(script.out / "data"),
        "--device", str(device), "--epochs", "2" if smoke else "1", "--set", "train.tasks=2",
    ]  # fmt: skip
    if smoke:
        common += ["--set", "backbone.width=8"]
    log = script.out / "step_graph.log"
    runs = {}
    for name, extra in (("eager", []), ("replayed", ["--set", "train.step_graph=true"])):
        out = script.out / f"step-graph-{name}"
        started = time.monotonic()
        result = xder_run(
            [*common, *extra, "--out", str(out)], log, timeout=script.left() / 2, launch=("--deterministic",)
        )
        checked(result, f"step_graph {name} run")
        (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
        runs[name] = {
            "wall_seconds": time.monotonic() - started,
            "results": run_results(run_dir),
            "epoch_seconds": epoch_seconds(run_dir),
        }
    keys = ("accuracy_matrix", "task_il_accuracy_matrix")
    eager, replayed = (runs[n]["results"] for n in ("eager", "replayed"))
    return {
        "method": "derpp",
        "benchmark": "seq-cifar10",
        "identical": all(eager[k] == replayed[k] for k in keys),
        "agree": abs(eager["faa"] - replayed["faa"]) <= STEP_GRAPH_FAA_TOLERANCE,
        "faa": {"eager": eager["faa"], "replayed": replayed["faa"]},
        "accuracy_matrix": {"eager": eager["accuracy_matrix"], "replayed": replayed["accuracy_matrix"]},
        "epoch_seconds": {n: runs[n]["epoch_seconds"] for n in runs},
        # the second task's last epoch: replayed throughout but for its warm-up steps
        "eager_epoch_seconds": runs["eager"]["epoch_seconds"][1][-1],
        "replayed_epoch_seconds": runs["replayed"]["epoch_seconds"][1][-1],
        "wall_seconds": {n: runs[n]["wall_seconds"] for n in runs},
    }
