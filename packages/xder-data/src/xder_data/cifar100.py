"""``seq-cifar100``: CIFAR-100 ("python version", Krizhevsky 2009) as 10 tasks of 10 classes.

Reads the files exactly as the official archive ``cifar-100-python.tar.gz`` unpacks them
(docs/data-formats.md, "CIFAR-10 and CIFAR-100")::

    <root>/cifar-100-python/train   pickled dict (Python 2): data (50000, 3072) uint8, fine_labels,
                                    coarse_labels, filenames, batch_label
    <root>/cifar-100-python/test    the same with 10000 rows
    <root>/cifar-100-python/meta    pickled dict: fine_label_names (100), coarse_label_names (20)

Each ``data`` row holds the R plane (32x32, row-major), then G, then B, so
``data.reshape(-1, 3, 32, 32)`` is already the (N, C, H, W) layout the toolkit uses. The pickles are
read with ``encoding='latin1'`` (as torchvision does) and their keys are normalised, so files
written by Python 2 and fixtures written by Python 3 with ``bytes`` or ``str`` keys all load. The
md5 sums of the official files are checked only on request (:func:`verify_cifar100`), never on
every load: small fixtures in the same format cannot match them.

Protocols (X-DER, Sec. 5.1 and App. "Data Augmentation Techniques"; the authors' mammoth
``seq-cifar100``):

* ``paper`` (default): classes in natural label order, 10 tasks x 10 classes; random 32x32 crop
  after 4-pixel zero padding and a horizontal flip, then normalisation by mean (0.5071, 0.4867,
  0.4408) and std (0.2675, 0.2565, 0.2761); 50 epochs per task, batch 32, replay minibatch 32, SGD
  lr 0.03 divided by 10 at epochs 35 and 45; buffer 500; the CIFAR ResNet18 (width 64).
* ``laptop``: the paper's protocol at width 8 with 2 epochs per task, everything else kept (data,
  transforms, batch and replay batch 32, SGD lr 0.03, buffer 500). The lr is still divided by 10 at
  70% and 90% of each task, as the paper's 35 and 45 of 50 epochs are: at 1.4 and 1.8 epochs
  (fractional milestones, counted in steps), so that the schedule keeps the paper's shape. One
  X-DER run at buffer 500 took 7.4 to 13 minutes alone on the 2-core CPUs measured
  (docs/benchmarks.md, "Protocols").

Option ``image_size`` (default 32, the native size): the paper's secondary-targets experiment
pre-trains "on Split CIFAR-100 with images upsampled to 64 x 64" (X-DER, App. "Secondary Targets:
experiment details"). With ``image_size=S`` every image is upsampled once, at load, to S x S with
:func:`upsample_images` (bilinear, ``align_corners=False``, no antialiasing filter, which only
matters when shrinking; rounded to the nearest integer) and stored uint8 at that size (614 MB for
the training set at 64), so that no batch pays for the interpolation. The training crop scales:
``CropFlip(S, padding=4 * S // 32)`` (8 pixels at 64), as does the strong augmentation
(``StrongAugment(S)``); ``input_shape`` is ``(3, S, S)``. ``image_size=32`` leaves every tensor and
transform exactly as described above.

``Benchmark.coarse_labels`` holds the super-class (0..19) of each class, derived from the
per-image (fine, coarse) pairs of both files; the super-class names are
:func:`cifar100_coarse_names`. Pickles can run code when loaded: read only files you trust (the
official archive, verified with :func:`verify_cifar100`, or the files :func:`prepare_cifar100`
writes).

:func:`prepare_cifar100` imports an image-folder copy (``train/<fine class>/*``,
``test/<fine class>/*``, a folder or a tar archive) into these three files. Such a copy has no
super-classes: they come from :func:`cifar100_superclasses`, the standard table of Krizhevsky
(2009) and the CIFAR-100 page (20 super-classes of 5 fine classes), shipped as the data file
``cifar100_superclasses.toml`` of this package.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from xder_data._archive import download_folder, md5_file
from xder_data._cifar_format import CifarFiles, CifarImport, decode_copy, split_dict, write_pickle
from xder_data._image_copy import ImageCopy, staged_folder
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, Progress, no_progress, register_benchmark
from xder_data.errors import BenchmarkOptionError

__all__ = [
    "CIFAR100_ARCHIVE",
    "CIFAR100_ARCHIVE_MD5",
    "CIFAR100_FOLDER",
    "CIFAR100_MD5",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "CIFAR100_URL",
    "SEQ_CIFAR100_DEFAULTS",
    "SEQ_CIFAR100_LAPTOP",
    "CIFAR100Import",
    "cifar100_coarse_names",
    "cifar100_superclasses",
    "download_cifar100",
    "prepare_cifar100",
    "seq_cifar100",
    "upsample_images",
    "verify_cifar100",
]

CIFAR100_URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
CIFAR100_ARCHIVE = "cifar-100-python.tar.gz"
CIFAR100_ARCHIVE_MD5 = "eb9058c3a382ffc7106e4002c42a8d85"
CIFAR100_FOLDER = "cifar-100-python"
CIFAR100_MD5 = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}
"""md5 of each unpacked file of the official archive (the sums torchvision checks)."""

CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)

N_FINE = 100
N_COARSE = 20
_NATIVE_SIZE = 32
_UPSAMPLE_CHUNK = 1024  # images interpolated at a time (a 64x64 float chunk is 50 MB)
_SPLIT_KEYS = ("data", "fine_labels", "coarse_labels", "filenames", "batch_label")
_META_KEYS = ("fine_label_names", "coarse_label_names")

SEQ_CIFAR100_DEFAULTS = BenchmarkDefaults(
    epochs=50,  # Sec. 5.1: "50 for CIFAR-100"
    batch_size=32,  # mammoth seq-cifar100 (0d727a7): batch 32, replay minibatch 32
    minibatch_size=32,
    lr=0.03,  # App. "Hyperparameter Choice": X-DER on Split CIFAR-100 selects lr 0.03
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="multistep",
    milestones=(35, 45),  # Sec. 5.1: "divided by 10 ([35, 45] for CIFAR-100)"
    lr_gamma=0.1,
    buffer_size=500,
    backbone="resnet18-cifar",  # App. "Backbone Architectures": ResNet18, 3x3 stem
    backbone_options={"width": 64, "in_channels": 3},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)

SEQ_CIFAR100_LAPTOP = dataclasses.replace(
    SEQ_CIFAR100_DEFAULTS,
    epochs=2,
    milestones=(1.4, 1.8),  # 35/50 and 45/50 of the task, as the paper's (35, 45) over 50 epochs
    backbone_options={"width": 8, "in_channels": 3},
)
"""``--protocol laptop``: the paper protocol at width 8 with 2 epochs per task, the lr divided by 10
at 70% and 90% of each task (docs/benchmarks.md)."""


FILES = CifarFiles(
    dataset="CIFAR-100",
    benchmark="seq-cifar100",
    folder=CIFAR100_FOLDER,
    archive=CIFAR100_ARCHIVE,
    download="cifar100",
    prepare="cifar100",
)


def _read_split(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(images (N, 3, 32, 32) uint8, fine (N,) int64, coarse (N,) int64)`` of ``train``/``test``."""
    obj = FILES.read_pickle(path)
    FILES.require_keys(path, obj, _SPLIT_KEYS)
    images = FILES.images(path, obj)
    n_rows = images.shape[0]
    fine = FILES.labels(path, obj, "fine_labels", n_rows, N_FINE)
    coarse = FILES.labels(path, obj, "coarse_labels", n_rows, N_COARSE)
    FILES.filenames(path, obj, n_rows)
    return images, fine, coarse


