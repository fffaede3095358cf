"""seq-miniimg: the reader of the authors' npy layout, its checks, and the three importers.

Fixtures are files written in the exact real format (docs/data-formats.md, "miniImageNet"):
``MINIIMG/{train,test}_{x,y}.npy`` (uint8 (n, 84, 84, 3) and int64 labels, all 100 classes); for
the importers, the Ravi & Larochelle tree (``images/*.jpg`` of mixed sizes and modes with
``train.csv``/``val.csv``/``test.csv``), the
``mini-imagenet-cache-*.pkl`` dicts (bytes keys), with 2-3 images a class, and image folders
already split, ``train/<wnid>/<wnid><index>.jpg`` (2 a class) + ``val/<wnid>/...`` (1 a class),
84x84 JPEGs, as a folder and as a ``.tar.gz``.
"""

from __future__ import annotations

import io
import pickle
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from xder_data import (
    BenchmarkFormatError,
    Compose,
    CropFlip,
    DataNotFoundError,
    MiniImageNetImport,
    Normalize,
    StrongAugment,
    benchmark_defaults,
    import_miniimagenet_csv,
    import_miniimagenet_folders,
    import_miniimagenet_pickle,
    load_benchmark,
    resolve_class_order,
)

MEAN = (0.47313006, 0.44905752, 0.40378186)
STD = (0.27292014, 0.26559181, 0.27953038)
FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy")
# 100 WordNet-like ids; the CSV and pickle fixtures list them in a shuffled order across files.
WNIDS = sorted(f"n{1_000_000 + 7919 * c:08d}" for c in range(100))
SHUFFLED = [WNIDS[i] for i in np.random.default_rng(3).permutation(100)]
SPLITS = {"train": SHUFFLED[:64], "val": SHUFFLED[64:80], "test": SHUFFLED[80:]}
SIZES = {wnid: 2 + (i % 3 == 0) for i, wnid in enumerate(SHUFFLED)}  # images per class: 2 or 3


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# The authors' npy layout


def write_layout(root: Path, per_class: tuple[int, int] = (2, 1), seed: int = 0) -> dict[str, np.ndarray]:
    """Write ``root/MINIIMG/`` with shuffled rows; returns the four arrays."""
    rng = np.random.default_rng(seed)
    folder = root / "MINIIMG"
    folder.mkdir(parents=True)
    arrays = {}
    for split, count in zip(("train", "test"), per_class, strict=True):
        y = rng.permutation(np.repeat(np.arange(100, dtype=np.int64), count))
        arrays[f"{split}_x"] = rng.integers(0, 256, (len(y), 84, 84, 3), dtype=np.uint8)
        arrays[f"{split}_y"] = y
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
    return arrays


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("miniimg")
    return root, write_layout(root)


@pytest.fixture(scope="module")
def bench(written):
    return load_benchmark("seq-miniimg", written[0])


def test_images_become_channels_first(bench, written) -> None:
    arrays = written[1]
    assert bench.train_x.shape == (200, 3, 84, 84)
    assert bench.test_x.shape == (100, 3, 84, 84)
    assert bench.train_x.dtype == torch.uint8
    assert bench.train_x.is_contiguous()
    assert bench.input_shape == (3, 84, 84)
    assert torch.equal(bench.train_x, torch.from_numpy(arrays["train_x"].transpose(0, 3, 1, 2).copy()))
    assert bench.train_x[5, 2, 10, 20] == arrays["train_x"][5, 10, 20, 2]  # (n, c, h, w) <- (n, h, w, c)
    assert bench.train_y.tolist() == arrays["train_y"].tolist()
    assert bench.test_y.tolist() == arrays["test_y"].tolist()
    assert bench.train_y.dtype == torch.int64
    assert bench.class_names is None  # no wnids.txt in the authors' layout
    assert bench.coarse_labels is None


