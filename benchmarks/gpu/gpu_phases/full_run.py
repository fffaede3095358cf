"""Phase 7 of the GPU script (``full_run``): one of the full runs
(:data:`~gpu_phases.modes.FULL_RUNS`) at its paper's protocol, the mean and std of its seeds' FAA
by the library's statistics beside the published value the library ships."""

from __future__ import annotations

import time
from typing import Any

import torch
from gpu_phases.common import Script, epoch_seconds, run_results, train_runs
from gpu_phases.modes import COMPILED_MODES, MODES, NOT_THE_AUTHORS, full_run_spec, settings_args
from gpu_phases.pack import packed_epoch_seconds

from xder_eval import seed_stats

# A training run's epoch over the bench's (the full run's epochs are planned with it, unless the
# run's own epoch was measured: LOOP_EPOCH_SECONDS). The bench's epoch is the loop's own since
# 664addb; a run adds its evaluations and end-of-task work. (The bench's epoch of its own making
# had been 1.55x faster than a run's on an H200, 5.4 s against 8.2 s for DER++ in bf16 +
# channels-last, on two machines of that kind.)
LOOP_OVER_BENCH = 1.1
# A training run's epoch where measured (seconds, mean after the first, on an H200): DER++ on Split
# CIFAR-10 with the backbone's CUDA graphs, 3.13 s (archive/h200-2026-11-26-graphs, index.json), where the
# bench of then had 7.8 s; with whole steps replayed, 1.75 s (archive/h200-2026-11-27).
LOOP_EPOCH_SECONDS = {("derpp-cifar10", "graphs"): 3.13, ("derpp-cifar10", "stepgraph"): 1.75}


