"""The paper's analyses of a trained learner (Sec. 6), as functions of tensors and callables.

xder-eval imports no sibling package: the caller (``xder-run analyze``) hands in the network, the
data as tensors, and factories for anything that must be built. Every function is deterministic
given its ``seed``/generator and leaves the model's parameters as it found them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_eval._arrays import ArrayLike, to_numpy

__all__ = [
    "DEFAULT_SHOTS",
    "BufferTraining",
    "class_mean_logits",
    "curve_auc",
    "fewshot_curve",
    "fisher_trace",
    "head_bias_fractions",
    "nearest_neighbour_accuracy",
    "noisy_loss",
    "train_on_buffer",
]

DEFAULT_SHOTS = (1, 2, 5, 10, 20, 50)


# ------------------------------------------------------------------ few-shot transfer (Sec. 6.3)


def nearest_neighbour_accuracy(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    *,
    shots: int,
    repeats: int = 5,
    seed: int = 0,
) -> float:
    """Accuracy (%) of a 1-nearest-neighbour classifier (Euclidean) fitted on ``shots`` training
    examples per class, averaged over ``repeats`` draws of those examples.

    Per repeat, each class present in ``train_labels`` contributes ``min(shots, n_c)`` rows drawn
    without replacement by ``numpy.random.default_rng(seed)`` (one generator for all repeats);
    the test rows are classified by their nearest drawn row (the first on ties).

    Args:
        train_features: (N, D) features of the pool the shots are drawn from.
        train_labels: (N,) their labels.
        test_features: (M, D) features to classify.
        test_labels: (M,) their labels.
    """
    pool = to_numpy(train_features, "train_features", ndim=2).astype(np.float64)
    pool_y = to_numpy(train_labels, "train_labels", ndim=1)
    queries = to_numpy(test_features, "test_features", ndim=2).astype(np.float64)
    query_y = to_numpy(test_labels, "test_labels", ndim=1)
    if shots < 1 or repeats < 1:
        raise ValueError("shots and repeats must be >= 1")
    if queries.shape[0] == 0 or pool.shape[0] == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    classes = np.unique(pool_y)
    squared_queries = (queries**2).sum(axis=1, keepdims=True)
    scores = []
    for _ in range(repeats):
        rows = np.concatenate([rng.permutation(np.flatnonzero(pool_y == c))[:shots] for c in classes])
        support = pool[rows]
        distances = squared_queries - 2 * queries @ support.T + (support**2).sum(axis=1)[None, :]
        predicted = pool_y[rows][distances.argmin(axis=1)]
        scores.append(float((predicted == query_y).mean()))
    return 100.0 * float(np.mean(scores))


def fewshot_curve(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    *,
    shots: Sequence[int] = DEFAULT_SHOTS,
    repeats: int = 5,
    seed: int = 0,
) -> list[float]:
    """:func:`nearest_neighbour_accuracy` at each number of ``shots`` per class (the paper's
    NN_{t -> t~}(k), Fig. "fewshot" (a))."""
    return [
        nearest_neighbour_accuracy(
            train_features, train_labels, test_features, test_labels, shots=k, repeats=repeats, seed=seed
        )
        for k in shots
    ]


def curve_auc(shots: Sequence[float], accuracies: Sequence[float]) -> float:
    """Area under an accuracy-vs-shots curve (trapezoids), divided by the shot range, so that it
    reads as the curve's mean accuracy in the curve's unit (the paper's AUC_{t -> t~})."""
    x = np.asarray(shots, dtype=np.float64)
    y = np.asarray(accuracies, dtype=np.float64)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("an AUC needs at least two points, one accuracy per shot count")
    return float(np.trapezoid(y, x) / (x[-1] - x[0]))


# ----------------------------------------------------------- bias and stored logits (Sec. 3.3)


def head_bias_fractions(head_counts: Sequence[Sequence[int]] | np.ndarray) -> list[list[float]]:
    """Row-normalise Class-IL mistake counts: ``[i][j]`` = the fraction of task i's misclassified
    test items whose predicted class belongs to task j (Fig. "derpperrors"); NaN rows for tasks
    without a mistake."""
    counts = np.asarray(head_counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        fractions: list[list[float]] = (counts / totals).tolist()
    return fractions


def class_mean_logits(logits: ArrayLike, labels: ArrayLike, num_classes: int) -> list[list[float]]:
    """Mean stored logit vector of each class: ``[c][k]`` = mean over items of class c of logit k
    (Fig. "derpplogits"); rows of classes without items are NaN.

    Args:
        logits: (N, C) stored logits.
        labels: (N,) their labels.
    """
    z = to_numpy(logits, "logits", ndim=2).astype(np.float64)
    y = to_numpy(labels, "labels", ndim=1).astype(np.int64)
    sums = np.zeros((num_classes, z.shape[1]))
    np.add.at(sums, y, z)
    counts = np.bincount(y, minlength=num_classes)[:, None].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        means: list[list[float]] = (sums / counts).tolist()
    return means


# ------------------------------------------------------------------------- flatness (Sec. 6.2)


def _full_precision(out: Tensor) -> Tensor:
    """Half-precision outputs are lifted to float32; float32/float64 are kept."""
    return out.float() if out.dtype in (torch.float16, torch.bfloat16) else out


def _batches(x: Tensor, y: Tensor, batch_size: int) -> Iterator[tuple[Tensor, Tensor]]:
    for start in range(0, y.shape[0], batch_size):
        yield x[start : start + batch_size], y[start : start + batch_size]


@torch.no_grad()
def _mean_loss(model: nn.Module, data: Sequence[tuple[Tensor, Tensor]], batch_size: int) -> float:
    task_means = []
    for x, y in data:
        total = 0.0
        for xb, yb in _batches(x, y, batch_size):
            total += float(F.cross_entropy(_full_precision(model(xb)), yb, reduction="sum"))
        task_means.append(total / max(y.shape[0], 1))
    return float(np.mean(task_means))


@torch.no_grad()
def noisy_loss(
    model: nn.Module,
    data: Sequence[tuple[Tensor, Tensor]],
    sigmas: Sequence[float],
    *,
    samples: int = 3,
    batch_size: int = 256,
    generator: torch.Generator | None = None,
) -> list[float]:
    """L_sigma of the X-DER paper's Eq. (flatness): the cross-entropy of the perturbed network,
    averaged over tasks and over ``samples`` draws of theta~ ~ N(theta, (sigma |theta|)^2) per
    weight (noise relative to each weight's magnitude; Li et al., Neyshabur et al.).

    Args:
        model: the network, in the mode it should be evaluated in (eval: BatchNorm running
            statistics are kept); its weights are restored afterwards.
        data: one ``(x, y)`` per task (transformed inputs, labels over all outputs).
        sigmas: relative noise levels; 0 gives the unperturbed loss.

    Returns:
        L_sigma for each sigma.
    """
    params = [p for p in model.parameters()]
    saved = [p.detach().clone() for p in params]
    curve = []
    try:
        for sigma in sigmas:
            if sigma == 0:
                curve.append(_mean_loss(model, data, batch_size))
                continue
            values = []
            for _ in range(samples):
                for p, original in zip(params, saved, strict=True):
                    noise = torch.randn(original.shape, generator=generator, device=original.device)
                    p.copy_(original + sigma * original.abs() * noise)
                values.append(_mean_loss(model, data, batch_size))
            curve.append(float(np.mean(values)))
    finally:
        for p, original in zip(params, saved, strict=True):
            p.copy_(original)
    return curve


def fisher_trace(model: nn.Module, data: Sequence[tuple[Tensor, Tensor]], *, batch_size: int = 64) -> float:
    """Tr(F) of the empirical Fisher information (X-DER Sec. 6.2): the mean over a task's
    examples of the squared norm of the per-example gradient of the cross-entropy, averaged
    over tasks.

    Per-example gradients come from ``torch.func`` (``vmap`` of ``grad`` over a functional call),
    so the model must be in eval mode (BatchNorm with running statistics: examples independent).
    """
    from torch.func import functional_call, grad, vmap

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach() for n, b in model.named_buffers()}

    def loss_one(parameters: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        out = functional_call(model, (parameters, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(_full_precision(out), y.unsqueeze(0))

    per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))
    task_means = []
    for x, y in data:
        total = torch.zeros((), dtype=torch.float64, device=y.device)
        for xb, yb in _batches(x, y, batch_size):
            grads = per_example(params, xb, yb)
            total += sum(grads[n].pow(2).flatten(1).sum(1).double().sum() for n in names)
        task_means.append(float(total) / max(y.shape[0], 1))
    return float(np.mean(task_means))


# ------------------------------------------------------------- buffer informativeness (Sec. 6.1)


@dataclass(frozen=True)
class BufferTraining:
    """How :func:`train_on_buffer` trains (the paper trains 70 epochs)."""

    epochs: int = 70
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9


def train_on_buffer(
    make_model: Callable[[], nn.Module],
    examples: Tensor,
    labels: Tensor,
    logits: Tensor | None,
    *,
    target: str,
    augment: Callable[[Tensor, torch.Generator | None], Tensor],
    settings: BufferTraining = BufferTraining(),
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Train a fresh network from scratch on a final replay buffer (the paper's proxy of a buffer's
    informativeness, Fig. "informativeness").

    Args:
        make_model: builds the untrained network (on the data's device).
        examples: (M, ...) stored (unaugmented) examples; ``augment`` turns a batch into inputs.
        labels: (M,) stored labels.
        logits: (M, C) stored logits (needed by ``logits`` and ``both``).
        target: ``labels`` (cross-entropy, as ER's buffer), ``logits`` (mean squared error to the
            stored logits, as DER) or ``both`` (their sum, as DER++).
        settings: epochs, batch size and SGD settings.

    Returns:
        The trained network, in eval mode.
    """
    if target not in ("labels", "logits", "both"):
        raise ValueError(f"target must be labels, logits or both, got {target!r}")
    if target != "labels" and logits is None:
        raise ValueError(f"target {target!r} needs stored logits")
    model = make_model()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    n = labels.shape[0]
    for _ in range(settings.epochs):
        order = torch.randperm(n, generator=generator, device=labels.device)
        for start in range(
            0, n - (n % settings.batch_size if n > settings.batch_size else 0), settings.batch_size
        ):
            rows = order[start : start + settings.batch_size]
            if rows.shape[0] < 2:
                continue
            out = _full_precision(model(augment(examples[rows], generator)))
            loss = out.new_zeros(())
            if target in ("labels", "both"):
                loss = loss + F.cross_entropy(out, labels[rows])
            if target in ("logits", "both"):
                assert logits is not None
                loss = loss + F.mse_loss(out, logits[rows].float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model.eval()