def test_twenty_tasks_of_five_classes(bench) -> None:
    assert (bench.n_tasks, bench.classes_per_task, bench.num_classes) == (20, (5,) * 20, 100)
    for t in (0, 7, 19):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (5 * t, 5 * t + 5)
        assert sorted(bench.train_y[split.train].tolist()) == sorted(list(range(5 * t, 5 * t + 5)) * 2)
        assert sorted(bench.test_y[split.test].tolist()) == list(range(5 * t, 5 * t + 5))


def test_random_class_order(bench, written) -> None:
    shuffled = load_benchmark("seq-miniimg", written[0], class_order="random", seed=4)
    order = resolve_class_order("random", 100, seed=4)
    assert shuffled.class_order == order
    first = shuffled.task(0)
    originals = bench.test_x[torch.isin(bench.test_y, torch.tensor(order[:5]))]
    assert sorted(map(bytes, shuffled.test_x[first.test].numpy())) == sorted(map(bytes, originals.numpy()))


def test_protocol_and_transforms(bench) -> None:
    defaults = benchmark_defaults("seq-miniimg")
    assert bench.defaults is defaults
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (80, 128, 128, 0.1)
    assert (defaults.lr_schedule, defaults.milestones, defaults.lr_gamma) == ("multistep", (35, 60, 75), 0.1)
    assert (defaults.momentum, defaults.weight_decay, defaults.buffer_size) == (0.0, 0.0, 2000)
    assert (defaults.backbone, defaults.backbone_options) == ("efficientnet-b2", {})
    assert (bench.mean, bench.std) == (MEAN, STD)
    assert isinstance(bench.train_transform, Compose)
    crop, normalize = bench.train_transform.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((84, 84), 4, True)
    assert isinstance(normalize, Normalize)
    assert (normalize.mean, normalize.std) == (MEAN, STD)
    assert isinstance(bench.test_transform, Normalize)
    assert isinstance(bench.strong_transform, StrongAugment)
    assert bench.strong_transform.size == 84
    g = torch.Generator().manual_seed(0)
    assert bench.train_transform(bench.train_x[:2], g).shape == (2, 3, 84, 84)
    assert bench.strong_transform(bench.train_x[:2], g).shape == (2, 3, 84, 84)


def test_any_integer_label_dtype_is_accepted(written, tmp_path: Path) -> None:
    shutil.copytree(written[0] / "MINIIMG", tmp_path / "MINIIMG")
    np.save(tmp_path / "MINIIMG" / "test_y.npy", written[1]["test_y"].astype(np.uint8))
    assert load_benchmark("seq-miniimg", tmp_path).test_y.tolist() == written[1]["test_y"].tolist()


def test_no_root_or_folder(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match=r"run\.data_root ROOT"):
        load_benchmark("seq-miniimg")
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-miniimg", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{tmp_path / 'MINIIMG'}: ")
    assert "import_miniimagenet_csv" in message
    assert "miniImagenet.zip" in message


@pytest.mark.parametrize("name", FILES)
def test_missing_file(written, tmp_path: Path, name: str) -> None:
    shutil.copytree(written[0] / "MINIIMG", tmp_path / "MINIIMG")
    (tmp_path / "MINIIMG" / name).unlink()
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-miniimg", tmp_path)
    assert _one_line(exc).startswith(f"{tmp_path / 'MINIIMG' / name}: miniImageNet file missing")


