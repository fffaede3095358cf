"""prepare_cifar100: an image-folder copy of CIFAR-100 into the official python-version files, read
back by seq-cifar100; and the super-class table it takes the coarse labels from.

The copies are tiny but in exactly the real layout: ``train/<fine class>/*`` and
``test/<fine class>/*`` for all 100 fine classes (2 train and 1 test image a class, the counts
passed as keyword arguments), PNG (lossless: pixels compared exactly) or JPEG, in a folder or a
``.tar.gz``.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import tarfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from xder_data import (
    BenchmarkFormatError,
    DataNotFoundError,
    cifar100_coarse_names,
    cifar100_superclasses,
    load_benchmark,
    prepare_cifar100,
)
from xder_data import cifar100 as cifar100_module

# meta's fine_label_names: the 100 fine classes in alphabetical order (fine label = position).
FINE = (  # noqa: SIM905
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly "
    "camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup "
    "dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower "
    "leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid "
    "otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray "
    "road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar "
    "sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle "
    "wardrobe whale willow_tree wolf woman worm"
).split()
COARSE = (  # noqa: SIM905
    "aquatic_mammals fish flowers food_containers fruit_and_vegetables household_electrical_devices "
    "household_furniture insects large_carnivores large_man-made_outdoor_things "
    "large_natural_outdoor_scenes large_omnivores_and_herbivores medium_mammals "
    "non-insect_invertebrates people reptiles small_mammals trees vehicles_1 vehicles_2"
).split()
# The super-class of each fine class (in FINE order), as the official files' labels pair them;
# reproduced in many code bases (e.g. continuum's ``cifar100_coarse_labels``).
COARSE_OF_FINE = [
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
]  # fmt: skip
PER_CLASS = {"train": 2, "test": 1}
SMALL = {"per_class": (2, 1)}


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# The super-class table (package data)


def test_the_table_is_20_superclasses_of_5_fine_classes_in_alphabetical_order() -> None:
    table = cifar100_superclasses()
    assert list(table) == COARSE == sorted(COARSE)
    assert all(len(members) == 5 for members in table.values())
    fine = [name for members in table.values() for name in members]
    assert len(fine) == len(set(fine)) == 100
    assert sorted(fine) == FINE
    assert all(list(members) == sorted(members) for members in table.values())
    superclass = {name: c for c, members in enumerate(table.values()) for name in members}
    assert [superclass[name] for name in FINE] == COARSE_OF_FINE


def test_the_table_ships_as_package_data_naming_its_source() -> None:
    data = resources.files("xder_data") / "cifar100_superclasses.toml"
    text = data.read_text(encoding="utf-8")
    assert "Krizhevsky" in text
    assert "Learning Multiple Layers of Features from Tiny Images" in text
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in text
    table = cifar100_superclasses()
    table["people"] = ()  # a copy: the shipped table is unchanged
    assert cifar100_superclasses()["people"] == ("baby", "boy", "girl", "man", "woman")


# ---------------------------------------------------------------------------------------------
# Tiny copies in the real layout


def _encode(pixels: np.ndarray, form: str, grey: bool = False) -> bytes:
    image = Image.fromarray(pixels)
    if grey:
        image = image.convert("L")
    buffer = io.BytesIO()
    image.save(buffer, format=form)
    return buffer.getvalue()


def copy_files(form: str = "PNG", seed: int = 0) -> dict[str, tuple[np.ndarray, bytes]]:
    """``{split/class/file: (pixels written (HWC), encoded bytes)}`` for all 100 classes; in the
    JPEG copy, every image of ``bee`` is greyscale."""
    rng = np.random.default_rng(seed)
    suffix = ".png" if form == "PNG" else ".jpg"
    files = {}
    for split, count in PER_CLASS.items():
        for name in FINE:
            for i in range(count):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                data = _encode(pixels, form, grey=form == "JPEG" and name == "bee")
                files[f"{split}/{name}/{name}_s_{i:06d}{suffix}"] = (pixels, data)
    return files


def write_copy(source: Path, files: dict[str, tuple[np.ndarray, bytes]]) -> Path:
    """Write ``files`` as a folder, or as a ``.tar.gz`` when ``source`` ends so."""
    if source.name.endswith(".tar.gz"):
        source.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(source, "w:gz") as tar:
            for relative, (_, data) in sorted(files.items(), key=lambda item: item[0][::-1]):
                info = tarfile.TarInfo(relative)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return source
    for relative, (_, data) in files.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(data)
    return source


def _load(path: Path, encoding: str = "latin1") -> dict[Any, Any]:
    with path.open("rb") as handle:
        return pickle.load(handle, encoding=encoding)


@pytest.mark.parametrize(
    ("form", "container"), [("PNG", "folder"), ("PNG", "tar"), ("JPEG", "folder"), ("JPEG", "tar")]
)
def test_prepare_then_read_back_through_seq_cifar100(tmp_path: Path, form: str, container: str) -> None:
    files = copy_files(form)
    name = "copy.tar.gz" if container == "tar" else "copy"
    source = write_copy(tmp_path / name, files)
    root = tmp_path / "data"
    done = prepare_cifar100(source, root, **SMALL)
    folder = root / "cifar-100-python"
    converted = 3 if form == "JPEG" else 0  # bee's 2 train + 1 test greyscale JPEGs
    assert (done.folder, done.n_train, done.n_test, done.converted) == (folder, 200, 100, converted)
    assert sorted(p.name for p in folder.iterdir()) == ["meta", "test", "train"]
    assert [p.name for p in root.iterdir()] == ["cifar-100-python"]  # no staging folder left

    meta = _load(folder / "meta")
    assert meta == {"fine_label_names": FINE, "coarse_label_names": COARSE}
    # As the official files: bytes keys under encoding='bytes', str keys under latin1 (torchvision).
    raw = _load(folder / "train", "bytes")
    assert sorted(raw) == [b"batch_label", b"coarse_labels", b"data", b"filenames", b"fine_labels"]
    assert raw[b"batch_label"] == b"training batch 1 of 1"
    assert _load(folder / "test")["batch_label"] == "testing batch 1 of 1"

    bench = load_benchmark("seq-cifar100", root)
    assert bench.class_names == tuple(FINE)
    assert bench.coarse_labels.tolist() == COARSE_OF_FINE
    assert cifar100_coarse_names(root) == tuple(COARSE)
    seen = set()
    for split, x, y in (("train", bench.train_x, bench.train_y), ("test", bench.test_x, bench.test_y)):
        obj = _load(folder / split)
        assert obj["data"].dtype == np.uint8
        assert obj["data"].shape == (len(y), 3072)
        assert obj["fine_labels"] == y.tolist()
        assert obj["coarse_labels"] == [COARSE_OF_FINE[f] for f in obj["fine_labels"]]
        assert np.bincount(y.numpy()).tolist() == [PER_CLASS[split]] * 100
        for image, label, filename in zip(x, y.tolist(), obj["filenames"], strict=True):
            key = f"{split}/{filename}"
            assert filename.split("/")[0] == FINE[label]
            pixels, data = files[key]
            expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            if form == "PNG":
                assert np.array_equal(expected, pixels)  # lossless: the pixels written
            assert np.array_equal(image.permute(1, 2, 0).numpy(), expected), key
            seen.add(key)
    assert seen == set(files)
    assert bench.n_tasks == 10


def test_prepare_replaces_an_earlier_copy(tmp_path: Path) -> None:
    root = tmp_path / "data"
    prepare_cifar100(write_copy(tmp_path / "a", copy_files(seed=0)), root, **SMALL)
    (root / "cifar-100-python" / "file.txt~").write_text("kept")  # as the official archive holds
    done = prepare_cifar100(write_copy(tmp_path / "b", copy_files(seed=1)), root, **SMALL)
    again = load_benchmark("seq-cifar100", root)
    files = copy_files(seed=1)
    name = _load(done.folder / "test")["filenames"][0]
    assert np.array_equal(again.test_x[0].permute(1, 2, 0).numpy(), files[f"test/{name}"][0])
    assert sorted(p.name for p in done.folder.iterdir()) == ["file.txt~", "meta", "test", "train"]
    assert [p.name for p in root.iterdir()] == ["cifar-100-python"]


# ---------------------------------------------------------------------------------------------
# Bad copies: one line, nothing half-written


def _break(source: Path, change: str) -> None:
    if change == "missing class":
        shutil.rmtree(source / "train" / "apple")
    elif change == "extra class":
        (source / "test" / "dog").mkdir()
        shutil.copy(source / "test" / "bear" / "bear_s_000000.png", source / "test" / "dog" / "dog_s_0.png")
    elif change == "misnamed class":
        os.rename(source / "train" / "maple_tree", source / "train" / "maple")
    elif change == "too few":
        (source / "train" / "bee" / "bee_s_000001.png").unlink()
    elif change == "too many":
        shutil.copy(
            source / "test" / "bed" / "bed_s_000000.png", source / "test" / "bed" / "bed_s_000009.png"
        )
    elif change == "big image":
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(
            source / "train" / "cattle" / "cattle_s_000000.png"
        )
    elif change == "corrupt":
        path = source / "train" / "shark" / "shark_s_000001.png"
        path.write_bytes(path.read_bytes()[:60])
    elif change == "not an image":
        (source / "test" / "worm" / "worm_s_000000.png").write_bytes(b"<html>not found</html>")
    elif change == "no train":
        shutil.rmtree(source / "train")
    elif change == "no test":
        shutil.rmtree(source / "test")


BAD = [
    ("missing class", "no images in train/apple/"),
    ("extra class", "unexpected test/dog/"),
    ("misnamed class", "unexpected train/maple/ and no images in train/maple_tree/"),
    ("too few", "train/bee/ holds 1 images, expected 2 per class"),
    ("too many", "test/bed/ holds 2 images, expected 1 per class"),
    ("big image", "train/cattle/cattle_s_000000.png is 64x64, but CIFAR-100 images are 32x32"),
    ("corrupt", "train/shark/shark_s_000001.png is not an image Pillow can read"),
    ("not an image", "test/worm/worm_s_000000.png is not an image Pillow can read"),
    ("no train", "holds no train/<class>/ images"),
    ("no test", "holds no test/<class>/ images"),
]


@pytest.mark.parametrize(("change", "match"), BAD)
def test_a_bad_copy_is_one_line_and_writes_nothing(tmp_path: Path, change: str, match: str) -> None:
    source = write_copy(tmp_path / "copy", copy_files())
    _break(source, change)
    root = tmp_path / "data"
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        prepare_cifar100(source, root, **SMALL)
    message = _one_line(exc)
    assert message.startswith(f"{source}: ")
    assert "expected an image-folder copy of CIFAR-100" in message
    assert not root.exists() or list(root.iterdir()) == []


@pytest.mark.parametrize(("change", "match"), [BAD[1], BAD[3], BAD[6]])
def test_a_bad_archive_leaves_the_earlier_copy(tmp_path: Path, change: str, match: str) -> None:
    root = tmp_path / "data"
    prepare_cifar100(write_copy(tmp_path / "good", copy_files()), root, **SMALL)
    folder = root / "cifar-100-python"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    bad = write_copy(tmp_path / "bad", copy_files(seed=2))
    _break(bad, change)
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bad / "train", arcname="train")
        tar.add(bad / "test", arcname="test")
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        prepare_cifar100(archive, root, **SMALL)
    assert _one_line(exc).startswith(f"{archive}: ")
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before
    assert [p.name for p in root.iterdir()] == ["cifar-100-python"]


def test_a_failure_while_writing_leaves_no_partial_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_copy(tmp_path / "copy", copy_files())
    written = []

    def fail_on_the_second(path: Path, obj: dict[bytes, Any]) -> None:
        if written:
            raise OSError("No space left on device")
        path.write_bytes(b"partial")
        written.append(path)

    monkeypatch.setattr(cifar100_module, "write_pickle", fail_on_the_second)
    root = tmp_path / "data"
    with pytest.raises(OSError, match="No space left"):
        prepare_cifar100(source, root, **SMALL)
    assert written
    assert list(root.iterdir()) == []  # the staging folder is gone, no cifar-100-python/


def test_the_default_counts_are_cifar100s(tmp_path: Path) -> None:
    source = write_copy(tmp_path / "copy", copy_files())
    with pytest.raises(BenchmarkFormatError, match="test/apple/ holds 1 images, expected 100 per class"):
        prepare_cifar100(source, tmp_path / "data")


def test_source_missing_or_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no such folder or archive") as exc:
        prepare_cifar100(tmp_path / "absent.tar.gz", tmp_path / "data", **SMALL)
    _one_line(exc)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(BenchmarkFormatError, match="neither a folder nor a readable tar archive") as exc:
        prepare_cifar100(junk, tmp_path / "data", **SMALL)
    _one_line(exc)
    assert not (tmp_path / "data").exists()


def test_a_missing_folder_now_also_names_the_importer(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cifar100", tmp_path)
    message = _one_line(exc)
    assert f"download_data('cifar100', '{tmp_path}')" in message
    assert f"prepare_data('cifar100', '{tmp_path}', source='DIR')" in message
