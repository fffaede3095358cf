"""seq-cifar100: the reader on tiny files in the exact official format, its checks, md5 and download.

The fixtures are files written in the exact real format (docs/data-formats.md, "CIFAR-10 and
CIFAR-100"): ``cifar-100-python/{train,test,meta}`` pickled dicts (protocol 2) with the five keys,
``data`` uint8 (n, 3072) in R, G, B plane order, labels as lists, all 100 classes. They are written
three ways: Python 3 with ``str`` keys, Python 3 with ``bytes`` keys, and as Python 2 wrote them
(``str`` objects as BINSTRING opcodes, which only load with ``encoding='latin1'``).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import shutil
import struct
import tarfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from xder_data import (
    BenchmarkFormatError,
    Compose,
    CropFlip,
    DataNotFoundError,
    Normalize,
    StrongAugment,
    UnknownProtocolError,
    benchmark_defaults,
    cifar100_coarse_names,
    download_cifar100,
    list_protocols,
    load_benchmark,
    verify_cifar100,
)
from xder_data import cifar100 as cifar100_module

N_TRAIN, N_TEST = 3, 1  # images per class
COARSE_OF_FINE = np.random.default_rng(1).permutation(np.repeat(np.arange(20), 5))
FINE_NAMES = [f"fine_{c:02d}" for c in range(100)]
COARSE_NAMES = [f"coarse_{c:02d}" for c in range(20)]
MEAN, STD = (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)


class _Python2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (SHORT_BINSTRING/BINSTRING), as Python 2's cPickle did."""

    dispatch: ClassVar[dict[type, Any]] = dict(pickle._Pickler.dispatch)

    def save_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_python2_str