def _bad_layout(change: str, arrays: dict[str, np.ndarray]) -> tuple[str, Any]:
    x, y = arrays["train_x"], arrays["train_y"]
    return {
        "float images": ("train_x.npy", x.astype(np.float32)),
        "channels first": ("train_x.npy", x.transpose(0, 3, 1, 2)),
        "32x32 images": ("train_x.npy", x[:, :32, :32]),
        "flat images": ("train_x.npy", x.reshape(len(x), -1)),
        "float labels": ("train_y.npy", y.astype(np.float64)),
        "2-d labels": ("train_y.npy", y[:, None]),
        "short labels": ("train_y.npy", y[:-1]),
        "label 100": ("train_y.npy", np.where(y == 99, 100, y)),
        "label -1": ("train_y.npy", np.where(y == 0, -1, y)),
        "class 42 absent": ("train_y.npy", np.where(y == 42, 41, y)),
        "object labels": ("test_y.npy", np.array([str(v) for v in y[:100]], dtype=object)),
    }[change]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("float images", r"float32 array of shape \(200, 84, 84, 3\), expected uint8 images"),
        ("channels first", r"\(200, 3, 84, 84\) \(channels first: store HWC\)"),
        ("32x32 images", r"shape \(200, 32, 32, 3\)"),
        ("flat images", r"shape \(200, 21168\)"),
        ("float labels", "labels of dtype float64, expected integers"),
        ("2-d labels", r"labels of shape \(200, 1\), expected one per image \(200,\)"),
        ("short labels", r"labels of shape \(199,\)"),
        ("label 100", r"labels span 0..100, expected 0..99"),
        ("label -1", r"labels span -1..99"),
        ("class 42 absent", "class 42 has no images"),
        ("object labels", "not a readable .npy array"),
    ],
)
def test_malformed_arrays(written, tmp_path: Path, change: str, match: str) -> None:
    shutil.copytree(written[0] / "MINIIMG", tmp_path / "MINIIMG")
    name, array = _bad_layout(change, written[1])
    path = tmp_path / "MINIIMG" / name
    np.save(path, array, allow_pickle=True)
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("seq-miniimg", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: ")
    assert "import_miniimagenet_csv" in message


@pytest.mark.parametrize(
    ("name", "how"), [("train_x.npy", "truncate"), ("test_y.npy", "junk"), ("test_x.npy", "empty")]
)
def test_truncated_or_foreign_npy(written, tmp_path: Path, name: str, how: str) -> None:
    shutil.copytree(written[0] / "MINIIMG", tmp_path / "MINIIMG")
    path = tmp_path / "MINIIMG" / name
    content = {"truncate": path.read_bytes()[:10_000], "junk": b"not an array", "empty": b""}[how]
    path.write_bytes(content)
    with pytest.raises(BenchmarkFormatError, match=r"not a readable \.npy array") as exc:
        load_benchmark("seq-miniimg", tmp_path)
    assert _one_line(exc).startswith(f"{path}: ")


def test_bad_wnids_file(written, tmp_path: Path) -> None:
    shutil.copytree(written[0] / "MINIIMG", tmp_path / "MINIIMG")
    (tmp_path / "MINIIMG" / "wnids.txt").write_text("\n".join(WNIDS[:99]) + "\n")
    with pytest.raises(BenchmarkFormatError, match="99 lines") as exc:
        load_benchmark("seq-miniimg", tmp_path)
    _one_line(exc)


# ---------------------------------------------------------------------------------------------
# Importer from the Ravi & Larochelle CSV distribution


def _image(wnid: str, i: int) -> Image.Image:
    """A small image of varying size and mode; every tenth is grayscale."""
    c = WNIDS.index(wnid)
    rng = np.random.default_rng(1000 * c + i)
    size = [(84, 84), (84, 84), (100, 90), (60, 61)][(c + i) % 4]
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    return image.convert("L") if (c + i) % 10 == 0 else image


def write_csv_tree(source: Path) -> dict[str, list[str]]:
    """``images/`` + the three CSVs; returns each wnid's filenames in file order."""
    (source / "images").mkdir(parents=True)
    files: dict[str, list[str]] = {}
    for split, wnids in SPLITS.items():
        lines = ["filename,label"]
        for wnid in wnids:
            # Rows in descending index order, so that "file order" differs from name order.
            for i in reversed(range(SIZES[wnid])):
                name = f"{wnid}{i:08d}.jpg"
                _image(wnid, i).save(source / "images" / name, quality=90)
                files.setdefault(wnid, []).append(name)
                lines.append(f"{name},{wnid}")
        (source / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return files


def _decode(path: Path) -> np.ndarray:
    image = Image.open(path).convert("RGB")
    if image.size != (84, 84):
        image = image.resize((84, 84), Image.Resampling.BILINEAR)
    return np.asarray(image)


def expected_split(sizes: list[int], test_per_class: int, seed: int) -> tuple[list, list]:
    """``[(class, position)]`` of the test and train rows, per the documented protocol."""
    rng = np.random.default_rng(seed)
    test, train = [], []
    for c, size in enumerate(sizes):
        order = rng.permutation(size)
        test += [(c, int(p)) for p in order[:test_per_class]]
        train += [(c, int(p)) for p in order[test_per_class:]]
    return test, train


@pytest.fixture(scope="module")
def csv_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    source = tmp_path_factory.mktemp("csv")
    return source, write_csv_tree(source)


@pytest.fixture(scope="module")
def csv_import(csv_tree, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MiniImageNetImport]:
    root = tmp_path_factory.mktemp("csv_root")
    return root, import_miniimagenet_csv(csv_tree[0], root, test_per_class=1, seed=7)


def test_csv_import_counts_and_report(csv_import, csv_tree) -> None:
    root, report = csv_import
    total = sum(SIZES.values())
    assert report.folder == root / "MINIIMG"
    assert report.n_classes == 100
    assert report.wnids == tuple(WNIDS)
    assert (report.n_train, report.n_test) == (total - 100, 100)
    sizes = [(_image(w, i).size) for w in WNIDS for i in range(SIZES[w])]
    assert report.resized == sum(size != (84, 84) for size in sizes) > 0
    assert sorted(p.name for p in report.folder.iterdir()) == sorted([*FILES, "wnids.txt"])


def test_csv_import_follows_the_documented_split(csv_import, csv_tree) -> None:
    root, _ = csv_import
    source, files = csv_tree
    folder = root / "MINIIMG"
    sizes = [len(files[w]) for w in WNIDS]
    test_rows, train_rows = expected_split(sizes, test_per_class=1, seed=7)
    for split, rows in (("test", test_rows), ("train", train_rows)):
        x, y = np.load(folder / f"{split}_x.npy"), np.load(folder / f"{split}_y.npy")
        assert x.dtype == np.uint8
        assert x.shape == (len(rows), 84, 84, 3)
        assert y.dtype == np.int64
        assert y.tolist() == [c for c, _ in rows]
        for k, (c, position) in enumerate(rows):
            assert np.array_equal(x[k], _decode(source / "images" / files[WNIDS[c]][position]))


def test_csv_import_loads_as_seq_miniimg(csv_import) -> None:
    root, report = csv_import
    bench = load_benchmark("seq-miniimg", root)
    assert bench.class_names == tuple(WNIDS)
    assert bench.train_x.shape == (report.n_train, 3, 84, 84)
    assert torch.bincount(bench.test_y).tolist() == [1] * 100
    reversed_bench = load_benchmark("seq-miniimg", root, class_order="reversed")
    assert reversed_bench.class_names[0] == WNIDS[-1]


def test_import_is_deterministic_per_seed(csv_import, csv_tree, tmp_path: Path) -> None:
    root, _ = csv_import
    again = import_miniimagenet_csv(csv_tree[0], tmp_path / "again", test_per_class=1, seed=7)
    for name in FILES:
        assert (again.folder / name).read_bytes() == (root / "MINIIMG" / name).read_bytes()
    other = import_miniimagenet_csv(csv_tree[0], tmp_path / "other", test_per_class=1, seed=8)
    assert not np.array_equal(np.load(other.folder / "test_x.npy"), np.load(root / "MINIIMG" / "test_x.npy"))


def _copy_tree(csv_tree, tmp_path: Path) -> Path:
    source = tmp_path / "source"
    shutil.copytree(csv_tree[0], source)
    return source


def test_csv_missing_pieces(csv_tree, tmp_path: Path) -> None:
    source = _copy_tree(csv_tree, tmp_path)
    (source / "val.csv").unlink()
    with pytest.raises(DataNotFoundError, match=r"val\.csv: missing") as exc:
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)
    _one_line(exc)
    shutil.rmtree(source / "images")
    with pytest.raises(DataNotFoundError, match="images: missing"):
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)


