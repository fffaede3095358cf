"""The Domain-IL and general streams (xder_data.scenarios) by hand: permutations, rotations, the
360 stream's segments, chunks, draws, angles and interleaving, and the benchmarks built on them
(perm-digits, rot-digits, digits-360; the MNIST ones: test_mnist.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xder_data import BenchmarkOptionError, benchmark_info, benchmark_scenario, load_benchmark
from xder_data.scenarios import (
    _chunks,
    _interleave,
    permuted_tasks,
    rotate,
    rotated_tasks,
    stream_360,
    stream_360_pairs,
)


def test_each_task_permutes_the_pixels_by_its_own_permutation() -> None:
    """Two 2x2 images, three tasks: copy t of image i is image i's flattened pixels taken in
    the order of permutation t; the same seed gives the same permutations (train and test)."""
    images = np.array([[[[1, 2], [3, 4]]], [[[5, 6], [7, 8]]]], dtype=np.uint8)
    stacked, perms = permuted_tasks(images, 3, seed=7)
    assert stacked.shape == (6, 1, 2, 2)
    for t, perm in enumerate(perms):
        assert sorted(perm.tolist()) == [0, 1, 2, 3]
        for i in range(2):
            flat = images[i].flatten()
            assert stacked[2 * t + i].flatten().tolist() == [int(flat[p]) for p in perm]
    _again, perms_again = permuted_tasks(images[:1], 3, seed=7)
    assert all((a == b).all() for a, b in zip(perms, perms_again, strict=True))
    assert len({tuple(p) for p in permuted_tasks(np.zeros((1, 1, 4, 4), np.uint8), 20, 0)[1]}) == 20


def test_rotation_is_pils_anticlockwise_nearest() -> None:
    """A 3x3 image turned 90 degrees anticlockwise and 180 (worked out by hand)."""
    image = np.arange(1, 10, dtype=np.uint8).reshape(3, 3)
    assert rotate(image, 90).tolist() == [[3, 6, 9], [2, 5, 8], [1, 4, 7]]
    assert rotate(image, 180).tolist() == [[9, 8, 7], [6, 5, 4], [3, 2, 1]]
    assert rotate(image, 0).tolist() == image.tolist()


def test_rotated_tasks_draw_one_angle_in_0_180_per_task() -> None:
    images = np.arange(2 * 9, dtype=np.uint8).reshape(2, 1, 3, 3)
    stacked, angles = rotated_tasks(images, 20, seed=3)
    assert len(angles) == 20
    assert all(0 <= a < 180 for a in angles)
    assert len(set(angles)) == 20
    assert stacked.shape == (40, 1, 3, 3)
    for t in (0, 19):
        assert (stacked[2 * t + 1, 0] == rotate(images[1, 0], angles[t])).all()


def test_the_360_stream_goes_round_its_pairs_three_times() -> None:
    pairs = stream_360_pairs()
    assert pairs[:3] == [(0, 1), (1, 2), (2, 3)]
    assert pairs[8] == (8, 0)
    assert pairs[9] == (0, 1)
    assert len(pairs) == 27
    assert all(pairs.count(p) == 3 for p in set(pairs))


def test_a_class_is_cut_into_six_chunks_taken_last_first() -> None:
    """26 rows: chunks of 26 // 6 + 1 = 5, the sixth holds the 1 row left; taken last first."""
    assert _chunks(26) == [(25, 26), (20, 25), (15, 20), (10, 15), (5, 10), (0, 5)]
    assert _chunks(20)[0] == (20, 20)  # 20 // 6 + 1 = 4: five chunks fill it, the sixth is empty


def test_two_chunks_interleave_in_proportion() -> None:
    """Item k of a class at (k + 0.5) / n: a at 0.25, 0.75; b at 0.125, 0.375, 0.625, 0.875."""
    assert _interleave(2, 4).tolist() == [1, 0, 1, 1, 0, 1]
    assert _interleave(1, 1).tolist() == [0, 1]
    assert _interleave(0, 2).tolist() == [1, 1]


def _stream_data(seed: int = 0):
    """26 train and 4 test random 4x4 images per class 0..9, labels shuffled."""
    rng = np.random.default_rng(seed)
    train_y = rng.permutation(np.repeat(np.arange(10), 26))
    test_y = rng.permutation(np.repeat(np.arange(10), 4))
    train_x = rng.integers(1, 256, (len(train_y), 1, 4, 4), dtype=np.uint8)
    test_x = rng.integers(1, 256, (len(test_y), 1, 4, 4), dtype=np.uint8)
    return train_x, train_y, test_x, test_y


