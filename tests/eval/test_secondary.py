"""SS-ERR and SS-NLL (X-DER Sec. 6.1, after Mittal et al. 2021) on logits worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xder_eval import secondary_superclass_log_probs, superclass_error, superclass_nll

# Four classes in two super-classes: {0, 1} -> 0, {2, 3} -> 1.
COARSE = np.array([0, 0, 1, 1])
# Logits as logs of weights, so softmaxes are ratios of the weights.
LOGITS = np.log(
    np.array(
        [
            [8.0, 2.0, 1.0, 1.0],  # max = class 0, dropped: q = [0, 2, 1, 1] / 4
            [1.0, 3.0, 6.0, 1.0],  # max = class 2, dropped: q = [1, 3, 0, 1] / 5
        ]
    )
)


def test_secondary_superclass_distribution_by_hand() -> None:
    log_q = secondary_superclass_log_probs(LOGITS, COARSE)
    np.testing.assert_allclose(np.exp(log_q), [[0.5, 0.5], [0.8, 0.2]])
    full = secondary_superclass_log_probs(LOGITS, COARSE, exclude_max=False)
    np.testing.assert_allclose(np.exp(full), [[10 / 12, 2 / 12], [4 / 11, 7 / 11]])


def test_ss_err_and_ss_nll_by_hand() -> None:
    # Item 0 is class 0 (a correct prediction: its own class is dropped, its sibling carries .5);
    # item 1 is class 1 (a wrong prediction: the max was class 2; super-class 0 keeps (1 + 3) / 5).
    labels = np.array([0, 1])
    assert superclass_error(LOGITS, labels, COARSE) == pytest.approx((0.5 + 0.2) / 2)
    assert superclass_nll(LOGITS, labels, COARSE) == pytest.approx((math.log(2) - math.log(0.8)) / 2)
    # With the max kept (the other reading of SS-NLL): -(log(10/12) + log(4/11)) / 2.
    expected_full = -(math.log(10 / 12) + math.log(4 / 11)) / 2
    assert superclass_nll(LOGITS, labels, COARSE, exclude_max=False) == pytest.approx(expected_full)


def test_labels_in_the_other_superclass() -> None:
    labels = np.array([3, 2])  # super-class 1 for both: Q = .5 and .2
    assert superclass_error(LOGITS, labels, COARSE) == pytest.approx(1 - (0.5 + 0.2) / 2)
    assert superclass_nll(LOGITS, labels, COARSE) == pytest.approx(-(math.log(0.5) + math.log(0.2)) / 2)


def test_only_the_first_of_tied_maxima_is_dropped() -> None:
    # Classes 0 and 1 tie for the max; dropping class 0 leaves q = [0, 2, 1] / 3, so super-class 1
    # (classes 1 and 2) gets everything. Dropping class 1 instead would give it 1/3.
    logits = np.log(np.array([[2.0, 2.0, 1.0]]))
    coarse = np.array([0, 1, 1])
    assert superclass_error(logits, np.array([1]), coarse) == pytest.approx(0.0)
    assert superclass_nll(logits, np.array([2]), coarse) == pytest.approx(0.0, abs=1e-12)


def test_a_superclass_emptied_by_the_max_gets_no_probability() -> None:
    logits = np.log(np.array([[5.0, 1.0, 1.0]]))
    coarse = np.array([0, 1, 1])  # class 0 is alone in its super-class and is the max
    assert superclass_error(logits, np.array([0]), coarse) == pytest.approx(1.0)
    assert superclass_nll(logits, np.array([0]), coarse) == math.inf


def _by_loop(logits: np.ndarray, labels: np.ndarray, coarse: np.ndarray) -> tuple[float, float]:
    """The definition item by item with plain exponentials, written independently."""
    errors, nlls = [], []
    for z, y in zip(logits, labels, strict=True):
        weights = np.exp(z - z.max())
        weights[int(np.argmax(z))] = 0.0
        q = weights / weights.sum()
        p = q[coarse == coarse[y]].sum()
        errors.append(1 - p)
        nlls.append(-math.log(p))
    return float(np.mean(errors)), float(np.mean(nlls))


def test_matches_the_definition_on_random_inputs() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = 4 * torch.randn(300, 100, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 100, (300,), generator=generator)
    coarse = torch.randperm(100, generator=generator) % 20  # 20 super-classes of 5 classes
    error, nll = _by_loop(logits.numpy(), labels.numpy(), coarse.numpy())
    assert superclass_error(logits, labels, coarse) == pytest.approx(error, abs=1e-12)
    assert superclass_nll(logits, labels, coarse) == pytest.approx(nll, abs=1e-10)
    # Rows of probabilities; invariance to a shift of each row's logits.
    np.testing.assert_allclose(np.exp(secondary_superclass_log_probs(logits, coarse)).sum(1), 1.0)
    shifted = logits + 100 * torch.randn(300, 1, generator=generator, dtype=torch.float64)
    assert superclass_nll(shifted, labels, coarse) == pytest.approx(nll, abs=1e-9)


def test_uniform_logits_give_the_superclass_share() -> None:
    # All logits equal: class 0 is dropped and the other 99 share the mass uniformly. An item of
    # class 0 keeps 4/99 for its super-class; an item of class 5 (another super-class) keeps 5/99.
    logits = torch.zeros(2, 100)
    coarse = torch.arange(100) // 5
    labels = torch.tensor([0, 5])
    assert superclass_error(logits, labels, coarse) == pytest.approx(1 - (4 / 99 + 5 / 99) / 2)


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="coarse_of_class has 3 entries"):
        superclass_error(LOGITS, np.array([0, 1]), np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="finite"):
        superclass_nll(np.array([[np.nan, 1.0]]), np.array([0]), np.array([0, 1]))
    with pytest.raises(ValueError, match="two classes"):
        superclass_error(np.zeros((1, 1)), np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match="integer"):
        superclass_error(LOGITS, np.array([0.0, 1.0]), COARSE)
    with pytest.raises(ValueError, match="no items"):
        superclass_error(np.zeros((0, 4)), np.zeros(0, dtype=np.int64), COARSE)
