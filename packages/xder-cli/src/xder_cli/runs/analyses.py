"""The paper's analyses of a trained run (Sec. 6 and its appendix).

Two kinds of analysis:

* recorded while training: by every run, the Class-IL mistakes by head after every task and the
  peak memory; by a run trained with ``run.record_analyses`` also the gradient norms of stream vs
  replay data at sampled steps (``train.record_every``) and, at every task end, the few-shot
  transfer of the future heads and the mean stored logits per class
  (:func:`~xder_cli.runs.analysis_records.task_end_analysis`, written to ``events.jsonl``). Those cost a
  few percent of a run, so they are off by default: :data:`RECORDED` names the analyses that need
  them;
* computed from the final checkpoint: calibration, secondary information, flatness, Fisher trace,
  buffer informativeness, Grad-CAM pointing (where the benchmark has masks) and secondary targets
  (where COCO-stitched data are prepared).

Results go to ``RUN_DIR/analysis/analysis.json`` and PNG plots beside it. The run is loaded back
by :func:`~xder_cli.runs.loaded.load_trained_run`; the plots are drawn by
``xder_cli.runs._analysis_plots``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_cli.runs._analysis_plots import plot_buffer_logits, plot_grad_norms, plot_head_bias, plot_series
from xder_cli.runs.analysis_records import task_end_analysis
from xder_cli.runs.defaults import ANALYSES
from xder_cli.runs.defaults import RECORDED_ANALYSES as RECORDED
from xder_cli.runs.errors import AnalysisSkipped, option
from xder_cli.runs.loaded import Predictor, TrainedRun, load_trained_run, predict_all
from xder_data import benchmark_defaults, load_benchmark
from xder_eval import (
    expected_calibration_error,
    plot_reliability_diagram,
    pointing_accuracy,
    reliability_bins,
    secondary_target_f1,
    superclass_error,
    superclass_nll,
)
from xder_eval.analyses import (
    BufferTraining,
    class_mean_logits,
    fisher_trace,
    head_bias_fractions,
    noisy_loss,
    train_on_buffer,
)
from xder_eval.plots import save_figure

__all__ = [
    "ANALYSES",
    "ANALYSIS_FOLDER",
    "FLATNESS_SIGMAS",
    "RECORDED",
    "RECORD_HINT",
    "RUNNERS",
    "AnalysisOptions",
    "AnalysisSkipped",
    "TrainedRun",
    "analyse",
    "load_trained_run",
    "probe_optimizer",
    "task_end_analysis",
]

RECORD_HINT = f"train it with {option('run.record_analyses')} (run.record_analyses = true)"
"""What to do for :data:`RECORDED`, as a template of :mod:`~xder_cli.runs.errors`."""
FLATNESS_SIGMAS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)
ANALYSIS_FOLDER = "analysis"
"""Where a run's analyses go: ``RUN_DIR/analysis/``, their plots and
:data:`xder_cli.runs.run_analysis.ANALYSIS_JSON`."""


@dataclass(frozen=True, kw_only=True)
class AnalysisOptions:
    """How the analyses that compute something run (defaults: ``xder-run analyze``'s).

    Attributes:
        max_items: training items per task for ``flatness`` (and, at most 200, ``fisher_trace``).
        buffer_epochs: epochs of ``buffer_informativeness``'s from-scratch training on the buffer.
        probe_epochs: epochs of ``secondary_targets``' linear probe.
        tolerance: the pointing game's tolerance in pixels (``pointing``, ``secondary_targets``).
        data_root: where ``secondary_targets`` finds the COCO-stitched data (None: the run's).
    """

    max_items: int = 500
    buffer_epochs: int = 70
    probe_epochs: int = 50
    tolerance: float = 0.0
    data_root: str | None = None


# ---------------------------------------------------------------------------------------------
# The analyses. Each returns a JSON-able dict, or raises AnalysisSkipped(reason). The run's own
# names (TrainedRun, load_trained_run, task_end_analysis) are importable from here too.


def _run_name(run: TrainedRun) -> str:
    return run.run_dir.name


def _test_logits(run: TrainedRun) -> Tensor:
    return predict_all(run.method, run.bench.test_x, run.bench.test_transform)


def analyse_ece(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    logits = _test_logits(run)
    probs = logits.softmax(dim=1)
    labels = run.bench.test_y
    bins = reliability_bins(probs, labels, n_bins=15)
    plot = plot_reliability_diagram(bins, out / "reliability.png", run=_run_name(run))
    return {
        "ece": expected_calibration_error(probs, labels, n_bins=15),
        "n_bins": 15,
        "accuracy": float((logits.argmax(1) == labels.cpu()).float().mean()),
        "plot": plot.name,
    }


def analyse_ss(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    coarse = run.bench.coarse_labels
    if coarse is None:
        raise AnalysisSkipped(f"{run.bench.name} has no super-classes")
    logits = _test_logits(run)
    return {
        "ss_err": superclass_error(logits, run.bench.test_y, coarse),
        "ss_nll": superclass_nll(logits, run.bench.test_y, coarse),
    }


def _task_events(run: TrainedRun, kind: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("event") == kind]


def analyse_head_bias(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    per_task = []
    for event in _task_events(run, "task"):
        counts = np.asarray(event.get("head_counts") or [], dtype=np.int64)
        t = event["task"]
        if t == 0 or counts.size == 0:
            continue
        past = counts[:t].sum(axis=0, keepdims=True)  # mistakes on every task before t
        per_task.append(
            {"task": t, "mistakes": int(past.sum()), "fraction_by_head": head_bias_fractions(past)[0]}
        )
    if not per_task:
        raise AnalysisSkipped("no task after the first was evaluated")
    plot = plot_head_bias(per_task, out / "head_bias.png", run.bench.classes_per_task, _run_name(run))
    last = per_task[-1]
    return {
        "per_task": per_task,
        "newest_head_share": last["fraction_by_head"][last["task"]],
        "mistakes": last["mistakes"],
        "plot": plot.name,
    }


def analyse_grad_norms(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    series: dict[str, list[float | None]] = {}
    points = []
    for event in _task_events(run, "epoch"):
        norms = event.get("grad_norms") or {}
        if not norms:
            continue
        points.append({"task": event["task"], "epoch": event["epoch"], **norms})
    if not points:
        raise AnalysisSkipped(
            "no gradient norm was recorded (train.record_every = 0, or a method without replay groups)"
        )
    for name in ("stream", "buffer"):
        series[name] = [p.get(name) for p in points]
    plot = plot_grad_norms(points, out / "grad_norms.png", _run_name(run))
    means = {
        k: float(np.mean([v for v in vals if v is not None]))
        for k, vals in series.items()
        if any(v is not None for v in vals)
    }
    return {"epochs": points, "mean": means, "plot": plot.name}


def analyse_buffer_logits(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    buffer = getattr(run.method, "buffer", None)
    if buffer is None or buffer.logits is None or not len(buffer):
        raise AnalysisSkipped("the method stores no logits")
    size = len(buffer)
    final = class_mean_logits(buffer.logits[:size], buffer.labels[:size], run.bench.num_classes)
    over_time = {
        str(e["task"]): e["buffer_class_logits"]
        for e in _task_events(run, "analysis")
        if "buffer_class_logits" in e
    }
    plot = plot_buffer_logits(final, out / "buffer_logits.png", run.bench.classes_per_task, _run_name(run))
    return {"final": final, "after_task": over_time, "plot": plot.name}


def analyse_fewshot(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    records = [e for e in _task_events(run, "analysis") if "fewshot" in e]
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
    plot = save_figure(ax.figure, out / "fewshot_auc.png", run=_run_name(run))
    return {"auc": auc, "per_task": per_task, "plot": plot.name}


def analyse_resources(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    epochs = _task_events(run, "epoch")
    seconds = [e["seconds"] for e in epochs]
    memory = [e["peak_memory_mb"] for e in _task_events(run, "analysis") if "peak_memory_mb" in e]
    return {
        "parameters": sum(p.numel() for p in run.method.net.parameters()),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "epochs": len(seconds),
        "wall_time_s": run.results.get("wall_time_s"),
        "peak_memory_mb": max(memory) if memory else None,
        "device": str(run.device),
    }


def _train_subset(run: TrainedRun, per_task: int) -> list[tuple[Tensor, Tensor]]:
    """Up to ``per_task`` unaugmented training rows of each task (seeded), transformed."""
    data = []
    for t in range(run.bench.n_tasks):
        rows = run.bench.task(t).train
        generator = torch.Generator().manual_seed(t)
        pick = rows[torch.randperm(rows.shape[0], generator=generator)[:per_task].to(rows.device)]
        data.append((run.bench.test_transform(run.bench.train_x[pick]), run.bench.train_y[pick]))
    return data


def analyse_flatness(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    data = _train_subset(run, options.max_items)
    generator = torch.Generator(device=run.device).manual_seed(0)
    curve = noisy_loss(Predictor(run.method).eval(), data, FLATNESS_SIGMAS, samples=3, generator=generator)
    ax = plot_series(
        {"L_sigma": curve},
        xlabel="sigma (weight noise, relative to each weight's magnitude)",
        ylabel="training loss L_sigma (cross-entropy)",
        title="Training loss under relative weight noise",
        x=list(FLATNESS_SIGMAS),
    )
    plot = save_figure(ax.figure, out / "flatness.png", run=_run_name(run))
    return {
        "sigmas": list(FLATNESS_SIGMAS),
        "loss": curve,
        "items_per_task": options.max_items,
        "plot": plot.name,
    }


def analyse_fisher(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    data = _train_subset(run, min(options.max_items, 200))
    return {
        "trace": fisher_trace(Predictor(run.method).eval(), data),
        "items_per_task": min(options.max_items, 200),
    }


def analyse_buffer_informativeness(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    buffer = getattr(run.method, "buffer", None)
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
            logits_test = predict_all(_AsMethod(model), run.bench.test_x, run.bench.test_transform)
        accuracy[target] = 100.0 * float((logits_test.argmax(1) == run.bench.test_y.cpu()).float().mean())
    return {"accuracy": accuracy, "buffer_size": size, "epochs": options.buffer_epochs}


class _AsMethod:
    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def predict(self, x: Tensor) -> Tensor:
        return self.model(x)


def _grad_cam(
    model: nn.Module, layer: nn.Module, x: Tensor, targets: Tensor, batch_size: int = 32
) -> np.ndarray:
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


def analyse_pointing(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    masks = run.bench.test_masks
    if masks is None:
        raise AnalysisSkipped(f"{run.bench.name} has no object masks (Split CUB-200 has)")
    net = run.method.net
    layer = getattr(net, "gradcam_layer", None)
    if layer is None:
        raise AnalysisSkipped("the backbone names no Grad-CAM layer")
    model = Predictor(run.method)
    x = run.bench.test_transform(run.bench.test_x)
    saliency = _grad_cam(model, layer, x, run.bench.test_y)
    result = pointing_accuracy(saliency, masks, run.bench.test_y, tolerance=options.tolerance)
    run.method.train(False)
    return {
        "accuracy": result.accuracy,
        "overall_accuracy": result.overall_accuracy,
        "tolerance": options.tolerance,
    }


class _Probe(nn.Module):
    """Frozen backbone features followed by a trainable linear multi-label classifier."""

    def __init__(self, net: nn.Module, classes: int) -> None:
        super().__init__()
        self.net = net
        backbone: Any = net  # a Backbone: forward_features, num_features
        self.linear = nn.Linear(int(backbone.num_features), classes).to(next(net.parameters()).device)

    def forward(self, x: Tensor) -> Tensor:
        backbone: Any = self.net
        return self.linear(backbone.forward_features(x))


def probe_optimizer(linear: nn.Module) -> tuple[torch.optim.SGD, int]:
    """The linear probe's SGD and batch size: the ``coco-stitch`` protocol's (its lr, momentum,
    weight decay and batch; the paper states only SGD and 50 epochs)."""
    protocol = benchmark_defaults("coco-stitch")
    optimizer = torch.optim.SGD(
        linear.parameters(), lr=protocol.lr, momentum=protocol.momentum, weight_decay=protocol.weight_decay
    )
    return optimizer, protocol.batch_size


def analyse_secondary_targets(run: TrainedRun, out: Path, options: AnalysisOptions) -> dict[str, Any]:
    from xder_data import DataError

    try:
        stitched = load_benchmark(
            "coco-stitch", options.data_root or run.plan.settings.data_root, device=run.device
        )
    except (DataError, ValueError) as error:
        raise AnalysisSkipped(f"COCO-stitched data not available ({str(error).splitlines()[0]})") from error
    if stitched.train_secondary_y is None or stitched.test_secondary_y is None:
        raise AnalysisSkipped("the coco-stitch benchmark carries no secondary labels")
    net = run.method.net
    for p in net.parameters():
        p.requires_grad_(False)
    probe = _Probe(net, stitched.num_classes)
    net.eval()
    optimizer, batch = probe_optimizer(probe.linear)
    generator = torch.Generator(device=run.device).manual_seed(0)
    n = stitched.train_y.shape[0]
    targets = F.one_hot(stitched.train_y, stitched.num_classes) | F.one_hot(
        stitched.train_secondary_y, stitched.num_classes
    )
    for _ in range(options.probe_epochs):
        order = torch.randperm(n, generator=generator, device=run.device)
        for s in range(0, n, batch):
            rows = order[s : s + batch]
            with torch.no_grad():
                features = net.forward_features(stitched.train_transform(stitched.train_x[rows], generator))
            loss = F.binary_cross_entropy_with_logits(probe.linear(features), targets[rows].float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        scores = predict_all(_AsMethod(probe), stitched.test_x, stitched.test_transform).sigmoid()
    f1 = secondary_target_f1(scores, stitched.test_y, stitched.test_secondary_y)
    result: dict[str, Any] = {"f1": f1, "probe_epochs": options.probe_epochs}
    if stitched.test_masks is not None and getattr(net, "gradcam_layer", None) is not None:
        for p in net.parameters():
            p.requires_grad_(True)  # Grad-CAM needs the gradient at the backbone's layer
        x = stitched.test_transform(stitched.test_x)
        saliency = _grad_cam(probe, net.gradcam_layer, x, stitched.test_secondary_y)
        pointing = pointing_accuracy(
            saliency, stitched.test_masks, stitched.test_secondary_y, tolerance=options.tolerance
        )
        result["pointing_accuracy"] = pointing.accuracy
    return result


RUNNERS = {
    "ece": analyse_ece,
    "ss": analyse_ss,
    "head_bias": analyse_head_bias,
    "grad_norms": analyse_grad_norms,
    "buffer_logits": analyse_buffer_logits,
    "future_fewshot_auc": analyse_fewshot,
    "resources": analyse_resources,
    "flatness": analyse_flatness,
    "fisher_trace": analyse_fisher,
    "buffer_informativeness": analyse_buffer_informativeness,
    "pointing": analyse_pointing,
    "secondary_targets": analyse_secondary_targets,
}


def analyse(run: TrainedRun, name: str, *, out: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """One analysis of :data:`ANALYSES` on a trained run (:func:`load_trained_run`), its plots
    written to ``out`` (default: ``RUN_DIR/analysis``). ``options`` are the fields of
    :class:`AnalysisOptions` (``max_items=500``, ``buffer_epochs=70``, ``probe_epochs=50``,
    ``tolerance=0.0``, ``data_root=None``).

    Raises:
        AnalysisSkipped: the analysis does not apply to this run (the reason says why).
        KeyError: no analysis of that name.
        TypeError: an option :class:`AnalysisOptions` does not have.
    """
    folder = Path(out) if out is not None else run.run_dir / ANALYSIS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return RUNNERS[name](run, folder, AnalysisOptions(**options))
