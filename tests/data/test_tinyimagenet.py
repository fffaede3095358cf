"""seq-tinyimg: the importer on tiny copies of the official ``tiny-imagenet-200`` layout (a folder and a
zip), the label mapping (sorted ``wnids.txt``), ``val_annotations.txt``, greyscale JPEGs, the
benchmark and its protocol, and the download (fetch faked).

The fixtures are the official layout: ``wnids.txt`` (in an unsorted order, as the real one is),
``words.txt``, ``train/<wnid>/images/<wnid>_<i>.JPEG`` with ``train/<wnid>/<wnid>_boxes.txt``,
``val/images/val_<i>.JPEG`` with the tab-separated ``val/val_annotations.txt`` and ``test/images/``.
Images are PNG-encoded pixels saved as 64x64 JPEG; comparisons decode the written file with Pillow.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

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
    benchmark_defaults,
    download_data,
    download_tinyimagenet,
    load_benchmark,
    prepare_data,
    prepare_tinyimagenet,
)
from xder_data import tinyimagenet as tiny_module

WNIDS = ["n03", "n01", "n02"]  # wnids.txt's order; labels follow the sorted order n01, n02, n03


def _jpeg(rng: np.random.Generator, mode: str = "RGB") -> bytes:
    shape = (64, 64, 3) if mode == "RGB" else (64, 64)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buffer, "JPEG")
    return buffer.getvalue()


def write_tiny(
    top: Path, wnids: list[str] = WNIDS, train: int = 2, val: int = 1, seed: int = 0
) -> dict[str, bytes]:
    """Write the official layout into ``top`` (the ``tiny-imagenet-200`` folder); return its files."""
    rng = np.random.default_rng(seed)
    files: dict[str, bytes] = {
        "wnids.txt": "".join(f"{w}\n" for w in wnids).encode(),
        "words.txt": "".join(f"{w}\tthing {w}, other name\n" for w in ["n00", *wnids, "n99"]).encode(),
    }
    for w in wnids:
        boxes = []
        for i in range(train):
            files[f"train/{w}/images/{w}_{i}.JPEG"] = _jpeg(rng, "L" if (w, i) == ("n02", 1) else "RGB")
            boxes.append(f"{w}_{i}.JPEG\t0\t1\t60\t61\n")
        files[f"train/{w}/{w}_boxes.txt"] = "".join(boxes).encode()
    lines, k = [], 0
    for _ in range(val):
        for w in reversed(wnids):
            files[f"val/images/val_{k}.JPEG"] = _jpeg(rng)
            lines.append(f"val_{k}.JPEG\t{w}\t3\t4\t50\t60\n")
            k += 1
    files["val/val_annotations.txt"] = "".join(lines).encode()
    files["test/images/test_0.JPEG"] = _jpeg(rng)
    for name, payload in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_bytes(payload)
    return files


def _pixels(payload: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(payload)) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1)


def _read_back(root: Path) -> dict[str, np.ndarray]:
    folder = root / "TINYIMG"
    return {name: np.load(folder / f"{name}.npy") for name in ("train_x", "train_y", "test_x", "test_y")}


@pytest.mark.parametrize("form", ["folder", "folder-parent", "zip"])
def test_prepare_decodes_the_official_layout(tmp_path: Path, form: str) -> None:
    top = tmp_path / "copy" / "tiny-imagenet-200"
    files = write_tiny(top)
    source = {"folder": top, "folder-parent": top.parent, "zip": tmp_path / "tiny-imagenet-200.zip"}[form]
    if form == "zip":
        with zipfile.ZipFile(source, "w") as archive:
            for name, payload in files.items():
                archive.writestr(f"tiny-imagenet-200/{name}", payload)
    done = prepare_tinyimagenet(source, tmp_path / "data")
    assert (done.n_train, done.n_test, done.converted) == (6, 3, 1)
    arrays = _read_back(tmp_path / "data")
    # labels: positions in sorted wnids.txt; train in (label, file name) order
    assert arrays["train_y"].tolist() == [0, 0, 1, 1, 2, 2]
    order = [f"train/{w}/images/{w}_{i}.JPEG" for w in sorted(WNIDS) for i in range(2)]
    for row, name in enumerate(order):
        np.testing.assert_array_equal(arrays["train_x"][row], _pixels(files[name]))
    grey = arrays["train_x"][order.index("train/n02/images/n02_1.JPEG")]
    np.testing.assert_array_equal(grey[0], grey[1])  # the greyscale JPEG, converted to RGB
    # test: val_annotations.txt's order, each file's wnid mapped through the sorted wnids
    assert arrays["test_y"].tolist() == [1, 0, 2]  # n02, n01, n03 (reversed wnids.txt)
    for row in range(3):
        np.testing.assert_array_equal(arrays["test_x"][row], _pixels(files[f"val/images/val_{row}.JPEG"]))
    folder = tmp_path / "data" / "TINYIMG"
    assert (folder / "wnids.txt").read_text() == "n01\nn02\nn03\n"
    assert (folder / "names.txt").read_text().splitlines()[0] == "thing n01, other name"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("twice", "wnids.txt lists a wnid twice"),
        ("words", "words.txt has no line for n03"),
        ("unknown-train", "train/n07/images/n07_0.JPEG: n07 is not in wnids.txt"),
        ("empty-class", "no images in train/n02/images/"),
        ("fields", "line 1 has 2 tab-separated fields, expected 6"),
        ("val-wnid", "line 3: n07 is not in wnids.txt"),
        ("val-image", "line 1: no val/images/val_0.JPEG"),
        ("unlabelled", "val/images/extra.JPEG has no line in val/val_annotations.txt"),
        ("size", "train/n01/images/n01_0.JPEG is 32x32, but Tiny ImageNet images are 64x64"),
        ("no-wnids", "holds no wnids.txt"),
    ],
)
def test_a_source_off_the_layout_is_refused_in_one_line(tmp_path: Path, change: str, match: str) -> None:
    top = tmp_path / "tiny-imagenet-200"
    write_tiny(top)
    annotations = top / "val" / "val_annotations.txt"
    if change == "twice":
        (top / "wnids.txt").write_text("n03\nn01\nn02\nn01\n")
    elif change == "words":
        (top / "words.txt").write_text("n01\ta\nn02\tb\n")
    elif change == "unknown-train":
        (top / "train/n07/images").mkdir(parents=True)
        (top / "train/n07/images/n07_0.JPEG").write_bytes(b"x")
    elif change == "empty-class":
        for path in (top / "train/n02/images").iterdir():
            path.unlink()
    elif change == "fields":
        annotations.write_text("val_0.JPEG\tn01\n")
    elif change == "val-wnid":
        annotations.write_text(annotations.read_text().replace("n03", "n07", 1))
    elif change == "val-image":
        (top / "val/images/val_0.JPEG").unlink()
    elif change == "unlabelled":
        (top / "val/images/extra.JPEG").write_bytes(b"x")
    elif change == "size":
        Image.new("RGB", (32, 32)).save(top / "train/n01/images/n01_0.JPEG", "JPEG")
    else:
        (top / "wnids.txt").unlink()
    with pytest.raises(BenchmarkFormatError, match=match) as caught:
        prepare_tinyimagenet(top, tmp_path / "data")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "data" / "TINYIMG").exists()


def test_missing_source_and_unreadable_zip(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no such folder or zip"):
        prepare_tinyimagenet(tmp_path / "absent", tmp_path / "data")
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(BenchmarkFormatError, match="neither a folder nor a readable zip"):
        prepare_tinyimagenet(tmp_path / "bad.zip", tmp_path / "data")


WNIDS_200 = [f"n{i:08d}" for i in range(200, 0, -1)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding TINYIMG/ decoded from 200 classes x 1 train and 1 validation image."""
    base = tmp_path_factory.mktemp("tiny")
    write_tiny(base / "tiny-imagenet-200", WNIDS_200, train=1, val=1)
    prepare_tinyimagenet(base / "tiny-imagenet-200", base / "data")
    return base / "data"