def test_csv_missing_image(csv_tree, tmp_path: Path) -> None:
    source = _copy_tree(csv_tree, tmp_path)
    name = next(iter(csv_tree[1].values()))[0]
    (source / "images" / name).unlink()
    with pytest.raises(DataNotFoundError) as exc:
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)
    message = _one_line(exc)
    assert message.startswith(
        f"{source / 'images' / name}: image listed in {source / 'train.csv'} is missing"
    )


@pytest.mark.parametrize("content", ["truncated", "text"])
def test_csv_unreadable_image_leaves_nothing_behind(csv_tree, tmp_path: Path, content: str) -> None:
    source = _copy_tree(csv_tree, tmp_path)
    path = source / "images" / csv_tree[1][WNIDS[50]][0]
    path.write_bytes(path.read_bytes()[:300] if content == "truncated" else b"<html>not found</html>")
    with pytest.raises(BenchmarkFormatError) as exc:
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)
    assert _one_line(exc).startswith(f"{path}: unreadable image")
    assert list((tmp_path / "root").iterdir()) == []  # no partial arrays, no staging folder


@pytest.mark.parametrize(
    ("csv_text", "match"),
    [
        ("name,wnid\nx.jpg,n01\n", "first line is 'name,wnid', expected the header 'filename,label'"),
        ("", "first line is 'nothing'"),
        ("filename,label\na.jpg,n01,extra\n", "line 2 is 'a.jpg,n01,extra', expected 'filename,label'"),
        ("filename,label\na.jpg,\n", "line 2 is 'a.jpg,'"),
    ],
)
def test_csv_malformed_rows(csv_tree, tmp_path: Path, csv_text: str, match: str) -> None:
    source = _copy_tree(csv_tree, tmp_path)
    (source / "test.csv").write_text(csv_text)
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)
    assert _one_line(exc).startswith(f"{source / 'test.csv'}: ")


