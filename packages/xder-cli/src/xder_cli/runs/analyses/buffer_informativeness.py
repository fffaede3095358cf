"""``buffer_informativeness``: a network trained from scratch on the buffer alone (on its labels,
and where it stores logits on those and on both), its test accuracy (%)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import torch

from xder_cli.runs.analyses._common import AsMethod
from xder_cli.runs.analyses.registry import AnalysisOptions, register_analysis
from xder_cli.runs.errors import AnalysisSkipped
from xder_cli.runs.loaded import TrainedRun, predict_all
from xder_eval.analyses import BufferTraining, train_on_buffer

__all__ = ["BufferInformativenessResult", "analyse_buffer_informativeness"]


class BufferInformativenessResult(TypedDict):
    """``buffer_informativeness`` of ``analysis.json``: the accuracy per training target."""

    accuracy: dict[str, float]
    buffer_size: int
    epochs: int


def summary(value: BufferInformativenessResult) -> str:
    return " ".join(f"{k} {v:.2f}%" for k, v in value["accuracy"].items()) + f" ({value['epochs']} epochs)"


@register_analysis("buffer_informativeness", summary=summary)
def analyse_buffer_informativeness(
    run: TrainedRun, out: Path, options: AnalysisOptions
) -> BufferInformativenessResult:
    buffer = run.method.replay_memory()
    if buffer is None or not len(buffer):
        raise AnalysisSkipped("the method keeps no replay buffer")
    size = len(buffer)
    examples, labels = buffer.examples[:size], buffer.labels[:size]
    logits = None if buffer.logits is None else buffer.logits[:size]
    targets = ["labels"] if logits is None else ["labels", "logits", "both"]
    settings = BufferTraining(epochs=options.buffer_epochs, batch_size=run.plan.schedule.batch_size)
    accuracy = {}
    for target in targets:
        generator = torch.Generator(device=run.device).manual_seed(0)
        model = train_on_buffer(
            run.make_network, examples, labels, logits, target=target,
            augment=run.bench.train_transform, settings=settings, generator=generator,
        )  # fmt: skip
        with torch.no_grad():
            logits_test = predict_all(AsMethod(model), run.bench.test_x, run.bench.test_transform)
        accuracy[target] = 100.0 * float((logits_test.argmax(1) == run.bench.test_y.cpu()).float().mean())
    return {"accuracy": accuracy, "buffer_size": size, "epochs": options.buffer_epochs}
