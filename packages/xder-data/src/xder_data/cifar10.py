"""``seq-cifar10``: CIFAR-10 ("python version", Krizhevsky 2009) as 5 tasks of 2 classes.

Reads the files exactly as the official archive ``cifar-10-python.tar.gz`` unpacks them::

    <root>/cifar-10-batches-py/data_batch_1 .. data_batch_5   pickled dicts (Python 2): data (10000,
                                                              3072) uint8, labels, filenames, batch_label
    <root>/cifar-10-batches-py/test_batch                     the same, the 10000 test images
    <root>/cifar-10-batches-py/batches.meta                   label_names (10), num_cases_per_batch, num_vis

Each ``data`` row holds the R plane (32x32, row-major), then G, then B; the pickles are read as
``seq-cifar100``'s are (:mod:`xder_data._cifar_format`: Python 2 or 3, ``bytes`` or ``str`` keys).
The training set is the five batches in order.

Protocols (the DER paper, Buzzega et al., NeurIPS 2020, Sec. 4.1 and App. F, and the authors'
mammoth ``seq-cifar10``):

* ``paper`` (default): classes in natural label order (airplane, automobile | bird, cat | deer, dog
  | frog, horse | ship, truck), 5 tasks x 2 classes; random 32x32 crop after 4-pixel zero padding
  and a horizontal flip, then normalisation by mean (0.4914, 0.4822, 0.4465) and std (0.2470, 0.2435,
  0.2615); the CIFAR ResNet18 (width 64); 50 epochs per task, batch 32, replay minibatch 32, SGD
  without momentum at a constant lr; buffer 200; each epoch's last partial batch kept (the
  authors' DataLoader).
* ``laptop``: the same data, transforms and batches at width 8 with 2 epochs per task, so that one
  X-DER run fits in about a quarter of an hour on a 2-core CPU (README, "Split CIFAR-10").

The strong augmentation for X-DER's future preparation is :class:`StrongAugment` at 32x32 (the
DER paper has no X-DER; these are the X-DER paper's CIFAR settings). Pickles can run code when
loaded: read only files you trust (the official archive, checked with :func:`verify_cifar10`, or
the files :func:`prepare_cifar10` writes).
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import shutil
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np
import torch

from xder_data._archive import download_folder, md5_file
from xder_data._cifar_format import CifarFiles
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line

__all__ = [
    "CIFAR10_ARCHIVE",
    "CIFAR10_ARCHIVE_MD5",
    "CIFAR10_CLASSES",
    "CIFAR10_FOLDER",
    "CIFAR10_MD5",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR10_URL",
    "SEQ_CIFAR10_DEFAULTS",
    "SEQ_CIFAR10_LAPTOP",
    "CIFAR10Import",
    "download_cifar10",
    "prepare_cifar10",
    "seq_cifar10",
    "verify_cifar10",
]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
"""md5 of each unpacked file of the official archive (the sums torchvision checks)."""

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
"""``batches.meta``'s ``label_names``: label i is ``CIFAR10_CLASSES[i]``."""

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2615)

N_CLASSES = 10
_SIZE = 32
_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
_SPLIT_KEYS = ("data", "labels", "filenames", "batch_label")

SEQ_CIFAR10_DEFAULTS = BenchmarkDefaults(
    epochs=50,  # DER paper Sec. 4.1: 50 epochs per task on Seq-CIFAR-10
    batch_size=32,  # mammoth seq-cifar10: batch 32, replay minibatch 32 (utils/best_args.py)
    minibatch_size=32,
    lr=0.03,  # DER and DER++'s selected lr (DER paper App. F); presets set each method's own
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",  # a constant lr: the DER paper's Seq-CIFAR-10 has no schedule
    buffer_size=200,  # the smallest of the DER paper's buffers (200, 500, 5120)
    backbone="resnet18-cifar",  # DER paper Sec. 4.1: ResNet18 (the CIFAR variant, 3x3 stem)
    backbone_options={"width": 64, "in_channels": 3},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)

SEQ_CIFAR10_LAPTOP = dataclasses.replace(
    SEQ_CIFAR10_DEFAULTS, epochs=2, backbone_options={"width": 8, "in_channels": 3}
)
"""``--protocol laptop``: the paper protocol at width 8 with 2 epochs per task (README)."""