def test_csv_with_64_classes_is_rejected(csv_tree, tmp_path: Path) -> None:
    source = _copy_tree(csv_tree, tmp_path)
    for split in ("val", "test"):
        (source / f"{split}.csv").write_text("filename,label\n")
    with pytest.raises(BenchmarkFormatError, match="name 64 classes, expected the 100"):
        import_miniimagenet_csv(source, tmp_path / "root", test_per_class=1)


def test_too_few_images_for_the_test_split(csv_tree, tmp_path: Path) -> None:
    with pytest.raises(BenchmarkFormatError, match="has 2 images, too few for 2 test images") as exc:
        import_miniimagenet_csv(csv_tree[0], tmp_path / "root", test_per_class=2)
    _one_line(exc)
    with pytest.raises(ValueError, match="test_per_class must be at least 1"):
        import_miniimagenet_csv(csv_tree[0], tmp_path / "root", test_per_class=0)


# ---------------------------------------------------------------------------------------------
# Importer from the mini-imagenet-cache-*.pkl distribution


def write_cache(
    source: Path, *, bytes_keys: bool = True, val_name: str = "val"
) -> dict[str, list[np.ndarray]]:
    """The three cache pickles; returns each wnid's images in class_dict order."""
    source.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    images_of: dict[str, list[np.ndarray]] = {}
    for split, wnids in SPLITS.items():
        n = sum(SIZES[w] for w in wnids)
        data = rng.integers(0, 256, (n, 84, 84, 3), dtype=np.uint8)
        rows = rng.permutation(n)  # classes own scattered rows, listed in no particular order
        class_dict, start = {}, 0
        for wnid in wnids:
            mine = [int(r) for r in rows[start : start + SIZES[wnid]]]
            start += SIZES[wnid]
            class_dict[wnid.encode() if bytes_keys else wnid] = mine
            images_of[wnid] = [data[r] for r in mine]
        obj = {"image_data": data, "class_dict": class_dict}
        if bytes_keys:
            obj = {k.encode(): v for k, v in obj.items()}
        name = val_name if split == "val" else split
        (source / f"mini-imagenet-cache-{name}.pkl").write_bytes(pickle.dumps(obj, protocol=4))
    return images_of


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[np.ndarray]]]:
    source = tmp_path_factory.mktemp("cache")
    return source, write_cache(source)


