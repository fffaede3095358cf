"""seq-mnist: the IDX reader on tiny files written in the official format (gzip-compressed and not),
the benchmark and its protocol, the download (fetch faked: served from file:// URLs or replaced) and
the import from a folder copy.

The fixtures are the four official files, ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``:
a big-endian header (two zero bytes, type byte 0x08, the number of dimensions, then one uint32 per
dimension: magic 0x00000803 + N, 28, 28 for images, 0x00000801 + N for labels) and the bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from xder_data import (
    BenchmarkFormatError,
    DataNotFoundError,
    Normalize,
    benchmark_defaults,
    download_data,
    download_mnist,
    load_benchmark,
    prepare_data,
    prepare_mnist,
    read_idx,
)
from xder_data import mnist as mnist_module

N_TRAIN, N_TEST = 3, 1  # images per digit


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8) as an IDX file: 0, 0, 0x08, ndim, the dimensions as big-endian uint32."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist(folder: Path, *, compressed: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the four official files into ``folder`` and return the arrays, by file name."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for prefix, per_digit in (("train", N_TRAIN), ("t10k", N_TEST)):
        labels = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), per_digit))
        arrays[f"{prefix}-images-idx3-ubyte"] = rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
        arrays[f"{prefix}-labels-idx1-ubyte"] = labels
    for name, array in arrays.items():
        raw = idx_bytes(array)
        if compressed:
            (folder / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)
    return arrays


def test_the_header_is_parsed_byte_exact(tmp_path: Path) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.uint64).reshape(2, 28, 28).astype(np.uint8)
    raw = idx_bytes(images)
    assert raw[:16] == bytes.fromhex("00000803000000020000001c0000001c")
    (tmp_path / "plain").write_bytes(raw)
    (tmp_path / "zipped.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "zipped-without-suffix").write_bytes(gzip.compress(raw))
    for name in ("plain", "zipped.gz", "zipped-without-suffix"):
        read = read_idx(tmp_path / name)
        assert read.dtype == np.uint8
        assert read.shape == (2, 28, 28)
        np.testing.assert_array_equal(read, images)
    labels = np.array([7, 0, 9], dtype=np.uint8)
    (tmp_path / "labels").write_bytes(bytes.fromhex("00000801 00000003") + bytes([7, 0, 9]))
    np.testing.assert_array_equal(read_idx(tmp_path / "labels"), labels)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (bytes.fromhex("01000801 00000001") + b"\x00", "does not start with two zero bytes"),
        (bytes.fromhex("00000d01 00000001") + b"\x00" * 4, r"type byte 0x0d, expected 0x08"),
        (bytes.fromhex("00000803 00000002 0000001c"), "truncated header"),
        (bytes.fromhex("00000801 00000003") + b"\x01\x02", "holds 2 data bytes, its header \\(3,\\) needs 3"),
        (b"\x1f\x8b\x08\x00garbage", "not a readable gzip file"),
    ],
)
def test_a_file_that_is_not_idx_is_refused_in_one_line(tmp_path: Path, raw: bytes, match: str) -> None:
    path = tmp_path / "file"
    path.write_bytes(raw)
    with pytest.raises(BenchmarkFormatError, match=match) as caught:
        read_idx(path)
    assert "\n" not in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("compressed", [True, False])
def test_seq_mnist_reads_the_files_in_order(tmp_path: Path, compressed: bool) -> None:
    arrays = write_mnist(tmp_path / "MNIST", compressed=compressed)
    bench = load_benchmark("seq-mnist", tmp_path)
    assert bench.name == "seq-mnist"
    assert bench.n_tasks == 5
    assert bench.classes_per_task == (2,) * 5
    assert bench.input_shape == (1, 28, 28)
    assert bench.class_order == tuple(range(10))
    assert bench.train_x.dtype == torch.uint8
    assert bench.train_x.shape == (10 * N_TRAIN, 1, 28, 28)
    torch.testing.assert_close(bench.train_x[:, 0], torch.from_numpy(arrays["train-images-idx3-ubyte"]))
    torch.testing.assert_close(bench.test_x[:, 0], torch.from_numpy(arrays["t10k-images-idx3-ubyte"]))
    assert bench.train_y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert bench.test_y.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert bench.class_names == tuple("0123456789")
    task = bench.task(1)
    assert sorted(set(bench.train_y[task.train].tolist())) == [2, 3]


def test_the_protocol_is_the_authors(tmp_path: Path) -> None:
    write_mnist(tmp_path / "MNIST")
    bench = load_benchmark("seq-mnist", tmp_path)
    defaults = benchmark_defaults("seq-mnist")
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (1, 10, 10, 0.03)
    assert (defaults.buffer_size, defaults.lr_schedule, defaults.drop_last) == (200, "none", False)
    assert defaults.backbone == "mnist-mlp"
    assert defaults.backbone_options == {"in_features": 784}
    # ToTensor alone: no augmentation, pixels scaled to [0, 1], the same for training and test
    for transform in (bench.train_transform, bench.test_transform):
        assert isinstance(transform, Normalize)
        out = transform(bench.train_x[:2])
        torch.testing.assert_close(out, bench.train_x[:2].float() / 255)
    assert bench.strong_transform is None


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            "missing",
            DataNotFoundError,
            r"t10k-labels-idx1-ubyte\[\.gz\]: MNIST file missing: run `download_data",
        ),
        ("swapped", BenchmarkFormatError, r"magic 0x00000801 .* expected 0x00000803"),
        ("count", BenchmarkFormatError, "2 labels for the 10 images"),
        ("label", BenchmarkFormatError, "label 10, expected 0..9"),
        ("digit", BenchmarkFormatError, "digit 9 has no images"),
    ],
)
def test_malformed_files_give_one_line(tmp_path: Path, change: str, error: type, match: str) -> None:
    folder = tmp_path / "MNIST"
    arrays = write_mnist(folder, compressed=False)
    labels = folder / "t10k-labels-idx1-ubyte"
    if change == "missing":
        labels.unlink()
    elif change == "swapped":
        (folder / "t10k-images-idx3-ubyte").write_bytes(labels.read_bytes())
    elif change == "count":
        labels.write_bytes(idx_bytes(arrays[labels.name][:2]))
    else:
        changed = arrays[labels.name].copy()
        changed[changed == 9] = 10 if change == "label" else 8
        labels.write_bytes(idx_bytes(changed))
    with pytest.raises(error, match=match) as caught:
        load_benchmark("seq-mnist", tmp_path)
    assert "\n" not in str(caught.value)


def test_no_root_or_no_folder(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="the MNIST benchmarks need a data root"):
        load_benchmark("seq-mnist", None)
    with pytest.raises(DataNotFoundError, match="MNIST folder not found: run `download_data\\('mnist'"):
        load_benchmark("seq-mnist", tmp_path)


def _serve(tmp_path: Path) -> tuple[str, dict[str, str], dict[str, np.ndarray]]:
    served = tmp_path / "served"
    arrays = write_mnist(served)
    sums = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in served.iterdir()}
    return served.as_uri() + "/", sums, arrays


def test_download_fetches_the_four_files_and_checks_each_md5(tmp_path: Path) -> None:
    url, sums, arrays = _serve(tmp_path)
    done = download_mnist(tmp_path / "data", url, expected_md5=sums)
    assert done.folder == tmp_path / "data" / "MNIST"
    assert (done.n_train, done.n_test) == (30, 10)
    assert sorted(p.name for p in done.folder.iterdir()) == sorted(sums)
    for name in sums:
        assert (done.folder / name).read_bytes() == (tmp_path / "served" / name).read_bytes()
    bench = load_benchmark("seq-mnist", tmp_path / "data")
    assert bench.train_y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    wrong = dict(sums, **{"t10k-labels-idx1-ubyte.gz": "0" * 32})
    (done.folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(BenchmarkFormatError, match=r"md5 .* differs from the expected 0000"):
        download_mnist(tmp_path / "data", url, expected_md5=wrong)
    assert not (done.folder / "t10k-labels-idx1-ubyte.gz").exists()
    assert not list(done.folder.glob("*.part"))


def test_download_data_mnist_fetches_the_official_names_and_sums(tmp_path: Path, monkeypatch) -> None:
    served = tmp_path / "served"
    write_mnist(served)
    calls = []

    def fake_fetch(url: str, target: Path, expected_md5: str) -> None:
        calls.append((url, target.name, expected_md5))
        target.write_bytes((served / target.name).read_bytes())

    monkeypatch.setattr(mnist_module, "fetch", fake_fetch)
    folder = download_data("mnist", tmp_path / "data")
    assert folder == tmp_path / "data" / "MNIST"
    assert calls == [
        (mnist_module.MNIST_URL + name, name, mnist_module.MNIST_MD5[name]) for name in mnist_module.MNIST_MD5
    ]
    assert load_benchmark("seq-mnist", tmp_path / "data").test_x.shape == (10, 1, 28, 28)


def test_a_failed_download_leaves_no_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="download failed"):
        download_mnist(tmp_path / "data", (tmp_path / "nowhere").as_uri() + "/")
    assert not (tmp_path / "data").exists()


def test_prepare_copies_the_files_from_a_torchvision_layout(tmp_path: Path) -> None:
    raw = tmp_path / "copy" / "MNIST" / "raw"
    arrays = write_mnist(raw, compressed=False)
    root = tmp_path / "data"
    write_mnist(root / "MNIST", seed=1)  # an earlier compressed copy: replaced, not shadowing
    result = prepare_data("mnist", root, source=tmp_path / "copy")
    assert str(result) == f"mnist: 30 train / 10 test images -> {root / 'MNIST'}"
    assert sorted(p.name for p in (root / "MNIST").iterdir()) == sorted(arrays)
    for name in arrays:
        assert (root / "MNIST" / name).read_bytes() == (raw / name).read_bytes()
    bench = load_benchmark("seq-mnist", root)
    assert bench.test_y.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()


def test_prepare_checks_before_it_copies(tmp_path: Path) -> None:
    source = tmp_path / "copy"
    write_mnist(source)
    (source / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(3, np.uint8))))
    with pytest.raises(BenchmarkFormatError, match="3 labels for the 30 images"):
        prepare_mnist(source, tmp_path / "data")
    assert not (tmp_path / "data").exists()
    (source / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(BenchmarkFormatError, match="holds no train-labels-idx1-ubyte nor"):
        prepare_mnist(source, tmp_path / "data")
    with pytest.raises(DataNotFoundError, match="no such folder"):
        prepare_mnist(tmp_path / "absent", tmp_path / "data")


def test_the_mnist_scenarios_read_the_official_files(tmp_path: Path) -> None:
    """perm-mnist, rot-mnist and mnist-360 from the four IDX files (3 train and 1 test image a
    digit here): 20 copies of the 30 train rows; a stream of the 27 train rows of digits 0..8."""
    write_mnist(tmp_path / "MNIST")
    perm = load_benchmark("perm-mnist", tmp_path)
    assert (perm.train_x.shape, perm.test_x.shape, perm.scenario) == (
        (600, 1, 28, 28),
        (200, 1, 28, 28),
        "domain-il",
    )
    rot = load_benchmark("rot-mnist", tmp_path, data_seed=5)
    assert rot.notes[0].startswith("rotated copies")
    assert rot.defaults.backbone == "mnist-mlp"
    stream = load_benchmark("mnist-360", tmp_path)
    assert (stream.scenario, stream.train_x.shape[0], stream.test_x.shape[0]) == ("general", 27, 9)
