"""``seq-mnist``: MNIST (LeCun et al., 1998) from its official IDX files as 5 tasks of 2 classes.

This module owns the IDX format. The four official files, each gzip-compressed (as distributed)
or not (as unpacked), in one folder::

    <root>/MNIST/train-images-idx3-ubyte[.gz]   magic 0x00000803, 60000, 28, 28, then the pixels
    <root>/MNIST/train-labels-idx1-ubyte[.gz]   magic 0x00000801, 60000, then the labels 0..9
    <root>/MNIST/t10k-images-idx3-ubyte[.gz]    the 10000 test images
    <root>/MNIST/t10k-labels-idx1-ubyte[.gz]    their labels

An IDX file is a big-endian header, two zero bytes, a type byte (0x08: unsigned byte, the only
type MNIST uses), a byte giving the number of dimensions, one uint32 per dimension, then the data
row-major; gzip is recognised by its magic bytes, whatever the file is named.

Protocol (the DER paper, Buzzega et al., NeurIPS 2020, and the authors' mammoth ``seq-mnist`` and
``utils/best_args.py`` at the tag ``neurips2020``): classes in natural label order (0, 1 | 2, 3 |
... | 8, 9), 5 tasks x 2 classes; no augmentation and no normalisation (their transform is
``ToTensor`` alone: pixels scaled to [0, 1]); the MNIST MLP (``mnist-mlp``: two hidden layers of
100); 1 epoch per task, batch 10, replay minibatch 10, SGD at a constant lr 0.03 (their ``sgd``
and DER's buffer-200 entry; presets set each method's own), buffer 200; each epoch's last
partial batch kept (the authors' DataLoader).
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from xder_data._archive import fetch, md5_file
from xder_data.augment import Normalize
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, download_call, one_line, prepare_call
from xder_data.scenarios import domain_benchmark, stream_360_benchmark

__all__ = [
    "MNIST_360_DEFAULTS",
    "MNIST_DOMAIN_DEFAULTS",
    "MNIST_FILES",
    "MNIST_FOLDER",
    "MNIST_MD5",
    "MNIST_URL",
    "SEQ_MNIST_DEFAULTS",
    "MNISTImport",
    "download_mnist",
    "mnist_360",
    "perm_mnist",
    "prepare_mnist",
    "read_idx",
    "rot_mnist",
    "seq_mnist",
]

MNIST_FOLDER = "MNIST"
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
"""The mirror torchvision downloads from (yann.lecun.com refuses most automated requests)."""
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
"""md5 of each official ``.gz`` file (the sums torchvision checks)."""

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
N_CLASSES = 10
_SIZE = 28
_UBYTE = 0x08
_GZIP = b"\x1f\x8b"

SEQ_MNIST_DEFAULTS = BenchmarkDefaults(
    epochs=1,  # best_args.py seq-mnist: n_epochs 1 for every method
    batch_size=10,  # best_args.py seq-mnist: batch 10 (sgd, er, der, derpp...)
    minibatch_size=10,  # best_args.py: er and der at buffer 200
    lr=0.03,  # best_args.py: sgd, der and derpp at buffer 200
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",
    buffer_size=200,  # the smallest of the DER paper's buffers (200, 500, 5120)
    backbone="mnist-mlp",  # mammoth seq-mnist: MNISTMLP(28 * 28, 10)
    backbone_options={"in_features": _SIZE * _SIZE},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)


def _fix(root: Path) -> str:
    return (
        f"run `{download_call('mnist', root)}`, copy the four official files with "
        f"`{prepare_call('mnist', root, source='DIR')}`, or put them under {root / MNIST_FOLDER}"
    )


def _bad(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(f"{path}: {problem}; not an official MNIST IDX file")


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file of unsigned bytes (gzip-compressed or not) as a uint8 array of its shape.

    Raises:
        DataNotFoundError: the file cannot be read.
        BenchmarkFormatError: a corrupt gzip stream, a header that is not IDX of unsigned bytes, or
            a data length other than the header's dimensions give.
    """
    return _read_idx(Path(path))[1]