def _as_bytes(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("latin1")
    if isinstance(value, list):
        return [_as_bytes(v) for v in value]
    return value


def dump(path: Path, obj: dict[str, Any], style: str = "str") -> None:
    """Pickle ``obj`` with protocol 2: ``str`` keys; ``bytes`` keys and strings; or Python 2 style."""
    if style == "str":
        path.write_bytes(pickle.dumps(obj, protocol=2))
    elif style == "bytes":
        path.write_bytes(pickle.dumps({k.encode(): _as_bytes(v) for k, v in obj.items()}, protocol=2))
    else:
        buffer = io.BytesIO()
        _Python2Pickler(buffer, protocol=2).dump({k.encode(): _as_bytes(v) for k, v in obj.items()})
        path.write_bytes(buffer.getvalue())


def split_dict(fine: np.ndarray, rng: np.random.Generator, label: str) -> dict[str, Any]:
    return {
        "data": rng.integers(0, 256, (len(fine), 3072), dtype=np.uint8),
        "fine_labels": [int(c) for c in fine],
        "coarse_labels": [int(COARSE_OF_FINE[c]) for c in fine],
        "filenames": [f"image_{i:05d}.png" for i in range(len(fine))],
        "batch_label": f"{label} batch 1 of 1",
    }


def write_cifar100(root: Path, style: str = "str", seed: int = 0) -> dict[str, dict[str, Any]]:
    """Write ``root/cifar-100-python/`` and return the three dicts written."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    files = {
        "train": split_dict(rng.permutation(np.repeat(np.arange(100), N_TRAIN)), rng, "training"),
        "test": split_dict(rng.permutation(np.repeat(np.arange(100), N_TEST)), rng, "testing"),
        "meta": {"fine_label_names": list(FINE_NAMES), "coarse_label_names": list(COARSE_NAMES)},
    }
    for name, obj in files.items():
        dump(folder / name, obj, style)
    (folder / "file.txt~").write_text("")
    return files


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("cifar")
    return root, write_cifar100(root)


@pytest.fixture(scope="module")
def bench(written):
    return load_benchmark("seq-cifar100", written[0])


# ---------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("style", ["str", "bytes", "python2"])
def test_every_pickle_style_reads_the_same(tmp_path: Path, style: str) -> None:
    files = write_cifar100(tmp_path, style)
    bench = load_benchmark("seq-cifar100", tmp_path)
    assert torch.equal(bench.train_x, torch.from_numpy(files["train"]["data"].reshape(-1, 3, 32, 32)))
    assert bench.train_y.tolist() == files["train"]["fine_labels"]
    assert bench.test_y.tolist() == files["test"]["fine_labels"]
    assert bench.class_names == tuple(FINE_NAMES)
    assert cifar100_coarse_names(tmp_path) == tuple(COARSE_NAMES)
    assert bench.coarse_names == tuple(COARSE_NAMES)


def test_shapes_dtypes_and_plane_order(bench, written) -> None:
    data = written[1]["train"]["data"]
    assert bench.train_x.shape == (100 * N_TRAIN, 3, 32, 32)
    assert bench.test_x.shape == (100 * N_TEST, 3, 32, 32)
    assert bench.train_x.dtype == torch.uint8
    assert bench.train_y.dtype == torch.int64
    assert bench.input_shape == (3, 32, 32)
    # Row 7: R plane = values 0..1023, G = 1024..2047, B = 2048..3071, each row-major 32x32.
    assert bench.train_x[7, 0, 0, 0] == data[7, 0]
    assert bench.train_x[7, 0, 1, 0] == data[7, 32]
    assert bench.train_x[7, 0, 0, 1] == data[7, 1]
    assert bench.train_x[7, 1, 0, 0] == data[7, 1024]
    assert bench.train_x[7, 2, 31, 31] == data[7, 3071]


def test_coarse_labels_are_each_classes_super_class(bench) -> None:
    assert bench.coarse_labels.tolist() == COARSE_OF_FINE.tolist()
    assert bench.coarse_labels.dtype == torch.int64


def test_ten_tasks_of_ten_consecutive_classes(bench) -> None:
    assert (bench.n_tasks, bench.classes_per_task, bench.num_classes) == (10, (10,) * 10, 100)
    for t in range(10):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (10 * t, 10 * t + 10)
        assert (
            torch.bincount(bench.train_y[split.train], minlength=100)[10 * t : 10 * t + 10].tolist()
            == [N_TRAIN] * 10
        )
        assert len(split.train) == 10 * N_TRAIN
        assert set(bench.test_y[split.test].tolist()) == set(range(10 * t, 10 * t + 10))


def test_explicit_class_order_moves_images_names_and_super_classes(bench, written) -> None:
    order = [int(c) for c in np.random.default_rng(5).permutation(100)]
    permuted = load_benchmark("seq-cifar100", written[0], class_order=order)
    assert permuted.class_order == tuple(order)
    assert permuted.class_names == tuple(FINE_NAMES[c] for c in order)
    assert permuted.coarse_labels.tolist() == COARSE_OF_FINE[order].tolist()
    first = permuted.task(0)
    mine = permuted.train_x[first.train]
    originals = bench.train_x[torch.isin(bench.train_y, torch.tensor(order[:10]))]
    assert sorted(map(bytes, mine.numpy())) == sorted(map(bytes, originals.numpy()))
    # Label i of the permuted benchmark is original class order[i].
    row = int(first.train[0])
    assert order[int(permuted.train_y[row])] == int(bench.train_y[row])


def test_reversed_order_puts_class_99_first(written) -> None:
    reversed_bench = load_benchmark("seq-cifar100", written[0], class_order="reversed")
    assert reversed_bench.class_names[0] == "fine_99"
    assert int(reversed_bench.coarse_labels[0]) == int(COARSE_OF_FINE[99])


def test_protocol_and_transforms(bench) -> None:
    defaults = benchmark_defaults("seq-cifar100")
    assert bench.defaults is defaults
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (50, 32, 32, 0.03)
    assert (defaults.lr_schedule, defaults.milestones, defaults.lr_gamma) == ("multistep", (35, 45), 0.1)
    assert (defaults.momentum, defaults.weight_decay, defaults.buffer_size) == (0.0, 0.0, 500)
    assert defaults.backbone == "resnet18-cifar"
    assert defaults.backbone_options == {"width": 64, "in_channels": 3}
    assert (bench.mean, bench.std) == (MEAN, STD)
    assert isinstance(bench.train_transform, Compose)
    crop, normalize = bench.train_transform.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((32, 32), 4, True)
    assert isinstance(normalize, Normalize)
    assert (normalize.mean, normalize.std) == (MEAN, STD)
    assert isinstance(bench.test_transform, Normalize)
    assert isinstance(bench.strong_transform, StrongAugment)
    assert bench.strong_transform.size == 32
    g = torch.Generator().manual_seed(0)
    assert bench.train_transform(bench.train_x[:4], g).shape == (4, 3, 32, 32)
    assert bench.strong_transform(bench.train_x[:4], g).dtype == torch.float32
    expected = (bench.test_x[:2].float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(
        STD
    ).view(1, 3, 1, 1)
    assert torch.allclose(bench.test_transform(bench.test_x[:2]), expected, atol=1e-6)


def test_laptop_protocol_is_the_paper_one_at_width_8_for_2_epochs(written, bench) -> None:
    """Width 8, 2 epochs per task, the lr divided by 10 at 70% and 90% of each task (the paper's 35
    and 45 of 50 epochs: 1.4 and 1.8 of 2); every other setting is the paper's."""
    assert list_protocols("seq-cifar100") == ["full", "laptop"]
    paper, laptop = benchmark_defaults("seq-cifar100"), benchmark_defaults("seq-cifar100", "laptop")
    assert (laptop.epochs, laptop.backbone_options) == (2, {"width": 8, "in_channels": 3})
    assert laptop.milestones == (1.4, 1.8)
    assert [m / laptop.epochs for m in laptop.milestones] == [m / paper.epochs for m in paper.milestones]
    same = ("batch_size", "minibatch_size", "lr", "momentum", "weight_decay", "lr_schedule", "lr_gamma")
    for key in (*same, "buffer_size", "optimizer", "drop_last", "backbone"):
        assert getattr(laptop, key) == getattr(paper, key), key
    assert (laptop.batch_size, laptop.lr, laptop.buffer_size, laptop.optimizer) == (32, 0.03, 500, "sgd")
    small = load_benchmark("seq-cifar100", written[0], protocol="laptop")
    assert small.defaults is laptop
    assert torch.equal(small.train_x, bench.train_x)  # same data, another training protocol
    with pytest.raises(UnknownProtocolError, match="has no protocol 'fast': it has full, laptop"):
        load_benchmark("seq-cifar100", written[0], protocol="fast")


# ---------------------------------------------------------------------------------------------
# Missing and malformed files


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_no_root_says_how_to_pass_one() -> None:
    with pytest.raises(DataNotFoundError, match=r"run\.data_root ROOT"):
        load_benchmark("seq-cifar100")


def test_missing_folder_names_it_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert str(tmp_path / "cifar-100-python") in message
    assert f"download_data('cifar100', '{tmp_path}')" in message
    assert "cifar-100-python.tar.gz" in message


@pytest.mark.parametrize("name", ["train", "test", "meta"])
def test_missing_file_names_it(written, tmp_path: Path, name: str) -> None:
    shutil.copytree(written[0] / "cifar-100-python", tmp_path / "cifar-100-python")
    (tmp_path / "cifar-100-python" / name).unlink()
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert str(tmp_path / "cifar-100-python" / name) in message
    assert "download_data('cifar100'" in message


def _meta() -> dict[str, Any]:
    return {"fine_label_names": list(FINE_NAMES), "coarse_label_names": list(COARSE_NAMES)}


def _bad_split(change: str) -> dict[str, Any]:
    classes = np.setdiff1d(np.arange(100), [42]) if change == "class 42 absent" else np.arange(100)
    obj = split_dict(np.repeat(classes, 2), np.random.default_rng(0), "training")
    if change == "no fine_labels":
        del obj["fine_labels"]
    elif change == "float data":
        obj["data"] = obj["data"].astype(np.float32)
    elif change == "short rows":
        obj["data"] = obj["data"][:, :3071]
    elif change == "hwc images":
        obj["data"] = obj["data"].reshape(-1, 32, 32, 3)
    elif change == "data as list":
        obj["data"] = obj["data"].tolist()
    elif change == "label 100":
        obj["fine_labels"][3] = 100
    elif change == "coarse 20":
        obj["coarse_labels"][3] = 20
    elif change == "short labels":
        obj["fine_labels"] = obj["fine_labels"][:-1]
    elif change == "string labels":
        obj["fine_labels"] = [str(c) for c in obj["fine_labels"]]
    elif change == "short filenames":
        obj["filenames"] = obj["filenames"][:5]
    elif change == "two super-classes":
        obj["coarse_labels"][0] = (obj["coarse_labels"][0] + 1) % 20
    return obj


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("no fine_labels", "key 'fine_labels' missing"),
        ("float data", r"'data' is float32 with shape \(200, 3072\), expected uint8"),
        ("short rows", r"shape \(200, 3071\)"),
        ("hwc images", r"shape \(200, 32, 32, 3\)"),
        ("data as list", "'data' is a list"),
        ("label 100", r"'fine_labels' spans 0..100, expected 0..99"),
        ("coarse 20", r"'coarse_labels' spans 0..20, expected 0..19"),
        ("short labels", r"'fine_labels' has shape \(199,\)"),
        ("string labels", "'fine_labels' holds <U"),
        ("short filenames", "'filenames' is not a list of 200"),
        ("two super-classes", "fine class 0 appears with coarse labels"),
        ("class 42 absent", "fine class 42 has no images"),
    ],
)
def test_malformed_train_file(written, tmp_path: Path, change: str, match: str) -> None:
    shutil.copytree(written[0] / "cifar-100-python", tmp_path / "cifar-100-python")
    path = tmp_path / "cifar-100-python" / "train"
    dump(path, _bad_split(change))
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: ")
    assert message.endswith(f"or unpack cifar-100-python.tar.gz under {tmp_path}")