def test_seq_tinyimg_is_10_tasks_of_20_with_the_authors_protocol(prepared: Path) -> None:
    bench = load_benchmark("seq-tinyimg", prepared)
    assert bench.n_tasks == 10
    assert bench.classes_per_task == (20,) * 10
    assert bench.num_classes == 200
    assert bench.input_shape == (3, 64, 64)
    assert bench.train_x.shape == (200, 3, 64, 64)
    assert bench.train_y.tolist() == list(range(200))
    assert sorted(bench.test_y.tolist()) == list(range(200))
    assert bench.class_names is not None
    assert bench.class_names[0] == "thing n00000001, other name"
    assert (bench.mean, bench.std) == ((0.4802, 0.4480, 0.3975), (0.2770, 0.2691, 0.2821))
    train = bench.train_transform
    assert isinstance(train, Compose)
    crop, normalize = train.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((64, 64), 4, True)
    assert isinstance(normalize, Normalize)
    assert normalize.mean == bench.mean
    assert normalize.std == bench.std
    x = bench.test_x[:2]
    expected = (x.float() / 255 - torch.tensor(bench.mean).view(1, 3, 1, 1)) / torch.tensor(bench.std).view(
        1, 3, 1, 1
    )
    torch.testing.assert_close(bench.test_transform(x), expected)
    defaults = benchmark_defaults("seq-tinyimg")
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (100, 32, 32, 0.03)
    assert (defaults.buffer_size, defaults.drop_last, defaults.backbone) == (200, False, "resnet18-cifar")
    assert defaults.backbone_options == {"width": 64, "in_channels": 3}