def _read_idx(path: Path) -> tuple[int, np.ndarray]:
    """``(magic number, data)`` of one IDX file (:func:`read_idx`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataNotFoundError(f"{path}: cannot read ({one_line(exc)})") from exc
    if raw[:2] == _GZIP:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise _bad(path, f"not a readable gzip file ({one_line(exc)})") from exc
    if len(raw) < 4 or raw[0] or raw[1]:
        raise _bad(path, f"header {raw[:4].hex()} does not start with two zero bytes")
    if raw[2] != _UBYTE:
        raise _bad(path, f"type byte 0x{raw[2]:02x}, expected 0x08 (unsigned byte)")
    ndim = raw[3]
    start = 4 + 4 * ndim
    if ndim == 0 or len(raw) < start:
        raise _bad(path, f"truncated header ({len(raw)} bytes for {ndim} dimensions)")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape))
    if len(raw) - start != expected:
        raise _bad(path, f"holds {len(raw) - start} data bytes, its header {shape} needs {expected}")
    magic = int.from_bytes(raw[:4], "big")
    return magic, np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(shape).copy()


def _find(folder: Path, name: str) -> Path | None:
    """``<folder>/<name>.gz`` or ``<folder>/<name>`` (the compressed one first), if either exists."""
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    return None


def _read_pair(image_path: Path, label_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 1, 28, 28) uint8, labels (N,) int64)`` of one split's two files, checked."""
    image_magic, images = _read_idx(image_path)
    label_magic, labels = _read_idx(label_path)
    if image_magic != IMAGES_MAGIC or images.shape[1:] != (_SIZE, _SIZE):
        raise _bad(
            image_path,
            f"magic 0x{image_magic:08x} with shape {images.shape}, expected 0x00000803 and (N, 28, 28)",
        )
    if label_magic != LABELS_MAGIC:
        raise _bad(
            label_path, f"magic 0x{label_magic:08x} with shape {labels.shape}, expected 0x00000801 and (N,)"
        )
    if len(labels) != len(images):
        raise _bad(label_path, f"{len(labels)} labels for the {len(images)} images of {image_path.name}")
    if len(labels) and labels.max() >= N_CLASSES:
        raise _bad(label_path, f"label {labels.max()}, expected 0..9")
    missing = np.setdiff1d(np.arange(N_CLASSES), labels)
    if len(missing):
        raise _bad(label_path, f"digit {missing[0]} has no images (MNIST has 10 classes)")
    return images[:, None], labels.astype(np.int64)


