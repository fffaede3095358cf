"""seq-cifar10: the reader on tiny files in the official format, its protocols, md5 and download, and
the importer from an image-folder copy (a folder or a tar archive).

The official fixtures follow the ``cifar-10-batches-py`` layout: ``data_batch_1``..``5``,
``test_batch`` (pickled dicts with ``data`` uint8 (n, 3072) in R, G, B plane order, ``labels``,
``filenames``, ``batch_label``) and ``batches.meta`` (``label_names``), pickled with protocol 2
with ``str`` or ``bytes`` keys. The importer's fixtures are PNG (lossless: pixels compared exactly)
and JPEG images in ``train/<class>/`` and ``test/<class>/``.
"""

from __future__ import annotations

import hashlib
import io
import os
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
    Normalize,
    StrongAugment,
    UnknownProtocolError,
    benchmark_defaults,
    canonical_protocol,
    download_cifar10,
    list_protocols,
    load_benchmark,
    prepare_cifar10,
    verify_cifar10,
)
from xder_data import cifar10 as cifar10_module

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2615)
PER_BATCH = 4  # images per class in each training batch file (so 20 per class in all)
N_TEST = 2  # test images per class


def _dump(path: Path, obj: dict[str, Any], style: str) -> None:
    if style == "bytes":
        obj = {k.encode(): v for k, v in obj.items()}
    path.write_bytes(pickle.dumps(obj, protocol=2))


def _split(labels: np.ndarray, rng: np.random.Generator, label: str) -> dict[str, Any]:
    return {
        "data": rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8),
        "labels": [int(c) for c in labels],
        "filenames": [f"image_{i:05d}.png" for i in range(len(labels))],
        "batch_label": label,
    }


def write_cifar10(root: Path, style: str = "str", seed: int = 0) -> dict[str, dict[str, Any]]:
    """Write ``root/cifar-10-batches-py/`` and return the dicts written, by file name."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    files: dict[str, dict[str, Any]] = {}
    for i in range(1, 6):
        labels = rng.permutation(np.repeat(np.arange(10), PER_BATCH))
        files[f"data_batch_{i}"] = _split(labels, rng, f"training batch {i} of 5")
    files["test_batch"] = _split(
        rng.permutation(np.repeat(np.arange(10), N_TEST)), rng, "testing batch 1 of 1"
    )
    files["batches.meta"] = {
        "label_names": list(CLASSES),
        "num_cases_per_batch": 10 * PER_BATCH,
        "num_vis": 3072,
    }
    for name, obj in files.items():
        _dump(folder / name, obj, style)
    (folder / "readme.html").write_text("<html></html>")
    return files


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("cifar10")
    return root, write_cifar10(root)


@pytest.fixture(scope="module")
def bench(written):
    return load_benchmark("seq-cifar10", written[0])


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("style", ["str", "bytes"])
def test_the_five_batches_in_order_then_the_test_batch(tmp_path: Path, style: str) -> None:
    files = write_cifar10(tmp_path, style)
    bench = load_benchmark("seq-cifar10", tmp_path)
    train = [files[f"data_batch_{i}"] for i in range(1, 6)]
    expected_x = np.concatenate([b["data"] for b in train]).reshape(-1, 3, 32, 32)
    assert torch.equal(bench.train_x, torch.from_numpy(expected_x))
    assert bench.train_y.tolist() == [y for b in train for y in b["labels"]]
    assert bench.test_y.tolist() == files["test_batch"]["labels"]
    assert bench.class_names == tuple(CLASSES)


def test_shapes_dtypes_and_plane_order(bench, written) -> None:
    assert bench.train_x.shape == (5 * 10 * PER_BATCH, 3, 32, 32)
    assert bench.test_x.shape == (10 * N_TEST, 3, 32, 32)
    assert bench.train_x.dtype == torch.uint8
    assert bench.train_y.dtype == torch.int64
    row = written[1]["data_batch_1"]["data"][0]
    # Row = R plane (1024 values, row-major), then G, then B: pixel (y=1, x=2) of channel G.
    assert int(bench.train_x[0, 1, 1, 2]) == int(row[1024 + 1 * 32 + 2])
    assert int(bench.train_x[0, 2, 31, 31]) == int(row[3071])


def test_five_tasks_of_two_consecutive_classes(bench) -> None:
    assert (bench.n_tasks, bench.classes_per_task, bench.num_classes) == (5, (2,) * 5, 10)
    for t in range(5):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (2 * t, 2 * t + 2)
        assert split.train.shape[0] == 2 * 5 * PER_BATCH
        assert split.test.shape[0] == 2 * N_TEST
        assert set(bench.train_y[split.train].tolist()) == {2 * t, 2 * t + 1}
    assert [bench.class_names[c] for c in range(2)] == ["airplane", "automobile"]


def test_paper_protocol_and_transforms(bench) -> None:
    defaults = benchmark_defaults("seq-cifar10")
    assert bench.defaults is defaults
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size) == (50, 32, 32)
    assert (defaults.lr_schedule, defaults.momentum, defaults.weight_decay) == ("none", 0.0, 0.0)
    assert (defaults.buffer_size, defaults.drop_last) == (200, False)
    assert defaults.backbone == "resnet18-cifar"
    assert defaults.backbone_options == {"width": 64, "in_channels": 3}
    assert (bench.mean, bench.std) == (MEAN, STD)
    assert isinstance(bench.train_transform, Compose)
    crop, normalize = bench.train_transform.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((32, 32), 4, True)
    assert isinstance(normalize, Normalize)
    assert (normalize.mean, normalize.std) == (MEAN, STD)
    assert isinstance(bench.strong_transform, StrongAugment)
    assert bench.strong_transform.size == 32
    expected = (bench.test_x[:2].float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(
        STD
    ).view(1, 3, 1, 1)
    assert torch.allclose(bench.test_transform(bench.test_x[:2]), expected, atol=1e-6)


def test_laptop_protocol_is_the_paper_one_at_width_8_for_2_epochs(written, bench) -> None:
    assert list_protocols("seq-cifar10") == ["full", "laptop"]
    paper, laptop = benchmark_defaults("seq-cifar10"), benchmark_defaults("seq-cifar10", "laptop")
    assert (laptop.epochs, laptop.backbone_options) == (2, {"width": 8, "in_channels": 3})
    for key in ("batch_size", "minibatch_size", "lr", "lr_schedule", "buffer_size", "drop_last", "backbone"):
        assert getattr(laptop, key) == getattr(paper, key), key
    small = load_benchmark("seq-cifar10", written[0], protocol="laptop")
    assert small.defaults is laptop
    assert torch.equal(small.train_x, bench.train_x)  # same data, another training protocol
    with pytest.raises(UnknownProtocolError, match="has no protocol 'fast': it has full, laptop"):
        load_benchmark("seq-cifar10", written[0], protocol="fast")


def test_the_full_protocol_answers_to_its_former_name(written) -> None:
    """``paper`` was the full protocol's name (runs recorded under it still read)."""
    assert (canonical_protocol("paper"), canonical_protocol("full"), canonical_protocol("laptop")) == (
        "full",
        "full",
        "laptop",
    )
    assert benchmark_defaults("seq-cifar10", "paper") is benchmark_defaults("seq-cifar10")
    assert load_benchmark("seq-cifar10", written[0], protocol="paper").defaults is benchmark_defaults(
        "seq-cifar10"
    )