FILES = CifarFiles(
    dataset="CIFAR-10",
    benchmark="seq-cifar10",
    folder=CIFAR10_FOLDER,
    archive=CIFAR10_ARCHIVE,
    download="cifar10",
    prepare="cifar10",
)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 3, 32, 32) uint8, labels (N,) int64)`` of one batch file."""
    obj = FILES.read_pickle(path)
    FILES.require_keys(path, obj, _SPLIT_KEYS)
    images = FILES.images(path, obj)
    labels = FILES.labels(path, obj, "labels", images.shape[0], N_CLASSES)
    FILES.filenames(path, obj, images.shape[0])
    return images, labels


def _read_names(root: Path) -> tuple[str, ...]:
    path = FILES.file(root, "batches.meta")
    obj = FILES.read_pickle(path)
    FILES.require_keys(path, obj, ("label_names",))
    return FILES.names(path, obj, "label_names", N_CLASSES)


def _every_class(path: Path, labels: np.ndarray) -> None:
    missing = np.setdiff1d(np.arange(N_CLASSES), labels)
    if len(missing):
        raise FILES.bad(path, f"class {missing[0]} has no images (CIFAR-10 has {N_CLASSES})")


@register_benchmark("seq-cifar10", defaults=SEQ_CIFAR10_DEFAULTS, protocols={"laptop": SEQ_CIFAR10_LAPTOP})
def seq_cifar10(root: Path | None) -> Benchmark:
    """Load ``seq-cifar10`` from ``<root>/cifar-10-batches-py/`` in natural class order.

    Returns a benchmark with ``train_x`` (N, 3, 32, 32) uint8 (50000 rows for the real data, the
    five batches in order), ``test_x`` (10000 rows), labels 0..9 and ``class_names``.

    Raises:
        DataNotFoundError: ``root`` is None, or the folder or one of its files is missing.
        BenchmarkFormatError: a file is truncated, not a pickle, or has a wrong key, dtype,
            shape, label range or name count, or a class has no images.
    """
    folder = FILES.path(root)
    root = folder.parent
    names = _read_names(root)
    parts = [_read_batch(FILES.file(root, name)) for name in _TRAIN_BATCHES]
    train_x = np.concatenate([images for images, _ in parts])
    train_y = np.concatenate([labels for _, labels in parts])
    _every_class(folder / _TRAIN_BATCHES[0], train_y)
    test_path = FILES.file(root, "test_batch")
    test_x, test_y = _read_batch(test_path)
    _every_class(test_path, test_y)
    return Benchmark(
        name="seq-cifar10",
        n_tasks=5,
        classes_per_task=(2,) * 5,
        class_order=tuple(range(N_CLASSES)),
        input_shape=(3, _SIZE, _SIZE),
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        train_x=torch.from_numpy(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=torch.from_numpy(test_x),
        test_y=torch.from_numpy(test_y),
        defaults=SEQ_CIFAR10_DEFAULTS,
        train_transform=Compose(CropFlip(_SIZE, padding=4, flip=True), Normalize(CIFAR10_MEAN, CIFAR10_STD)),
        test_transform=Normalize(CIFAR10_MEAN, CIFAR10_STD),
        strong_transform=StrongAugment(_SIZE, CIFAR10_MEAN, CIFAR10_STD),
        class_names=names,
    )


# ---------------------------------------------------------------------------------------------
# Integrity and download


def verify_cifar10(root: str | Path) -> list[str]:
    """md5-check the seven files against the official ones.

    Returns:
        The paths (as str, in the order of :data:`CIFAR10_MD5`) of the files whose md5 differs; an
        empty list means the data are the official ones (files written by
        :func:`prepare_cifar10` from a re-encoded copy differ, as expected).

    Raises:
        DataNotFoundError: the folder or one of the files is missing.
    """
    root = Path(root)
    paths = [FILES.file(root, name) for name in CIFAR10_MD5]
    return [str(path) for path in paths if md5_file(path) != CIFAR10_MD5[path.name]]


def download_cifar10(
    root: str | Path, url: str = CIFAR10_URL, *, expected_md5: str = CIFAR10_ARCHIVE_MD5
) -> Path:
    """Download ``cifar-10-python.tar.gz``, check its md5 and unpack it under ``root``.

    As :func:`~xder_data.download_cifar100`: streamed to a ``.part`` file and renamed once its md5
    matches (an archive already in ``root`` with the right md5 is reused and kept), unpacked
    through a staging folder that accepts only plain files and folders under
    ``cifar-10-batches-py/``.

    Returns:
        The folder ``<root>/cifar-10-batches-py``.

    Raises:
        DataNotFoundError: the download failed.
        BenchmarkFormatError: the md5 differs (nothing is kept), or the archive is unreadable,
            unsafe or lacks one of the seven files.
    """
    return download_folder(Path(root), url, CIFAR10_ARCHIVE, expected_md5, CIFAR10_FOLDER, tuple(CIFAR10_MD5))


# ---------------------------------------------------------------------------------------------
# Import from an image-folder copy

Progress = Callable[[Iterable[Any]], Iterable[Any]]
"""Wraps the iterable a converter walks through (e.g. ``tqdm``); the identity by default."""

_SPLITS = ("train", "test")
_SHUFFLE_SEED = 0


def _no_progress(items: Iterable[Any]) -> Iterable[Any]:
    return items


@dataclass(frozen=True)
class CIFAR10Import:
    """What :func:`prepare_cifar10` wrote: the folder and the images per split."""

    folder: Path
    n_train: int
    n_test: int
    converted: int
    """Images that were not RGB (e.g. greyscale) and were converted to RGB."""


class _Python2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (SHORT_BINSTRING/BINSTRING), as the official files were
    written: they load with ``str`` keys under ``encoding='latin1'`` (torchvision) and with
    ``bytes`` keys under ``encoding='bytes'``."""

    dispatch: ClassVar[dict[type, Any]] = dict(pickle._Pickler.dispatch)

    def _save_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_python2_str


