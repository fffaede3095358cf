"""What a run records after each task for the analyses (:func:`task_end_analysis`, written to
``events.jsonl`` by :class:`~xder_cli.runs.recorder.RunRecorder`): the peak memory always; with
``run.record_analyses`` also the few-shot transfer of the future heads and the buffer's mean
logits per class (:data:`xder_cli.runs.analyses.RECORDED` names the analyses that read them)."""

from __future__ import annotations

import resource
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from xder_cli.runs.loaded import predict_all
from xder_eval.analyses import DEFAULT_SHOTS, class_mean_logits, curve_auc, fewshot_curve
from xder_methods import FitState

__all__ = ["FEWSHOT_POOL", "task_end_analysis"]

FEWSHOT_POOL = max(DEFAULT_SHOTS)  # training examples kept per class for the shots


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


def task_end_analysis(loop: FitState, *, full: bool = True) -> dict[str, Any]:
    """What a run records after each task for later analysis (``events.jsonl`` ``analysis``).

    * ``peak_memory_mb``: peak memory since the previous record (always: it costs nothing);
    * with ``full`` (``run.record_analyses``):

      * ``fewshot``: for every unseen task u > t, the 1-NN accuracy (%) on u's test set of the
        features given by u's own (future) head, fitted on 1..50 training examples per class
        (X-DER Sec. 6.3, Fig. "fewshot"), its AUC, and their mean ``auc_mean`` (AUC_t);
      * ``buffer_class_logits``: mean stored logit vector per class (Fig. "derpplogits");
      * ``seconds``: what recording them took.
    """
    method: Any = loop.method  # a MethodBase: an nn.Module with a network
    stream = loop.stream
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
