"""``flatness``: the training loss under relative weight noise of growing scale (L_sigma), on up to
``max_items`` training items per task, with its curve (``flatness.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import torch

from xder_cli.runs.analyses._common import plot_series, run_name, train_subset
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.loaded import Predictor, TrainedRun
from xder_eval.analyses import noisy_loss
from xder_eval.plots import save_figure

__all__ = ["FLATNESS_SIGMAS", "FlatnessResult", "analyse_flatness"]

FLATNESS_SIGMAS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)


class FlatnessResult(TypedDict):
    """``flatness`` of ``analysis.json``: the loss at each sigma."""

    sigmas: list[float]
    loss: list[float]
    items_per_task: int
    plot: str


def summary(value: FlatnessResult) -> str:
    return "L_sigma " + " ".join(f"{s}:{v:.3f}" for s, v in zip(value["sigmas"], value["loss"], strict=True))


@register_analysis("flatness", summary=summary)
def analyse_flatness(run: TrainedRun, out: Path, options: AnalysisOptions) -> FlatnessResult:
    data = train_subset(run, options.max_items)
    generator = torch.Generator(device=run.device).manual_seed(0)
    curve = noisy_loss(Predictor(run.method).eval(), data, FLATNESS_SIGMAS, samples=3, generator=generator)
    ax = plot_series(
        {"L_sigma": curve},
        xlabel="sigma (weight noise, relative to each weight's magnitude)",
        ylabel="training loss L_sigma (cross-entropy)",
        title="Training loss under relative weight noise",
        x=list(FLATNESS_SIGMAS),
    )
    plot = save_figure(ax.figure, out / "flatness.png", run=run_name(run))
    return {
        "sigmas": list(FLATNESS_SIGMAS),
        "loss": curve,
        "items_per_task": options.max_items,
        "plot": plot.name,
    }
