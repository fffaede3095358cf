"""The ``folder`` benchmark on small trees of real PNG/JPEG files and ``.npz`` arrays written here:
layouts, decoding, the HDF5 cache and its staleness, the test split, the task split, and every
user mistake as a precise exception. Also :func:`benchmark_from_tensors`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xder_data import (
    CUSTOM_DEFAULTS,
    BenchmarkFormatError,
    BenchmarkOptionError,
    CacheWriteError,
    DataNotFoundError,
    benchmark_defaults,
    benchmark_from_tensors,
    benchmark_options,
    channel_stats,
    folder_cache_path,
    load_benchmark,
    split_classes,
)
from xder_data.folder import FOLDER_CACHE

CLASSES = ("cat", "dog", "eel", "fox", "gnu", "hen")


def pixels(seed: int, size: tuple[int, int] = (8, 8)) -> np.ndarray:
    """A random (H, W, 3) uint8 image, distinct per seed."""
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def write_tree(
    root: Path, per_class: dict[str, int], classes=CLASSES, size=(8, 8), seed=0
) -> dict[str, Path]:
    """``root/<split>/<class>/<i>.png`` with ``per_class[split]`` images per class ('' = no split
    folder); returns the path of each image by ``split/class/i``."""
    written = {}
    for split, count in per_class.items():
        for c, name in enumerate(classes):
            folder = root / split / name if split else root / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                path = folder / f"{i}.png"
                Image.fromarray(pixels(seed + 1000 * c + 10 * i + (split == "test"), size)).save(path)
                written[f"{split}/{name}/{i}"] = path
    return written


def as_chw(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))


def counting():
    calls: list[int] = []

    def progress(items):
        items = list(items)
        calls.append(len(items))
        return items

    return calls, progress


# ---------------------------------------------------------------------------------------------
# Layouts and decoding


def test_train_and_test_trees_give_the_split_and_the_pixels(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 3, "test": 2})
    bench = load_benchmark("folder", tmp_path, tasks=3)
    assert bench.name == "folder"
    assert bench.n_tasks == 3
    assert bench.classes_per_task == (2, 2, 2)
    assert bench.class_names == CLASSES
    assert bench.input_shape == (3, 8, 8)
    assert bench.train_x.dtype == torch.uint8
    assert bench.train_x.shape == (18, 3, 8, 8)
    assert bench.test_x.shape == (12, 3, 8, 8)
    assert bench.train_y.tolist() == [c for c in range(6) for _ in range(3)]
    assert bench.test_y.tolist() == [c for c in range(6) for _ in range(2)]
    # class 'eel' (2), training image 1: the file's pixels, channels first
    assert torch.equal(bench.train_x[2 * 3 + 1], as_chw(pixels(2000 + 10)))
    assert torch.equal(bench.test_x[5 * 2 + 0], as_chw(pixels(5000 + 1)))
    mean, std = channel_stats(bench.train_x)
    assert bench.mean == pytest.approx(mean)
    assert bench.std == pytest.approx(std)
    assert bench.defaults is CUSTOM_DEFAULTS
    assert benchmark_defaults("folder") is CUSTOM_DEFAULTS
    split = bench.task(1)
    assert (split.class_start, split.class_end) == (2, 4)
    assert split.train.tolist() == list(range(6, 12))


def test_the_protocol_is_cifar_style_and_x_der_ready(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1})
    bench = load_benchmark("folder", tmp_path)
    defaults = bench.defaults
    assert (defaults.backbone, defaults.batch_size, defaults.minibatch_size) == ("resnet18-cifar", 32, 32)
    assert defaults.backbone_options == {"width": 64, "in_channels": 3}
    assert bench.classes_per_task == (2, 2, 2)  # 2 classes per task by default
    generator = torch.Generator().manual_seed(0)
    weak = bench.train_transform(bench.train_x, generator)
    strong = bench.strong_transform(bench.train_x, generator)
    assert weak.shape == strong.shape == (12, 3, 8, 8)
    assert weak.dtype == strong.dtype == torch.float32
    assert repr(bench.train_transform).startswith("Compose(CropFlip(size=(8, 8), padding=1, flip=True)")
    laptop = load_benchmark("folder", tmp_path, protocol="laptop").defaults  # a first look on a CPU
    assert (laptop.epochs, laptop.backbone_options) == (5, {"width": 8, "in_channels": 3})
    assert dataclasses.replace(laptop, epochs=50, backbone_options=defaults.backbone_options) == defaults


def test_greyscale_and_rgba_images_become_rgb_and_other_files_are_ignored(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    Image.fromarray(grey, "L").save(tmp_path / "a" / "grey.png")
    rgba = np.dstack([pixels(1), np.full((8, 8), 7, dtype=np.uint8)])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "b" / "rgba.png")
    Image.fromarray(pixels(2)).save(tmp_path / "b" / "more.png")
    (tmp_path / "b" / "notes.txt").write_text("not an image")
    (tmp_path / "b" / ".hidden.png").write_bytes(b"not even a png")
    (tmp_path / ".git").mkdir()  # a hidden folder is not a class
    (tmp_path / "README.md").write_text("a file at the top is not a class")
    bench = load_benchmark("folder", tmp_path, classes_per_task=1, test_fraction=0.5)
    assert bench.class_names == ("a", "b")
    everything = torch.cat([bench.train_x, bench.test_x])
    assert everything.shape[0] == 3
    assert any(torch.equal(x, torch.from_numpy(np.stack([grey] * 3))) for x in everything)
    assert any(torch.equal(x, as_chw(pixels(1))) for x in everything)


def test_one_tree_is_split_per_class_with_a_fixed_seed(tmp_path: Path) -> None:
    write_tree(tmp_path, {"": 10}, classes=CLASSES[:4])
    bench = load_benchmark("folder", tmp_path, test_fraction=0.3)
    assert bench.train_y.bincount().tolist() == [7, 7, 7, 7]
    assert bench.test_y.bincount().tolist() == [3, 3, 3, 3]
    again = load_benchmark("folder", tmp_path, test_fraction=0.3)
    assert torch.equal(bench.test_x, again.test_x)
    everything = {tuple(x.flatten().tolist()) for x in torch.cat([bench.train_x, bench.test_x])}
    assert len(everything) == 40  # disjoint, and nothing lost
    default = load_benchmark("folder", tmp_path)
    assert default.test_y.bincount().tolist() == [2, 2, 2, 2]  # 0.2 by default


def test_a_train_tree_without_test_is_one_tree(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 5}, classes=CLASSES[:2])
    bench = load_benchmark("folder", tmp_path, classes_per_task=[1, 1])
    assert bench.class_names == CLASSES[:2]
    assert bench.test_y.bincount().tolist() == [1, 1]


def test_image_size_resizes_the_shorter_side_then_crops_the_centre(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    wide, tall = pixels(1, (6, 12)), pixels(2, (10, 5))
    Image.fromarray(wide).save(tmp_path / "a" / "wide.png")
    Image.fromarray(tall).save(tmp_path / "b" / "tall.png")
    Image.fromarray(pixels(3, (4, 4))).save(tmp_path / "b" / "small.png")
    bench = load_benchmark("folder", tmp_path, image_size=4, classes_per_task=1, test_fraction=0.3)
    assert bench.input_shape == (3, 4, 4)
    expected = Image.fromarray(wide).resize((8, 4), Image.Resampling.BILINEAR).crop((2, 0, 6, 4))
    assert torch.equal(bench.train_x[0], as_chw(np.asarray(expected)))
    expected = Image.fromarray(tall).resize((4, 8), Image.Resampling.BILINEAR).crop((0, 2, 4, 6))
    rows = torch.cat([bench.train_x, bench.test_x])
    assert any(torch.equal(x, as_chw(np.asarray(expected))) for x in rows)
    assert any(torch.equal(x, as_chw(pixels(3, (4, 4)))) for x in rows)  # already 4x4: untouched


def test_same_non_square_size_needs_no_image_size(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1}, classes=CLASSES[:2], size=(6, 10))
    bench = load_benchmark("folder", tmp_path)
    assert bench.input_shape == (3, 6, 10)
    generator = torch.Generator().manual_seed(0)
    assert bench.strong_transform(bench.train_x, generator).shape == (4, 3, 6, 10)
    assert bench.train_transform(bench.train_x, generator).shape == (4, 3, 6, 10)


def test_mean_and_std_given_are_kept(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1}, classes=CLASSES[:2])
    bench = load_benchmark("folder", tmp_path, mean=[0.5, 0.4, 0.3], std=[0.2, 0.2, 0.25])
    assert bench.mean == (0.5, 0.4, 0.3)
    assert bench.std == (0.2, 0.2, 0.25)


def test_class_order_reorders_the_sorted_class_folders(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1})
    bench = load_benchmark("folder", tmp_path, class_order="reversed")
    assert bench.class_names == tuple(reversed(CLASSES))
    assert bench.class_order == (5, 4, 3, 2, 1, 0)


# ---------------------------------------------------------------------------------------------
# The cache


def test_decoded_once_into_a_cache_beside_the_data(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1})
    calls, progress = counting()
    first = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18]
    assert (tmp_path / FOLDER_CACHE).is_file()
    assert folder_cache_path(tmp_path) == tmp_path / FOLDER_CACHE
    second = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18]  # read from the cache, nothing decoded
    assert torch.equal(first.train_x, second.train_x)
    assert torch.equal(first.test_x, second.test_x)
    # options that do not change the decoding share the cache
    load_benchmark("folder", tmp_path, tasks=2, progress=progress)
    assert calls == [18]


def test_a_changed_image_makes_the_cache_stale(tmp_path: Path) -> None:
    images = write_tree(tmp_path, {"train": 2, "test": 1})
    calls, progress = counting()
    load_benchmark("folder", tmp_path, progress=progress)
    changed = images["train/dog/1"]
    Image.fromarray(pixels(99)).save(changed)
    stat = changed.stat()
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    bench = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 18]
    assert torch.equal(bench.train_x[1 * 2 + 1], as_chw(pixels(99)))


def test_a_new_image_or_another_image_size_makes_the_cache_stale(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1})
    calls, progress = counting()
    load_benchmark("folder", tmp_path, progress=progress)
    Image.fromarray(pixels(77)).save(tmp_path / "train" / "cat" / "new.png")
    bench = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 19]
    assert bench.train_y.bincount().tolist() == [3, 2, 2, 2, 2, 2]
    bench = load_benchmark("folder", tmp_path, image_size=4, progress=progress)
    assert calls == [18, 19, 19]
    assert bench.input_shape == (3, 4, 4)


def test_a_deleted_or_renamed_image_makes_the_cache_stale(tmp_path: Path) -> None:
    images = write_tree(tmp_path, {"train": 2, "test": 1})
    calls, progress = counting()
    load_benchmark("folder", tmp_path, progress=progress)
    images["train/dog/1"].unlink()
    bench = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 17]
    assert bench.train_y.bincount().tolist() == [2, 1, 2, 2, 2, 2]
    # Moved to another class (same bytes, same mtime): the image now counts as a cat.
    moved = tmp_path / "train" / "cat" / "moved.png"
    images["train/eel/0"].rename(moved)
    bench = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 17, 17]
    assert bench.train_y.bincount().tolist() == [3, 1, 1, 2, 2, 2]
    eel = 2
    assert any(torch.equal(x, as_chw(pixels(1000 * eel))) for x in bench.train_x[bench.train_y == 0])
    # Renamed in place (same class, same bytes): the listing changed, so it is decoded again.
    moved.rename(moved.with_name("renamed.png"))
    load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 17, 17, 17]


def test_a_corrupt_cache_is_decoded_again(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 2, "test": 1})
    calls, progress = counting()
    reference = load_benchmark("folder", tmp_path, progress=progress)
    (tmp_path / FOLDER_CACHE).write_bytes(b"not an HDF5 file")
    bench = load_benchmark("folder", tmp_path, progress=progress)
    assert calls == [18, 18]
    assert torch.equal(bench.train_x, reference.train_x)


def test_cache_dir_takes_the_cache_when_the_data_folder_is_read_only(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    write_tree(data, {"train": 2, "test": 1})
    calls, progress = counting()
    load_benchmark("folder", data, cache_dir=str(cache), progress=progress)
    assert not (data / FOLDER_CACHE).exists()
    (written,) = cache.iterdir()
    assert written == folder_cache_path(data, cache)
    assert written.name.startswith("data-")
    assert written.suffix == ".h5"
    load_benchmark("folder", data, cache_dir=str(cache), progress=progress)
    assert calls == [18]


def test_an_unwritable_cache_is_one_precise_error(tmp_path: Path) -> None:
    write_tree(tmp_path / "data", {"train": 1, "test": 1}, classes=CLASSES[:2])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CacheWriteError, match=r"cannot write the cache .*benchmark.cache_dir"):
        load_benchmark("folder", tmp_path / "data", cache_dir=str(blocker / "cache"))


# ---------------------------------------------------------------------------------------------
# .npz


def test_npz_channels_last_uint8_with_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (8, 6, 6, 3), dtype=np.uint8)
    x_test = rng.integers(0, 256, (4, 6, 6, 3), dtype=np.uint8)
    y_train, y_test = np.array([7, 7, 3, 3, 5, 5, 9, 9]), np.array([3, 5, 7, 9])
    path = tmp_path / "mine.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, class_names=list("abcd"))
    bench = load_benchmark("folder", path)
    assert bench.class_names == ("a", "b", "c", "d")
    assert bench.train_y.tolist() == [2, 2, 0, 0, 1, 1, 3, 3]  # labels 3, 5, 7, 9 -> 0..3
    assert bench.test_y.tolist() == [0, 1, 2, 3]
    assert torch.equal(bench.train_x[0], as_chw(x_train[0]))
    assert not (tmp_path / FOLDER_CACHE).exists()


def test_npz_greyscale_floats_channels_first_and_a_test_fraction(tmp_path: Path) -> None:
    x = np.random.default_rng(1).random((20, 5, 5)).astype(np.float32)
    y = np.repeat(np.arange(4), 5)
    np.savez(tmp_path / "grey.npz", x_train=x, y_train=y)
    bench = load_benchmark("folder", tmp_path / "grey.npz", test_fraction=0.4)
    assert bench.input_shape == (3, 5, 5)
    assert bench.test_y.bincount().tolist() == [2, 2, 2, 2]
    row = torch.cat([bench.train_x, bench.test_x])[0]
    assert torch.equal(row[0], row[2])  # greyscale replicated
    nchw = np.random.default_rng(2).integers(0, 256, (4, 3, 7, 7), dtype=np.uint8)
    np.savez(tmp_path / "nchw.npz", x_train=nchw, y_train=[0, 1, 0, 1], x_test=nchw[:2], y_test=[0, 1])
    bench = load_benchmark("folder", tmp_path / "nchw.npz", image_size=4, classes_per_task=1)
    assert bench.input_shape == (3, 4, 4)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x_train": np.zeros((2, 4, 4), np.uint8)}, "key 'y_train' missing"),
        ({"x_train": np.zeros((2, 4), np.uint8), "y_train": [0, 1]}, "x_train has shape"),
        ({"x_train": np.full((2, 4, 4), 2.0), "y_train": [0, 1]}, "floats outside"),
        ({"x_train": np.zeros((2, 4, 4), np.uint8), "y_train": [0.5, 1.0]}, "1-D integer"),
        ({"x_train": np.zeros((2, 4, 4), np.uint8), "y_train": [0, 1, 1]}, "3 labels for 2 images"),
        (
            {"x_train": np.zeros((2, 4, 4), np.uint8), "y_train": [0, 1], "x_test": np.zeros((1, 4, 4))},
            "both x_test and y_test",
        ),
        (
            {
                "x_train": np.zeros((2, 4, 4), np.uint8),
                "y_train": [0, 1],
                "x_test": np.zeros((1, 4, 4), np.uint8),
                "y_test": [2],
            },
            "test label 2 has no training image",
        ),
    ],
)
def test_npz_mistakes(arrays, message, tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(BenchmarkFormatError, match=message):
        load_benchmark("folder", tmp_path / "bad.npz", classes_per_task=1)


# ---------------------------------------------------------------------------------------------
# Tasks


def test_split_classes() -> None:
    assert split_classes(6) == (2, 2, 2)
    assert split_classes(6, tasks=3) == (2, 2, 2)
    assert split_classes(6, tasks=2) == (3, 3)
    assert split_classes(6, classes_per_task=3) == (3, 3)
    assert split_classes(6, classes_per_task=[1, 2, 3]) == (1, 2, 3)
    assert split_classes(6, tasks=3, classes_per_task=[1, 2, 3]) == (1, 2, 3)
    assert split_classes(6, tasks=3, classes_per_task=2) == (2, 2, 2)


@pytest.mark.parametrize(
    ("n", "options", "message"),
    [
        (6, {"tasks": 4}, r"6 classes do not divide into 4 tasks: .*classes_per_task=\[2, 2, 1, 1\]"),
        (7, {}, "7 classes do not divide into tasks of 2"),
        (6, {"tasks": 8}, "6 classes cannot make 8 tasks"),
        (6, {"classes_per_task": [2, 2]}, r"holds 4 classes, the data have 6"),
        (6, {"tasks": 2, "classes_per_task": 2}, "make 3 tasks, not the 2 asked for"),
        (6, {"tasks": 0}, "tasks must be an integer >= 1"),
        (6, {"classes_per_task": 0}, "classes_per_task must be >= 1"),
        (6, {"classes_per_task": [3, 0, 3]}, "list of ints >= 1"),
        (6, {"classes_per_task": True}, "an int or a list of ints >= 1, got True"),
    ],
)
def test_classes_that_do_not_divide(n, options, message) -> None:
    with pytest.raises(BenchmarkOptionError, match=message):
        split_classes(n, **options)


# ---------------------------------------------------------------------------------------------
# Mistakes


def test_an_empty_class_folder(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 1, "test": 1}, classes=CLASSES[:2])
    (tmp_path / "train" / "zebra").mkdir()
    (tmp_path / "train" / "zebra" / "notes.txt").write_text("no image here")
    with pytest.raises(BenchmarkFormatError, match=r"train/zebra: empty class folder"):
        load_benchmark("folder", tmp_path)


def test_an_unreadable_image(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 1, "test": 1}, classes=CLASSES[:2])
    (tmp_path / "test" / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(BenchmarkFormatError, match=r"test/cat/broken.png: unreadable image"):
        load_benchmark("folder", tmp_path)
    assert not (tmp_path / FOLDER_CACHE).exists()


def test_mixed_image_sizes_without_image_size(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 1, "test": 1}, classes=CLASSES[:2])
    Image.fromarray(pixels(5, (9, 9))).save(tmp_path / "train" / "dog" / "big.png")
    with pytest.raises(
        BenchmarkFormatError,
        match=r"mixed image sizes: .* is 8x8, .*big.png is 9x9; pass benchmark.image_size",
    ):
        load_benchmark("folder", tmp_path)
    assert load_benchmark("folder", tmp_path, image_size=8).input_shape == (3, 8, 8)


def test_a_test_class_missing_from_train(tmp_path: Path) -> None:
    write_tree(tmp_path, {"train": 1, "test": 1}, classes=CLASSES[:2])
    write_tree(tmp_path, {"test": 1}, classes=("dgo",))
    with pytest.raises(BenchmarkFormatError, match=r"test class 'dgo' has no folder in .*train"):
        load_benchmark("folder", tmp_path)


@pytest.mark.parametrize(
    ("make", "options", "error", "message"),
    [
        ("nothing", {}, DataNotFoundError, "no such folder"),
        ("empty", {}, DataNotFoundError, "no class folder"),
        ("tree", {"test_fraction": 0.5}, BenchmarkOptionError, "applies only to a single tree"),
        ("tree", {"test_fraction": 1.5}, BenchmarkOptionError, r"test_fraction must be in \(0, 1\)"),
        ("tree", {"image_size": 0}, BenchmarkOptionError, "image_size must be an integer >= 1"),
        ("tree", {"mean": [0.5]}, BenchmarkOptionError, "mean has 1 values, the images have 3 channels"),
        ("tree", {"std": [0.5, 0.0, 0.5]}, BenchmarkOptionError, "std must be positive"),
        ("tree", {"tasks": 4}, BenchmarkOptionError, "do not divide into 4 tasks"),
        ("tree", {"widht": 3}, BenchmarkOptionError, "benchmark 'folder' has no option 'widht': it takes"),
        ("single", {"test_fraction": 0.9}, BenchmarkOptionError, "leaves it no training image"),
    ],
)
def test_folder_mistakes(make, options, error, message, tmp_path: Path) -> None:
    root = tmp_path / "data"
    if make == "empty":
        root.mkdir()
    elif make == "tree":
        write_tree(root, {"train": 1, "test": 1})
    elif make == "single":
        write_tree(root, {"": 3}, classes=CLASSES[:2])
    with pytest.raises(error, match=message):
        load_benchmark("folder", root, **options)


def test_no_data_root() -> None:
    with pytest.raises(DataNotFoundError, match=r"needs run\.data_root"):
        load_benchmark("folder", None)


def test_the_options_are_the_loader_keywords() -> None:
    assert set(benchmark_options("folder")) == {
        "tasks",
        "classes_per_task",
        "image_size",
        "test_fraction",
        "mean",
        "std",
        "cache_dir",
    }
    assert benchmark_options("seq-digits") == {}
    with pytest.raises(
        BenchmarkOptionError, match="benchmark 'seq-digits' has no option 'tasks': it takes no"
    ):
        load_benchmark("seq-digits", tasks=3)


# ---------------------------------------------------------------------------------------------
# From tensors


def test_benchmark_from_tensors_relabels_and_checks() -> None:
    x = torch.randint(0, 256, (12, 1, 6, 6), dtype=torch.uint8)
    y = torch.tensor([4, 4, 4, 8, 8, 8, 1, 1, 1, 6, 6, 6])
    bench = benchmark_from_tensors(x, y, x[:4], y[[0, 3, 6, 9]], classes_per_task=[1, 3])
    assert bench.classes_per_task == (1, 3)
    assert bench.train_y.tolist() == [1, 1, 1, 3, 3, 3, 0, 0, 0, 2, 2, 2]
    assert bench.input_shape == (1, 6, 6)
    assert bench.name == "tensors"
    assert bench.strong_transform(x.float() / 255, torch.Generator().manual_seed(0)).shape == (12, 1, 6, 6)
    with pytest.raises(BenchmarkFormatError, match="test label 5 has no training image"):
        benchmark_from_tensors(x, y, x[:1], torch.tensor([5]))
    with pytest.raises(BenchmarkFormatError, match=r"must be \(N, C, H, W\)"):
        benchmark_from_tensors(x[:, 0], y, x[:1], y[:1])
    with pytest.raises(BenchmarkFormatError, match="same"):
        benchmark_from_tensors(x, y, x[:1, :, :4], y[:1])
    with pytest.raises(BenchmarkOptionError, match="3 class names for 4 classes"):
        benchmark_from_tensors(x, y, x[:1], y[:1], class_names=["a", "b", "c"])