def full_run(
    script: Script,
    device: torch.device,
    smoke: bool,
    benches: dict[Any, Any],
    reserve: float,
    which: str,
    epochs: int | None = None,
    check: dict[str, Any] | None = None,
    seeds: tuple[int, ...] = (0,),
    packed: dict[str, Any] | None = None,
    whole: bool = False,
    mode_asked: str | None = None,
) -> dict[str, Any]:
    """One of :data:`~gpu_phases.modes.FULL_RUNS` (:func:`~gpu_phases.modes.full_run_spec`), one run per
    seed of ``seeds``, all at once (one process each), in the mode of the fastest training-loop epoch
    (the pack phase's, ``packed``, for as many runs at once where it measured them; else the loop's
    own where measured, :data:`LOOP_EPOCH_SECONDS`; else the bench's times :data:`LOOP_OVER_BENCH`),
    as many epochs per task (at most the protocol's) as fit in the time left less ``reserve`` seconds
    (``epochs``: that many; ``whole``: the last seeds left out where that lets the others run the
    whole protocol); ``check``: the step_graph phase's figures, where it ran; ``mode_asked``: that
    mode, planned with its measured epoch (:data:`LOOP_EPOCH_SECONDS`) where the bench did not run. A
    run the time cuts short still reports the tasks it finished (``results.json`` is rewritten after
    every task)."""
    spec = full_run_spec(which)
    timings = {}
    for mode in MODES:
        if mode in NOT_THE_AUTHORS and mode != mode_asked:  # a paper's run, unless asked otherwise
            continue
        payload = benches.get((spec["benchmark"], mode))
        rows = [r for r in payload["methods"] if r["method"] == spec["method"]] if payload else []
        if rows and rows[0]["epoch_seconds"] is not None:
            seconds = rows[0]["epoch_seconds"] * LOOP_OVER_BENCH
            timings[mode] = LOOP_EPOCH_SECONDS.get((which, mode), seconds)
    # Step graphs unless the step_graph phase found the replayed run off (FAA more than
    # gpu_phases.step_graph.STEP_GRAPH_FAA_TOLERANCE from the eager one's); with its float32 epoch
    # where it measured this run's method (an upper bound of the bf16 mode's). Where that phase did
    # not finish, the bench's stepgraph mode ran the replays at the paper's shapes, and the CPU's
    # replay check vouches for what they compute.
    if check is not None and not check["agree"]:
        timings.pop("stepgraph", None)
    elif check is not None and (check["method"], check["benchmark"]) == (spec["method"], spec["benchmark"]):
        timings["stepgraph"] = check["replayed_epoch_seconds"]
    same = packed is not None and (packed["method"], packed["benchmark"]) == (
        spec["method"],
        spec["benchmark"],
    )

    def plan(runs: int) -> tuple[str, float | None, int]:
        """The mode, a run's epoch and the epochs per task that fit, with ``runs`` runs at once."""
        packed_s = packed_epoch_seconds(packed, runs) if same else None
        if packed_s is not None and mode_asked in (None, packed["mode"]):  # that many at once: it wins
            mode, epoch_s = packed["mode"], packed_s
        else:
            mode = mode_asked or (min(timings, key=timings.__getitem__) if timings else "fp32")
            epoch_s = timings.get(mode, LOOP_EPOCH_SECONDS.get((which, mode)))
            if epoch_s is not None:  # not measured packed: as if one after another
                epoch_s *= runs
        if epoch_s is None:
            return mode, None, 1
        # 20 s for start-up, evaluations and plots (and 60 s for compiling)
        fixed = 20 + (60 if mode in COMPILED_MODES else 0) + (15 if mode.startswith("stepgraph") else 0)
        fit = int(max(0.0, script.left() - reserve - fixed) / (spec["tasks"] * epoch_s))
        return mode, epoch_s, min(spec["epochs"], fit)

    if whole and epochs is None and not smoke:  # the fewest seeds dropped that let the protocol fit
        for runs in range(len(seeds), 0, -1):
            if plan(runs)[2] >= spec["epochs"]:
                seeds = seeds[:runs]
                break
    mode, loop_epoch_s, fit = plan(len(seeds))
    if epochs is None:
        epochs = 1 if smoke else fit
    if epochs < 1:
        raise RuntimeError(
            f"no time for one epoch per task ({script.left():.0f} s left, {loop_epoch_s} s an epoch)"
        )
    out = script.out / "full-run"
    runs = {}
    for seed in seeds:
        args = [
            "train", "--method", spec["method"], "--benchmark", spec["benchmark"], "--protocol", "full",
            "--buffer-size", str(spec["buffer_size"]), "--preset", "paper", "--seed", str(seed),
            "--data-root", str(script.out / "data"), "--device", str(device), "--epochs", str(epochs),
            "--out", str(out / f"seed-{seed}"),
            *settings_args(mode),
        ]  # fmt: skip
        if smoke:
            args += ["--set", "backbone.width=8"]
        runs[f"seed-{seed}"] = args
    started = time.monotonic()
    walls = train_runs(runs, script.out / "full_run.log", timeout=script.left() - reserve)
    seconds = time.monotonic() - started
    per_seed = []
    for seed in seeds:
        (run_dir,) = [p for p in (out / f"seed-{seed}").iterdir() if p.is_dir()]
        results = run_results(run_dir)
        per_seed.append(
            {
                "seed": seed,
                "complete": results["complete"] and walls[f"seed-{seed}"] is not None,
                "tasks_done": results["tasks_done"],
                "faa": results["faa"],
                "wall_seconds": walls[f"seed-{seed}"],
                "epoch_seconds": epoch_seconds(run_dir),
                "accuracy_matrix": results["accuracy_matrix"],
                "run_dir": str(run_dir.relative_to(script.out)),
            }
        )
    stats = seed_stats([r["faa"] for r in per_seed])  # the library's statistics over seeds
    mean, std = stats.mean, stats.std
    return {
        **spec,
        "mode": mode,
        "seeds": list(seeds),
        "epochs_per_task": epochs,
        "complete": all(r["complete"] for r in per_seed),
        "tasks_done": min(r["tasks_done"] for r in per_seed),
        "faa": mean,
        "faa_std": std,
        "wall_seconds": seconds,
        "planned_epoch_seconds": loop_epoch_s,
        "projected_full_protocol_seconds": None
        if loop_epoch_s is None
        else loop_epoch_s * spec["epochs"] * spec["tasks"],
        "runs": per_seed,
    }