@pytest.mark.parametrize(("bytes_keys", "val_name"), [(True, "val"), (False, "validation")])
def test_pickle_import_follows_the_documented_split(tmp_path: Path, bytes_keys: bool, val_name: str) -> None:
    images_of = write_cache(tmp_path / "source", bytes_keys=bytes_keys, val_name=val_name)
    report = import_miniimagenet_pickle(tmp_path / "source", tmp_path / "root", test_per_class=1, seed=3)
    assert report.wnids == tuple(WNIDS)
    assert (report.n_classes, report.n_train, report.n_test, report.resized) == (
        100,
        sum(SIZES.values()) - 100,
        100,
        0,
    )
    test_rows, train_rows = expected_split([SIZES[w] for w in WNIDS], test_per_class=1, seed=3)
    for split, rows in (("test", test_rows), ("train", train_rows)):
        x, y = np.load(report.folder / f"{split}_x.npy"), np.load(report.folder / f"{split}_y.npy")
        assert y.tolist() == [c for c, _ in rows]
        expected = np.stack([images_of[WNIDS[c]][p] for c, p in rows])
        assert np.array_equal(x, expected)
    bench = load_benchmark("seq-miniimg", tmp_path / "root")
    assert bench.class_names == tuple(WNIDS)
    assert bench.n_tasks == 20


def test_pickle_import_is_deterministic(cache, tmp_path: Path) -> None:
    first = import_miniimagenet_pickle(cache[0], tmp_path / "a", test_per_class=1, seed=0)
    second = import_miniimagenet_pickle(cache[0], tmp_path / "b", test_per_class=1, seed=0)
    for name in FILES:
        assert (first.folder / name).read_bytes() == (second.folder / name).read_bytes()


def _rewrite(path: Path, change: str) -> None:
    obj = pickle.loads(path.read_bytes())
    if change == "no class_dict":
        del obj[b"class_dict"]
    elif change == "float images":
        obj[b"image_data"] = obj[b"image_data"].astype(np.float32)
    elif change == "chw images":
        obj[b"image_data"] = obj[b"image_data"].transpose(0, 3, 1, 2)
    elif change == "row out of range":
        first = next(iter(obj[b"class_dict"]))
        obj[b"class_dict"][first] = [*obj[b"class_dict"][first], len(obj[b"image_data"])]
    elif change == "nested rows":
        first = next(iter(obj[b"class_dict"]))
        obj[b"class_dict"][first] = [obj[b"class_dict"][first]]
    elif change == "a list":
        obj = [1, 2]
    path.write_bytes(pickle.dumps(obj, protocol=4))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("no class_dict", r"key 'class_dict' missing \(found: image_data\)"),
        ("float images", r"'image_data' is float32 \(\d+, 84, 84, 3\), expected uint8 \(N, 84, 84, 3\)"),
        ("chw images", r"'image_data' is uint8 \(\d+, 3, 84, 84\)"),
        ("row out of range", r"class_dict\['n\d+'\] names rows .*, but image_data holds \d+"),
        ("nested rows", "is not a flat list of int rows"),
        ("a list", "holds a list, expected a dict"),
    ],
)
def test_pickle_malformed(cache, tmp_path: Path, change: str, match: str) -> None:
    source = tmp_path / "source"
    shutil.copytree(cache[0], source)
    path = source / "mini-imagenet-cache-test.pkl"
    _rewrite(path, change)
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        import_miniimagenet_pickle(source, tmp_path / "root", test_per_class=1)
    assert _one_line(exc).startswith(f"{path}: ")


