"""``future_fewshot_auc``: the few-shot transfer of the future heads (X-DER Sec. 6.3, Fig.
"fewshot"), recorded after each task by a run trained with ``run.record_analyses``: for every
unseen task, the 1-NN accuracy on its test set of the features its own (future) head gives,
fitted on 1 to 50 training examples per class; its AUC, and their mean AUC_t, plotted over the
tasks (``fewshot_auc.png``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from xder_cli.runs.analyses._common import plot_series, run_name, task_events
from xder_cli.runs.analyses.registry import AnalysisOptions, TaskEndRecord, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun, predict_all
from xder_eval.analyses import DEFAULT_SHOTS, curve_auc, fewshot_curve
from xder_eval.plots import save_figure
from xder_methods import FitState

__all__ = ["FEWSHOT_POOL", "FewshotRecord", "FewshotResult", "analyse_fewshot"]

FEWSHOT_POOL = max(DEFAULT_SHOTS)  # training examples kept per class for the shots


class FewshotRecord(TypedDict):
    """``fewshot`` of an ``analysis`` event, after task t: for each unseen task u > t (by u, from
    0), the accuracy (%) per number of shots, its AUC, and their mean ``auc_mean`` (AUC_t)."""

    shots: list[int]
    curves: dict[str, list[float]]
    auc: dict[str, float]
    auc_mean: float


class FewshotResult(TypedDict):
    """``future_fewshot_auc`` of ``analysis.json``: AUC_t and the whole record after each task t."""

    auc: dict[str, float]
    per_task: dict[str, FewshotRecord]
    plot: str


def _fewshot_pool(labels: Tensor, start: int, end: int, per_class: int, seed: int) -> Tensor:
    """Up to ``per_class`` training rows of each class in [start, end), drawn once per seed."""
    y = labels.cpu().numpy()
    rng = np.random.default_rng(seed)
    rows = [rng.permutation(np.flatnonzero(y == c))[:per_class] for c in range(start, end)]
    return torch.from_numpy(np.sort(np.concatenate(rows))).to(labels.device)


def record(loop: FitState) -> Mapping[str, object]:
    """``fewshot`` (:class:`FewshotRecord`) after every task but the last."""
    t = loop.task - 1  # the task just finished
    if t >= loop.n_tasks - 1:
        return {}
    method: Any = loop.method  # a MethodBase: its transforms
    stream = loop.stream
    curves, aucs = {}, {}
    for u in range(t + 1, loop.n_tasks):
        start, end = loop.setting.class_range(u)
        split = stream.task(u)
        pool = _fewshot_pool(stream.train_y, start, end, FEWSHOT_POOL, seed=u)
        train_features = predict_all(method, stream.train_x[pool], method.transforms.test)[:, start:end]
        test_features = predict_all(method, stream.test_x[split.test], method.transforms.test)[:, start:end]
        curve = fewshot_curve(
            train_features, stream.train_y[pool], test_features, stream.test_y[split.test], seed=u
        )
        curves[str(u)] = curve
        aucs[str(u)] = curve_auc(DEFAULT_SHOTS, curve)
    fewshot: FewshotRecord = {
        "shots": list(DEFAULT_SHOTS),
        "curves": curves,
        "auc": aucs,
        "auc_mean": float(np.nanmean(list(aucs.values()))),
    }
    return {"fewshot": fewshot}


def summary(value: FewshotResult) -> str:
    return "AUC_t " + " ".join(f"{v:.1f}" for v in value["auc"].values())


@register_analysis(
    "future_fewshot_auc",
    summary=summary,
    needs_records=True,
    recorded_keys=("fewshot",),
    at_task_end=TaskEndRecord(record),
)
def analyse_fewshot(run: TrainedRun, out: Path, options: AnalysisOptions) -> FewshotResult:
    records = [e for e in task_events(run, "analysis") if "fewshot" in e]
    if not records:
        raise AnalysisSkipped("no few-shot record (the run has a single task, or predates the recording)")
    per_task = {str(e["task"]): e["fewshot"] for e in records}
    auc = {t: r["auc_mean"] for t, r in per_task.items()}
    ax = plot_series(
        {"AUC_t": list(auc.values())},
        xlabel="after training task",
        ylabel="AUC_t: mean AUC of the future heads (%)",
        title="Few-shot transfer of the future heads (1-NN, 1 to 50 shots)",
        x=[int(t) + 1 for t in auc],  # tasks from 1, as printed while training
        integer_x=True,
    )
    plot = save_figure(ax.figure, out / "fewshot_auc.png", run=run_name(run))
    return {"auc": auc, "per_task": per_task, "plot": plot.name}