def test_test_file_must_agree_with_the_training_super_classes(written, tmp_path: Path) -> None:
    shutil.copytree(written[0] / "cifar-100-python", tmp_path / "cifar-100-python")
    path = tmp_path / "cifar-100-python" / "test"
    obj = split_dict(np.arange(100), np.random.default_rng(0), "testing")
    obj["coarse_labels"][17] = (obj["coarse_labels"][17] + 1) % 20
    dump(path, obj)
    with pytest.raises(BenchmarkFormatError, match="row 17 pairs fine class 17") as exc:
        load_benchmark("seq-cifar100", tmp_path)
    assert _one_line(exc).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({"fine_label_names": FINE_NAMES[:99], "coarse_label_names": COARSE_NAMES}, "holds 99 entries"),
        ({"fine_label_names": FINE_NAMES, "coarse_label_names": COARSE_NAMES[:19]}, "holds 19 entries"),
        ({"fine_label_names": FINE_NAMES}, "key 'coarse_label_names' missing"),
        ({"fine_label_names": list(range(100)), "coarse_label_names": COARSE_NAMES}, "must hold strings"),
    ],
)
def test_malformed_meta(written, tmp_path: Path, meta: dict[str, Any], match: str) -> None:
    shutil.copytree(written[0] / "cifar-100-python", tmp_path / "cifar-100-python")
    path = tmp_path / "cifar-100-python" / "meta"
    dump(path, meta)
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: ")
    assert message.endswith(f"or unpack cifar-100-python.tar.gz under {tmp_path}")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("train", "truncated", "not a readable pickle"),
        ("test", "truncated", "not a readable pickle"),
        ("meta", "truncated", "not a readable pickle"),
        ("train", b"this is not a pickle\n", "not a readable pickle"),
        ("train", b"", "not a readable pickle"),
        ("test", pickle.dumps([1, 2, 3], protocol=2), "holds a list"),
    ],
)
def test_truncated_or_foreign_files(written, tmp_path: Path, name: str, content: Any, match: str) -> None:
    shutil.copytree(written[0] / "cifar-100-python", tmp_path / "cifar-100-python")
    path = tmp_path / "cifar-100-python" / name
    if content == "truncated":
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: ")
    assert "download_data('cifar100'" in message


