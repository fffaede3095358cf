"""A trained run loaded back from its run directory (:func:`load_trained_run`): its plan,
benchmark, method (from the last checkpoint), events and results, for the analyses. Its parts
are built as training built them (:mod:`xder_cli.runs.build`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from xder_cli.runs import rundir
from xder_cli.runs.build import (
    benchmark_setting,
    build_method,
    build_network,
    load_data,
    resolve_device,
    run_generator,
)
from xder_cli.runs.errors import RunDirError
from xder_cli.runs.records import Event
from xder_cli.runs.settings import RunPlan, load_plan
from xder_data import Benchmark

__all__ = ["Predictor", "TrainedRun", "load_trained_run", "predict_all"]


class Predictor(nn.Module):
    """A method's prediction as a module (``forward = method.predict``), for tools that take one."""

    def __init__(self, method: Any) -> None:
        super().__init__()
        self.method = method  # a ContinualMethod, an nn.Module: registered as a submodule

    def forward(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.method.predict(x))


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
    plan: RunPlan[Any]
    bench: Benchmark
    method: Any
    device: torch.device
    events: list[Event]
    results: dict[str, Any]
    """Its ``results.json``; empty where it has none yet."""
    complete: bool

    def make_network(self) -> nn.Module:
        """A fresh, untrained network of the run's backbone, on its device."""
        return build_network(self.plan, self.bench.num_classes, self.device)


def load_trained_run(run_dir: Path, *, device: str | None = None, data_root: str | None = None) -> TrainedRun:
    """Rebuild the method of a run directory and load its checkpoint (eval mode). The run is
    ``complete`` when its checkpoint is past the last task it trains (``train.tasks``, else the
    benchmark's).

    Raises:
        RunDirError: not a run directory, or one without a checkpoint yet.
        PluginError: a plugin the run records (``run.plugins``) that does not load now.
    """
    run_dir = rundir.check_run_dir(run_dir)
    checkpoint = run_dir / rundir.CHECKPOINT
    if not checkpoint.is_file():
        raise RunDirError(f"{run_dir} has no {rundir.CHECKPOINT} yet: train (or resume) it first")
    plan = load_plan(run_dir)  # the plugins the run records loaded first, as a resume loads them
    target = resolve_device(device or plan.settings.device)
    # Analyses read the data where they compute: on the device, whatever run.data_device said.
    bench = load_data(plan, target, data_root=data_root, data_device="device")
    run = TrainedRun(run_dir, plan, bench, None, target, [], {}, False)
    method = build_method(plan, run.make_network(), *benchmark_setting(bench), run_generator(plan, target))
    state = rundir.load_checkpoint(checkpoint, target)
    method.load_state_dict(state["method"])
    method.train(False)
    run.method = method
    run.complete = state["position"]["task"] >= (plan.schedule.tasks or bench.n_tasks)
    run.events = rundir.read_events(run_dir)
    run.results = dict(rundir.read_results(run_dir) or {})
    return run
