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
  X-DER run fits in about a quarter of an hour on a 2-core CPU (docs/results.md, "Results on
  seq-cifar10").

The strong augmentation for X-DER's future preparation is :class:`StrongAugment` at 32x32 (the
DER paper has no X-DER; these are the X-DER paper's CIFAR settings). Pickles can run code when
loaded: read only files you trust (the official archive, checked with :func:`verify_cifar10`, or
the files :func:`prepare_cifar10` writes).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from xder_data._archive import download_folder, md5_file
from xder_data._cifar_format import CifarFiles, CifarImport, Split, decode_copy, split_dict, write_pickle
from xder_data._image_copy import ImageCopy, staged_folder
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, Progress, no_progress, register_benchmark

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
"""``--protocol laptop``: the paper protocol at width 8 with 2 epochs per task
(docs/benchmarks.md)."""

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

"""Wraps the iterable a converter walks through (e.g. ``tqdm``); the identity by default."""

_SHUFFLE_SEED = 0

COPY = ImageCopy(
    dataset="CIFAR-10",
    splits=("train", "test"),
    size=_SIZE,
    layout="an image-folder copy of CIFAR-10: train/<class>/* and test/<class>/* with the class folders "
    + ", ".join(CIFAR10_CLASSES),
)


class CIFAR10Import(CifarImport):
    """What :func:`prepare_cifar10` wrote: the folder, the images per split and how many were
    converted to RGB."""


def _write_folder(root: Path, splits: dict[str, Split]) -> Path:
    """Write the seven files through a staging folder inside ``root`` into
    ``<root>/cifar-10-batches-py/`` (:func:`~xder_data._image_copy.staged_folder`)."""
    with staged_folder(root, CIFAR10_FOLDER, tuple(CIFAR10_MD5)) as staging:
        images, labels, names = splits["train"]
        chunks = np.array_split(np.arange(len(labels)), len(_TRAIN_BATCHES))
        for i, (name, rows) in enumerate(zip(_TRAIN_BATCHES, chunks, strict=True), 1):
            batch = split_dict(
                images[rows], [names[r] for r in rows], f"training batch {i} of 5", {"labels": labels[rows]}
            )
            write_pickle(staging / name, batch)
        images, labels, names = splits["test"]
        write_pickle(
            staging / "test_batch", split_dict(images, names, "testing batch 1 of 1", {"labels": labels})
        )
        meta = {
            b"num_cases_per_batch": len(chunks[0]),
            b"label_names": [name.encode() for name in CIFAR10_CLASSES],
            b"num_vis": 3 * _SIZE * _SIZE,
        }
        write_pickle(staging / "batches.meta", meta)
    return root / CIFAR10_FOLDER


def prepare_cifar10(
    source: str | Path, root: str | Path, *, progress: Progress = no_progress
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
    written into a staging folder inside ``root``; only then are the files moved into place (the
    staging folder renamed when there is no earlier copy, else one rename a file), so a failure
    leaves any earlier copy untouched and nothing half-written.

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
    entries = COPY.entries(source)
    COPY.check_classes(source, entries, CIFAR10_CLASSES)
    splits, converted = decode_copy(COPY, source, entries, CIFAR10_CLASSES, progress, _SHUFFLE_SEED)
    folder = _write_folder(root, splits)
    return CIFAR10Import(folder, len(splits["train"][1]), len(splits["test"][1]), converted)
