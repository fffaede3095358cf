"""The DER paper's Domain-IL and general continual streams, built from any set of labelled
grey-scale images: the same functions make ``perm-mnist``, ``rot-mnist`` and ``mnist-360`` from
MNIST and ``perm-digits``, ``rot-digits`` and ``digits-360`` from scikit-learn's digits.

As the authors' code builds them (mammoth at the tag ``neurips2020``: ``datasets/perm_mnist.py``,
``rot_mnist.py``, ``mnist_360.py``, ``transforms/permutation.py``, ``transforms/rotation.py``),
with the differences each function states. Every task's (or segment's) images are made once,
here, as uint8 tensors: the loop then treats them as any other rows.

* **Permuted** (:func:`permuted_tasks`): task t applies one fixed permutation of the pixels
  (the flattened image) to every train and test image; 20 tasks, every task permuted (the
  first too), labels unchanged.
* **Rotated** (:func:`rotated_tasks`): task t rotates every image by one angle drawn uniformly
  from [0, 180) degrees, about the centre, nearest-neighbour, corners filled with 0 (PIL's
  ``Image.rotate``, what ``torchvision.transforms.functional.rotate`` calls on a PIL image).
* **The 360 stream** (:func:`stream_360`): classes 0..8 (9 is left out: it is a rotated 6), the
  stream shows two classes at a time, (0, 1), (1, 2), ..., (8, 0), three rounds: 27 segments.
  Class c's training rows (in their order) are cut into six chunks of ``n_c // 6 + 1`` (the
  last shorter), taken last first, one per segment it is in. A segment draws each of its two
  chunks' length from that chunk, with replacement (the authors draw each example with a fresh
  shuffled ``DataLoader`` iterator), the two classes interleaved in proportion. Class c's k-th
  drawn example is rotated by ``((c - 1) * 60 + k * 360 / n_c) mod 360`` degrees: each class
  turns once round over the stream. Test: every test image of classes 0..8, the k-th of class
  c (in a seeded order) rotated by ``k * 360 / n_c_test``.

Differences from the authors' code:

* Permutations and angles are drawn from the benchmark's ``seed`` (``numpy.random.
  default_rng``), fixed for every run; the authors draw them from the run's global NumPy state.
* The 360 stream: the authors build each batch of a segment from ``round(r_a / (r_a + r_b) *
  batch_size)`` examples of class a (``r``: what is left of each chunk) and end the segment
  when either chunk runs out, leaving the other's last few undrawn; here the whole of both
  chunks is drawn, interleaved in proportion, so the stream does not depend on the batch size
  (the loop cuts each segment into batches on its own). Their test batches are drawn with
  replacement too (a fresh shuffled iterator per batch); here each test image counts once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from PIL import Image

from xder_data.augment import Normalize
from xder_data.benchmark import Benchmark, BenchmarkDefaults

__all__ = [
    "DOMAIN_TASKS",
    "STREAM_CLASSES",
    "STREAM_ROUNDS",
    "Stream360",
    "domain_benchmark",
    "permuted_tasks",
    "rotate",
    "rotated_tasks",
    "stream_360",
    "stream_360_benchmark",
    "stream_360_pairs",
]

DOMAIN_TASKS = 20
"""Tasks of the permuted and rotated benchmarks (the DER paper's 20)."""

STREAM_CLASSES = 9
"""Classes of the 360 stream: 0..8."""
STREAM_ROUNDS = 3
"""Times the 360 stream goes round its class pairs."""


def permuted_tasks(images: np.ndarray, n_tasks: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """``n_tasks`` copies of ``images`` (N, 1, H, W), copy t with its pixels permuted by
    permutation t (drawn in turn from ``default_rng(seed)``; each of ``H * W`` entries).

    Returns:
        ``(stacked, permutations)``: (n_tasks * N, 1, H, W) task by task, and the permutations.
    """
    rng = np.random.default_rng(seed)
    flat = images.reshape(images.shape[0], -1)
    perms = [rng.permutation(flat.shape[1]) for _ in range(n_tasks)]
    stacked = np.concatenate([flat[:, p].reshape(images.shape) for p in perms])
    return stacked, perms


def rotate(image: np.ndarray, degrees: float) -> np.ndarray:
    """``image`` (H, W) uint8 rotated ``degrees`` anticlockwise about its centre, nearest
    neighbour, the uncovered corners 0: PIL's ``Image.rotate``, as the authors' transforms."""
    return np.asarray(Image.fromarray(image, mode="L").rotate(float(degrees), Image.Resampling.NEAREST))


def rotated_tasks(images: np.ndarray, n_tasks: int, seed: int) -> tuple[np.ndarray, list[float]]:
    """``n_tasks`` copies of ``images`` (N, 1, H, W), copy t rotated by angle t (uniform in
    [0, 180), drawn in turn from ``default_rng(seed)``).

    Returns:
        ``(stacked, angles)``: (n_tasks * N, 1, H, W) task by task, and the angles in degrees.
    """
    rng = np.random.default_rng(seed)
    angles = [float(rng.uniform(0.0, 180.0)) for _ in range(n_tasks)]
    stacked = np.concatenate([np.stack([rotate(img[0], a) for img in images])[:, None] for a in angles])
    return stacked, angles


def stream_360_pairs() -> list[tuple[int, int]]:
    """The class pairs of the 360 stream's segments, in order: (0, 1), (1, 2), ..., (8, 0),
    three times (27 segments)."""
    one_round = [(c, (c + 1) % STREAM_CLASSES) for c in range(STREAM_CLASSES)]
    return one_round * STREAM_ROUNDS


@dataclass(frozen=True)
class Stream360:
    """A built 360 stream. ``train_x`` (N, 1, H, W) in stream order with ``train_y`` and
    ``segment`` (the segment of each row, 0..26); ``test_x``, ``test_y`` the rotated test set
    (class by class); ``angles`` the training rows' rotations in degrees."""

    train_x: np.ndarray
    train_y: np.ndarray
    segment: np.ndarray
    angles: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def _chunks(n: int) -> list[tuple[int, int]]:
    """The six chunks ``[start, end)`` of a class's ``n`` rows, last first (the authors pop
    them off the end of a list)."""
    size = n // (2 * STREAM_ROUNDS) + 1
    bounds = [(min(k * size, n), min((k + 1) * size, n)) for k in range(2 * STREAM_ROUNDS)]
    return bounds[::-1]


def _interleave(n_a: int, n_b: int) -> np.ndarray:
    """Which class (0: a, 1: b) each position of a segment of ``n_a + n_b`` draws is: item k of
    each class at its fraction ``(k + 0.5) / n`` of the segment, a first on ties."""
    keys = np.concatenate([(np.arange(n_a) + 0.5) / n_a, (np.arange(n_b) + 0.5) / n_b])
    which = np.concatenate([np.zeros(n_a, np.int64), np.ones(n_b, np.int64)])
    return which[np.argsort(keys, kind="stable")]


def stream_360(
    train_images: np.ndarray,
    train_labels: np.ndarray,
    test_images: np.ndarray,
    test_labels: np.ndarray,
    seed: int,
) -> Stream360:
    """The 360 stream of ``train_images`` (N, 1, H, W) uint8 with labels 0..9 (class 9 is
    dropped) and its rotated test set; every draw from ``default_rng(seed)``. See the module."""
    rng = np.random.default_rng(seed)
    rows = [np.flatnonzero(train_labels == c) for c in range(STREAM_CLASSES)]
    chunks = [_chunks(len(r)) for r in rows]
    drawn = [0] * STREAM_CLASSES  # draws of each class so far: its rotation counter
    xs: list[np.ndarray] = []
    ys: list[int] = []
    segs: list[int] = []
    angles: list[float] = []
    for s, pair in enumerate(stream_360_pairs()):
        picks = []
        for c in pair:
            start, end = chunks[c].pop(0)
            size = end - start  # 0 for a class too small to fill its six chunks
            picks.append(rows[c][start + rng.integers(0, max(size, 1), size=size)])
        which = _interleave(len(picks[0]), len(picks[1]))
        taken = [0, 0]
        for w in which:
            c = pair[w]
            row = picks[w][taken[w]]
            taken[w] += 1
            angle = ((c - 1) * 60 + drawn[c] * 360.0 / len(rows[c])) % 360
            drawn[c] += 1
            xs.append(rotate(train_images[row, 0], angle)[None])
            ys.append(c)
            segs.append(s)
            angles.append(angle)
    test_x, test_y = [], []
    for c in range(STREAM_CLASSES):
        order = rng.permutation(np.flatnonzero(test_labels == c))
        step = 360.0 / len(order)
        test_x += [rotate(test_images[r, 0], k * step)[None] for k, r in enumerate(order)]
        test_y += [c] * len(order)
    return Stream360(
        train_x=np.stack(xs),
        train_y=np.asarray(ys, dtype=np.int64),
        segment=np.asarray(segs, dtype=np.int64),
        angles=np.asarray(angles),
        test_x=np.stack(test_x),
        test_y=np.asarray(test_y, dtype=np.int64),
    )


def _identity() -> Normalize:
    return Normalize((0.0,), (1.0,))  # the authors' ToTensor alone: pixels in [0, 1]


def domain_benchmark(
    name: str,
    kind: Literal["permuted", "rotated"],
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    *,
    defaults: BenchmarkDefaults,
    seed: int,
    n_tasks: int = DOMAIN_TASKS,
) -> Benchmark:
    """A ``domain-il`` benchmark of ``n_tasks`` permuted or rotated copies of ``train`` and
    ``test`` ((N, 1, H, W) uint8 images, labels 0..9), no augmentation, no normalisation.

    Each train and test copy is drawn from the same permutation or angle (task t's): the task's
    input distribution. The notes name them.
    """
    build = permuted_tasks if kind == "permuted" else rotated_tasks
    (train_x, train_y), (test_x, test_y) = train, test
    # One draw for both splits: the same seed gives the same permutations (angles) in turn.
    train_all, drawn = build(train_x, n_tasks, seed)
    test_all, _ = build(test_x, n_tasks, seed)
    classes = int(train_y.max()) + 1
    what = "angles (degrees)" if kind == "rotated" else "permutations"
    shown = ", ".join(f"{a:.1f}" for a in drawn) if kind == "rotated" else f"{n_tasks} drawn"
    return Benchmark(
        name=name,
        scenario="domain-il",
        n_tasks=n_tasks,
        classes_per_task=(classes,) * n_tasks,
        class_order=tuple(range(classes)),
        input_shape=tuple(train_x.shape[1:]),
        mean=(0.0,),
        std=(1.0,),
        train_x=torch.from_numpy(train_all),
        train_y=torch.from_numpy(np.tile(train_y, n_tasks)),
        test_x=torch.from_numpy(test_all),
        test_y=torch.from_numpy(np.tile(test_y, n_tasks)),
        train_task=torch.from_numpy(np.repeat(np.arange(n_tasks), len(train_y))),
        test_task=torch.from_numpy(np.repeat(np.arange(n_tasks), len(test_y))),
        defaults=defaults,
        train_transform=_identity(),
        test_transform=_identity(),
        class_names=tuple(str(c) for c in range(classes)),
        notes=(f"{kind} copies of the data, task by task; the tasks' {what} from seed {seed}: {shown}",),
    )


def stream_360_benchmark(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    *,
    defaults: BenchmarkDefaults,
    seed: int,
) -> Benchmark:
    """The ``general`` benchmark of :func:`stream_360` on ``train`` and ``test``: one task of 9
    classes, its rows the stream in order, each row's segment in ``train_segment``."""
    built = stream_360(*train, *test, seed=seed)
    return Benchmark(
        name=name,
        scenario="general",
        n_tasks=1,
        classes_per_task=(STREAM_CLASSES,),
        class_order=tuple(range(STREAM_CLASSES)),
        input_shape=tuple(train[0].shape[1:]),
        mean=(0.0,),
        std=(1.0,),
        train_x=torch.from_numpy(built.train_x),
        train_y=torch.from_numpy(built.train_y),
        test_x=torch.from_numpy(built.test_x),
        test_y=torch.from_numpy(built.test_y),
        train_segment=torch.from_numpy(built.segment),
        defaults=defaults,
        train_transform=_identity(),
        test_transform=_identity(),
        class_names=tuple(str(c) for c in range(STREAM_CLASSES)),
        notes=(
            f"a stream of {len(built.train_y)} drawn examples in {len(stream_360_pairs())} segments of two "
            f"classes, rotating; seed {seed}",
        ),
    )