def test_seq_tinyimg_needs_the_decoded_files(prepared: Path, tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="seq-tinyimg needs a data root"):
        load_benchmark("seq-tinyimg", None)
    with pytest.raises(
        DataNotFoundError, match=r"TINYIMG/train_x.npy: Tiny ImageNet file missing: run `download_data"
    ):
        load_benchmark("seq-tinyimg", tmp_path)
    write_tiny(tmp_path / "few", train=1)
    prepare_tinyimagenet(tmp_path / "few", tmp_path / "data")
    with pytest.raises(BenchmarkFormatError, match=r"names\.txt: 3 lines, expected 200"):
        load_benchmark("seq-tinyimg", tmp_path / "data")


def test_download_fetches_the_zip_and_decodes_it(tmp_path: Path, monkeypatch) -> None:
    top = tmp_path / "build" / "tiny-imagenet-200"
    files = write_tiny(top)
    archive = tmp_path / "served.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name, payload in files.items():
            handle.writestr(f"tiny-imagenet-200/{name}", payload)
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    done = download_tinyimagenet(tmp_path / "data", archive.as_uri(), expected_md5=md5)
    assert (done.n_train, done.n_test) == (6, 3)
    assert (tmp_path / "data" / "tiny-imagenet-200.zip").read_bytes() == archive.read_bytes()
    with pytest.raises(BenchmarkFormatError, match=r"md5 .* differs"):
        download_tinyimagenet(tmp_path / "other", archive.as_uri())
    assert not (tmp_path / "other").exists()  # nothing kept, not even the data root it made
    calls = []

    def fake_fetch(url: str, target: Path, expected_md5: str) -> None:
        calls.append((url, target.name, expected_md5))
        target.write_bytes(archive.read_bytes())

    monkeypatch.setattr(tiny_module, "fetch", fake_fetch)
    assert download_data("tinyimagenet", tmp_path / "third") == tmp_path / "third" / "TINYIMG"
    assert calls == [(tiny_module.TINYIMG_URL, "tiny-imagenet-200.zip", tiny_module.TINYIMG_ARCHIVE_MD5)]
    result = prepare_data("tinyimagenet", tmp_path / "fourth", source=top)
    assert (
        str(result)
        == f"tinyimagenet: 6 train / 3 test images (1 converted to RGB) -> {tmp_path / 'fourth' / 'TINYIMG'}"
    )