def test_pickle_truncated_or_missing(cache, tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(cache[0], source)
    path = source / "mini-imagenet-cache-val.pkl"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(BenchmarkFormatError, match="not a readable pickle") as exc:
        import_miniimagenet_pickle(source, tmp_path / "root", test_per_class=1)
    assert _one_line(exc).startswith(f"{path}: ")
    (source / "mini-imagenet-cache-test.pkl").unlink()
    with pytest.raises(DataNotFoundError, match=r"mini-imagenet-cache-test\.pkl: missing"):
        import_miniimagenet_pickle(source, tmp_path / "root", test_per_class=1)


# ---------------------------------------------------------------------------------------------
# Importer from image folders already split: train/<wnid>/*.jpg + val/<wnid>/*.jpg (folder or tar)

FOLDER_COUNTS = {"train": 2, "val": 1}


def folder_files(seed: int = 0) -> dict[str, bytes]:
    """``{split/wnid/<wnid><index>.jpg: JPEG bytes}`` for the 100 classes: indices 0..1 in
    ``train/``, 2 in ``val/`` (as the real copy puts a class's lowest indices in train); every
    image of the fifth class is greyscale."""
    rng = np.random.default_rng(seed)
    files = {}
    index = {wnid: 0 for wnid in WNIDS}
    for split, count in FOLDER_COUNTS.items():
        for wnid in SHUFFLED:  # written in no sorted order
            for _ in range(count):
                image = Image.fromarray(rng.integers(0, 256, (84, 84, 3), dtype=np.uint8))
                if wnid == WNIDS[4]:
                    image = image.convert("L")
                buffer = io.BytesIO()
                image.save(buffer, format="JPEG", quality=90)
                files[f"{split}/{wnid}/{wnid}{index[wnid]:08d}.jpg"] = buffer.getvalue()
                index[wnid] += 1
    return files


def write_folders(source: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` as a folder, or as a ``.tar.gz`` when ``source`` ends so."""
    if source.name.endswith(".tar.gz"):
        source.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(source, "w:gz") as tar:
            for relative, data in files.items():
                info = tarfile.TarInfo(relative)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return source
    for relative, data in files.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(data)
    return source


def _rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def folder_copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    files = folder_files()
    return write_folders(tmp_path_factory.mktemp("folders") / "copy", files), files


@pytest.mark.parametrize("container", ["folder", "tar"])
def test_folders_import_keeps_the_split_as_given(tmp_path: Path, container: str) -> None:
    files = folder_files()
    source = write_folders(tmp_path / ("copy.tar.gz" if container == "tar" else "copy"), files)
    report = import_miniimagenet_folders(source, tmp_path / "root")
    folder = tmp_path / "root" / "MINIIMG"
    assert (report.folder, report.wnids, report.n_train, report.n_test) == (folder, tuple(WNIDS), 200, 100)
    assert (report.resized, report.converted) == (0, 3)  # the greyscale class: 2 train + 1 val
    assert sorted(p.name for p in folder.iterdir()) == sorted([*FILES, "wnids.txt"])
    assert [p.name for p in (tmp_path / "root").iterdir()] == ["MINIIMG"]  # no staging folder left
    assert (folder / "wnids.txt").read_text().split() == WNIDS
    for split, source_split in (("train", "train"), ("test", "val")):
        x, y = np.load(folder / f"{split}_x.npy"), np.load(folder / f"{split}_y.npy")
        count = FOLDER_COUNTS[source_split]
        # Label = position of the wnid in sorted order; class by class, files in name order.
        assert (x.dtype, x.shape, y.dtype) == (np.uint8, (100 * count, 84, 84, 3), np.int64)
        assert y.tolist() == np.repeat(np.arange(100), count).tolist()
        names = sorted(name for name in files if name.startswith(f"{source_split}/"))
        names.sort(key=lambda name: WNIDS.index(name.split("/")[1]))
        expected = np.stack([_rgb(files[name]) for name in names])
        assert np.array_equal(x, expected)
    bench = load_benchmark("seq-miniimg", tmp_path / "root")
    assert (bench.n_tasks, bench.class_names) == (20, tuple(WNIDS))
    assert torch.bincount(bench.train_y).tolist() == [2] * 100
    assert torch.bincount(bench.test_y).tolist() == [1] * 100


def _break_folders(source: Path, change: str) -> None:
    first = source / "train" / WNIDS[0]
    if change == "big image":
        Image.fromarray(np.zeros((84, 100, 3), np.uint8)).save(
            first / f"{WNIDS[0]}00000001.jpg", format="JPEG"
        )
    elif change == "truncated":
        path = source / "val" / WNIDS[7] / f"{WNIDS[7]}00000002.jpg"
        path.write_bytes(path.read_bytes()[:200])
    elif change == "not an image":
        (source / "val" / WNIDS[99] / f"{WNIDS[99]}00000002.jpg").write_bytes(b"<html>not found</html>")
    elif change == "train only":
        shutil.rmtree(source / "val" / WNIDS[3])
    elif change == "val only":
        shutil.rmtree(source / "train" / WNIDS[3])
    elif change == "uneven":
        shutil.copy(first / f"{WNIDS[0]}00000000.jpg", first / f"{WNIDS[0]}00000009.jpg")
    elif change == "no val":
        shutil.rmtree(source / "val")
    elif change == "99 classes":
        shutil.rmtree(source / "train" / WNIDS[3])
        shutil.rmtree(source / "val" / WNIDS[3])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            "big image",
            f"train/{WNIDS[0]}/{WNIDS[0]}00000001.jpg is 100x84, but miniImageNet images are 84x84",
        ),
        ("truncated", f"val/{WNIDS[7]}/{WNIDS[7]}00000002.jpg is not an image Pillow can read"),
        ("not an image", f"val/{WNIDS[99]}/{WNIDS[99]}00000002.jpg is not an image Pillow can read"),
        ("train only", rf"no images in val/{WNIDS[3]}/ \(every class needs images in train/ and val/\)"),
        ("val only", rf"unexpected val/{WNIDS[3]}/ \(every class needs images in train/ and val/\)"),
        ("uneven", f"train/{WNIDS[0]}/ holds 3 images, expected 2 per class"),
        ("no val", "holds no val/<class>/ images"),
        ("99 classes", "train/ and val/ name 99 classes, expected the 100 of miniImageNet"),
    ],
)
def test_folders_errors_are_one_line_and_leave_nothing(
    folder_copy, tmp_path: Path, change: str, match: str
) -> None:
    source = tmp_path / "copy"
    shutil.copytree(folder_copy[0], source)
    _break_folders(source, change)
    root = tmp_path / "root"
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        import_miniimagenet_folders(source, root)
    assert _one_line(exc).startswith(f"{source}: ")
    assert not root.exists() or list(root.iterdir()) == []  # no partial arrays, no staging folder


def test_folders_error_in_an_archive_leaves_the_earlier_import(folder_copy, tmp_path: Path) -> None:
    root = tmp_path / "root"
    import_miniimagenet_folders(folder_copy[0], root)
    folder = root / "MINIIMG"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    files = folder_files(seed=1)
    files[f"val/{WNIDS[50]}/{WNIDS[50]}00000002.jpg"] = files[f"val/{WNIDS[50]}/{WNIDS[50]}00000002.jpg"][
        :300
    ]
    archive = write_folders(tmp_path / "bad.tar.gz", files)
    with pytest.raises(BenchmarkFormatError, match="is not an image Pillow can read") as exc:
        import_miniimagenet_folders(archive, root)
    assert _one_line(exc).startswith(f"{archive}: ")
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before
    assert [p.name for p in root.iterdir()] == ["MINIIMG"]


def test_folders_source_missing_or_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no such folder or archive") as exc:
        import_miniimagenet_folders(tmp_path / "absent.tar.gz", tmp_path / "root")
    _one_line(exc)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(BenchmarkFormatError, match="neither a folder nor a readable tar archive") as exc:
        import_miniimagenet_folders(junk, tmp_path / "root")
    _one_line(exc)