def _read_meta(root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    path = FILES.file(root, "meta")
    obj = FILES.read_pickle(path)
    FILES.require_keys(path, obj, _META_KEYS)
    fine = FILES.names(path, obj, "fine_label_names", N_FINE)
    return fine, FILES.names(path, obj, "coarse_label_names", N_COARSE)


def _coarse_of_fine(path: Path, fine: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    """The (100,) super-class of each fine class, from per-image pairs that must agree."""
    pairs = np.unique(np.stack([fine, coarse], axis=1), axis=0)  # sorted by fine, then coarse
    per_fine = np.bincount(pairs[:, 0], minlength=N_FINE)
    if (per_fine == 0).any():
        missing = np.flatnonzero(per_fine == 0)[0]
        raise FILES.bad(path, f"fine class {missing} has no images (CIFAR-100 has 100)")
    if (per_fine > 1).any():
        bad = int(np.flatnonzero(per_fine > 1)[0])
        found = pairs[pairs[:, 0] == bad, 1].tolist()
        raise FILES.bad(
            path, f"fine class {bad} appears with coarse labels {found}, but each belongs to one super-class"
        )
    mapping = np.empty(N_FINE, dtype=np.int64)
    mapping[pairs[:, 0]] = pairs[:, 1]
    return mapping


def _check_coarse(path: Path, mapping: np.ndarray, fine: np.ndarray, coarse: np.ndarray) -> None:
    wrong = np.flatnonzero(mapping[fine] != coarse)
    if len(wrong):
        row = int(wrong[0])
        raise FILES.bad(
            path,
            f"row {row} pairs fine class {fine[row]} with coarse label {coarse[row]}, but the training "
            f"file puts it in super-class {mapping[fine[row]]}",
        )
    missing = np.setdiff1d(np.arange(N_FINE), fine)
    if len(missing):
        raise FILES.bad(path, f"fine class {missing[0]} has no images (CIFAR-100 has 100)")


def cifar100_coarse_names(root: str | Path) -> tuple[str, ...]:
    """The 20 super-class names (``meta``'s ``coarse_label_names``), indexed by the values of
    ``Benchmark.coarse_labels`` (super-class ids are never remapped by a class order)."""
    return _read_meta(Path(root))[1]


def upsample_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear upsampling of uint8 images, as ``seq-cifar100`` does for ``image_size > 32``.

    ``torch.nn.functional.interpolate`` with ``mode="bilinear"``, ``align_corners=False`` and
    ``antialias=False`` on the float values 0..255, rounded half to even and clamped to 0..255;
    done in chunks of 1024 images so that the float copy stays small.

    Args:
        images: (N, C, H, W) uint8.
        size: output height and width, at least H and W (this only enlarges).

    Returns:
        (N, C, size, size) uint8; ``images`` itself when it is already ``size`` x ``size``.
    """
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError(f"expected uint8 images (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
    height, width = images.shape[2:]
    if size < max(height, width):
        raise ValueError(f"upsample_images only enlarges: size {size} is below the input {height}x{width}")
    if (height, width) == (size, size):
        return images
    out = torch.empty((*images.shape[:2], size, size), dtype=torch.uint8)
    for start in range(0, len(images), _UPSAMPLE_CHUNK):
        chunk = images[start : start + _UPSAMPLE_CHUNK].to(torch.float32)
        resized = F.interpolate(
            chunk, size=(size, size), mode="bilinear", align_corners=False, antialias=False
        )
        out[start : start + len(chunk)] = resized.round_().clamp_(0, 255).to(torch.uint8)
    return out


@register_benchmark("seq-cifar100", defaults=SEQ_CIFAR100_DEFAULTS, protocols={"laptop": SEQ_CIFAR100_LAPTOP})
def seq_cifar100(root: Path | None, *, image_size: int = _NATIVE_SIZE) -> Benchmark:
    """Load ``seq-cifar100`` from ``<root>/cifar-100-python/`` in natural class order.

    Args:
        root: the data root holding ``cifar-100-python/``.
        image_size: side S of the stored images; above 32, each image is upsampled once with
            :func:`upsample_images` (bilinear, no antialiasing) and the crop padding and strong
            augmentation scale with S (see the module docstring).

    Returns a benchmark with ``train_x`` (N, 3, S, S) uint8 (50000 rows for the real data),
    ``test_x`` (10000 rows), fine labels 0..99, ``coarse_labels`` (100,) and ``class_names``.

    Raises:
        BenchmarkOptionError: ``image_size`` is not an integer of at least 32 (a ValueError).
        DataNotFoundError: ``root`` is None, or the folder or one of its files is missing.
        BenchmarkFormatError: a file is truncated, not a pickle, or has a wrong key, dtype,
            shape, label range or name count, or fine and coarse labels disagree.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < _NATIVE_SIZE:
        raise BenchmarkOptionError(
            f"benchmark.image_size must be an integer of at least {_NATIVE_SIZE} (images are only "
            f"upsampled), got {image_size!r}"
        )
    folder = FILES.path(root)
    root = folder.parent
    train_path, test_path = FILES.file(root, "train"), FILES.file(root, "test")
    fine_names, coarse_names = _read_meta(root)
    train_x, train_fine, train_coarse = _read_split(train_path)
    test_x, test_fine, test_coarse = _read_split(test_path)
    coarse_of_fine = _coarse_of_fine(train_path, train_fine, train_coarse)
    _check_coarse(test_path, coarse_of_fine, test_fine, test_coarse)
    size = image_size
    # Padding scales with the side (4 px at 32), so the crop shifts the same fraction of the image.
    padding = 4 * size // _NATIVE_SIZE
    return Benchmark(
        name="seq-cifar100",
        n_tasks=10,
        classes_per_task=(10,) * 10,
        class_order=tuple(range(N_FINE)),
        input_shape=(3, size, size),
        mean=CIFAR100_MEAN,
        std=CIFAR100_STD,
        train_x=upsample_images(torch.from_numpy(train_x), size),
        train_y=torch.from_numpy(train_fine),
        test_x=upsample_images(torch.from_numpy(test_x), size),
        test_y=torch.from_numpy(test_fine),
        defaults=SEQ_CIFAR100_DEFAULTS,
        train_transform=Compose(
            CropFlip(size, padding=padding, flip=True), Normalize(CIFAR100_MEAN, CIFAR100_STD)
        ),
        test_transform=Normalize(CIFAR100_MEAN, CIFAR100_STD),
        strong_transform=StrongAugment(size, CIFAR100_MEAN, CIFAR100_STD),
        coarse_labels=torch.from_numpy(coarse_of_fine),
        class_names=fine_names,
        coarse_names=coarse_names,
    )


# ---------------------------------------------------------------------------------------------
# Integrity and download


def verify_cifar100(root: str | Path) -> list[str]:
    """md5-check ``train``, ``test`` and ``meta`` against the official files (docs/data-formats.md).

    Returns:
        The paths (as str, in the order train, test, meta) of the files whose md5 differs; an
        empty list means the data are the official ones.

    Raises:
        DataNotFoundError: the folder or one of the three files is missing.
    """
    root = Path(root)
    paths = [FILES.file(root, name) for name in CIFAR100_MD5]
    return [str(path) for path in paths if md5_file(path) != CIFAR100_MD5[path.name]]


def download_cifar100(
    root: str | Path, url: str = CIFAR100_URL, *, expected_md5: str = CIFAR100_ARCHIVE_MD5
) -> Path:
    """Download ``cifar-100-python.tar.gz``, check its md5 and unpack it under ``root``.

    The archive is streamed to ``<root>/cifar-100-python.tar.gz.part`` and renamed only once its
    md5 matches; an archive already in ``root`` with the right md5 is reused (and kept after
    unpacking). Extraction goes through a staging folder inside ``root`` and accepts only plain
    files and folders under ``cifar-100-python/`` (no absolute paths, ``..`` or links), then moves
    them into ``<root>/cifar-100-python/``.

    Args:
        root: the data root (created if missing).
        url: where to fetch the archive (any URL ``urllib`` opens, ``file://`` included).
        expected_md5: md5 of the archive; the official one unless testing with a fixture.

    Returns:
        The folder ``<root>/cifar-100-python``.

    Raises:
        DataNotFoundError: the download failed.
        BenchmarkFormatError: the md5 differs (nothing is kept), or the archive is unreadable,
            unsafe or lacks ``train``/``test``/``meta``.
    """
    return download_folder(
        Path(root), url, CIFAR100_ARCHIVE, expected_md5, CIFAR100_FOLDER, tuple(CIFAR100_MD5)
    )


# ---------------------------------------------------------------------------------------------
# Import from an image-folder copy

SUPERCLASSES_FILE = "cifar100_superclasses.toml"
_SHUFFLE_SEED = 0


@functools.cache
def _superclass_table() -> tuple[tuple[str, tuple[str, ...]], ...]:
    text = resources.files("xder_data").joinpath(SUPERCLASSES_FILE).read_text(encoding="utf-8")
    return tuple((name, tuple(fine)) for name, fine in tomllib.loads(text)["superclasses"].items())


def cifar100_superclasses() -> dict[str, tuple[str, ...]]:
    """CIFAR-100's 20 super-classes and the 5 fine classes of each, in alphabetical order.

    Read from the package's data file ``cifar100_superclasses.toml``: the standard table of
    A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images" (2009) and the CIFAR-100
    page, with the names the official ``meta`` file uses. Super-class i (in this order) is coarse
    label i; the 100 fine names in alphabetical order are fine labels 0..99.
    """
    return dict(_superclass_table())


def _fine_names() -> list[str]:
    return sorted(fine for _, members in _superclass_table() for fine in members)


COPY = ImageCopy(
    dataset="CIFAR-100",
    splits=("train", "test"),
    size=_NATIVE_SIZE,
    layout="an image-folder copy of CIFAR-100: train/<class>/* and test/<class>/*, one folder for each "
    "of the 100 fine classes named as in the official meta file (apple, aquarium_fish, baby, ..., "
    "woman, worm), 32x32 images",
)


class CIFAR100Import(CifarImport):
    """What :func:`prepare_cifar100` wrote: the folder, the images per split and how many were
    converted to RGB."""


def prepare_cifar100(
    source: str | Path,
    root: str | Path,
    *,
    per_class: tuple[int, int] = (500, 100),
    progress: Progress = no_progress,
) -> CIFAR100Import:
    """Import an image-folder copy of CIFAR-100 into the official layout ``<root>/cifar-100-python/``.

    ``source`` is a folder or a tar archive (``.tar``, ``.tar.gz``...) holding
    ``train/<fine class>/*`` and ``test/<fine class>/*`` (optionally under one leading folder):
    exactly the 100 fine classes, named as the official ``meta`` file names them (``apple``,
    ``aquarium_fish``, ..., ``worm``), ``per_class`` = (train, test) images in each (500 and 100,
    as CIFAR-100 has), each 32x32 in any format Pillow reads (non-RGB images are
    converted to RGB). Hidden files and folders are ignored.

    Written as the official files: ``train`` and ``test`` (the images of each in a fixed shuffled
    order, ``numpy.random.default_rng(0)``) with ``data`` uint8 (N, 3072) in R, G, B plane order,
    ``fine_labels`` (the class's position among the 100 names in alphabetical order),
    ``coarse_labels`` (its super-class's position among the 20 in alphabetical order, from
    :func:`cifar100_superclasses`), ``filenames`` (the source's ``<class>/<file>``) and
    ``batch_label``; ``meta`` with ``fine_label_names`` and ``coarse_label_names``; pickled as
    Python 2 wrote them. Everything is checked and decoded first and written into a staging folder
    inside ``root``, then moved into place (the folder renamed, or each file replaced in one rename
    when an earlier copy exists), so a failure leaves nothing half-written.

    Args:
        source: the folder or archive.
        root: the data root (created if missing).
        per_class: the images each class folder must hold, (train, test); small copies in tests
            pass fewer, the command line always uses (500, 100).
        progress: wraps the per-image loop (e.g. ``tqdm``) to show progress.

    Raises:
        DataNotFoundError: ``source`` does not exist.
        BenchmarkFormatError: not a folder nor a readable tar archive, no ``train/`` or ``test/``
            images, a class folder missing or not one of the 100 fine classes, a class with another
            number of images, an unreadable image, or an image not 32x32.
    """
    source, root = Path(source), Path(root)
    table = _superclass_table()
    fine_names = _fine_names()
    entries = COPY.entries(source)
    COPY.check_classes(source, entries, fine_names)
    COPY.check_counts(source, entries, dict(zip(COPY.splits, per_class, strict=True)))
    splits, converted = decode_copy(COPY, source, entries, fine_names, progress, _SHUFFLE_SEED)
    superclass_of = {fine: c for c, (_, members) in enumerate(table) for fine in members}
    coarse_of_fine = np.array([superclass_of[name] for name in fine_names], dtype=np.int64)
    with staged_folder(root, CIFAR100_FOLDER, tuple(CIFAR100_MD5)) as staging:
        for split, batch_label in (("train", "training batch 1 of 1"), ("test", "testing batch 1 of 1")):
            images, fine, names = splits[split]
            labels = {"fine_labels": fine, "coarse_labels": coarse_of_fine[fine]}
            write_pickle(staging / split, split_dict(images, names, batch_label, labels))
        meta = {
            b"fine_label_names": [name.encode() for name in fine_names],
            b"coarse_label_names": [name.encode() for name, _ in table],
        }
        write_pickle(staging / "meta", meta)
    return CIFAR100Import(root / CIFAR100_FOLDER, len(splits["train"][1]), len(splits["test"][1]), converted)
