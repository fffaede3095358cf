"""The paper's analyses of a trained run (Sec. 6 and its appendix).

Two kinds of analysis:

* recorded while training: by every run, the Class-IL mistakes by head after every task and the
  peak memory; by a run trained with ``run.record_analyses`` also the gradient norms of stream vs
  replay data at sampled steps (``train.record_every``) and, at every task end, the few-shot
  transfer of the future heads and the mean stored logits per class (:func:`task_end_analysis`,
  written to ``events.jsonl``). Those cost a few percent of a run, so they are off by default:
  :data:`RECORDED` names the analyses that need them;
* computed from the final checkpoint: calibration, secondary information, flatness, Fisher trace,
  buffer informativeness, Grad-CAM pointing (where the benchmark has masks) and secondary targets
  (where COCO-stitched data are prepared).

Results go to ``RUN_DIR/analysis/analysis.json`` and PNG plots beside it.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_cli.runs import rundir
from xder_cli.runs.errors import AnalysisSkipped, RunDirError, option
from xder_data import Benchmark, load_benchmark
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
    DEFAULT_SHOTS,
    BufferTraining,
    class_mean_logits,
    curve_auc,
    fewshot_curve,
    fisher_trace,
    head_bias_fractions,
    noisy_loss,
    train_on_buffer,
)
from xder_eval.plots import legend_outside, new_figure, save_figure
from xder_methods import ContinualSetting, Loop, Transforms, create_method
from xder_models import create_backbone

__all__ = [
    "ANALYSES",
    "RECORDED",
    "RECORD_HINT",
    "RUNNERS",
    "AnalysisSkipped",
    "TrainedRun",
    "analyse",
    "load_trained_run",
    "task_end_analysis",
]

from xder_cli.runs.plan import build_plan, resolve_device

ANALYSES = (
    "ece",
    "ss",
    "head_bias",
    "grad_norms",
    "buffer_logits",
    "future_fewshot_auc",
    "resources",
    "flatness",
    "fisher_trace",
    "buffer_informativeness",
    "pointing",
    "secondary_targets",
)
RECORDED = ("grad_norms", "future_fewshot_auc")
"""Analyses that read what only a run trained with ``run.record_analyses`` records."""
RECORD_HINT = f"train it with {option('run.record_analyses')} (run.record_analyses = true)"
"""What to do for :data:`RECORDED`, as a template of :mod:`~xder_cli.runs.errors`."""
FLATNESS_SIGMAS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)
FEWSHOT_POOL = max(DEFAULT_SHOTS)  # training examples kept per class for the shots


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


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        torch.cuda.reset_peak_memory_stats(device)
        return peak
    # ru_maxrss: kilobytes on Linux (the process's peak resident memory).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fewshot_pool(labels: Tensor, start: int, end: int, per_class: int, seed: int) -> Tensor:
    """Up to ``per_class`` training rows of each class in [start, end), drawn once per seed."""
    y = labels.cpu().numpy()
    rng = np.random.default_rng(seed)
    rows = [rng.permutation(np.flatnonzero(y == c))[:per_class] for c in range(start, end)]
    return torch.from_numpy(np.sort(np.concatenate(rows))).to(labels.device)


def task_end_analysis(loop: Loop, *, full: bool = True) -> dict[str, Any]:
    """What a run records after each task for later analysis (``events.jsonl`` ``analysis``).

    * ``peak_memory_mb``: peak memory since the previous record (always: it costs nothing);
    * with ``full`` (``run.record_analyses``):

      * ``fewshot``: for every unseen task u > t, the 1-NN accuracy (%) on u's test set of the
        features given by u's own (future) head, fitted on 1..50 training examples per class
        (X-DER Sec. 6.3, Fig. "fewshot"), its AUC, and their mean ``auc_mean`` (AUC_t);
      * ``buffer_class_logits``: mean stored logit vector per class (Fig. "derpplogits");
      * ``seconds``: what recording them took.
    """
    method, stream = loop.method, loop.stream
    t = loop.task - 1  # the task just finished
    record: dict[str, Any] = {"event": "analysis", "task": t}
    if not full:
        record["peak_memory_mb"] = _peak_memory_mb(next(method.parameters()).device)
        return record
    started = time.perf_counter()
    was_training = method.training
    method.train(False)
    if t < loop.n_tasks - 1:
        curves, aucs = {}, {}
        for u in range(t + 1, loop.n_tasks):
            start, end = loop.setting.class_range(u)
            split = stream.task(u)
            pool = _fewshot_pool(stream.train_y, start, end, FEWSHOT_POOL, seed=u)
            train_features = predict_all(method, stream.train_x[pool], method.transforms.test)[:, start:end]
            test_features = predict_all(method, stream.test_x[split.test], method.transforms.test)[
                :, start:end
            ]
            curve = fewshot_curve(
                train_features, stream.train_y[pool], test_features, stream.test_y[split.test], seed=u
            )
            curves[str(u)] = curve
            aucs[str(u)] = curve_auc(DEFAULT_SHOTS, curve)
        record["fewshot"] = {
            "shots": list(DEFAULT_SHOTS),
            "curves": curves,
            "auc": aucs,
            "auc_mean": float(np.nanmean(list(aucs.values()))),
        }
    buffer = getattr(method, "buffer", None)
    if buffer is not None and getattr(buffer, "logits", None) is not None and len(buffer):
        size = len(buffer)
        record["buffer_class_logits"] = class_mean_logits(
            buffer.logits[:size], buffer.labels[:size], loop.setting.num_classes
        )
    record["peak_memory_mb"] = _peak_memory_mb(next(method.parameters()).device)
    method.train(was_training)
    record["seconds"] = time.perf_counter() - started
    return record


# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The analyses. Each returns a JSON-able dict, or raises AnalysisSkipped(reason).


def _test_logits(run: TrainedRun) -> Tensor:
    return predict_all(run.method, run.bench.test_x, run.bench.test_transform)


def analyse_ece(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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


def analyse_ss(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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


def analyse_head_bias(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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
    plot = _plot_head_bias(per_task, out / "head_bias.png", run.bench.classes_per_task, _run_name(run))
    last = per_task[-1]["fraction_by_head"]
    return {"per_task": per_task, "newest_head_share": last[per_task[-1]["task"]], "plot": plot.name}


def analyse_grad_norms(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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
    plot = _plot_grad_norms(points, out / "grad_norms.png", _run_name(run))
    means = {
        k: float(np.mean([v for v in vals if v is not None]))
        for k, vals in series.items()
        if any(v is not None for v in vals)
    }
    return {"epochs": points, "mean": means, "plot": plot.name}


def analyse_buffer_logits(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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
    plot = _plot_buffer_logits(final, out / "buffer_logits.png", run.bench.classes_per_task, _run_name(run))
    return {"final": final, "after_task": over_time, "plot": plot.name}


def analyse_fewshot(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
    records = [e for e in _task_events(run, "analysis") if "fewshot" in e]
    if not records:
        raise AnalysisSkipped("no few-shot record (the run has a single task, or predates the recording)")
    per_task = {str(e["task"]): e["fewshot"] for e in records}
    auc = {t: r["auc_mean"] for t, r in per_task.items()}
    ax = _plot_series(
        {"AUC_t": list(auc.values())},
        xlabel="after training task",
        ylabel="AUC_t: mean AUC of the future heads (%)",
        title="Few-shot transfer of the future heads (1-NN, 1 to 50 shots)",
        x=[int(t) + 1 for t in auc],  # tasks from 1, as printed while training
        integer_x=True,
    )
    plot = save_figure(ax.figure, out / "fewshot_auc.png", run=_run_name(run))
    return {"auc": auc, "per_task": per_task, "plot": plot.name}


def analyse_resources(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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


def analyse_flatness(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
    data = _train_subset(run, args.max_items)
    generator = torch.Generator(device=run.device).manual_seed(0)
    curve = noisy_loss(Predictor(run.method).eval(), data, FLATNESS_SIGMAS, samples=3, generator=generator)
    ax = _plot_series(
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
        "items_per_task": args.max_items,
        "plot": plot.name,
    }


def analyse_fisher(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
    data = _train_subset(run, min(args.max_items, 200))
    return {
        "trace": fisher_trace(Predictor(run.method).eval(), data),
        "items_per_task": min(args.max_items, 200),
    }


def analyse_buffer_informativeness(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
    buffer = getattr(run.method, "buffer", None)
    if buffer is None or not len(buffer):
        raise AnalysisSkipped("the method keeps no replay buffer")
    size = len(buffer)
    examples, labels = buffer.examples[:size], buffer.labels[:size]
    logits = None if buffer.logits is None else buffer.logits[:size]
    targets = ["labels"] if logits is None else ["labels", "logits", "both"]
    settings = BufferTraining(epochs=args.buffer_epochs, batch_size=run.plan.schedule.batch_size)
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
    return {"accuracy": accuracy, "buffer_size": size, "epochs": args.buffer_epochs}


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


def analyse_pointing(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
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
    result = pointing_accuracy(saliency, masks, run.bench.test_y, tolerance=args.tolerance)
    run.method.train(False)
    return {
        "accuracy": result.accuracy,
        "overall_accuracy": result.overall_accuracy,
        "tolerance": args.tolerance,
    }


class _Probe(nn.Module):
    """Frozen backbone features followed by a trainable linear multi-label classifier."""

    def __init__(self, net: nn.Module, classes: int) -> None:
        super().__init__()
        self.net = net
        self.linear = nn.Linear(net.num_features, classes).to(next(net.parameters()).device)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.net.forward_features(x))


def analyse_secondary_targets(run: TrainedRun, out: Path, args: Any) -> dict[str, Any]:
    from xder_data import DataError

    try:
        stitched = load_benchmark(
            "coco-stitch", args.data_root or run.plan.settings.data_root, device=run.device
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
    optimizer = torch.optim.SGD(probe.linear.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator(device=run.device).manual_seed(0)
    n = stitched.train_y.shape[0]
    targets = F.one_hot(stitched.train_y, stitched.num_classes) | F.one_hot(
        stitched.train_secondary_y, stitched.num_classes
    )
    for _ in range(args.probe_epochs):
        order = torch.randperm(n, generator=generator, device=run.device)
        for s in range(0, n, 32):
            rows = order[s : s + 32]
            with torch.no_grad():
                features = net.forward_features(stitched.train_transform(stitched.train_x[rows], generator))
            loss = F.binary_cross_entropy_with_logits(probe.linear(features), targets[rows].float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        scores = predict_all(_AsMethod(probe), stitched.test_x, stitched.test_transform).sigmoid()
    f1 = secondary_target_f1(scores, stitched.test_y, stitched.test_secondary_y)
    result: dict[str, Any] = {"f1": f1, "probe_epochs": args.probe_epochs}
    if stitched.test_masks is not None and getattr(net, "gradcam_layer", None) is not None:
        for p in net.parameters():
            p.requires_grad_(True)  # Grad-CAM needs the gradient at the backbone's layer
        x = stitched.test_transform(stitched.test_x)
        saliency = _grad_cam(probe, net.gradcam_layer, x, stitched.test_secondary_y)
        pointing = pointing_accuracy(
            saliency, stitched.test_masks, stitched.test_secondary_y, tolerance=args.tolerance
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


# ---------------------------------------------------------------------------------------------
# Plots (xder_eval.plots' figure helper). Tasks and heads count from 1, as the terminal counts
# tasks ("task 1/5") and the accuracy matrices do; classes are their labels, from 0. Each plot
# names its run (the run directory's name) in a suptitle.


def _run_name(run: TrainedRun) -> str:
    return run.run_dir.name


def _class_ranges(classes_per_task: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` label of each task's classes."""
    ends = np.cumsum(classes_per_task).tolist()
    return [(end - size, end - 1) for size, end in zip(classes_per_task, ends, strict=True)]