def _read_split(folder: Path, prefix: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of ``train`` or ``t10k`` in ``folder`` (:func:`_read_pair`)."""
    paths = []
    for kind in ("images-idx3", "labels-idx1"):
        path = _find(folder, f"{prefix}-{kind}-ubyte")
        if path is None:
            raise DataNotFoundError(f"{folder / f'{prefix}-{kind}-ubyte'}[.gz]: MNIST file missing: {fix}")
        paths.append(path)
    return _read_pair(*paths)


def _folder(root: Path | str | None) -> Path:
    if root is None:
        raise DataNotFoundError(
            "the MNIST benchmarks need a data root: pass run.data_root ROOT (the folder that holds "
            f"{MNIST_FOLDER}/), "
            f"after `{download_call('mnist', 'ROOT')}`"
        )
    root = Path(root)
    folder = root / MNIST_FOLDER
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: MNIST folder not found: {_fix(root)}")
    return folder


@register_benchmark("seq-mnist", defaults=SEQ_MNIST_DEFAULTS)
def seq_mnist(root: Path | None) -> Benchmark:
    """Load ``seq-mnist`` from the IDX files of ``<root>/MNIST/`` in natural class order.

    Returns a benchmark with ``train_x`` (N, 1, 28, 28) uint8 (60000 rows for the real data, in
    file order), ``test_x`` (10000 rows), labels 0..9 and ``class_names`` ``"0"``..``"9"``.

    Raises:
        DataNotFoundError: ``root`` is None, or the folder or one of the four files is missing.
        BenchmarkFormatError: a file is not IDX, has the wrong magic, shape or label range, the
            label and image counts differ, or a digit has no images.
    """
    (train_x, train_y), (test_x, test_y) = _mnist(root)
    identity = Normalize((0.0,), (1.0,))  # the authors' ToTensor alone: pixels in [0, 1]
    return Benchmark(
        name="seq-mnist",
        n_tasks=5,
        classes_per_task=(2,) * 5,
        class_order=tuple(range(N_CLASSES)),
        input_shape=(1, _SIZE, _SIZE),
        mean=(0.0,),
        std=(1.0,),
        train_x=torch.from_numpy(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=torch.from_numpy(test_x),
        test_y=torch.from_numpy(test_y),
        defaults=SEQ_MNIST_DEFAULTS,
        train_transform=identity,
        test_transform=identity,
        class_names=tuple(str(c) for c in range(N_CLASSES)),
    )


# ---------------------------------------------------------------------------------------------
# Download and import from a copy


@dataclass(frozen=True)
class MNISTImport:
    """What :func:`prepare_mnist` or :func:`download_mnist` left: the folder and the images per split."""

    folder: Path
    n_train: int
    n_test: int


def _counted(folder: Path) -> MNISTImport:
    fix = _fix(folder.parent)
    n_train = len(_read_split(folder, "train", fix)[1])
    return MNISTImport(folder, n_train, len(_read_split(folder, "t10k", fix)[1]))


def download_mnist(
    root: str | Path, url: str = MNIST_URL, *, expected_md5: dict[str, str] | None = None
) -> MNISTImport:
    """Download the four official ``.gz`` files into ``<root>/MNIST/``, each md5-checked.

    Each is streamed to a ``.part`` file and renamed once its md5 matches; a file already there
    with the right md5 is kept. The files stay compressed (the reader takes them as they are) and
    are read once to check them.

    Args:
        root: the data root (created if missing).
        url: the folder the files are fetched from (``url + name``).
        expected_md5: md5 per ``.gz`` name; :data:`MNIST_MD5` when None.

    Raises:
        DataNotFoundError: a download failed.
        BenchmarkFormatError: an md5 differs (that file is not kept), or a file is not IDX.
    """
    sums = MNIST_MD5 if expected_md5 is None else expected_md5
    root = Path(root)
    folder = root / MNIST_FOLDER
    made = [p for p in (root, folder) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for name in MNIST_FILES:
            target = folder / f"{name}.gz"
            if not (target.is_file() and md5_file(target) == sums[target.name]):
                fetch(url + target.name, target, sums[target.name])
    except BaseException:
        for path in reversed(made):  # leave no empty folder behind (offline, Ctrl-C)
            if not any(path.iterdir()):
                path.rmdir()
        raise
    return _counted(folder)


def _source_file(source: Path, name: str) -> Path:
    """``name[.gz]`` in ``source`` or any folder below (e.g. torchvision's ``MNIST/raw/``)."""
    found = sorted(p for p in source.rglob(f"{name}*") if p.name in (name, f"{name}.gz") and p.is_file())
    if not found:
        raise BenchmarkFormatError(
            f"{source}: holds no {name} nor {name}.gz; expected a folder holding the four official MNIST "
            f"files: {', '.join(MNIST_FILES)} (each .gz or not)"
        )
    return min(found, key=lambda p: (len(p.parts), p.name != f"{name}.gz"))


def prepare_mnist(source: str | Path, root: str | Path) -> MNISTImport:
    """Copy the four official IDX files from a folder (or any folder below it, e.g. torchvision's
    ``MNIST/raw/``) into ``<root>/MNIST/``, compressed or not as found.

    Every file is read and checked first (as :func:`seq_mnist` reads it); then each is copied
    byte for byte to a ``.part`` file and renamed, the other form of the same file (``.gz`` or
    not) removed so that the reader sees the copied one.

    Raises:
        DataNotFoundError: ``source`` is not a folder.
        BenchmarkFormatError: a file is missing or is not the official format.
    """
    source, root = Path(source), Path(root)
    if not source.is_dir():
        raise DataNotFoundError(
            f"{source}: no such folder: give prepare_data.source the folder of MNIST's files"
        )
    paths = [_source_file(source, name) for name in MNIST_FILES]
    n_train = len(_read_pair(paths[0], paths[1])[1])
    n_test = len(_read_pair(paths[2], paths[3])[1])
    folder = root / MNIST_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in zip(MNIST_FILES, paths, strict=True):
        target = folder / path.name
        part = target.with_name(target.name + ".part")
        shutil.copyfile(path, part)
        os.replace(part, target)
        other = folder / (name if path.name.endswith(".gz") else f"{name}.gz")
        other.unlink(missing_ok=True)
    return MNISTImport(folder, n_train, n_test)


MNIST_DOMAIN_DEFAULTS = BenchmarkDefaults(
    epochs=1,  # best_args.py perm-mnist and rot-mnist: n_epochs 1
    batch_size=128,  # best_args.py: batch 128 for every method
    minibatch_size=128,  # best_args.py: er, der, derpp at buffer 200
    lr=0.2,  # best_args.py perm-mnist: sgd's lr (presets set each method's own)
    buffer_size=200,
    backbone="mnist-mlp",
    backbone_options={"in_features": _SIZE * _SIZE},
    drop_last=False,
)
"""``perm-mnist`` and ``rot-mnist``: the DER paper's Domain-IL protocol (20 tasks, one epoch each)."""

MNIST_360_DEFAULTS = BenchmarkDefaults(
    epochs=1,  # one pass over the stream
    batch_size=16,  # best_args.py mnist-360: er, der, derpp at buffer 200
    minibatch_size=16,
    lr=0.2,  # best_args.py mnist-360: sgd's lr
    buffer_size=200,
    backbone="mnist-mlp",
    backbone_options={"in_features": _SIZE * _SIZE},
    drop_last=False,
)
"""``mnist-360``: the DER paper's general continual stream, one pass."""


def _mnist(root: Path | None) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    folder = _folder(root)
    fix = _fix(folder.parent)
    return _read_split(folder, "train", fix), _read_split(folder, "t10k", fix)


@register_benchmark("perm-mnist", defaults=MNIST_DOMAIN_DEFAULTS, scenario="domain-il")
def perm_mnist(root: Path | None, *, data_seed: int = 0) -> Benchmark:
    """``perm-mnist``: 20 Domain-IL tasks of MNIST, each with its pixels permuted by the task's
    permutation (:func:`xder_data.scenarios.domain_benchmark`; ``data_seed`` draws them). Holds the
    20 copies: about 1.1 GB of uint8 images.

    Raises:
        DataNotFoundError, BenchmarkFormatError: as :func:`seq_mnist`.
    """
    train, test = _mnist(root)
    return domain_benchmark(
        "perm-mnist", "permuted", train, test, defaults=MNIST_DOMAIN_DEFAULTS, seed=data_seed
    )


@register_benchmark("rot-mnist", defaults=MNIST_DOMAIN_DEFAULTS, scenario="domain-il")
def rot_mnist(root: Path | None, *, data_seed: int = 0) -> Benchmark:
    """``rot-mnist``: 20 Domain-IL tasks of MNIST, each rotated by the task's angle (uniform in
    [0, 180) degrees; ``data_seed`` draws them). Holds the 20 copies: about 1.1 GB.

    Raises:
        DataNotFoundError, BenchmarkFormatError: as :func:`seq_mnist`.
    """
    train, test = _mnist(root)
    return domain_benchmark(
        "rot-mnist", "rotated", train, test, defaults=MNIST_DOMAIN_DEFAULTS, seed=data_seed
    )


@register_benchmark("mnist-360", defaults=MNIST_360_DEFAULTS, scenario="general")
def mnist_360(root: Path | None, *, data_seed: int = 0) -> Benchmark:
    """``mnist-360``: MNIST's digits 0..8 as the DER paper's general continual stream
    (:func:`xder_data.scenarios.stream_360`; ``data_seed`` draws it): 54,051 draws in 27 segments.

    Raises:
        DataNotFoundError, BenchmarkFormatError: as :func:`seq_mnist`.
    """
    train, test = _mnist(root)
    return stream_360_benchmark("mnist-360", train, test, defaults=MNIST_360_DEFAULTS, seed=data_seed)
