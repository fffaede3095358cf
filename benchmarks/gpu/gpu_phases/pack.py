"""Phase 6 of the GPU script (``pack``): K DER++ runs at once on one card."""

from __future__ import annotations

import time
from typing import Any

import torch
from gpu_phases.common import Script, epoch_seconds, train_runs
from gpu_phases.modes import settings_args

# K DER++ runs at once on one card, each PACK_EPOCHS epochs of task 0 (the first records its
# graphs; the others are its steady epochs); PACK_RESERVE seconds kept for the full run.
PACK_SIZES = (1, 2, 4, 8)
PACK_EPOCHS = 3
PACK_RESERVE = 20.0


def pack_mode(device: torch.device, check: dict[str, Any] | None) -> str:
    """The mode the pack phase and a packed full run train in: whole-step graphs (``stepgraph``)
    where the step_graph phase found the replayed run agreeing with the eager one, else the
    backbone's graphs (``graphs``); on a CPU (smoke) float32, whose steps a GPU would replay."""
    if device.type != "cuda":
        return "fp32"
    return "stepgraph" if check is not None and check["agree"] else "graphs"


def pack(script: Script, device: torch.device, smoke: bool, mode: str) -> dict[str, Any]:
    """K DER++ runs at once on one device, K in :data:`PACK_SIZES` (smoke: 1 and 2), each a
    separate ``xder-run train`` process (Split CIFAR-10, the paper's shapes, buffer 200, seeds 0 ..
    K-1, :data:`PACK_EPOCHS` epochs of task 0, in ``mode``): each run's steady epoch (the mean of
    its epochs after the first, which records its graphs), and the packed throughput, the sum of
    the runs' epochs per hour. A size the time left cannot hold is skipped (the time it needs
    planned from the last size's wall time)."""
    sizes = (1, 2) if smoke else PACK_SIZES
    epochs = 2 if smoke else PACK_EPOCHS
    rows = []
    last_wall = 0.0
    for k in sizes:
        needs = last_wall * 1.8 + 10  # the next size: about twice the work of the last, in parallel
        if not smoke and script.left() < needs + PACK_RESERVE:
            rows.append(
                {"k": k, "status": "skipped", "reason": f"{script.left():.0f} s left, needs {needs:.0f}"}
            )
            break
        folder = script.out / f"pack-{k}"
        runs = {}
        for seed in range(k):
            args = [
                "train", "--method", "derpp", "--benchmark", "seq-cifar10", "--protocol", "full",
                "--buffer-size", "20" if smoke else "200", "--seed", str(seed),
                "--data-root", str(script.out / "data"), "--device", str(device),
                "--epochs", str(epochs), "--set", "train.tasks=1", "--out", str(folder / f"seed-{seed}"),
                *settings_args(mode),
            ]  # fmt: skip
            if smoke:
                args += ["--set", "backbone.width=8"]
            runs[f"seed-{seed}"] = args
        started = time.monotonic()
        try:
            walls = train_runs(runs, folder / "pack.log", timeout=script.left() - PACK_RESERVE / 2)
        except Exception as error:  # keep the sizes measured so far
            rows.append({"k": k, "status": "error", "reason": f"{type(error).__name__}: {error}"})
            break
        wall = time.monotonic() - started
        last_wall = wall
        steady = []
        for seed in range(k):
            (run_dir,) = [p for p in (folder / f"seed-{seed}").iterdir() if p.is_dir()]
            times = epoch_seconds(run_dir).get(0, [])
            steady.append(sum(times[1:]) / len(times[1:]) if len(times) > 1 else None)
        done = [t for t in steady if t is not None]
        rows.append(
            {
                "k": k,
                "status": "ok" if len(done) == k else "partial",
                "wall_seconds": wall,
                "run_wall_seconds": walls,
                "steady_epoch_seconds": steady,
                "mean_epoch_seconds": sum(done) / len(done) if done else None,
                # the packed throughput: every run's steady epochs per hour, summed
                "epochs_per_hour": sum(3600 / t for t in done) if done else None,
            }
        )
    one = next((r["epochs_per_hour"] for r in rows if r["k"] == 1 and r.get("epochs_per_hour")), None)
    for row in rows:
        if one and row.get("epochs_per_hour"):
            row["speedup_over_one"] = row["epochs_per_hour"] / one
            # the DER paper's Split CIFAR-10 protocol: 5 tasks x 50 epochs a run
            row["full_protocol_runs_per_hour"] = row["epochs_per_hour"] / 250
    return {"method": "derpp", "benchmark": "seq-cifar10", "mode": mode, "epochs": epochs, "rows": rows}


def packed_epoch_seconds(packed: dict[str, Any] | None, runs: int) -> float | None:
    """A run's steady epoch with ``runs`` runs at once, from the pack phase: the smallest size
    measured that holds them (an upper bound), else the largest measured."""
    if not packed:
        return None
    rows = [r for r in packed["rows"] if r.get("mean_epoch_seconds")]
    if not rows:
        return None
    holding = [r for r in rows if r["k"] >= runs]
    row = min(holding, key=lambda r: r["k"]) if holding else max(rows, key=lambda r: r["k"])
    return float(row["mean_epoch_seconds"])
