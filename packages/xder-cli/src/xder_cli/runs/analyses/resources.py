"""``resources``: the network's parameters, the seconds per epoch, the run's wall time and the
peak memory (recorded by every run after each task: it costs nothing)."""

from __future__ import annotations

import resource
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch

from xder_cli.runs.analyses._common import task_events
from xder_cli.runs.analyses.registry import AnalysisOptions, TaskEndRecord, register_analysis
from xder_cli.runs.loaded import TrainedRun
from xder_methods import FitState

__all__ = ["ResourcesResult", "analyse_resources"]


class ResourcesResult(TypedDict):
    """``resources`` of ``analysis.json`` (None where the run recorded nothing of it)."""

    parameters: int
    seconds_per_epoch: float | None
    epochs: int
    wall_time_s: float | None
    peak_memory_mb: float | None
    device: str


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        torch.cuda.reset_peak_memory_stats(device)
        return peak
    # ru_maxrss: kilobytes on Linux (the process's peak resident memory).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def record(loop: FitState) -> Mapping[str, object]:
    """``peak_memory_mb``: the peak memory since the previous record."""
    method: Any = loop.method  # a MethodBase: an nn.Module
    return {"peak_memory_mb": _peak_memory_mb(next(method.parameters()).device)}


def summary(value: ResourcesResult) -> str:
    secs = "-" if value["seconds_per_epoch"] is None else f"{value['seconds_per_epoch']:.2f}"
    memory = "-" if value["peak_memory_mb"] is None else f"{value['peak_memory_mb']:.0f}"
    return f"{value['parameters']:,} parameters, {secs} s/epoch, peak memory {memory} MB"


@register_analysis("resources", summary=summary, at_task_end=TaskEndRecord(record, always=True))
def analyse_resources(run: TrainedRun, out: Path, options: AnalysisOptions) -> ResourcesResult:
    seconds = [e["seconds"] for e in task_events(run, "epoch")]
    memory = [e["peak_memory_mb"] for e in task_events(run, "analysis") if "peak_memory_mb" in e]
    return {
        "parameters": sum(p.numel() for p in run.method.net.parameters()),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "epochs": len(seconds),
        "wall_time_s": run.results.get("wall_time_s"),
        "peak_memory_mb": max(memory) if memory else None,
        "device": str(run.device),
    }
