"""The GPU script: the GPU checks, speed at the papers' shapes, runs packed on one card and a
paper's protocol, in one call of a few minutes (``run.sh`` starts it; ``device_call.sh`` is the
command given to a lent GPU machine; ``jobs.py`` gives it the next jobs of the queue).

Every phase writes its figures as JSON into ``--out`` (``<phase>.json``, with ``summary.json``
and ``table.txt`` last) and runs under one deadline (``--budget`` seconds): a phase that fails
records its error and the next one runs; the full run takes the time left. ``--smoke`` runs every
phase at toy sizes, the bench once per mode (``--device cpu`` on a CPU: the nox session ``gpu``),
so that the first GPU run works first time; its deadline, 30 minutes unless ``--budget`` gives
another, only guards against a hang (it checks the script, not its pace: a busy machine slows it
down and skips none of its phases).

Phases:

1. ``env``: torch, the device, the packages' import paths.
2. ``data``: ``xder-run data prepare cifar10`` (and ``cifar100`` for ``--full-run
   xder-cifar100``) from the archives beside this script (``data/cifar10-jpg.tar.gz``,
   ``data/cifar100-jpg.tar.gz``: the CIFAR-10 and CIFAR-100 JPEG archives, ``train/<class>/*.jpg``
   and ``test/<class>/*.jpg``); in smoke mode from small image folders it writes itself. Data an
   earlier call prepared in the same folder is used as it is.
3. ``tests``: the GPU checks, ``pytest -m gpu tests/gpu`` on the device (a training step against
   the CPU's in float32, TF32 and bf16; no host sync in a step; a run killed with SIGKILL and
   resumed against the run left alone; whole steps replayed against eager ones): each test's
   outcome (``tests.json``, ``tests.xml``, ``tests.log``). In smoke mode DER++'s only, on the CPU,
   and not its replayed-against-eager test, whose runs the ``step_graph`` phase repeats.
4. ``bench``: ``xder-run bench`` (FT, ER, DER++, X-DER) at the papers' shapes on ``seq-cifar10``
   and ``seq-cifar100`` in the modes of ``gpu_phases.modes.MODES`` (each one table of the
   ``--set`` settings that bench and train both take) that :data:`BENCH_PLAN` (or
   ``--bench-plan``) names: float32, bf16 + channels-last, ``graphs`` (those two with the
   backbone compiled into CUDA graphs, DER++ and X-DER only, torch's recompile and CUDA-graph
   notes in ``bench.log``), ``stepgraph`` (bf16 + channels-last with whole steps replayed as
   CUDA graphs, ``train.step_graph``), ``stepgraph-fp32`` (the same in float32, torch's default
   on a GPU: TF32 convolutions), ``stepgraph-grouped`` (the same with DER++'s and X-DER's
   stream and buffer batches, and X-DER's future-preparation views, in one forward pass in which
   BatchNorm keeps each batch apart, ``--set method.replay_forward=grouped``: the authors'
   computation) and ``stepgraph-joint`` (those batches in one forward pass, BatchNorm over them
   together, ``--set method.replay_forward=joint``: not the authors' code, so a full run takes it
   only when ``--full-run-mode`` names it); seconds per step, the floor, peak memory, the
   projected full protocol.
5. ``step_graph``: whole training steps recorded as CUDA graphs (``train.step_graph``): DER++ on
   Split CIFAR-10 (paper shapes, float32, deterministic algorithms), 1 epoch of 2 tasks, once
   eagerly and once with its steps replayed; the accuracy matrices compared (the replays draw the
   same random numbers, so they should be equal), and each run's epoch times (task 2's epoch:
   every step after the warm-up replayed). On a CPU (smoke) the replays are checked op by op
   instead (:class:`xder_methods.core.graphs.ReplayCheck`). The full run leaves the ``stepgraph``
   mode (bf16 + channels-last + step graphs) out if the two FAAs differ by more than
   ``gpu_phases.step_graph.STEP_GRAPH_FAA_TOLERANCE``, and otherwise plans it with the replayed
   float32 epoch (an upper bound of its own).
6. ``pack``: K = 1, 2, 4 and 8 DER++ runs at once on the one device (separate processes, Split
   CIFAR-10 at the paper's shapes, ``gpu_phases.pack.PACK_EPOCHS`` epochs of task 0), in the step_graph mode
   where that phase agreed, else with the backbone's graphs: each run's steady epoch and the
   packed throughput (epochs per hour, summed over the runs) against K.
7. ``full_run``: ``--full-run`` (``gpu_phases.modes.FULL_RUNS``: DER++ on Split CIFAR-10, buffer 200, by
   default; X-DER on Split CIFAR-100, buffer 500) at its paper's protocol and preset, one run per
   seed of ``--full-run-seeds``, all at once, in the mode of the fastest training-loop epoch (the
   pack phase's for that many runs at once, where it ran; in a folder an earlier call left, its
   ``pack.json``), as many epochs per task as the time left allows, or ``--full-run-epochs``
   (``--bench-from`` takes the bench figures of an earlier call instead; ``--full-run-mode`` a
   mode).
8. ``compile``: the bench again with ``train.compile`` in torch's default mode (the ``compile``
   mode: DER++ and X-DER), when time is left; only when ``--phases`` names it.

Each phase is a module of ``gpu_phases/`` beside this script (``data``, ``tests``, ``bench``,
``step_graph``, ``pack``, ``full_run``; ``modes`` the modes and full runs, ``common`` the deadline
and the ``xder-run`` calls, ``table`` the summary); the full run's published FAA and its mean and
std over seeds are the library's (``xder_cli.runs.published``, ``xder_eval.seed_stats``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from gpu_phases.bench import bench
from gpu_phases.common import Script
from gpu_phases.data import environment, prepare_data
from gpu_phases.full_run import full_run
from gpu_phases.modes import COMPILED_MODES, FULL_RUNS, MODES, full_run_spec
from gpu_phases.pack import pack, pack_mode
from gpu_phases.step_graph import step_graph_check
from gpu_phases.table import table
from gpu_phases.tests import gpu_tests

PHASES = ("data", "tests", "bench", "step_graph", "pack", "full_run", "compile")
# torch.compile's default mode gained nothing on the H200 (the graphs mode of the bench replaces it)
DEFAULT_PHASES = tuple(p for p in PHASES if p != "compile")
# bf16 alone was slower than float32 on the H200 (more cast kernels in a launch-bound step), and
# Split CIFAR-100 in float32 and bf16 + channels-last was measured there once: left out, so that
# the full run gets the time. The compiled modes run on CUDA only (on a CPU compiling takes minutes).
BENCH_PLAN = [
    ("seq-cifar10", "fp32"),
    ("seq-cifar10", "bf16-cl"),
    ("seq-cifar10", "graphs"),
    ("seq-cifar10", "stepgraph"),
    ("seq-cifar100", "graphs"),
    ("seq-cifar100", "stepgraph"),
]
COMPILE_SECONDS = 100.0  # kept back for the compiled bench (DER++ and X-DER) after the full run
BUDGET = 360.0  # seconds for the whole script on a GPU (a lent machine's quarter-hour, start-up aside)
SMOKE_BUDGET = 1800.0  # the smoke's: a guard against a hang only (busy, it took 9 min on 2 cores)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON figures and logs")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="every phase at toy sizes")
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds for the whole script ({BUDGET:.0f}; with --smoke {SMOKE_BUDGET:.0f})",
    )
    parser.add_argument(
        "--phases",
        default=",".join(DEFAULT_PHASES),
        help=f"comma-separated phases to run (of {','.join(PHASES)}; default: all but compile)",
    )
    parser.add_argument(
        "--bench-from",
        type=Path,
        metavar="DIR",
        help="bench-*.json of an earlier call, for the full run's mode",
    )
    parser.add_argument(
        "--bench-plan",
        default=",".join(f"{b}:{m}" for b, m in BENCH_PLAN),
        help="the bench phase's benchmark:mode pairs, comma-separated (modes: "
        f"{', '.join(MODES)}; default: {','.join(f'{b}:{m}' for b, m in BENCH_PLAN)})",
    )
    parser.add_argument(
        "--full-run",
        choices=FULL_RUNS,
        default="derpp-cifar10",
        help="the full run: DER++ on Split CIFAR-10, buffer 200 (default), or X-DER on Split CIFAR-100, "
        "buffer 500 (needs data/cifar100-jpg.tar.gz)",
    )
    parser.add_argument(
        "--full-run-epochs",
        type=int,
        metavar="N",
        help="epochs per task of the full run (default: as many as the time left allows)",
    )
    parser.add_argument(
        "--full-run-seeds",
        default="0",
        metavar="S,S",
        help="seeds of the full run, comma-separated, all run at once on the one device (default: 0)",
    )
    parser.add_argument(
        "--full-run-whole",
        action="store_true",
        help="leave out the last seeds where that lets the others run the protocol's every epoch",
    )
    parser.add_argument(
        "--full-run-mode",
        choices=tuple(MODES),
        help="the full run's mode (default: the fastest measured)",
    )
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    seeds = tuple(int(seed) for seed in args.full_run_seeds.split(","))
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    budget = args.budget if args.budget is not None else SMOKE_BUDGET if args.smoke else BUDGET
    script = Script(args.out, budget)
    cuda = device.type == "cuda"
    script.phase("env", lambda: environment(device))
    kinds = ["cifar10"] if phases & {"data", "step_graph", "pack"} else []
    full_data = full_run_spec(args.full_run)["data"]
    if "full_run" in phases and full_data not in kinds:
        kinds.append(full_data)
    for kind in kinds:
        script.phase(f"data-{kind}", lambda k=kind: prepare_data(script, args.smoke, k))
    if "tests" in phases:
        script.phase("tests", lambda: gpu_tests(script, device, args.smoke))
    benches: dict[Any, Any] = {}
    for path in sorted(args.bench_from.glob("bench-*.json")) if args.bench_from else []:
        payload = json.loads(path.read_text())
        mode = path.stem.removeprefix(f"bench-{payload['settings']['benchmark']}-")
        benches[(payload["settings"]["benchmark"], mode)] = payload
    if "bench" in phases:
        plan = [tuple(pair.split(":", 1)) for pair in args.bench_plan.split(",")]
        if args.smoke:  # each mode once: the smoke tests the script, not the benchmarks
            first = {mode: (benchmark, mode) for benchmark, mode in reversed(plan)}
            plan = [pair for pair in plan if first[pair[1]] == pair]
        for benchmark, mode in plan:
            if mode in COMPILED_MODES and not cuda:
                skipped = {"status": "skipped", "reason": "compiled: CUDA only"}
                script.phases[f"bench-{benchmark}-{mode}"] = skipped
                continue
            payload = script.phase(
                f"bench-{benchmark}-{mode}",
                lambda b=benchmark, m=mode: bench(script, device, args.smoke, b, m),
                needs=0 if args.smoke else 30,
            )
            if payload is not None:
                benches[(benchmark, mode)] = payload
    check = None
    if "step_graph" in phases:
        check = script.phase(
            "step_graph", lambda: step_graph_check(script, device, args.smoke), needs=0 if args.smoke else 60
        )
    packed = None
    if "pack" not in phases and (args.out / "pack.json").exists():  # an earlier call's, same folder
        packed = json.loads((args.out / "pack.json").read_text())
    if "pack" in phases:
        mode = pack_mode(device, check)
        packed = script.phase(
            "pack", lambda: pack(script, device, args.smoke, mode), needs=0 if args.smoke else 60
        )
    compiling = cuda and "compile" in phases  # compiling on a CPU takes minutes
    if "full_run" in phases:
        reserve = COMPILE_SECONDS if compiling else 0.0
        script.phase(
            "full_run",
            lambda: full_run(
                script,
                device,
                args.smoke,
                benches,
                reserve,
                args.full_run,
                args.full_run_epochs,
                check,
                seeds,
                packed,
                args.full_run_whole,
                args.full_run_mode,
            ),
            needs=0 if args.smoke else 40,
        )
    if compiling:
        payload = script.phase(
            "bench-seq-cifar10-compile",
            lambda: bench(script, device, args.smoke, "seq-cifar10", "compile", ("derpp", "xder")),
            needs=30,
        )
        if payload is not None:
            benches[("seq-cifar10", "compile")] = payload
    summary = table(script, benches)
    script.write("summary", {"phases": script.phases, "elapsed_s": time.monotonic() - script.started})
    (args.out / "table.txt").write_text(summary + "\n")
    print(summary)
    return 0 if all(p["status"] != "error" for p in script.phases.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