# ---------------------------------------------------------------------------------------------
# Missing and malformed files


def test_missing_folder_names_every_way_to_get_the_data(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar10", tmp_path)
    message = _one_line(exc)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert f"download_data('cifar10', '{tmp_path}')" in message
    assert f"prepare_data('cifar10', '{tmp_path}', source='DIR')" in message
    assert "cifar-10-python.tar.gz" in message
    with pytest.raises(DataNotFoundError, match=r"run\.data_root ROOT"):
        load_benchmark("seq-cifar10")


@pytest.mark.parametrize("name", ["data_batch_3", "test_batch", "batches.meta"])
def test_missing_file_names_it(written, tmp_path: Path, name: str) -> None:
    shutil.copytree(written[0] / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / name).unlink()
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar10", tmp_path)
    assert str(tmp_path / "cifar-10-batches-py" / name) in _one_line(exc)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("no labels", "key 'labels' missing"),
        ("float data", r"'data' is float32 with shape \(40, 3072\), expected uint8"),
        ("label 10", r"'labels' spans 0..10, expected 0..9"),
        ("short labels", r"'labels' has shape \(39,\)"),
        ("short filenames", "'filenames' is not a list of 40"),
        ("truncated", "not a readable pickle"),
    ],
)
def test_malformed_batch(written, tmp_path: Path, change: str, match: str) -> None:
    shutil.copytree(written[0] / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    obj = dict(written[1]["data_batch_2"])
    if change == "no labels":
        del obj["labels"]
    elif change == "float data":
        obj["data"] = obj["data"].astype(np.float32)
    elif change == "label 10":
        obj["labels"] = [*obj["labels"][:-1], 10]
    elif change == "short labels":
        obj["labels"] = obj["labels"][:-1]
    elif change == "short filenames":
        obj["filenames"] = obj["filenames"][:3]
    _dump(path, obj, "str")
    if change == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("seq-cifar10", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: ")
    assert message.endswith(f"or unpack cifar-10-python.tar.gz under {tmp_path}")


def test_a_class_without_images_and_a_short_meta_are_errors(written, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    shutil.copytree(written[0] / "cifar-10-batches-py", folder)
    test = dict(written[1]["test_batch"])
    keep = [i for i, y in enumerate(test["labels"]) if y != 7]
    test = {**test, "data": test["data"][keep], "labels": [test["labels"][i] for i in keep]}
    test["filenames"] = test["filenames"][: len(keep)]
    _dump(folder / "test_batch", test, "str")
    with pytest.raises(BenchmarkFormatError, match="class 7 has no images"):
        load_benchmark("seq-cifar10", tmp_path)
    shutil.copy(written[0] / "cifar-10-batches-py" / "test_batch", folder / "test_batch")
    _dump(folder / "batches.meta", {"label_names": CLASSES[:9]}, "str")
    with pytest.raises(BenchmarkFormatError, match="'label_names' holds 9 entries"):
        load_benchmark("seq-cifar10", tmp_path)


# ---------------------------------------------------------------------------------------------
# md5 and download


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_official_md5_sums() -> None:
    assert cifar10_module.CIFAR10_ARCHIVE_MD5 == "c58f30108f718f92721af3b95e74349a"
    assert cifar10_module.CIFAR10_URL == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert cifar10_module.CIFAR10_MD5 == {
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
        "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
    }


def test_verify_lists_the_files_that_differ(written, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = written[0] / "cifar-10-batches-py"
    assert len(verify_cifar10(written[0])) == 7
    for name in cifar10_module.CIFAR10_MD5:
        if name != "test_batch":
            monkeypatch.setitem(cifar10_module.CIFAR10_MD5, name, _md5(folder / name))
    assert verify_cifar10(written[0]) == [str(folder / "test_batch")]


def _archive(source: Path, path: Path) -> str:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return _md5(path)


def test_download_checks_the_md5_and_unpacks(written, tmp_path: Path) -> None:
    archive = tmp_path / "served" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    md5 = _archive(written[0], archive)
    root = tmp_path / "data"
    folder = download_cifar10(root, archive.as_uri(), expected_md5=md5)
    assert folder == root / "cifar-10-batches-py"
    for name in [*cifar10_module.CIFAR10_MD5, "readme.html"]:
        assert (folder / name).read_bytes() == (written[0] / "cifar-10-batches-py" / name).read_bytes()
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]
    assert load_benchmark("seq-cifar10", root).train_x.shape == (200, 3, 32, 32)


def test_download_rejects_a_checksum_mismatch_and_a_missing_file(written, tmp_path: Path) -> None:
    archive = tmp_path / "cifar-10-python.tar.gz"
    md5 = _archive(written[0], archive)
    with pytest.raises(BenchmarkFormatError, match=f"md5 {md5} differs from the expected c58f30108f7"):
        download_cifar10(tmp_path / "data", archive.as_uri())
    assert not (tmp_path / "data").exists()  # nothing kept, not even the data root it made
    source = tmp_path / "source"
    shutil.copytree(written[0] / "cifar-10-batches-py", source / "cifar-10-batches-py")
    (source / "cifar-10-batches-py" / "data_batch_5").unlink()
    md5 = _archive(source, tmp_path / "incomplete.tar.gz")
    with pytest.raises(BenchmarkFormatError, match="holds no cifar-10-batches-py/data_batch_5"):
        download_cifar10(tmp_path / "data2", (tmp_path / "incomplete.tar.gz").as_uri(), expected_md5=md5)


# ---------------------------------------------------------------------------------------------
# Import from an image-folder copy


def _pixels(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)


def write_image_folder(
    root: Path, per_class: tuple[int, int] = (3, 2), seed: int = 0
) -> dict[str, np.ndarray]:
    """``root/{train,test}/<class>/NNNN.png`` (lossless); returns the pixels (HWC) by relative path."""
    rng = np.random.default_rng(seed)
    written = {}
    for split, count in zip(("train", "test"), per_class, strict=True):
        for cls in CLASSES:
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                pixels = _pixels(rng)
                Image.fromarray(pixels).save(root / split / cls / f"{i:04d}.png")
                written[f"{split}/{cls}/{i:04d}.png"] = pixels
    return written


def _load(path: Path, encoding: str = "latin1") -> dict[Any, Any]:
    with path.open("rb") as handle:
        return pickle.load(handle, encoding=encoding)


def test_prepare_from_a_folder_writes_the_official_layout(tmp_path: Path) -> None:
    images = write_image_folder(tmp_path / "copy")
    (tmp_path / "copy" / "train" / "cat" / ".DS_Store").write_bytes(b"\0junk")  # hidden: ignored
    done = prepare_cifar10(tmp_path / "copy", tmp_path / "data")
    folder = tmp_path / "data" / "cifar-10-batches-py"
    assert (done.folder, done.n_train, done.n_test, done.converted) == (folder, 30, 20, 0)
    assert sorted(p.name for p in folder.iterdir()) == sorted(cifar10_module.CIFAR10_MD5)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["cifar-10-batches-py"]  # no staging left
    # As the official files: bytes keys under encoding='bytes', str keys under latin1 (torchvision).
    raw = _load(folder / "data_batch_1", "bytes")
    assert sorted(raw) == [b"batch_label", b"data", b"filenames", b"labels"]
    assert raw[b"batch_label"] == b"training batch 1 of 5"
    meta = _load(folder / "batches.meta")
    assert meta == {"num_cases_per_batch": 6, "label_names": CLASSES, "num_vis": 3072}
    batches = [_load(folder / f"data_batch_{i}") for i in range(1, 6)] + [_load(folder / "test_batch")]
    assert [len(b["labels"]) for b in batches] == [6, 6, 6, 6, 6, 20]
    seen = set()
    for batch, split in zip(batches, ["train"] * 5 + ["test"], strict=True):
        assert batch["data"].dtype == np.uint8
        assert batch["data"].shape[1] == 3072
        for row, label, name in zip(batch["data"], batch["labels"], batch["filenames"], strict=True):
            key = f"{split}/{name}"
            assert name.split("/")[0] == CLASSES[label]
            # R plane, then G, then B: the HWC pixels transposed to CHW and flattened.
            assert np.array_equal(row, images[key].transpose(2, 0, 1).reshape(-1)), key
            seen.add(key)
    assert seen == set(images)
    bench = load_benchmark("seq-cifar10", tmp_path / "data")
    assert (bench.train_x.shape[0], bench.test_x.shape[0]) == (30, 20)
    assert sorted(np.bincount(bench.train_y.numpy()).tolist()) == [3] * 10


def test_prepare_shuffles_the_training_images_across_batches(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "copy", per_class=(10, 1))
    prepare_cifar10(tmp_path / "copy", tmp_path / "data")
    first = _load(tmp_path / "data" / "cifar-10-batches-py" / "data_batch_1")["labels"]
    assert len(first) == 20
    assert len(set(first)) > 2


def test_prepare_from_a_tar_archive_with_a_leading_folder_and_jpegs(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    archive = tmp_path / "cifar10-jpg.tar.gz"
    expected = {}
    with tarfile.open(archive, "w:gz") as tar:
        for split in ("test", "train"):
            for cls in CLASSES:
                buffer = io.BytesIO()
                image = Image.fromarray(_pixels(rng))
                if cls == "frog":  # a greyscale JPEG: converted to RGB
                    image = image.convert("L")
                image.save(buffer, format="JPEG")
                data = buffer.getvalue()
                info = tarfile.TarInfo(f"cifar10/{split}/{cls}/0000.jpg")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                expected[(split, cls)] = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    done = prepare_cifar10(archive, tmp_path / "data")
    assert (done.n_train, done.n_test, done.converted) == (10, 10, 2)
    bench = load_benchmark("seq-cifar10", tmp_path / "data")
    for x, y in zip(bench.test_x, bench.test_y, strict=True):
        assert np.array_equal(x.permute(1, 2, 0).numpy(), expected[("test", CLASSES[int(y)])])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("rename cat", "unexpected train/kitten/ and no images in train/cat/"),
        ("no test", "holds no test/<class>/ images"),
        ("big image", "train/dog/0000.png is 64x64, but CIFAR-10 images are 32x32"),
        ("not an image", "train/ship/0001.png is not an image Pillow can read"),
        ("empty class", "no images in test/horse/"),
    ],
)
def test_prepare_errors_are_one_line_and_leave_the_earlier_copy(
    tmp_path: Path, change: str, match: str
) -> None:
    write_image_folder(tmp_path / "good", per_class=(2, 1))
    prepare_cifar10(tmp_path / "good", tmp_path / "data")
    folder = tmp_path / "data" / "cifar-10-batches-py"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    source = tmp_path / "bad"
    write_image_folder(source, per_class=(2, 1), seed=1)
    if change == "rename cat":
        os.rename(source / "train" / "cat", source / "train" / "kitten")
    elif change == "no test":
        shutil.rmtree(source / "test")
    elif change == "big image":
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(source / "train" / "dog" / "0000.png")
    elif change == "not an image":
        (source / "train" / "ship" / "0001.png").write_bytes(b"not a png")
    elif change == "empty class":
        for path in (source / "test" / "horse").iterdir():
            path.unlink()
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        prepare_cifar10(source, tmp_path / "data")
    assert _one_line(exc).startswith(f"{source}: ")
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    assert after == before
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["cifar-10-batches-py"]


def test_prepare_source_missing_or_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no such folder or archive"):
        prepare_cifar10(tmp_path / "absent", tmp_path / "data")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(BenchmarkFormatError, match="neither a folder nor a readable tar archive") as exc:
        prepare_cifar10(junk, tmp_path / "data")
    _one_line(exc)
