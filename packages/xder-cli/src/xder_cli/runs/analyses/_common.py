"""What the analyses share: the run's test logits, events and training rows, Grad-CAM, and the
plots' conventions (``xder_eval.plots``' figure helper). Tasks and heads count from 1, as the
terminal counts tasks ("task 1/5") and the accuracy matrices do; classes are their labels, from 0.
Each plot names its run (the run directory's name) in a suptitle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun, predict_all
from xder_eval.plots import legend_outside, new_figure

__all__ = [
    "AsMethod",
    "class_ranges",
    "grad_cam",
    "head_label",
    "plot_series",
    "run_name",
    "task_events",
    "test_set_logits",
    "train_subset",
]


def run_name(run: TrainedRun) -> str:
    """The run directory's name, which each plot carries."""
    return run.run_dir.name


def test_set_logits(run: TrainedRun) -> Tensor:
    """The method's logits on the benchmark's whole test set."""
    return predict_all(run.method, run.bench.test_x, run.bench.test_transform)


def task_events(run: TrainedRun, kind: str) -> list[dict[str, Any]]:
    """The run's events of ``kind`` (``"epoch"``, ``"task"``, ``"analysis"``), in order."""
    return [e for e in run.events if e.get("event") == kind]


def train_subset(run: TrainedRun, per_task: int) -> list[tuple[Tensor, Tensor]]:
    """Up to ``per_task`` unaugmented training rows of each task (seeded), transformed."""
    data = []
    for t in range(run.bench.n_tasks):
        rows = run.bench.task(t).train
        generator = torch.Generator().manual_seed(t)
        pick = rows[torch.randperm(rows.shape[0], generator=generator)[:per_task].to(rows.device)]
        data.append((run.bench.test_transform(run.bench.train_x[pick]), run.bench.train_y[pick]))
    return data


class AsMethod:
    """A network seen as a method (``predict = forward``), for :func:`predict_all`."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def predict(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.model(x))


def grad_cam(
    model: nn.Module, layer: nn.Module, x: Tensor, targets: Tensor, batch_size: int = 32
) -> np.ndarray:
    """Grad-CAM saliency of ``model`` at ``layer`` for each row's target class.

    Raises:
        AnalysisSkipped: the grad-cam package is not installed.
    """
    try:
        from pytorch_grad_cam import GradCAM
        from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
    except ImportError as error:
        raise AnalysisSkipped(
            "Grad-CAM needs the grad-cam package: pip install 'xder-eval[gradcam]'"
        ) from error
    maps = []
    with GradCAM(model=model, target_layers=[layer]) as cam:  # it puts the model in eval mode
        for s in range(0, x.shape[0], batch_size):
            chunk = [ClassifierOutputTarget(int(c)) for c in targets[s : s + batch_size].tolist()]
            maps.append(cam(input_tensor=x[s : s + batch_size], targets=chunk))
    return np.concatenate(maps) if maps else np.zeros((0, *x.shape[2:]))


def class_ranges(classes_per_task: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` label of each task's classes."""
    ends = np.cumsum(classes_per_task).tolist()
    return [(end - size, end - 1) for size, end in zip(classes_per_task, ends, strict=True)]


def head_label(task: int, classes_per_task: Sequence[int]) -> str:
    """``head 2 (classes 2-3)``: task ``task`` (from 0) named from 1, with its class labels."""
    if task >= len(classes_per_task):
        return f"head {task + 1}"
    first, last = class_ranges(classes_per_task)[task]
    classes = f"class {first}" if first == last else f"classes {first}-{last}"
    return f"head {task + 1} ({classes})"


def plot_series(
    series: Mapping[str, Sequence[float | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    x: Sequence[float] | None = None,
    integer_x: bool = False,
) -> Any:
    """A line per series (a legend only with two or more); returns the axes, saved by the
    caller with :func:`~xder_eval.plots.save_figure` after any addition."""
    from matplotlib.ticker import MaxNLocator

    fig = new_figure(6.5, 4)
    ax = fig.add_subplot()
    for index, (name, values) in enumerate(series.items()):
        xs = list(x) if x is not None else list(range(1, len(values) + 1))
        ys = [np.nan if v is None else v for v in values]
        ax.plot(xs, ys, marker="os^D"[index % 4], markersize=4, label=name)
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        legend_outside(ax)
    return ax
