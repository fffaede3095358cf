"""``seq-tinyimg``: Tiny ImageNet (the CS231n release, 200 classes of 64x64 images) as 10 tasks of 20.

This module owns the official ``tiny-imagenet-200`` layout, read from the folder or from the zip
``tiny-imagenet-200.zip`` (optionally under one leading folder)::

    wnids.txt                                the 200 WordNet ids, one a line
    words.txt                                <wnid>\\t<names> for every WordNet id (names of the classes)
    train/<wnid>/images/<wnid>_<i>.JPEG      500 training images a class
    train/<wnid>/<wnid>_boxes.txt            bounding boxes (not read)
    val/images/val_<i>.JPEG                  the 10000 validation images: the test set
    val/val_annotations.txt                  <file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1>, a line an image
    test/images/test_<i>.JPEG                unlabelled (not read)

Every image is decoded once by :func:`prepare_tinyimagenet` (some are greyscale JPEGs: converted
to RGB) into ``<root>/TINYIMG/``: ``train_x.npy`` (N, 3, 64, 64) uint8, ``train_y.npy`` int64,
``test_x.npy``, ``test_y.npy`` (the validation images, as everyone evaluates on them, the test
labels being unpublished) and ``wnids.txt`` / ``names.txt`` (label i's wnid and words on line i).

Labels are the positions of the wnids in sorted order (what an ``ImageFolder`` over ``train/``
gives). The authors' code (mammoth ``datasets/seq_tinyimagenet.py`` at the tag ``neurips2020``)
reads arrays they preprocessed themselves and publish only as a download, so their label mapping
cannot be read from their code; sorted wnids is the convention of the torchvision-based
pipelines. Training images are in (label, file name) order, test images in
``val_annotations.txt``'s order.

Protocol (the authors' ``seq-tinyimg`` and ``utils/best_args.py``): classes in label order, 10
tasks x 20 classes; random 64x64 crop after 4-pixel zero padding and a horizontal flip, then
normalisation by mean (0.4802, 0.4480, 0.3975) and std (0.2770, 0.2691, 0.2821); their ResNet18
(the CIFAR layout, width 64, global average pooling over the 8x8 maps of a 64x64 input); 100
epochs per task, batch 32, replay minibatch 32, SGD at a constant lr 0.03 (their ``sgd``, DER and
DER++ entries; presets set each method's own); buffer 200; each epoch's last partial batch kept.
No strong augmentation is defined (the DER paper has no X-DER).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from xder_data._archive import fetch, md5_file
from xder_data._image_copy import ImageCopy, staged_folder
from xder_data.augment import Compose, CropFlip, Normalize
from xder_data.benchmark import Benchmark, BenchmarkDefaults, Progress, no_progress, register_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, download_call, one_line, prepare_call

__all__ = [
    "SEQ_TINYIMG_DEFAULTS",
    "TINYIMG_ARCHIVE",
    "TINYIMG_ARCHIVE_MD5",
    "TINYIMG_FOLDER",
    "TINYIMG_MEAN",
    "TINYIMG_STD",
    "TINYIMG_URL",
    "TinyImageNetImport",
    "download_tinyimagenet",
    "prepare_tinyimagenet",
    "seq_tinyimg",
]

TINYIMG_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINYIMG_ARCHIVE = "tiny-imagenet-200.zip"
TINYIMG_ARCHIVE_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
TINYIMG_FOLDER = "TINYIMG"
"""The folder under the data root that :func:`prepare_tinyimagenet` writes (the authors' name)."""
TINYIMG_MEAN = (0.4802, 0.4480, 0.3975)
TINYIMG_STD = (0.2770, 0.2691, 0.2821)

N_CLASSES = 200
_SIZE = 64
_FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy", "wnids.txt", "names.txt")

SEQ_TINYIMG_DEFAULTS = BenchmarkDefaults(
    epochs=100,  # best_args.py seq-tinyimg: n_epochs 100 for every method
    batch_size=32,  # best_args.py seq-tinyimg: batch 32, replay minibatch 32
    minibatch_size=32,
    lr=0.03,  # best_args.py: sgd, der and derpp at buffer 200
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",
    buffer_size=200,  # the smallest of the DER paper's buffers (200, 500, 5120)
    backbone="resnet18-cifar",  # mammoth seq-tinyimg: resnet18(200), nf 64, 3x3 stem, global pooling
    backbone_options={"width": 64, "in_channels": 3},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)

COPY = ImageCopy(
    dataset="Tiny ImageNet",
    splits=("train", "val"),
    size=_SIZE,
    layout="the official tiny-imagenet-200 folder or zip: wnids.txt, words.txt, "
    "train/<wnid>/images/*.JPEG, val/images/*.JPEG with val/val_annotations.txt",
)


@dataclass(frozen=True)
class TinyImageNetImport:
    """What :func:`prepare_tinyimagenet` wrote: the folder, the images per split and how many were
    converted to RGB."""

    path: Path
    n_train: int
    n_test: int
    converted: int


# ---------------------------------------------------------------------------------------------
# The official layout, from a folder or a zip


class _Source:
    """The files of a ``tiny-imagenet-200`` folder or zip, by path relative to where ``wnids.txt`` is."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self._zip: zipfile.ZipFile | None = None
        self.files: dict[str, str] = {}
        if source.is_dir():
            top = source if (source / "wnids.txt").is_file() else source / "tiny-imagenet-200"
            for path in top.rglob("*"):
                relative = path.relative_to(top).as_posix()
                if path.is_file() and not any(p.startswith(".") for p in relative.split("/")):
                    self.files[relative] = str(path)
        elif source.is_file():
            try:
                self._zip = zipfile.ZipFile(source)
                names = [info.filename for info in self._zip.infolist() if not info.is_dir()]
            except (zipfile.BadZipFile, OSError) as exc:
                raise COPY.bad(source, f"neither a folder nor a readable zip ({one_line(exc)})") from exc
            tops = sorted((n for n in names if PurePosixPath(n).name == "wnids.txt"), key=len)
            prefix = tops[0][: -len("wnids.txt")] if tops and tops[0].count("/") <= 1 else ""
            self.files = {n[len(prefix) :]: n for n in names if n.startswith(prefix)}
        else:
            raise DataNotFoundError(
                f"{source}: no such folder or zip: give prepare_data.source the tiny-imagenet-200 folder "
                "or zip"
            )
        if "wnids.txt" not in self.files:
            raise COPY.bad(source, "holds no wnids.txt (at its top or under tiny-imagenet-200/)")

    def read(self, name: str) -> bytes:
        if name not in self.files:
            raise COPY.bad(self.source, f"holds no {name}")
        if self._zip is not None:
            return self._zip.read(self.files[name])
        return Path(self.files[name]).read_bytes()

    def text(self, name: str) -> list[str]:
        """The non-empty lines of a text file."""
        return [line for line in self.read(name).decode("utf-8").splitlines() if line.strip()]

    def reader(self, name: str) -> Callable[[], bytes]:
        return lambda: self.read(name)

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def _classes(src: _Source) -> tuple[list[str], list[str]]:
    """The wnids in sorted order (label i is ``wnids[i]``) and their words from ``words.txt``."""
    wnids = [line.strip() for line in src.text("wnids.txt")]
    if len(set(wnids)) != len(wnids):
        raise COPY.bad(src.source, "wnids.txt lists a wnid twice")
    words = {}
    for line in src.text("words.txt"):
        wnid, _, text = line.partition("\t")
        words[wnid.strip()] = text.strip()
    missing = [w for w in wnids if w not in words]
    if missing:
        raise COPY.bad(src.source, f"words.txt has no line for {missing[0]}")
    ordered = sorted(wnids)
    return ordered, [words[w] for w in ordered]


def _train_entries(src: _Source, label_of: dict[str, int]) -> list[tuple[int, str]]:
    """``(label, path)`` of every training image, in (label, file name) order."""
    entries = []
    for name in src.files:
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "train" and parts[2] == "images":
            if parts[1] not in label_of:
                raise COPY.bad(src.source, f"{name}: {parts[1]} is not in wnids.txt")
            entries.append((label_of[parts[1]], name))
    entries.sort()
    empty = sorted(set(label_of) - {name.split("/")[1] for _, name in entries})
    if empty:
        raise COPY.bad(src.source, f"no images in train/{empty[0]}/images/")
    return entries


def _val_entries(src: _Source, label_of: dict[str, int]) -> list[tuple[int, str]]:
    """``(label, path)`` of every validation image, in ``val_annotations.txt``'s order."""
    entries = []
    for number, line in enumerate(src.text("val/val_annotations.txt"), 1):
        fields = line.split("\t")
        if len(fields) != 6:
            raise COPY.bad(
                src.source,
                f"val/val_annotations.txt line {number} has {len(fields)} tab-separated fields, expected 6 "
                "(file, wnid, x0, y0, x1, y1)",
            )
        file, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in label_of:
            raise COPY.bad(src.source, f"val/val_annotations.txt line {number}: {wnid} is not in wnids.txt")
        if f"val/images/{file}" not in src.files:
            raise COPY.bad(src.source, f"val/val_annotations.txt line {number}: no val/images/{file}")
        entries.append((label_of[wnid], f"val/images/{file}"))
    unlabelled = sorted({n for n in src.files if n.startswith("val/images/")} - {name for _, name in entries})
    if unlabelled:
        raise COPY.bad(src.source, f"{unlabelled[0]} has no line in val/val_annotations.txt")
    empty = sorted(set(range(len(label_of))) - {label for label, _ in entries})
    if empty:
        wnid = next(w for w, i in label_of.items() if i == empty[0])
        raise COPY.bad(src.source, f"no validation image of {wnid} in val/val_annotations.txt")
    return entries


def prepare_tinyimagenet(
    source: str | Path, root: str | Path, *, progress: Progress = no_progress
) -> TinyImageNetImport:
    """Decode the official ``tiny-imagenet-200`` folder or zip into ``<root>/TINYIMG/``.

    Every image is decoded with Pillow (greyscale ones converted to RGB) and must be 64x64; the
    labels are the positions in the sorted ``wnids.txt``. Everything is read and checked first,
    then written into a staging folder inside ``root`` and moved into place, so that a failure
    leaves any earlier copy untouched.

    Raises:
        DataNotFoundError: ``source`` does not exist.
        BenchmarkFormatError: not the official layout (a file missing, a wnid twice or unknown, a
            class without images, an annotation line without its image or of the wrong shape), or
            an image Pillow cannot read or not 64x64.
    """
    source, root = Path(source), Path(root)
    src = _Source(source)
    try:
        wnids, names = _classes(src)
        label_of = {wnid: i for i, wnid in enumerate(wnids)}
        splits = {"train": _train_entries(src, label_of), "test": _val_entries(src, label_of)}
        entries = [(split, label, name) for split, rows in splits.items() for label, name in rows]
        images = np.empty((len(entries), 3, _SIZE, _SIZE), dtype=np.uint8)
        converted = 0
        for i, (_, _, name) in enumerate(progress(entries)):
            pixels, was_converted = COPY.decode(source, name, src.reader(name))
            images[i] = pixels.transpose(2, 0, 1)
            converted += was_converted
    finally:
        src.close()
    n_train = len(splits["train"])
    with staged_folder(root, TINYIMG_FOLDER, _FILES) as staging:
        for split, rows, x in (
            ("train", splits["train"], images[:n_train]),
            ("test", splits["test"], images[n_train:]),
        ):
            np.save(staging / f"{split}_x.npy", x)
            np.save(staging / f"{split}_y.npy", np.array([label for label, _ in rows], dtype=np.int64))
        (staging / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
        (staging / "names.txt").write_text("".join(f"{n}\n" for n in names))
    return TinyImageNetImport(root / TINYIMG_FOLDER, n_train, len(splits["test"]), converted)


def download_tinyimagenet(
    root: str | Path,
    url: str = TINYIMG_URL,
    *,
    expected_md5: str = TINYIMG_ARCHIVE_MD5,
    progress: Progress = no_progress,
) -> TinyImageNetImport:
    """Download ``tiny-imagenet-200.zip`` into ``root`` (md5-checked; one already there with the
    right md5 is reused and kept), then decode it (:func:`prepare_tinyimagenet`) without unpacking.

    Raises:
        DataNotFoundError: the download failed.
        BenchmarkFormatError: the md5 differs (nothing is kept), or the zip is not the official layout.
    """
    root = Path(root)
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    archive = root / TINYIMG_ARCHIVE
    try:
        if not (archive.is_file() and md5_file(archive) == expected_md5):
            fetch(url, archive, expected_md5)
    except BaseException:
        if created and not any(root.iterdir()):  # leave no empty data root behind (offline, Ctrl-C)
            root.rmdir()
        raise
    return prepare_tinyimagenet(archive, root, progress=progress)


# ---------------------------------------------------------------------------------------------
# The benchmark


def _fix(root: Path) -> str:
    return (
        f"run `{download_call('tinyimagenet', root)}` or decode the official tiny-imagenet-200 folder or zip "
        f"with `{prepare_call('tinyimagenet', root, source='DIR')}`"
    )


def _bad(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(
        f"{path}: {problem}; not what prepare_data('tinyimagenet') writes: {_fix(path.parent.parent)}"
    )


def _load(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    x_path, y_path = folder / f"{split}_x.npy", folder / f"{split}_y.npy"
    try:
        x, y = np.load(x_path, allow_pickle=False), np.load(y_path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _bad(x_path, f"not a readable .npy pair with {y_path.name} ({one_line(exc)})") from exc
    if x.dtype != np.uint8 or x.shape[1:] != (3, _SIZE, _SIZE):
        raise _bad(x_path, f"{x.dtype} with shape {x.shape}, expected uint8 (N, 3, 64, 64)")
    if y.dtype != np.int64 or y.shape != (len(x),):
        raise _bad(y_path, f"{y.dtype} with shape {y.shape}, expected int64 ({len(x)},)")
    if len(np.setdiff1d(np.arange(N_CLASSES), y)) or len(np.setdiff1d(y, np.arange(N_CLASSES))):
        raise _bad(y_path, f"labels must cover 0..{N_CLASSES - 1}, each with images")
    return x, y


@register_benchmark("seq-tinyimg", defaults=SEQ_TINYIMG_DEFAULTS)
def seq_tinyimg(root: Path | None) -> Benchmark:
    """Load ``seq-tinyimg`` from ``<root>/TINYIMG/`` (written by :func:`prepare_tinyimagenet`).

    Returns a benchmark with ``train_x`` (N, 3, 64, 64) uint8 (100000 rows for the real data),
    ``test_x`` (the 10000 validation images), labels 0..199 (sorted wnids) and ``class_names``
    (their ``words.txt`` entries).

    Raises:
        DataNotFoundError: ``root`` is None, or the folder or one of its files is missing.
        BenchmarkFormatError: a file has the wrong dtype or shape, or the classes are not 200,
            each with images.
    """
    if root is None:
        raise DataNotFoundError(
            "seq-tinyimg needs a data root: pass run.data_root ROOT (the folder that holds "
            f"{TINYIMG_FOLDER}/), after `{download_call('tinyimagenet', 'ROOT')}`"
        )
    root = Path(root)
    folder = root / TINYIMG_FOLDER
    for name in _FILES:
        if not (folder / name).is_file():
            raise DataNotFoundError(f"{folder / name}: Tiny ImageNet file missing: {_fix(root)}")
    names = tuple((folder / "names.txt").read_text().splitlines())
    if len(names) != N_CLASSES:
        raise _bad(folder / "names.txt", f"{len(names)} lines, expected {N_CLASSES}")
    train_x, train_y = _load(folder, "train")
    test_x, test_y = _load(folder, "test")
    normalize = Normalize(TINYIMG_MEAN, TINYIMG_STD)
    return Benchmark(
        name="seq-tinyimg",
        n_tasks=10,
        classes_per_task=(20,) * 10,
        class_order=tuple(range(N_CLASSES)),
        input_shape=(3, _SIZE, _SIZE),
        mean=TINYIMG_MEAN,
        std=TINYIMG_STD,
        train_x=torch.from_numpy(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=torch.from_numpy(test_x),
        test_y=torch.from_numpy(test_y),
        defaults=SEQ_TINYIMG_DEFAULTS,
        train_transform=Compose(CropFlip(_SIZE, padding=4, flip=True), normalize),
        test_transform=normalize,
        class_names=names,
    )
