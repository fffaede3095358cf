"""Secondary information: SS-ERR and SS-NLL over super-classes (X-DER paper Sec. 6.1, Tab. "brox_values").

The paper follows Mittal et al. (2021, "Essentials for Class Incremental Learning"): the final model is
evaluated on the CIFAR-100 test set relabelled with its 20 super-classes, and "the Secondary-Superclass
Error (SS-ERR) equals 1 minus the probability of predicting the right super-class. As the focus lies on
secondary information, the maximum logit is always omitted during softmax computation. Otherwise, the
Secondary-Superclass NLL (SS-NLL) considers the negative log-likelihood when using super-classes as
labels."

What is computed here, for item i with logits ``z_i`` (C,), fine label ``y_i`` and super-class
``s_i = coarse_of_class[y_i]``:

1. ``m_i = argmax_c z_ic`` (the first index on ties) is dropped: the secondary distribution is the
   softmax over the other C - 1 logits, ``q_ic = exp(z_ic) / sum_{c' != m_i} exp(z_ic')`` for
   ``c != m_i`` and ``q_{i m_i} = 0``. The dropped logit is the max whether or not the item is classified
   correctly: on a correct item the true class is gone and its siblings carry the super-class; on a
   wrong one the true class stays in.
2. Super-class probabilities are sums of their classes' probabilities: ``Q_i(s) = sum_{c: coarse(c)=s}
   q_ic`` (the probability of "predicting super-class s" under the secondary distribution).
3. ``SS-ERR = (1/N) sum_i (1 - Q_i(s_i))``: 1 minus the *probability* of the right super-class,
   averaged over items; a soft error, not the error rate of an argmax (the paper's definition goes
   through a softmax, which an argmax would not need).
4. ``SS-NLL = -(1/N) sum_i log Q_i(s_i)`` with the same secondary distribution: the paper's "always
   omitted" is read as covering both metrics (``exclude_max=False`` gives the NLL of the full softmax,
   the other reading of "Otherwise").

Items: every item passed in (the paper uses the whole CIFAR-100 test set after the last task). Both
metrics are fractions / nats, lower is better; the paper's table prints SS-ERR as a fraction (0.57).
"""

from __future__ import annotations

import numpy as np

from xder_eval._arrays import ArrayLike, check_labels, to_numpy

__all__ = ["secondary_superclass_log_probs", "superclass_error", "superclass_nll"]


def _coarse_map(coarse_of_class: ArrayLike, n_classes: int) -> np.ndarray:
    coarse = to_numpy(coarse_of_class, "coarse_of_class", ndim=1)
    if coarse.shape[0] != n_classes:
        raise ValueError(f"coarse_of_class has {coarse.shape[0]} entries, the logits {n_classes} classes")
    if coarse.dtype.kind not in "iu":
        raise ValueError(f"coarse_of_class must hold integer super-class ids, not {coarse.dtype}")
    coarse = coarse.astype(np.int64)
    if coarse.min() < 0:
        raise ValueError("coarse_of_class must hold non-negative super-class ids")
    return coarse


def _log_probs(z: np.ndarray, coarse: np.ndarray, exclude_max: bool) -> np.ndarray:
    n = z.shape[0]
    if exclude_max:
        z[np.arange(n), z.argmax(axis=1)] = -np.inf  # np.argmax: the first maximum
    # Log-softmax over the remaining logits; at least one is finite (C >= 2, finite inputs).
    shift = z.max(axis=1, keepdims=True)
    log_q = z - shift - np.log(np.exp(z - shift).sum(axis=1, keepdims=True))
    # Per-super-class logsumexp in one pass: sort the classes by super-class, reduce each run.
    order = np.argsort(coarse, kind="stable")
    sorted_coarse = coarse[order]
    starts = np.flatnonzero(np.r_[True, sorted_coarse[1:] != sorted_coarse[:-1]])
    grouped = log_q[:, order]
    group_max = np.maximum.reduceat(grouped, starts, axis=1)
    group_max = np.where(np.isfinite(group_max), group_max, 0.0)  # an all -inf group stays -inf below
    sizes = np.diff(np.r_[starts, coarse.shape[0]])
    with np.errstate(divide="ignore"):
        sums = np.add.reduceat(np.exp(grouped - np.repeat(group_max, sizes, axis=1)), starts, axis=1)
        group_log = np.log(sums) + group_max
    out = np.full((n, int(coarse.max()) + 1), -np.inf)
    out[:, sorted_coarse[starts]] = group_log
    return out