def _head_label(task: int, classes_per_task: Sequence[int]) -> str:
    """``head 2 (classes 2-3)``: task ``task`` (from 0) named from 1, with its class labels."""
    if task >= len(classes_per_task):
        return f"head {task + 1}"
    first, last = _class_ranges(classes_per_task)[task]
    classes = f"class {first}" if first == last else f"classes {first}-{last}"
    return f"head {task + 1} ({classes})"


def _plot_series(
    series: dict[str, list[float | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    x: Sequence[float] | None = None,
    integer_x: bool = False,
) -> Any:
    """A line per series (a legend only with two or more); returns the axes, saved by the
    caller with :func:`save_figure` after any addition."""
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


def _plot_grad_norms(points: list[dict[str, Any]], path: Path, run: str) -> Path:
    """Stream and buffer gradient norms per epoch, epochs counted over all tasks from 1; the
    tasks (from 1) on the top axis, a dotted line where each one starts."""
    series = {f"{name} loss": [p.get(name) for p in points] for name in ("stream", "buffer")}
    ax = _plot_series(
        series,
        xlabel="epoch (counted over all tasks)",
        ylabel="gradient norm (L2, mean over the epoch)",
        title="Gradient norms of the stream and the buffer loss terms",
        integer_x=True,
    )
    tasks = [p["task"] for p in points]
    starts = [i + 1 for i, t in enumerate(tasks) if i == 0 or t != tasks[i - 1]]
    ends = [*(s - 1 for s in starts[1:]), len(tasks)]
    if len(starts) > 1:
        for start in starts[1:]:
            ax.axvline(start - 0.5, color="0.6", linestyle=":", linewidth=1)
        top = ax.secondary_xaxis("top")
        step = max(1, len(starts) // 20)
        chosen = list(range(0, len(starts), step))
        top.set_xticks(
            [(starts[i] + ends[i]) / 2 for i in chosen], [str(tasks[starts[i] - 1] + 1) for i in chosen]
        )
        top.set_xlabel("task", fontsize="small")
        top.tick_params(labelsize="small")
    return save_figure(ax.figure, path, run=run)


def _plot_head_bias(
    per_task: list[dict[str, Any]], path: Path, classes_per_task: Sequence[int], run: str
) -> Path:
    """Stacked bars: after each task (from 1), the share of the mistakes on the past tasks that
    each head (from 1, with its classes) wins."""
    n_heads = max(len(p["fraction_by_head"]) for p in per_task)
    fig = new_figure(7.5 if n_heads <= 16 else 9, 4.2)
    ax = fig.add_subplot()
    bottoms = np.zeros(len(per_task))
    labels = [str(p["task"] + 1) for p in per_task]
    colours = _head_colours(n_heads)
    for head in range(n_heads):
        share = np.array([
            100 * p["fraction_by_head"][head] if head < len(p["fraction_by_head"]) else 0.0 for p in per_task
        ])  # fmt: skip
        share = np.nan_to_num(share)
        ax.bar(labels, share, bottom=bottoms, color=colours[head], label=_head_label(head, classes_per_task))
        bottoms += share
    ax.set_xlabel("after training task")
    ax.set_ylabel("share of the mistakes on past tasks (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Which head wins the Class-IL mistakes on past tasks")
    legend_outside(ax, title="predicted head", title_fontsize="small")
    return save_figure(fig, path, run=run)


def _head_colours(n: int) -> list[Any]:
    """One colour per head: tab10 or tab20 while they suffice (no colour repeats), else viridis."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(n - 1, 1)) for i in range(n)]


MAX_LOGIT_CLASSES = 200
"""The buffer-logit matrix shows at most this many classes (said in its title when cut)."""


def _plot_buffer_logits(
    matrix: list[list[float]], path: Path, classes_per_task: Sequence[int], run: str
) -> Path:
    """Heat map of the mean stored logit per (class of the stored item, logit); classes are
    labels (from 0), the tasks' class blocks are outlined; a class with no stored item is grey."""
    from matplotlib.ticker import MaxNLocator

    values = np.asarray(matrix, dtype=np.float64)
    shown = values[:MAX_LOGIT_CLASSES, :MAX_LOGIT_CLASSES]
    fig = new_figure(6.5, 5.2)
    ax = fig.add_subplot()
    ax.set_facecolor("0.85")  # rows of classes without stored items (NaN)
    limit = np.nanmax(np.abs(shown)) if np.isfinite(shown).any() else 1.0
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="coolwarm", vmin=-limit, vmax=limit)
    n = shown.shape[0]
    for first, _ in _class_ranges(classes_per_task)[1:]:
        if first < n:
            ax.axhline(first - 0.5, color="0.3", linewidth=0.6)
            ax.axvline(first - 0.5, color="0.3", linewidth=0.6)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    ax.set_xlim(-0.5, shown.shape[1] - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("logit of class")
    ax.set_ylabel("class of the stored item")
    title = "Mean logits stored in the buffer (lines: task boundaries)"
    if values.shape[0] > n or values.shape[1] > shown.shape[1]:
        title += f", first {MAX_LOGIT_CLASSES} classes"
    if np.isnan(shown).all(axis=1).any():
        title += "; grey: no item stored"
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8, label="mean stored logit")
    return save_figure(fig, path, run=run)


def analyse(run: TrainedRun, name: str, *, out: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """One analysis of :data:`ANALYSES` on a trained run (:func:`load_trained_run`), its plots
    written to ``out`` (default: ``RUN_DIR/analysis``). ``options`` are those of ``xder-run
    analyze`` (``max_items=500``, ``buffer_epochs=70``, ``probe_epochs=50``, ``tolerance=0.0``,
    ``data_root=None``).

    Raises:
        AnalysisSkipped: the analysis does not apply to this run (the reason says why).
        KeyError: no analysis of that name.
    """
    settings = {
        "max_items": 500,
        "buffer_epochs": 70,
        "probe_epochs": 50,
        "tolerance": 0.0,
        "data_root": None,
    }
    unknown = set(options) - set(settings)
    if unknown:
        raise TypeError(f"analyse() got unknown options {sorted(unknown)}; it takes {sorted(settings)}")
    folder = Path(out) if out is not None else run.run_dir / "analysis"
    folder.mkdir(parents=True, exist_ok=True)
    return RUNNERS[name](run, folder, SimpleNamespace(**(settings | options)))
