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
   and ``seq-cifar100`` in the modes of :data:`MODES` that :data:`BENCH_PLAN` (or
   ``--bench-plan``) names: float32, bf16 + channels-last, ``graphs`` (those two with the
   backbone compiled into CUDA graphs, DER++ and X-DER only, torch's recompile and CUDA-graph
   notes in ``bench.log``), ``stepgraph`` (bf16 + channels-last with whole steps replayed as
   CUDA graphs, ``--step-graph``) and ``stepgraph-joint`` (the same with DER++'s and X-DER's
   stream and buffer batches in one forward pass, ``--set method.replay_forward=joint``: not the
   authors' code, so a full run takes it only when ``--full-run-mode`` names it); seconds per
   step, the floor, peak memory, the projected full protocol.
5. ``step_graph``: whole training steps recorded as CUDA graphs (``train.step_graph``): DER++ on
   Split CIFAR-10 (paper shapes, float32, deterministic algorithms), 1 epoch of 2 tasks, once
   eagerly and once with its steps replayed; the accuracy matrices compared (the replays draw the
   same random numbers, so they should be equal), and each run's epoch times (task 2's epoch:
   every step after the warm-up replayed). On a CPU (smoke) the replays are checked op by op
   instead (:class:`xder_methods.core.graphs.ReplayCheck`). The full run leaves the ``stepgraph``
   mode (bf16 + channels-last + step graphs) out if the two FAAs differ by more than
   :data:`STEP_GRAPH_FAA_TOLERANCE`, and otherwise plans it with the replayed float32 epoch (an
   upper bound of its own).