def _checked(logits: ArrayLike, coarse_of_class: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    z = to_numpy(logits, "logits", ndim=2).astype(np.float64)  # a copy: the max is overwritten
    if z.shape[1] < 2:
        raise ValueError("secondary information needs at least two classes")
    if not np.isfinite(z).all():
        raise ValueError("logits must be finite (no NaN or inf)")
    return z, _coarse_map(coarse_of_class, z.shape[1])


def secondary_superclass_log_probs(
    logits: ArrayLike, coarse_of_class: ArrayLike, *, exclude_max: bool = True
) -> np.ndarray:
    """Log-probabilities of the super-classes under the secondary distribution (max logit dropped).

    ``log Q_i(s) = logsumexp_{c: coarse(c)=s, c != m_i} z_ic - logsumexp_{c != m_i} z_ic`` with
    ``m_i = argmax_c z_ic`` (first index on ties), computed in float64. A super-class with no class
    left (its only member was the max, or no class maps to it) gets ``-inf``.

    Args:
        logits: (N, C) finite logits, C >= 2.
        coarse_of_class: (C,) super-class id of each class (``Benchmark.coarse_labels``, in the same
            mapped label order as the logits); S = ``max + 1`` super-classes.
        exclude_max: drop the max logit before the softmax (the paper's secondary information);
            False gives the super-class log-probabilities of the full softmax.

    Returns:
        (N, S) float64 log-probabilities; the exponentials of each row sum to 1.

    Raises:
        ValueError: shapes that disagree, fewer than two classes, non-finite logits, or bad ids.
    """
    z, coarse = _checked(logits, coarse_of_class)
    return _log_probs(z, coarse, exclude_max)


def _true_superclass_log_probs(
    logits: ArrayLike, labels: ArrayLike, coarse_of_class: ArrayLike, exclude_max: bool
) -> np.ndarray:
    z, coarse = _checked(logits, coarse_of_class)
    n = z.shape[0]
    if n == 0:
        raise ValueError("no items to evaluate")
    y = check_labels(to_numpy(labels, "labels", ndim=1), n, z.shape[1])
    picked: np.ndarray = _log_probs(z, coarse, exclude_max)[np.arange(n), coarse[y]]
    return picked


def superclass_error(logits: ArrayLike, labels: ArrayLike, coarse_of_class: ArrayLike) -> float:
    """SS-ERR: one minus the secondary probability of the true super-class, averaged over items.

    ``SS-ERR = (1/N) sum_i (1 - Q_i(coarse(y_i)))``, where ``Q_i`` sums, per super-class, the softmax
    of the logits with the max logit removed (see the module docstring for the exact steps).

    Args:
        logits: (N, C) logits of the final model on the test set.
        labels: (N,) fine class ids in [0, C).
        coarse_of_class: (C,) super-class id of each fine class (20 super-classes on CIFAR-100).

    Returns:
        SS-ERR, a fraction in [0, 1] (lower is better).
    """
    log_p = _true_superclass_log_probs(logits, labels, coarse_of_class, exclude_max=True)
    return float(np.mean(1.0 - np.exp(log_p)))


def superclass_nll(
    logits: ArrayLike, labels: ArrayLike, coarse_of_class: ArrayLike, *, exclude_max: bool = True
) -> float:
    """SS-NLL: negative log-likelihood of the true super-class, averaged over items (nats).

    ``SS-NLL = -(1/N) sum_i log Q_i(coarse(y_i))`` with the same secondary super-class distribution
    as :func:`superclass_error` (max logit removed before the softmax; ``exclude_max=False`` keeps
    it). ``inf`` when some item gives its true super-class no probability at all, which happens only
    when the max logit was the super-class's sole member.

    Args:
        logits: (N, C) logits of the final model on the test set.
        labels: (N,) fine class ids in [0, C).
        coarse_of_class: (C,) super-class id of each fine class.
        exclude_max: drop the max logit (default, the paper's "always omitted").

    Returns:
        SS-NLL in nats (lower is better).
    """
    log_p = _true_superclass_log_probs(logits, labels, coarse_of_class, exclude_max=exclude_max)
    return float(-np.mean(log_p))