def test_the_360_stream_by_hand() -> None:
    """Classes of 26 rows: chunks of 1, 5, 5, 5, 5, 5 in the order used. Segment 0, (0, 1): both
    classes' 1-row chunk (2 draws); segments 1..7: the next class's first chunk (1) and the
    previous one's second (5): 6; segment 8, (8, 0): 5 + 5; every later segment 10. Class c's k-th
    draw turns by ((c - 1) * 60 + k * 360 / 26) mod 360 and is a row of the chunk in use; class 9
    never shows; each segment holds its pair."""
    train_x, train_y, test_x, test_y = _stream_data()
    built = stream_360(train_x, train_y, test_x, test_y, seed=1)
    sizes = np.bincount(built.segment).tolist()
    assert sizes == [2, 6, 6, 6, 6, 6, 6, 6, 10] + [10] * 18
    assert built.segment.tolist() == sorted(built.segment.tolist())
    assert set(built.train_y.tolist()) == set(range(9))
    assert len(built.train_y) == 9 * 26
    for s, pair in enumerate(stream_360_pairs()):
        assert set(built.train_y[built.segment == s].tolist()) == set(pair)
    class_0 = built.angles[built.train_y == 0]
    assert class_0[0] == pytest.approx(300.0)
    assert class_0[13] == pytest.approx(120.0)
    assert built.angles[built.train_y == 2][0] == pytest.approx(60.0)
    assert built.angles[built.train_y == 1][25] == pytest.approx(25 * 360 / 26)
    rows_0 = np.flatnonzero(train_y == 0)
    # class 0's first draw comes from its last chunk (row 25 of its rows), turned 300 degrees
    first = built.train_x[np.flatnonzero(built.train_y == 0)[0], 0]
    assert (first == rotate(train_x[rows_0[25], 0], 300.0)).all()
    # its draws 1..5 (segment 8) come from rows 20..24, each turned by its own angle
    for k in range(1, 6):
        drawn = built.train_x[np.flatnonzero(built.train_y == 0)[k], 0]
        angle = (300 + k * 360 / 26) % 360
        assert any((drawn == rotate(train_x[r, 0], angle)).all() for r in rows_0[20:25])


def test_the_360_test_set_turns_each_class_once_round() -> None:
    """Every test image of classes 0..8 once, class by class; the k-th of a class's 4 turned by
    k * 90 degrees."""
    train_x, train_y, test_x, test_y = _stream_data()
    built = stream_360(train_x, train_y, test_x, test_y, seed=1)
    assert built.test_y.tolist() == [c for c in range(9) for _ in range(4)]
    rows_3 = np.flatnonzero(test_y == 3)
    for k in range(4):
        shown = built.test_x[12 + k, 0]
        assert sum((shown == rotate(test_x[r, 0], 90.0 * k)).all() for r in rows_3) >= 1


def test_perm_digits_is_twenty_domain_il_tasks_of_the_same_ten_classes() -> None:
    bench = load_benchmark("perm-digits")
    assert (bench.scenario, benchmark_scenario("perm-digits"), bench.n_tasks, bench.num_classes) == (
        "domain-il",
        "domain-il",
        20,
        10,
    )
    seq = load_benchmark("seq-digits")
    n_train, n_test = seq.train_y.shape[0], seq.test_y.shape[0]
    for t in (0, 7):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (0, 10)
        assert split.train.tolist() == list(range(t * n_train, (t + 1) * n_train))
        assert split.test.tolist() == list(range(t * n_test, (t + 1) * n_test))
        assert (bench.train_y[split.train] == seq.train_y).all()
        # the same permutation for the task's train and test copies: pixel sums are kept
        assert (bench.test_x[split.test].flatten(1).sum(1) == seq.test_x.flatten(1).sum(1)).all()
    assert benchmark_info(bench)["scenario"] == "domain-il"


def test_a_domain_il_validation_split_keeps_each_rows_task() -> None:
    bench = load_benchmark("rot-digits", validation=0.1)
    assert bench.val_task is not None
    assert bench.train_task is not None
    assert bench.val_y is not None
    assert torch.bincount(bench.val_task).tolist() == [bench.val_task.shape[0] // 20] * 20
    assert bench.task(3).val is not None
    assert (bench.val_task[bench.task(3).val] == 3).all()


def test_digits_360_is_one_general_task_with_no_validation_split() -> None:
    bench = load_benchmark("digits-360")
    assert (bench.scenario, bench.n_tasks, bench.num_classes) == ("general", 1, 9)
    assert bench.train_segment is not None
    assert int(bench.train_segment.max()) == 26
    with pytest.raises(BenchmarkOptionError, match="no validation split"):
        load_benchmark("digits-360", validation=0.1)


def test_a_class_too_small_for_six_chunks_leaves_its_segments_to_the_other() -> None:
    """12 rows a class: chunks of 3 fill four, the last two are empty and taken first: segment 0
    and 1 draw nothing (both chunks empty), nor does the rest of the first round; all 108 rows come
    later."""
    rng = np.random.default_rng(0)
    train_y = np.repeat(np.arange(10), 12)
    train_x = rng.integers(1, 256, (120, 1, 4, 4), dtype=np.uint8)
    built = stream_360(train_x, train_y, train_x[::12], train_y[::12], seed=0)
    assert np.bincount(built.segment, minlength=27)[:9].tolist() == [0] * 9
    assert len(built.train_y) == 9 * 12