6. ``pack``: K = 1, 2, 4 and 8 DER++ runs at once on the one device (separate processes, Split
   CIFAR-10 at the paper's shapes, :data:`PACK_EPOCHS` epochs of task 0), in the step_graph mode
   where that phase agreed, else with the backbone's graphs: each run's steady epoch and the
   packed throughput (epochs per hour, summed over the runs) against K.
7. ``full_run``: ``--full-run`` (:data:`FULL_RUNS`: DER++ on Split CIFAR-10, buffer 200, by
   default; X-DER on Split CIFAR-100, buffer 500) at its paper's protocol and preset, one run per
   seed of ``--full-run-seeds``, all at once, in the mode of the fastest training-loop epoch (the
   pack phase's for that many runs at once, where it ran; in a folder an earlier call left, its
   ``pack.json``), as many epochs per task as the time left allows, or ``--full-run-epochs``
   (``--bench-from`` takes the bench figures of an earlier call instead; ``--full-run-mode`` a
   mode).
8. ``compile``: the bench again with ``--compile`` in torch's default mode (DER++ and X-DER), when
   time is left; only when ``--phases`` names it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LAUNCH = [sys.executable, str(HERE / "launch.py")]
METHODS = ("sgd", "er", "derpp", "xder")  # sgd is FT: fine-tuning, the lower bound
# The full runs the script can make, each beside its published Class-IL FAA (mean, std).
FULL_RUNS: dict[str, dict[str, Any]] = {
    "derpp-cifar10": {
        "method": "derpp", "benchmark": "seq-cifar10", "data": "cifar10", "buffer_size": 200,
        "tasks": 5, "epochs": 50, "published_faa": (64.88, 1.17), "published_in": "DER paper, Table 2",
    },
    "xder-cifar100": {
        "method": "xder", "benchmark": "seq-cifar100", "data": "cifar100", "buffer_size": 500,
        "tasks": 10, "epochs": 50, "published_faa": (49.93, None), "published_in": "X-DER paper, Table 1",
    },
}  # fmt: skip
# A training run's epoch over the bench's (the full run's epochs are planned with it, unless the
# run's own epoch was measured: LOOP_EPOCH_SECONDS). The bench's epoch is the loop's own since
# 664addb; a run adds its evaluations and end-of-task work. (The bench's epoch of its own making
# had been 1.55x faster than a run's on an H200, 5.4 s against 8.2 s for DER++ in bf16 +
# channels-last, on two machines of that kind.)
LOOP_OVER_BENCH = 1.1
# A training run's epoch where measured (seconds, mean after the first, on an H200): DER++ on Split
# CIFAR-10 with the backbone's CUDA graphs, 3.13 s (results/h200-2026-11-26-graphs), where the
# bench of then had 7.8 s; with whole steps replayed, 1.75 s (results/h200-2026-11-27).
LOOP_EPOCH_SECONDS = {("derpp-cifar10", "graphs"): 3.13, ("derpp-cifar10", "stepgraph"): 1.75}
# The step_graph phase: how far (FAA points) the replayed run may fall from the eager one before
# the full run leaves step graphs out. Deterministic float32 should give equal matrices; this
# allows for an atomic add whose order still varies.
STEP_GRAPH_FAA_TOLERANCE = 2.0
# The pack phase: K DER++ runs at once on one card, each PACK_EPOCHS epochs of task 0 (the first
# records its graphs; the others are its steady epochs); PACK_RESERVE seconds kept for the full run.
PACK_SIZES = (1, 2, 4, 8)
PACK_EPOCHS = 3
PACK_RESERVE = 20.0
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


class Script:
    """The deadline and the output folder; ``phase`` runs one phase and records its outcome."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.phases: dict[str, Any] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self, name: str, payload: Any) -> None:
        (self.out / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")

    def phase(self, name: str, fn: Callable[[], Any], *, needs: float = 0.0) -> Any:
        if self.left() < needs:
            self.phases[name] = {
                "status": "skipped",
                "reason": f"{self.left():.0f} s left, needs {needs:.0f}",
            }
            print(f"[{name}] skipped: {self.phases[name]['reason']}", flush=True)
            return None
        print(f"[{name}] ({self.left():.0f} s left)", flush=True)
        started = time.monotonic()
        try:
            payload = fn()
        except Exception as error:  # record it and go on: one GPU call must bring back all it can
            self.phases[name] = {
                "status": "error",
                "error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - started,
            }
            (self.out / f"{name}.error.txt").write_text(traceback.format_exc())
            print(f"[{name}] ERROR {self.phases[name]['error']}", flush=True)
            return None
        seconds = time.monotonic() - started
        self.phases[name] = {"status": "ok", "seconds": round(seconds, 2)}
        self.write(name, payload)
        print(f"[{name}] done in {seconds:.1f} s", flush=True)
        return payload


def xder_run(
    args: list[str],
    log: Path,
    *,
    timeout: float,
    launch: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``xder-run ARGS`` through ``launch.py``, ``env`` added to the environment; stdout and stderr
    appended to ``log``."""
    command = [*LAUNCH, *launch, "--", *args]
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=max(timeout, 1),
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as expired:
        with log.open("a") as file:
            file.write(f"$ {' '.join(command)}\n(timed out after {timeout:.0f} s)\n{expired.stdout or ''}\n")
        raise
    with log.open("a") as file:
        file.write(f"$ {' '.join(command)}\n(rc {result.returncode}, {time.monotonic() - started:.1f} s)\n")
        file.write(result.stdout + result.stderr + "\n")
    return result


def checked(result: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed (rc {result.returncode}): {' | '.join(tail)}")
    return result


def train_runs(
    runs: dict[str, list[str]], log: Path, *, timeout: float, env: dict[str, str] | None = None
) -> dict[str, float | None]:
    """``xder-run`` runs all at once, one process each (``runs``: name -> its arguments), each
    one's output into ``log`` with the name's suffix; waits for all, up to ``timeout`` seconds from
    the start, then kills those left. Returns each run's wall seconds (None: killed at the
    timeout); a run that fails raises, after all have ended."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    procs = {}
    with contextlib.ExitStack() as logs:
        for name, args in runs.items():
            file = logs.enter_context(log.with_suffix(f".{name}.log").open("a"))
            file.write(f"$ {' '.join([*LAUNCH, '--', *args])}\n")
            file.flush()
            procs[name] = subprocess.Popen(
                [*LAUNCH, "--", *args],
                stdout=file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        walls: dict[str, float | None] = {}
        failed = []
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
                walls[name] = time.monotonic() - started
                if proc.returncode != 0:
                    failed.append(f"{name} (rc {proc.returncode})")
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                walls[name] = None
    if failed:
        raise RuntimeError(f"runs failed: {', '.join(failed)} (see {log.stem}.*.log)")
    return walls


# ---------------------------------------------------------------------------------------------
# 1-2: environment and data


def environment(device: torch.device) -> dict[str, Any]:
    import xder_cli
    import xder_methods

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "packages": {"xder_cli": xder_cli.__file__, "xder_methods": xder_methods.__file__},
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {
            "card": torch.cuda.get_device_name(device),
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
    return info


def smoke_images(folder: Path, kind: str, per_class: int, test_per_class: int) -> Path:
    """A small image-folder copy of CIFAR-10 or CIFAR-100 (random 32x32 JPEGs, one brightness per
    class so that the classes can be learnt) in the layout ``xder-run data prepare`` reads."""
    from PIL import Image

    from xder_data.cifar10 import CIFAR10_CLASSES
    from xder_data.cifar100 import cifar100_superclasses

    fine = sorted(name for members in cifar100_superclasses().values() for name in members)
    classes = CIFAR10_CLASSES if kind == "cifar10" else tuple(fine)

    rng = torch.Generator().manual_seed(0)
    for split, count in (("train", per_class), ("test", test_per_class)):
        for index, name in enumerate(classes):
            target = folder / split / name
            target.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                noise = torch.randint(0, 40, (32, 32, 3), generator=rng, dtype=torch.uint8)
                pixels = (noise + index * 215 // len(classes)).numpy()
                Image.fromarray(pixels).save(target / f"{i}.jpg", quality=90)
    return folder


def prepare_data(script: Script, smoke: bool, kind: str) -> dict[str, Any]:
    """``xder-run data prepare KIND`` (cifar10 or cifar100) from ``data/<kind>-jpg.tar.gz`` beside
    this script, or in smoke mode from a small image folder written here."""
    data_root = script.out / "data"
    from xder_data.cifar10 import CIFAR10_FOLDER
    from xder_data.cifar100 import CIFAR100_FOLDER

    prepared = data_root / {"cifar10": CIFAR10_FOLDER, "cifar100": CIFAR100_FOLDER}[kind]
    if prepared.is_dir():  # an earlier call's, in the same folder
        return {"data_root": str(data_root), "reused": str(prepared), "seconds": 0.0}
    if smoke:  # the CIFAR-100 importer wants the real counts: 500 and 100 a class
        counts = (40, 10) if kind == "cifar10" else (500, 100)
        source = smoke_images(script.out / f"smoke-{kind}", kind, *counts)
    else:
        source = HERE / "data" / f"{kind}-jpg.tar.gz"
    started = time.monotonic()
    checked(
        xder_run(
            ["data", "prepare", kind, "--source", str(source), "--data-root", str(data_root)],
            script.out / "data.log",
            timeout=script.left() if smoke else min(120, script.left()),
        ),
        f"data prepare {kind}",
    )
    return {"source": str(source), "data_root": str(data_root), "seconds": time.monotonic() - started}


# ---------------------------------------------------------------------------------------------
# 3: the GPU checks (tests/gpu)


SMOKE_TESTS = "derpp and not replayed"
"""The smoke's GPU checks (``pytest -k``): DER++'s, less the replayed-against-eager runs, which the
``step_graph`` phase trains again (eager and replayed DER++, their matrices compared)."""


def gpu_tests(script: Script, device: torch.device, smoke: bool) -> dict[str, Any]:
    """``pytest -m gpu tests/gpu`` on ``device`` (``XDER_TEST_DEVICE``; smoke: :data:`SMOKE_TESTS`,
    their code on the CPU at a toy width): each test's outcome, from pytest's JUnit XML."""
    import xml.etree.ElementTree as ElementTree

    report = script.out / "tests.xml"
    command = [
        sys.executable, "-m", "pytest", "-m", "gpu", str(ROOT / "tests" / "gpu"), "-q",
        "-p", "no:cacheprovider", f"--junitxml={report}", *(["-k", SMOKE_TESTS] if smoke else []),
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=max(1.0, script.left()),
        check=False,
        env={**os.environ, "XDER_TEST_DEVICE": str(device)},
    )
    (script.out / "tests.log").write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    if not report.exists():
        raise RuntimeError(f"pytest wrote no report (rc {result.returncode}): see tests.log")
    cases = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome = next(
            (child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed"
        )
        cases[case.get("name")] = outcome
    failed = sorted(name for name, outcome in cases.items() if outcome != "passed")
    if result.returncode != 0 or failed or not cases:
        raise RuntimeError(f"gpu tests: {len(failed)} of {len(cases)} not passed: {', '.join(failed)}")
    return {"device": str(device), "seconds": time.monotonic() - started, "tests": cases}


# ---------------------------------------------------------------------------------------------
# 4-7: speed, whole-step graphs, packing and the full run


MODES = {
    "fp32": [],
    "bf16": ["--precision", "bf16"],
    "bf16-cl": ["--precision", "bf16", "--channels-last"],
    # the backbone compiled into CUDA graphs (torch.compile's reduce-overhead mode), bf16 + channels-last
    "graphs": ["--precision", "bf16", "--channels-last", "--compile", "--compile-mode", "reduce-overhead"],
    # whole training steps recorded as CUDA graphs and replayed (train.step_graph), bf16 + channels-last
    "stepgraph": ["--precision", "bf16", "--channels-last", "--step-graph"],
    # the same with DER's, DER++'s and X-DER's stream and buffer batches in one forward pass (not the
    # authors' code: BatchNorm sees them together), DER++ and X-DER only
    "stepgraph-joint": [
        "--precision", "bf16", "--channels-last", "--step-graph", "--set", "method.replay_forward=joint",
    ],
}  # fmt: skip
# The same modes as the settings of a training run (the full run).
MODE_SETTINGS = {
    "fp32": [],
    "bf16": ["train.precision=bf16"],
    "bf16-cl": ["train.precision=bf16", "train.channels_last=true"],
    "graphs": [
        "train.precision=bf16", "train.channels_last=true", "train.compile=true",
        "train.compile_mode=reduce-overhead",
    ],
    "stepgraph": ["train.precision=bf16", "train.channels_last=true", "train.step_graph=true"],
    "stepgraph-joint": [
        "train.precision=bf16", "train.channels_last=true", "train.step_graph=true",
        "method.replay_forward=joint",
    ],
}  # fmt: skip
# Compiling costs tens of seconds a network on the GPU: those modes bench DER++ and X-DER only.
COMPILED_MODES = {"compile", "graphs"}
# Modes that change what a method computes (the authors' code forwards each batch apart): the full
# run takes one only when --full-run-mode names it.
NOT_THE_AUTHORS = {"stepgraph-joint"}
# The modes benched with DER++ and X-DER only: compiling, and changes to the replay's passes.
REPLAYING_METHODS_ONLY = COMPILED_MODES | NOT_THE_AUTHORS


def bench(
    script: Script, device: torch.device, smoke: bool, benchmark: str, mode: str, methods=METHODS
) -> Any:
    path = script.out / f"bench-{benchmark}-{mode}.json"
    if mode in REPLAYING_METHODS_ONLY:
        methods = tuple(m for m in methods if m in ("derpp", "xder"))
    elif smoke and mode != "fp32":  # the other modes' paths with two methods (X-DER's bf16 and
        # step graphs: the correctness phase and the unit tests); a CPU's bf16 is slow
        methods = tuple(m for m in methods if m in ("sgd", "derpp"))
    args = [
        "bench", "--benchmark", benchmark, "--protocol", "full", "--methods", ",".join(methods),
        "--device", str(device), "--json", str(path), *MODES.get(mode, []),
    ]  # fmt: skip
    if mode == "compile":
        args += ["--precision", "bf16", "--compile"]
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


def run_results(run_dir: Path) -> dict[str, Any]:
    """A run's ``results.json`` (read by its one reader, ``xder_cli.runs.rundir``)."""
    from xder_cli.runs import rundir

    results = rundir.read_results(run_dir)
    if results is None:
        raise RuntimeError(f"no {rundir.RESULTS} in {run_dir}")
    return results


def epoch_seconds(run_dir: Path) -> dict[int, list[float]]:
    """Each task's epoch times of a run (its ``events.jsonl``, read by ``xder_cli.runs.rundir``)."""
    from xder_cli.runs import rundir

    times: dict[int, list[float]] = {}
    for event in rundir.read_events(run_dir):
        if event["event"] == "epoch":
            times.setdefault(event["task"], []).append(event["seconds"])
    return times


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
                *(a for setting in MODE_SETTINGS[mode] for a in ("--set", setting)),
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
    """One of :data:`FULL_RUNS`, one run per seed of ``seeds``, all at once (one process each),
    in the mode of the fastest training-loop epoch (the pack phase's, ``packed``, for as many runs
    at once where it measured them; else the loop's own where measured, :data:`LOOP_EPOCH_SECONDS`;
    else the bench's times :data:`LOOP_OVER_BENCH`), as many epochs per task (at most the
    protocol's) as fit in the time left less ``reserve`` seconds (``epochs``: that many; ``whole``:
    the last seeds left out where that lets the others run the whole protocol);
    ``check``: the step_graph phase's figures, where it ran; ``mode_asked``: that mode, planned
    with its measured epoch (:data:`LOOP_EPOCH_SECONDS`) where the bench did not run. A run the
    time cuts short still reports the tasks it finished (``results.json`` is rewritten after
    every task)."""
    spec = FULL_RUNS[which]
    timings = {}
    for mode in MODE_SETTINGS:
        if mode in NOT_THE_AUTHORS and mode != mode_asked:  # a paper's run, unless asked otherwise
            continue
        payload = benches.get((spec["benchmark"], mode))
        rows = [r for r in payload["methods"] if r["method"] == spec["method"]] if payload else []
        if rows and rows[0]["epoch_seconds"] is not None:
            seconds = rows[0]["epoch_seconds"] * LOOP_OVER_BENCH
            timings[mode] = LOOP_EPOCH_SECONDS.get((which, mode), seconds)
    # Step graphs unless the step_graph phase found the replayed run off (FAA more than
    # STEP_GRAPH_FAA_TOLERANCE from the eager one's); with its float32 epoch where it measured
    # this run's method (an upper bound of the bf16 mode's). Where that phase did not finish,
    # the bench's stepgraph mode ran the replays at the paper's shapes, and the CPU's replay
    # check vouches for what they compute.
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
            *(a for setting in MODE_SETTINGS[mode] for a in ("--set", setting)),
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
    faas = [r["faa"] for r in per_seed if r["faa"] is not None]
    mean = sum(faas) / len(faas) if faas else None
    std = (sum((f - mean) ** 2 for f in faas) / (len(faas) - 1)) ** 0.5 if len(faas) > 1 else None
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


# ---------------------------------------------------------------------------------------------


def table(script: Script, benches: dict[Any, Any]) -> str:
    lines = ["phase        status  seconds"]
    for name, info in script.phases.items():
        lines.append(f"{name:12} {info['status']:7} {info.get('seconds', '')}")
    for name in ("tests", "step_graph", "pack", "full_run"):
        path = script.out / f"{name}.json"
        if not path.exists():
            continue
        payload = json.loads(path.read_text())
        if name == "tests":
            passed = sum(outcome == "passed" for outcome in payload["tests"].values())
            lines.append(f"gpu tests on {payload['device']}: {passed} of {len(payload['tests'])} passed")
        elif name == "step_graph":
            lines.append(
                f"step graphs: {payload['method']} {payload['benchmark']} epoch "
                f"{payload['eager_epoch_seconds']:.2f} s eager, {payload['replayed_epoch_seconds']:.2f} s "
                f"replayed; FAA {payload['faa']['eager']:.2f} / {payload['faa']['replayed']:.2f}, "
                f"identical: {payload['identical']}, agree: {payload['agree']}"
            )
        elif name == "pack":
            for r in payload["rows"]:
                if r["status"] in ("skipped", "error"):
                    lines.append(f"pack K={r['k']}: {r['status']} ({r['reason']})")
                    continue
                epoch = "-" if r["mean_epoch_seconds"] is None else f"{r['mean_epoch_seconds']:.2f}"
                speedup = r.get("speedup_over_one", float("nan"))
                lines.append(
                    f"pack K={r['k']} ({payload['mode']}): epoch {epoch} s a run, "
                    f"{r['epochs_per_hour'] or 0:.0f} epochs/h in all "
                    f"(x{speedup:.2f} one run's), wall {r['wall_seconds']:.0f} s"
                )
        else:
            p = payload
            projected = p["projected_full_protocol_seconds"]
            faa = "-" if p["faa"] is None else f"{p['faa']:.2f}"
            std = "" if p.get("faa_std") is None else f" +- {p['faa_std']:.2f}"
            lines.append(
                f"full run {p['method']} {p['benchmark']} m{p['buffer_size']} seeds {p['seeds']} "
                f"{p['epochs_per_task']}/{p['epochs']} epochs ({p['mode']}), "
                f"{p['tasks_done']}/{p['tasks']} tasks: "
                f"FAA {faa}{std} ({p['published_in']}: {p['published_faa'][0]}) "
                f"in {p['wall_seconds']:.0f} s; "
                f"the full protocol projected {'-' if projected is None else f'{projected / 60:.0f}'} min"
            )
    lines.append(
        "bench            mode      method  s/step  floor  ratio  syncs launches  peakMiB protocol_h replayed"
    )
    for (benchmark, mode), payload in benches.items():
        for r in payload["methods"]:
            peak = r.get("peak_memory_bytes")
            projected = r.get("projected_protocol_seconds")
            lines.append(
                f"{benchmark:16} {mode:9} {r['method']:6} {r['seconds_per_step'] * 1e3:6.1f}ms "
                f"{r['floor_seconds'] * 1e3:5.1f}ms {r['step_over_floor']:5.2f} "
                f"{r['host_syncs_per_step']:5d} {r.get('launches_per_step', '-'):>8} "
                f"{'-' if peak is None else f'{peak / 2**20:7.0f}'} "
                f"{'-' if projected is None else f'{projected / 3600:8.2f}'} "
                f"{r.get('replayed_steps') if r.get('replayed_steps') is not None else '-':>9}"
            )
    return "\n".join(lines)


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
        choices=tuple(FULL_RUNS),
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
        choices=tuple(MODE_SETTINGS),
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
    if "full_run" in phases and FULL_RUNS[args.full_run]["data"] not in kinds:
        kinds.append(FULL_RUNS[args.full_run]["data"])
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