# ---------------------------------------------------------------------------------------------
# md5 and download


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_official_md5_sums() -> None:
    assert cifar100_module.CIFAR100_ARCHIVE_MD5 == "eb9058c3a382ffc7106e4002c42a8d85"
    assert cifar100_module.CIFAR100_URL == "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    assert cifar100_module.CIFAR100_MD5 == {
        "train": "16019d7e3df5f24257cddd939b257f8d",
        "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
        "meta": "7973b15100ade9c7d40fb424638fde48",
    }


def test_verify_lists_the_files_that_differ(written, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = written[0] / "cifar-100-python"
    assert verify_cifar100(written[0]) == [str(folder / n) for n in ("train", "test", "meta")]
    monkeypatch.setitem(cifar100_module.CIFAR100_MD5, "train", _md5(folder / "train"))
    monkeypatch.setitem(cifar100_module.CIFAR100_MD5, "meta", _md5(folder / "meta"))
    assert verify_cifar100(written[0]) == [str(folder / "test")]


def test_verify_needs_the_files(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="cifar-100-python"):
        verify_cifar100(tmp_path)


def _archive(source: Path, path: Path, extra: dict[str, bytes] | None = None) -> str:
    """A .tar.gz of ``source/cifar-100-python`` (plus ``extra`` members); returns its md5."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source / "cifar-100-python", arcname="cifar-100-python")
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return _md5(path)


def test_download_checks_the_md5_and_unpacks(written, tmp_path: Path) -> None:
    archive = tmp_path / "served" / "cifar-100-python.tar.gz"
    archive.parent.mkdir()
    md5 = _archive(written[0], archive)
    root = tmp_path / "data"
    folder = download_cifar100(root, archive.as_uri(), expected_md5=md5)
    assert folder == root / "cifar-100-python"
    for name in ("train", "test", "meta", "file.txt~"):
        assert (folder / name).read_bytes() == (written[0] / "cifar-100-python" / name).read_bytes()
    assert _md5(root / "cifar-100-python.tar.gz") == md5
    assert sorted(p.name for p in root.iterdir()) == ["cifar-100-python", "cifar-100-python.tar.gz"]
    assert load_benchmark("seq-cifar100", root).train_x.shape == (100 * N_TRAIN, 3, 32, 32)
    # An archive already in place with the right md5 is reused: the URL is not opened again.
    again = download_cifar100(root, (tmp_path / "nowhere.tar.gz").as_uri(), expected_md5=md5)
    assert again == folder


def test_download_rejects_a_checksum_mismatch(written, tmp_path: Path) -> None:
    archive = tmp_path / "cifar-100-python.tar.gz"
    md5 = _archive(written[0], archive)
    root = tmp_path / "data"
    with pytest.raises(BenchmarkFormatError) as exc:
        download_cifar100(root, archive.as_uri())  # the official md5: a fixture cannot match it
    message = _one_line(exc)
    assert f"md5 {md5} differs from the expected eb9058c3a382ffc7106e4002c42a8d85" in message
    assert archive.as_uri() in message
    assert not root.exists()  # neither the partial download nor a folder, nor the root it made


def test_download_failure_is_reported(tmp_path: Path) -> None:
    url = (tmp_path / "absent.tar.gz").as_uri()
    with pytest.raises(DataNotFoundError, match="download failed") as exc:
        download_cifar100(tmp_path / "data", url, expected_md5="0" * 32)
    assert url in _one_line(exc)
    assert not (tmp_path / "data").exists()  # no empty data root left behind
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(DataNotFoundError):
        download_cifar100(kept, url, expected_md5="0" * 32)
    assert kept.is_dir()  # a folder that was there stays


def test_download_refuses_unsafe_members(written, tmp_path: Path) -> None:
    archive = tmp_path / "served" / "evil.tar.gz"
    archive.parent.mkdir()
    md5 = _archive(written[0], archive, extra={"../escaped.txt": b"gotcha"})
    root = tmp_path / "deep" / "data"
    with pytest.raises(BenchmarkFormatError, match=r"unsafe archive member '\.\./escaped\.txt'") as exc:
        download_cifar100(root, archive.as_uri(), expected_md5=md5)
    _one_line(exc)
    assert not (root.parent / "escaped.txt").exists()
    assert not (root / "cifar-100-python").exists()
    assert [p.name for p in root.iterdir()] == ["cifar-100-python.tar.gz"]  # no staging folder left


def test_download_needs_the_three_files(written, tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(written[0] / "cifar-100-python", source / "cifar-100-python")
    (source / "cifar-100-python" / "meta").unlink()
    archive = tmp_path / "incomplete.tar.gz"
    md5 = _archive(source, archive)
    with pytest.raises(BenchmarkFormatError, match="holds no cifar-100-python/meta"):
        download_cifar100(tmp_path / "data", archive.as_uri(), expected_md5=md5)


def test_download_rejects_a_corrupt_archive(tmp_path: Path) -> None:
    archive = tmp_path / "junk.tar.gz"
    archive.write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    with pytest.raises(BenchmarkFormatError, match=r"not a readable \.tar\.gz"):
        download_cifar100(tmp_path / "data", archive.as_uri(), expected_md5=_md5(archive))


# ---------------------------------------------------------------------------------------------
# image_size: upsampled once at load (the secondary-targets pre-training at 64x64)


@pytest.fixture(scope="module")
def bench64(written):
    return load_benchmark("seq-cifar100", written[0], image_size=64)


def test_image_size_64_upsamples_every_image_once(bench64, bench) -> None:
    assert bench64.train_x.shape == (100 * N_TRAIN, 3, 64, 64)
    assert bench64.test_x.shape == (100 * N_TEST, 3, 64, 64)
    assert bench64.train_x.dtype == torch.uint8
    assert bench64.input_shape == (3, 64, 64)
    expected = torch.nn.functional.interpolate(
        bench.train_x.float(), size=(64, 64), mode="bilinear", align_corners=False, antialias=False
    )
    assert torch.equal(bench64.train_x, expected.round().clamp(0, 255).to(torch.uint8))
    assert torch.equal(bench64.train_y, bench.train_y)
    assert torch.equal(bench64.test_y, bench.test_y)
    assert bench64.class_names == bench.class_names
    assert torch.equal(bench64.coarse_labels, bench.coarse_labels)


def test_bilinear_2x_by_hand() -> None:
    """Half-pixel centres: output column j samples input x = (j + 0.5) / 2 - 0.5, clamped at the edges."""
    row = torch.tensor([10, 50, 200, 0], dtype=torch.uint8)
    images = row.view(1, 1, 1, 4).expand(1, 3, 4, 4).contiguous()
    out = cifar100_module.upsample_images(images, 8)
    # x = -0.25 (clamped to 0), 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25 (clamped to 3).
    expected = [10, 20, 40, 87.5, 162.5, 150, 50, 0]
    assert out.shape == (1, 3, 8, 8)
    assert out[0, 1, 5].tolist() == [round(v) for v in expected] == [10, 20, 40, 88, 162, 150, 50, 0]
    assert cifar100_module.upsample_images(images, 4) is images


def test_image_size_scales_the_transforms(bench64, written) -> None:
    crop, normalize = bench64.train_transform.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((64, 64), 8, True)
    assert isinstance(normalize, Normalize)
    assert (normalize.mean, normalize.std) == (MEAN, STD)
    assert isinstance(bench64.strong_transform, StrongAugment)
    assert bench64.strong_transform.size == 64
    g = torch.Generator().manual_seed(0)
    assert bench64.train_transform(bench64.train_x[:4], g).shape == (4, 3, 64, 64)
    assert bench64.strong_transform(bench64.train_x[:4], g).shape == (4, 3, 64, 64)
    assert bench64.defaults is benchmark_defaults("seq-cifar100")
    bench48 = cifar100_module.seq_cifar100(written[0], image_size=48)
    assert bench48.input_shape == (3, 48, 48)
    assert bench48.train_transform.transforms[0].padding == 6


def test_default_image_size_is_the_native_32(bench, written) -> None:
    explicit = load_benchmark("seq-cifar100", written[0], image_size=32)
    assert torch.equal(explicit.train_x, bench.train_x)
    assert explicit.input_shape == (3, 32, 32)
    assert explicit.train_transform.transforms[0].padding == 4
    assert explicit.strong_transform.size == 32


@pytest.mark.parametrize("image_size", [16, 31, 64.0, True, "64"])
def test_image_size_must_be_an_integer_of_at_least_32(written, image_size: Any) -> None:
    with pytest.raises(ValueError, match="image_size must be an integer of at least 32"):
        load_benchmark("seq-cifar100", written[0], image_size=image_size)


def test_upsample_images_only_enlarges_uint8() -> None:
    with pytest.raises(ValueError, match="only enlarges"):
        cifar100_module.upsample_images(torch.zeros(1, 3, 32, 32, dtype=torch.uint8), 16)
    with pytest.raises(ValueError, match="expected uint8"):
        cifar100_module.upsample_images(torch.zeros(1, 3, 32, 32), 64)


def test_an_archive_given_as_the_data_root_is_told_to_be_imported(tmp_path: Path) -> None:
    archive = tmp_path / "cifar100-jpg.tar.gz"
    archive.write_bytes(b"\x1f\x8b")
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar100", archive)
    message = _one_line(exc)
    assert f"{archive} is a file, not a folder" in message
    assert f"prepare_data('cifar100', 'data', source='{archive}')" in message
    assert "download_data" not in message  # not: download into the archive
