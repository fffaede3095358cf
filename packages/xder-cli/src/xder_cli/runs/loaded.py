"""A trained run loaded back from its run directory (:func:`load_trained_run`): its plan,
benchmark, method (from the last checkpoint), events and results, for the analyses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from xder_cli.runs import rundir
from xder_cli.runs.errors import RunDirError
from xder_cli.runs.plan import build_plan, resolve_device
from xder_data import Benchmark, load_benchmark
from xder_methods import ContinualSetting, Transforms, create_method
from xder_models import create_backbone

__all__ = ["Predictor", "TrainedRun", "load_trained_run", "predict_all"]


class Predictor(nn.Module):
    """A method's prediction as a module (``forward = method.predict``), for tools that take one."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method

    def forward(self, x: Tensor) -> Tensor:
        return self.method.predict(x)


@torch.no_grad()
def predict_all(method: Any, x: Tensor, transform: Any, batch_size: int = 512) -> Tensor:
    """Logits over all classes for every row of ``x`` (unaugmented, through ``transform``)."""
    outputs = [
        method.predict(transform(x[s : s + batch_size])).float() for s in range(0, x.shape[0], batch_size)
    ]
    return torch.cat(outputs) if outputs else torch.zeros(0)


@dataclass
class TrainedRun:
    """A finished (or checkpointed) run, rebuilt from its directory."""

    run_dir: Path
    plan: Any
    bench: Benchmark
    method: Any
    device: torch.device
    events: list[dict[str, Any]]
    results: dict[str, Any]
    complete: bool

    def make_network(self) -> nn.Module:
        """A fresh, untrained network of the run's backbone, on its device."""
        options = {k: v for k, v in self.plan.backbone.items() if k != "name"}
        torch.manual_seed(self.plan.settings.seed)
        return create_backbone(self.plan.backbone["name"], self.bench.num_classes, **options).to(self.device)


def load_trained_run(run_dir: Path, *, device: str | None = None, data_root: str | None = None) -> TrainedRun:
    """Rebuild the method of a run directory and load its checkpoint (eval mode).

    Raises:
        RunDirError: not a run directory, or one without a checkpoint yet.
    """
    run_dir = rundir.check_run_dir(run_dir)
    checkpoint = run_dir / rundir.CHECKPOINT
    if not checkpoint.is_file():
        raise RunDirError(f"{run_dir} has no {rundir.CHECKPOINT} yet: train (or resume) it first")
    plan = build_plan(rundir.read_config(run_dir / rundir.CONFIG))
    settings = plan.settings
    target = resolve_device(device or settings.device)
    bench = load_benchmark(
        settings.benchmark,
        data_root or settings.data_root,
        class_order=settings.class_order,
        seed=settings.seed,
        validation=settings.validation,
        device=target,
        protocol=settings.protocol,
        **plan.benchmark,
    )
    run = TrainedRun(run_dir, plan, bench, None, target, [], {}, False)
    generator = torch.Generator(device=target).manual_seed(settings.seed)
    method = create_method(
        settings.method,
        net=run.make_network(),
        setting=ContinualSetting(bench.classes_per_task, bench.input_shape, bench.train_x.dtype),
        transforms=Transforms(bench.train_transform, bench.test_transform, bench.strong_transform),
        config=plan.method_config,
        generator=generator,
    )
    state = rundir.load_checkpoint(checkpoint, target)
    method.load_state_dict(state["method"])
    method.train(False)
    run.method = method
    run.complete = state["position"]["task"] >= bench.n_tasks
    events_path = run_dir / rundir.EVENTS
    if events_path.exists():
        run.events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
    run.results = rundir.read_results(run_dir) or {}
    return run
