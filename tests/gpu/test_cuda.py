"""What must hold on a GPU (``pytest -m gpu tests/gpu``; conftest.py says how they run on a CPU):
a training step computes what the CPU's computes, makes no host synchronisation, a run killed with
SIGKILL and resumed ends as the run left alone, and whole steps replayed as CUDA graphs end as the
same run stepped eagerly. The steps are the library's own (``xder_cli.runs.bench.method_at_task``:
the method brought to task 1 as ``xder-run bench`` brings it, stepped by ``xder_methods.run_step``
with ``apply_step``'s backward, hooks and optimiser step)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from xder_cli.runs import rundir
from xder_cli.runs.bench import BenchOptions, method_at_task, with_protocol
from xder_data import benchmark_defaults
from xder_methods import OpCounter

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
# xder-run through the GPU script's launcher: --deterministic (deterministic algorithms, with
# cuBLAS's workspace set before CUDA starts) and --kill-after T,E (SIGKILL right after that checkpoint).
LAUNCH = [sys.executable, str(ROOT / "benchmarks" / "gpu" / "launch.py")]
# Against the CPU's float32 step: the loss's relative difference, and the gradient's relative L2
# difference (fp32) or its cosine to the CPU's (TF32, bf16). Strict float32 on CUDA is not the
# CPU's arithmetic: cuDNN picks its convolution algorithms by speed, and their float32 sums differ
# from the CPU's by ~1e-6 a layer, amplified along 18 layers' backward pass (measured on an H200:
# 6.7e-4 DER++, 3.8e-3 X-DER); TF32 rounds the convolutions' operands to 10 bits of mantissa, bf16
# autocast every operand to 8.
LOSS_TOLERANCE = {"fp32": 1e-4, "tf32": 1e-3, "bf16": 1e-2}
FP32_GRAD_TOLERANCE = 1e-2
MIN_COSINE = {"tf32": 0.99, "bf16": 0.95}
CPU_STEPS: dict[tuple[str, int], tuple[float, dict[str, float], torch.Tensor]] = {}


def options(
    name: str, device: torch.device, width: int, precision: str = "fp32", replay_forward: str | None = None
) -> BenchOptions:
    """The DER paper's Split CIFAR-10 shapes (ResNet-18 of ``width``, batch and replay batch 32,
    buffer 200), method ``name`` at task 1 (with ``method.replay_forward`` where given)."""
    forward = () if replay_forward is None else (("method.replay_forward", replay_forward),)
    bench = BenchOptions(
        methods=(name,), benchmark="seq-cifar10", protocol="full", width=width, buffer_size=200,
        device=str(device), settings=(("train.precision", precision), *forward),
    )  # fmt: skip
    return with_protocol(bench, benchmark_defaults("seq-cifar10", "full"))


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def planted_step(
    planted_draws: Any, name: str, device: torch.device, width: int, precision: str
) -> tuple[float, dict[str, float], torch.Tensor]:
    """One training step of ``name`` at task 1 on ``device``, every random draw planted from the
    CPU: its loss, its terms and the gradients it left (float64, on the CPU)."""
    with planted_draws():
        at = method_at_task(name, options(name, device, width, precision), device)
        out = at.step()
    assert out.loss is not None
    grads = torch.cat([p.grad.flatten() for p in at.net.parameters() if p.grad is not None])
    return float(out.loss), {k: float(v) for k, v in out.terms.items()}, grads.double().cpu()


@pytest.mark.parametrize("mode", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("name", ["derpp", "xder"])
def test_a_training_step_on_the_device_computes_the_cpu_s(
    name: str, mode: str, device: torch.device, width: int, planted_draws: Any
) -> None:
    key = (name, width)
    if key not in CPU_STEPS:  # the reference, once for the three modes
        CPU_STEPS[key] = planted_step(planted_draws, name, torch.device("cpu"), width, "fp32")
    ref_loss, ref_terms, ref_grads = CPU_STEPS[key]
    with tf32(mode != "fp32"):
        loss, terms, grads = planted_step(
            planted_draws, name, device, width, "bf16" if mode == "bf16" else "fp32"
        )
    assert torch.isfinite(grads).all()
    assert abs(loss - ref_loss) <= LOSS_TOLERANCE[mode] * abs(ref_loss), (loss, ref_loss)
    assert terms.keys() == ref_terms.keys()
    if mode == "fp32":
        relative = float((grads - ref_grads).norm() / ref_grads.norm())
        assert relative <= FP32_GRAD_TOLERANCE
    else:
        cosine = float(torch.nn.functional.cosine_similarity(grads, ref_grads, dim=0))
        assert cosine >= MIN_COSINE[mode]


@pytest.mark.parametrize("name", ["derpp", "xder"])
def test_a_grouped_step_on_the_device_computes_the_separate_one(
    name: str, device: torch.device, width: int
) -> None:
    """``method.replay_forward = grouped`` (one pass, BatchNorm per batch) against the authors'
    separate passes on the same device, strict float32: the same loss and terms, the gradients
    within the float32 tolerance above (the convolutions run over other batch sizes)."""
    steps = []
    with tf32(False):
        for mode in ("separate", "grouped"):
            at = method_at_task(name, options(name, device, width, replay_forward=mode), device)
            out = at.step()
            assert out.loss is not None
            grads = torch.cat([p.grad.flatten() for p in at.net.parameters() if p.grad is not None])
            steps.append((float(out.loss), {k: float(v) for k, v in out.terms.items()}, grads.double().cpu()))
    (loss, terms, grads), (grouped_loss, grouped_terms, grouped_grads) = steps
    assert abs(grouped_loss - loss) <= LOSS_TOLERANCE["fp32"] * abs(loss), (grouped_loss, loss)
    assert grouped_terms.keys() == terms.keys()
    assert float((grouped_grads - grads).norm() / grads.norm()) <= FP32_GRAD_TOLERANCE


@pytest.mark.parametrize(
    ("name", "replay_forward"),
    [("sgd", None), ("er", None), ("derpp", None), ("xder", None), ("xder", "grouped")],
)
def test_a_training_step_makes_no_host_sync(
    name: str, replay_forward: str | None, device: torch.device, width: int
) -> None:
    at = method_at_task(name, options(name, device, width, replay_forward=replay_forward), device)
    at.step(), at.step()
    with OpCounter() as counter:
        at.step()
    assert counter.host_syncs == 0, dict(counter.syncs)
    if device.type == "cuda":  # CUDA's own count: any synchronising call raises
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
        try:
            at.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")


def train(
    out: Path, device: torch.device, *args: str, kill_after: str | None = None
) -> subprocess.CompletedProcess:
    """``xder-run train`` on ``seq-digits`` on ``device``, deterministic algorithms on."""
    launch = [*LAUNCH, "--deterministic", *(["--kill-after", kill_after] if kill_after else []), "--"]
    command = [
        *launch, "train", "--benchmark", "seq-digits", "--device", str(device), "--seed", "0",
        "--epochs", "2", "--buffer-size", "50", "--out", str(out), *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)


def matrices(out: Path) -> dict[str, Any]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    results = rundir.read_results(run_dir)
    assert results is not None
    assert results["complete"]
    return {k: results[k] for k in ("accuracy_matrix", "task_il_accuracy_matrix")}


@pytest.mark.parametrize("name", ["derpp", "xder"])
def test_a_run_killed_and_resumed_ends_as_the_run_left_alone(
    name: str, device: torch.device, tmp_path: Path
) -> None:
    whole = train(tmp_path / "whole", device, "--method", name)
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = train(tmp_path / "cut", device, "--method", name, kill_after="1,0")
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "cut").iterdir() if p.is_dir()]
    resumed = subprocess.run(
        [*LAUNCH, "--deterministic", "--", "train", "--resume", str(run_dir)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert matrices(tmp_path / "cut") == matrices(tmp_path / "whole")


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("sgd", ()),
        ("er", ()),
        ("derpp", ()),
        ("xder", ()),
        ("xder", ("--set", "method.replay_forward=grouped")),
    ],
)
def test_steps_replayed_as_cuda_graphs_end_as_the_eager_run(
    name: str, settings: tuple[str, ...], device: torch.device, tmp_path: Path
) -> None:
    eager = train(tmp_path / "eager", device, "--method", name, *settings)
    assert eager.returncode == 0, eager.stderr[-2000:]
    replayed = train(
        tmp_path / "replayed", device, "--method", name, *settings, "--set", "train.step_graph=true"
    )
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert "could not be captured" not in replayed.stderr
    (run_dir,) = [p for p in (tmp_path / "replayed").iterdir() if p.is_dir()]
    replays = [e.get("replayed_steps", 0) for e in rundir.read_events(run_dir) if e["event"] == "epoch"]
    assert sum(replays) > 0  # steps were replayed (on a CPU: checked op by op)
    assert matrices(tmp_path / "replayed") == matrices(tmp_path / "eager")