def _write_pickle(path: Path, obj: dict[bytes, Any]) -> None:
    with path.open("wb") as handle:
        _Python2Pickler(handle, protocol=2).dump(obj)
        handle.flush()
        os.fsync(handle.fileno())


_Entry = tuple[str, str, str, Callable[[], bytes]]
"""``(split, class folder, file name, read)`` of one image of the source."""


def _bad_source(source: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(
        f"{source}: {problem}; expected an image-folder copy of CIFAR-10: train/<class>/* and "
        f"test/<class>/* with the class folders {', '.join(CIFAR10_CLASSES)}"
    )


def _split_parts(relative: PurePosixPath) -> tuple[str, str, str] | None:
    """``(split, class, file)`` of a path ``[prefix/]split/class/file``, else None."""
    parts = relative.parts
    if len(parts) >= 3 and parts[-3] in _SPLITS and not any(p.startswith(".") for p in parts):
        return parts[-3], parts[-2], parts[-1]
    return None


def _folder_entries(source: Path) -> Iterator[_Entry]:
    for path in sorted(source.rglob("*")):
        found = _split_parts(PurePosixPath(path.relative_to(source).as_posix()))
        if found is not None and path.is_file():
            yield (*found, path.read_bytes)


def _archive_entries(tar: tarfile.TarFile) -> Iterator[_Entry]:
    """The images of a tar archive, read in the archive's order (a compressed archive is read
    once, front to back)."""
    for member in tar:
        found = _split_parts(PurePosixPath(member.name))
        if found is not None and member.isfile():
            handle = tar.extractfile(member)
            assert handle is not None  # a regular file always has a payload
            payload = handle.read()
            yield (*found, lambda payload=payload: payload)


def _check_classes(source: Path, entries: list[_Entry]) -> None:
    for split in _SPLITS:
        found = {cls for s, cls, _, _ in entries if s == split}
        if not found:
            raise _bad_source(source, f"holds no {split}/<class>/ images")
        unexpected = sorted(found - set(CIFAR10_CLASSES))
        missing = [c for c in CIFAR10_CLASSES if c not in found]
        if unexpected or missing:
            what = [f"unexpected {split}/{unexpected[0]}/"] if unexpected else []
            what += [f"no images in {split}/{missing[0]}/"] if missing else []
            raise _bad_source(source, " and ".join(what))


def _decode(source: Path, where: str, read: Callable[[], bytes]) -> tuple[np.ndarray, bool]:
    """One image as (3, 32, 32) uint8 RGB, and whether it had to be converted to RGB."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(read())) as image:
            size, mode = image.size, image.mode
            rgb = image.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        raise _bad_source(source, f"{where} is not an image Pillow can read ({one_line(exc)})") from exc
    if size != (_SIZE, _SIZE):
        raise _bad_source(
            source, f"{where} is {size[0]}x{size[1]}, but CIFAR-10 images are 32x32: resize the copy first"
        )
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1), mode != "RGB"


def _batch(images: np.ndarray, labels: np.ndarray, names: list[str], label: str) -> dict[bytes, Any]:
    return {
        b"batch_label": label.encode(),
        b"labels": [int(y) for y in labels],
        b"data": np.ascontiguousarray(images.reshape(len(images), -1)),
        b"filenames": [name.encode() for name in names],
    }


def _write_folder(root: Path, splits: dict[str, tuple[np.ndarray, np.ndarray, list[str]]]) -> Path:
    """Write the seven files into a staging folder inside ``root``, then move them into
    ``<root>/cifar-10-batches-py/`` (each file replaced in one rename)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{CIFAR10_FOLDER}-", dir=root))
    try:
        images, labels, names = splits["train"]
        chunks = np.array_split(np.arange(len(labels)), len(_TRAIN_BATCHES))
        for i, (name, rows) in enumerate(zip(_TRAIN_BATCHES, chunks, strict=True), 1):
            batch = _batch(images[rows], labels[rows], [names[r] for r in rows], f"training batch {i} of 5")
            _write_pickle(staging / name, batch)
        images, labels, names = splits["test"]
        _write_pickle(staging / "test_batch", _batch(images, labels, names, "testing batch 1 of 1"))
        meta = {
            b"num_cases_per_batch": len(chunks[0]),
            b"label_names": [name.encode() for name in CIFAR10_CLASSES],
            b"num_vis": 3 * _SIZE * _SIZE,
        }
        _write_pickle(staging / "batches.meta", meta)
        target = root / CIFAR10_FOLDER
        target.mkdir(exist_ok=True)
        for name in CIFAR10_MD5:
            os.replace(staging / name, target / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def prepare_cifar10(
    source: str | Path, root: str | Path, *, progress: Progress = _no_progress
) -> CIFAR10Import:
    """Import an image-folder copy of CIFAR-10 into the official layout ``<root>/cifar-10-batches-py/``.

    ``source`` is a folder or a tar archive (``.tar``, ``.tar.gz``...) holding ``train/<class>/*``
    and ``test/<class>/*`` (optionally under one leading folder), the class folders named after
    CIFAR-10's label names (:data:`CIFAR10_CLASSES`), each image 32x32 in any format Pillow reads
    (non-RGB images are converted to RGB). Hidden files and folders are ignored.

    Written exactly as the official files: ``data_batch_1``..``5`` (the training images in a
    fixed shuffled order, ``numpy.random.default_rng(0)``, split as evenly as possible),
    ``test_batch`` (also shuffled) and ``batches.meta``, pickled as Python 2 wrote them (``bytes``
    keys under ``encoding='bytes'``), ``data`` uint8 (N, 3072) in R, G, B plane order,
    ``filenames`` the source's ``<class>/<file>``. Everything is decoded and checked first and
    written into a staging folder inside ``root``; only then are the files moved into place, one
    rename each, so a failure leaves any earlier copy untouched.

    Args:
        source: the folder or archive.
        root: the data root (created if missing).
        progress: wraps the per-image loop (e.g. ``tqdm``) to show progress.

    Raises:
        DataNotFoundError: ``source`` does not exist.
        BenchmarkFormatError: not a folder nor a readable tar archive, class folders other than
            CIFAR-10's, a class without images, an unreadable image, or an image not 32x32.
    """
    source, root = Path(source), Path(root)
    if not source.exists():
        raise DataNotFoundError(f"{source}: no such folder or archive: give --source an image-folder copy")
    if source.is_dir():
        return _import(source, root, list(_folder_entries(source)), progress)
    try:
        with tarfile.open(source, "r:*") as tar:
            entries = list(_archive_entries(tar))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise _bad_source(source, f"neither a folder nor a readable tar archive ({one_line(exc)})") from exc
    return _import(source, root, entries, progress)


def _import(source: Path, root: Path, entries: list[_Entry], progress: Progress) -> CIFAR10Import:
    _check_classes(source, entries)
    label_of = {name: i for i, name in enumerate(CIFAR10_CLASSES)}
    ordered = sorted(entries, key=lambda e: (e[0], label_of[e[1]], e[2]))
    images = np.empty((len(ordered), 3, _SIZE, _SIZE), dtype=np.uint8)
    converted = 0
    for i, (split, cls, name, read) in enumerate(progress(ordered)):
        images[i], was_converted = _decode(source, f"{split}/{cls}/{name}", read)
        converted += was_converted
    rng = np.random.default_rng(_SHUFFLE_SEED)
    splits = {}
    for split in _SPLITS:
        rows = np.array([i for i, e in enumerate(ordered) if e[0] == split])
        rows = rows[rng.permutation(len(rows))]
        labels = np.array([label_of[ordered[r][1]] for r in rows], dtype=np.int64)
        names = [f"{ordered[r][1]}/{ordered[r][2]}" for r in rows]
        splits[split] = (images[rows], labels, names)
    root.mkdir(parents=True, exist_ok=True)
    folder = _write_folder(root, splits)
    return CIFAR10Import(folder, len(splits["train"][1]), len(splits["test"][1]), converted)
