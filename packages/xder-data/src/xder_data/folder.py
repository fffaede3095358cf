"""``folder``: a class-incremental benchmark from the user's own images, or arrays in an ``.npz``.

``--data-root DIR`` names one of:

* ``DIR/train/<class>/*`` and ``DIR/test/<class>/*``: the split as given. Every test class must
  be a training class;
* ``DIR/<class>/*`` (or ``DIR/train/<class>/*`` without ``test/``): one tree, of which a seeded,
  stratified ``test_fraction`` (0.2 by default) of each class is held out as the test set
  (:func:`~xder_data.validation_split` with seed 0, so every run sees the same test set);
* ``FILE.npz`` with ``x_train``, ``y_train`` and, optionally, ``x_test`` and ``y_test`` (without
  them, ``test_fraction`` splits the training arrays) and ``class_names``. Images are
  (N, H, W) (greyscale), (N, H, W, C) or (N, C, H, W) with C in 1, 3 (4: the alpha channel is
  dropped); uint8, or floats in [0, 1] (rounded to uint8). Labels are integers.

Class folders are the non-hidden folders of a tree, in sorted name order: the first is class 0
(``--class-order`` reorders them). An image is any non-hidden file below a class folder (subfolders
included) whose extension Pillow knows (``.png``, ``.jpg``, ``.bmp``, ...); other files are
ignored. Every image is converted to RGB (greyscale replicated, alpha dropped), so the benchmark
has three channels and fits the protocol's ``resnet18-cifar``.

Options (``--set benchmark.KEY=VALUE``; the ``[benchmark]`` section of ``config.toml``):

* ``tasks``, ``classes_per_task`` (an int, or a list with one entry per task): the split into
  tasks; 2 classes per task by default (:func:`~xder_data.custom.split_classes`);
* ``image_size`` N: each image's shorter side is resized to N (Pillow's bilinear filter), then
  the centre N x N is cropped (torchvision's ``Resize(N)`` then ``CenterCrop(N)``). Without it the
  images are kept as they are and must all have the same size;
* ``test_fraction``: see above (only for one tree or an ``.npz`` without test arrays);
* ``mean``, ``std``: per-channel normalisation; computed from the training images when not given;
* ``cache_dir``: where the decoded cache goes when ``DIR`` is read-only.

Images are decoded once into an HDF5 cache, ``DIR/xder-cache.h5`` (or
``<cache_dir>/<DIR name>-<hash of DIR's path>.h5``), written atomically. It records a sha256 of
the listing (every image's split, class, path, size in bytes and modification time) and of
``image_size``; a cache whose digest differs from the tree's is stale and is decoded again, as is
an unreadable one. An ``.npz`` is read directly, without a cache.

The protocol is the CIFAR-style :data:`~xder_data.custom.CUSTOM_DEFAULTS` (``resnet18-cifar``,
crop with padding plus flip, batch 32, StrongAugment for X-DER).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from xder_data._hdf5 import read_attr
from xder_data.benchmark import Benchmark, Progress, no_progress, register_benchmark, validation_split
from xder_data.custom import CUSTOM_DEFAULTS, benchmark_from_tensors
from xder_data.errors import (
    BenchmarkFormatError,
    BenchmarkOptionError,
    CacheWriteError,
    DataNotFoundError,
    one_line,
)

__all__ = [
    "DEFAULT_TEST_FRACTION",
    "FOLDER_CACHE",
    "FOLDER_DEFAULTS",
    "FOLDER_LAPTOP",
    "FolderListing",
    "folder",
    "folder_cache_path",
    "read_folder_listing",
]

FOLDER_DEFAULTS = CUSTOM_DEFAULTS
"""The ``folder`` benchmark's protocol: the CIFAR-style one (50 epochs a task of a width-64
ResNet18: about 25 minutes for 120 images on a two-core CPU)."""
FOLDER_LAPTOP = dataclasses.replace(
    FOLDER_DEFAULTS, epochs=5, backbone_options={"width": 8, "in_channels": 3}
)
"""``--protocol laptop``: a first look at your own images on a CPU, 5 epochs a task at width 8
(the same data, transforms and batches)."""
FOLDER_CACHE = "xder-cache.h5"
"""The cache's file name inside the data folder."""
DEFAULT_TEST_FRACTION = 0.2
"""Test fraction of a single tree (or an ``.npz`` without test arrays)."""
SPLIT_SEED = 0
"""Seed of the test split of a single tree: fixed, so that every run sees the same test set."""
CACHE_FORMAT = "xder-folder"
CACHE_VERSION = 1
_LAYOUT = "expected DIR/train/<class>/* and DIR/test/<class>/*, DIR/<class>/*, or a FILE.npz"
# What Pillow raises on a file it cannot decode (UnidentifiedImageError is an OSError).
_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError)


def _hidden(path: Path, below: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(below).parts)


def _image_extensions() -> frozenset[str]:
    from PIL import Image

    return frozenset(ext.lower() for ext in Image.registered_extensions())


# ---------------------------------------------------------------------------------------------
# The listing


@dataclass(frozen=True, eq=False)
class FolderListing:
    """The images of a folder layout, in split, class and path order.

    Attributes:
        root: the data folder.
        class_names: the training class folders, sorted; class i is ``class_names[i]``.
        paths: every image, training images first.
        labels: (N,) int64 class of each image.
        is_train: (N,) bool.
        split_given: True for ``train/`` + ``test/``, False for one tree (split by fraction).
    """

    root: Path
    class_names: tuple[str, ...]
    paths: tuple[Path, ...]
    labels: np.ndarray
    is_train: np.ndarray
    split_given: bool

    def digest(self, image_size: int | None) -> str:
        """sha256 of every image's split, class, path, size and modification time, and of the
        decoding option: it changes whenever the cache would."""
        digest = hashlib.sha256(f"{CACHE_FORMAT} {CACHE_VERSION} image_size={image_size}\n".encode())
        for name in self.class_names:
            digest.update(f"class {name}\n".encode())
        for path, label, train in zip(self.paths, self.labels.tolist(), self.is_train.tolist(), strict=True):
            try:
                stat = path.stat()
            except OSError as exc:
                raise DataNotFoundError(f"{path}: cannot read it ({one_line(exc)})") from exc
            relative = path.relative_to(self.root).as_posix()
            digest.update(f"{int(train)} {label} {relative} {stat.st_size} {stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()


def _class_folders(tree: Path) -> list[Path]:
    return sorted(p for p in tree.iterdir() if p.is_dir() and not p.name.startswith("."))


def _class_images(folder: Path, extensions: frozenset[str]) -> list[Path]:
    images = sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in extensions and not _hidden(p, folder) and p.is_file()
    )
    if not images:
        raise BenchmarkFormatError(
            f"{folder}: empty class folder (no image file Pillow reads: .png, .jpg, ...); "
            "add images or remove the folder"
        )
    return images


def read_folder_listing(root: Path) -> FolderListing:
    """List the images under ``root`` (see the module docstring for the layouts).

    Raises:
        DataNotFoundError: ``root`` is missing or holds no class folder.
        BenchmarkFormatError: an empty class folder, or a test class that is not a training class.
    """
    if not root.is_dir():
        raise DataNotFoundError(f"{root}: no such folder; {_LAYOUT}")
    train_tree, test_tree = root / "train", root / "test"
    split_given = train_tree.is_dir() and test_tree.is_dir()
    tree = train_tree if train_tree.is_dir() else root
    classes = _class_folders(tree)
    if split_given and not classes:
        raise DataNotFoundError(f"{train_tree}: no class folder; {_LAYOUT}")
    if not classes:
        raise DataNotFoundError(f"{root}: no class folder; {_LAYOUT}")
    names = [c.name for c in classes]
    extensions = _image_extensions()
    paths: list[Path] = []
    labels: list[int] = []
    for label, folder in enumerate(classes):
        images = _class_images(folder, extensions)
        paths += images
        labels += [label] * len(images)
    n_train = len(paths)
    if split_given:
        for folder in _class_folders(test_tree):
            if folder.name not in names:
                raise BenchmarkFormatError(
                    f"{folder}: test class {folder.name!r} has no folder in {train_tree}: every test "
                    "class must be a training class (check the folder's name)"
                )
            images = _class_images(folder, extensions)
            paths += images
            labels += [names.index(folder.name)] * len(images)
    is_train = np.zeros(len(paths), dtype=bool)
    is_train[:n_train] = True
    return FolderListing(
        root=root,
        class_names=tuple(names),
        paths=tuple(paths),
        labels=np.array(labels, dtype=np.int64),
        is_train=is_train,
        split_given=split_given,
    )


# ---------------------------------------------------------------------------------------------
# Decoding


def _resize_crop(image: Any, size: int) -> Any:
    """torchvision's ``Resize(size)`` (shorter side to ``size``, bilinear) then ``CenterCrop(size)``
    on a PIL image."""
    from PIL import Image

    width, height = image.size
    if (width, height) != (size, size):
        new = (size, int(size * height / width)) if width <= height else (int(size * width / height), size)
        if new != (width, height):
            image = image.resize(new, Image.Resampling.BILINEAR)
    width, height = image.size
    top, left = round((height - size) / 2), round((width - size) / 2)
    return image.crop((left, top, left + size, top + size))


def _open_rgb(path: Path) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (*_DECODE_ERRORS, Image.DecompressionBombError) as exc:
        raise BenchmarkFormatError(
            f"{path}: unreadable image ({one_line(exc)}); replace or remove the file"
        ) from exc


def _decode(
    listing: FolderListing, image_size: int | None, progress: Progress
) -> tuple[np.ndarray, tuple[int, int]]:
    """Every image of the listing as (N, 3, H, W) uint8, and (H, W)."""
    pixels: np.ndarray | None = None
    first: tuple[Path, tuple[int, int]] | None = None
    for i in progress(range(len(listing.paths))):
        path = listing.paths[i]
        image = _open_rgb(path)
        if image_size is not None:
            image = _resize_crop(image, image_size)
        elif first is None:
            first = (path, image.size)
        elif image.size != first[1]:
            (w0, h0), (w, h) = first[1], image.size
            raise BenchmarkFormatError(
                f"mixed image sizes: {first[0]} is {w0}x{h0}, {path} is {w}x{h}; pass benchmark.image_size=N "
                "(each image's shorter side resized to N, then centre-cropped to N x N)"
            )
        if pixels is None:
            width, height = image.size
            pixels = np.empty((len(listing.paths), 3, height, width), dtype=np.uint8)
        pixels[i] = np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)
    assert pixels is not None  # a listing holds at least one image
    return pixels, (pixels.shape[2], pixels.shape[3])


# ---------------------------------------------------------------------------------------------
# The cache


def folder_cache_path(root: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Where the decoded images of ``root`` are cached: ``root/xder-cache.h5``, or
    ``cache_dir/<root's name>-<12 hex digits of sha256(root's absolute path)>.h5``."""
    root = Path(root)
    if cache_dir is None:
        return root / FOLDER_CACHE
    absolute = root.resolve()
    digest = hashlib.sha256(str(absolute).encode()).hexdigest()[:12]
    return Path(cache_dir) / f"{absolute.name}-{digest}.h5"


def _read_cache(path: Path, digest: str, n_images: int) -> np.ndarray | None:
    """The cached images when ``path`` is a complete cache of this listing, else None (stale,
    unreadable or absent: the caller decodes again)."""
    if not path.is_file():
        return None
    try:
        with h5py.File(path, "r") as handle:
            if (read_attr(handle, "format"), read_attr(handle, "version")) != (CACHE_FORMAT, CACHE_VERSION):
                return None
            if read_attr(handle, "listing_sha256") != digest:
                return None
            images = handle.get("images")
            if not isinstance(images, h5py.Dataset) or images.dtype != np.uint8:
                return None
            if images.ndim != 4 or images.shape[0] != n_images or images.shape[1] != 3:
                return None
            out = np.empty(images.shape, dtype=np.uint8)
            if out.size:
                images.read_direct(out)
            return out
    except OSError:
        return None


def _write_cache(path: Path, pixels: np.ndarray, digest: str, listing: FolderListing) -> None:
    fix = "pass benchmark.cache_dir=DIR (a writable folder) when the data folder is read-only"
    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(partial, "w") as handle:
            handle.create_dataset("images", data=pixels)
            handle["labels"] = listing.labels
            handle["is_train"] = listing.is_train
            handle.attrs.update(
                {
                    "format": CACHE_FORMAT,
                    "version": CACHE_VERSION,
                    "listing_sha256": digest,
                    "root": str(listing.root.resolve()),
                    "class_names": json.dumps(list(listing.class_names)),
                }
            )
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
    except OSError as exc:
        raise CacheWriteError(f"{path}: cannot write the cache ({one_line(exc)}); {fix}") from exc
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# .npz


def _npz_images(path: Path, array: np.ndarray, key: str) -> np.ndarray:
    """(N, 3, H, W) uint8 from (N, H, W), (N, H, W, C) or (N, C, H, W)."""
    if array.ndim == 3:
        array = array[:, None]
    elif array.ndim == 4 and array.shape[1] not in (1, 3) and array.shape[-1] in (1, 3, 4):
        array = array.transpose(0, 3, 1, 2)
    elif not (array.ndim == 4 and array.shape[1] in (1, 3, 4)):
        raise BenchmarkFormatError(
            f"{path}: {key} has shape {array.shape}: expected (N, H, W), (N, H, W, C) or (N, C, H, W) "
            "with C in 1, 3, 4"
        )
    if array.dtype == np.uint8:
        pass
    elif np.issubdtype(array.dtype, np.floating):
        if array.size and (np.nanmin(array) < 0 or np.nanmax(array) > 1 or np.isnan(array).any()):
            raise BenchmarkFormatError(f"{path}: {key} holds floats outside [0, 1]: scale them or use uint8")
        array = np.rint(array * 255).astype(np.uint8)
    else:
        raise BenchmarkFormatError(f"{path}: {key} is {array.dtype}: expected uint8, or floats in [0, 1]")
    channels = array.shape[1]
    if channels == 1:
        array = np.repeat(array, 3, axis=1)
    elif channels == 4:
        array = array[:, :3]
    return np.ascontiguousarray(array)


def _npz_resize(array: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((array.shape[0], 3, size, size), dtype=np.uint8)
    for i in range(array.shape[0]):
        image = Image.fromarray(array[i].transpose(1, 2, 0))
        out[i] = np.asarray(_resize_crop(image, size), dtype=np.uint8).transpose(2, 0, 1)
    return out


def _read_npz(path: Path, image_size: int | None) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise BenchmarkFormatError(f"{path}: not a readable .npz file ({one_line(exc)})") from exc
    for key in ("x_train", "y_train"):
        if key not in arrays:
            raise BenchmarkFormatError(
                f"{path}: key {key!r} missing; an .npz benchmark holds x_train, y_train "
                "(and x_test, y_test, class_names)"
            )
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise BenchmarkFormatError(f"{path}: give both x_test and y_test, or neither (test_fraction)")
    out: dict[str, Any] = {}
    for split in ("train", "test"):
        if f"x_{split}" not in arrays:
            continue
        images = _npz_images(path, arrays[f"x_{split}"], f"x_{split}")
        labels = arrays[f"y_{split}"]
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise BenchmarkFormatError(f"{path}: y_{split} must be a 1-D integer array, got {labels.dtype}")
        if labels.shape[0] != images.shape[0]:
            raise BenchmarkFormatError(
                f"{path}: y_{split} holds {labels.shape[0]} labels for {images.shape[0]} images"
            )
        out[f"x_{split}"] = _npz_resize(images, image_size) if image_size is not None else images
        out[f"y_{split}"] = labels.astype(np.int64)
    if "class_names" in arrays:
        out["class_names"] = [str(name) for name in arrays["class_names"].tolist()]
    return out


# ---------------------------------------------------------------------------------------------
# The loader


def _check_options(image_size: Any, test_fraction: Any) -> None:
    if image_size is not None and (
        isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1
    ):
        raise BenchmarkOptionError(f"benchmark.image_size must be an integer >= 1, got {image_size!r}")
    if test_fraction is not None and (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, int | float)
        or not 0 < test_fraction < 1
    ):
        raise BenchmarkOptionError(f"benchmark.test_fraction must be in (0, 1), got {test_fraction!r}")


def _split(
    labels: np.ndarray, fraction: float | None, names: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified, seeded ``(train_rows, test_rows)``; every class keeps a training row."""
    train, test = validation_split(
        torch.from_numpy(labels), DEFAULT_TEST_FRACTION if fraction is None else float(fraction), SPLIT_SEED
    )
    train_np = train.numpy()
    for c in np.unique(labels):
        if not (labels[train_np] == c).any():
            name = names[int(c)] if names is not None else str(c)
            raise BenchmarkOptionError(
                f"class {name!r} has {int((labels == c).sum())} image(s): the test fraction leaves it no "
                "training image; add images or lower benchmark.test_fraction"
            )
    return train_np, test.numpy()


@register_benchmark("folder", defaults=FOLDER_DEFAULTS, protocols={"laptop": FOLDER_LAPTOP})
def folder(
    root: Path | None,
    *,
    tasks: int | None = None,
    classes_per_task: int | list[int] | None = None,
    image_size: int | None = None,
    test_fraction: float | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    cache_dir: str | None = None,
    progress: Progress | None = None,
) -> Benchmark:
    """Load the user's images (or ``.npz``) under ``root`` as a benchmark (module docstring).

    Args:
        root: the data folder, or an ``.npz`` file.
        tasks, classes_per_task: the split into tasks (2 classes per task by default).
        image_size: resize the shorter side to this, then centre-crop a square; None keeps the
            images' own size, which must then be the same for all.
        test_fraction: of each class, held out as the test set when the data have no test split
            (0.2 by default); an error when they have one.
        mean, std: per-channel normalisation; computed from the training images when not given.
        cache_dir: the folder of the decoding cache (default: the data folder itself).
        progress: wraps the per-image decoding loop (e.g. ``tqdm``).

    Returns:
        ``train_x``/``test_x`` (N, 3, H, W) uint8, labels in class-name order, ``class_names``.

    Raises:
        DataNotFoundError: no root, a missing folder, or no class folder in it.
        BenchmarkFormatError: an empty class folder, an unreadable image, mixed image sizes
            without ``image_size``, a test class missing from train, or a malformed ``.npz``.
        BenchmarkOptionError: classes that do not divide into the tasks asked for, a class the
            test fraction leaves without training images, ``test_fraction`` with a given split,
            or ill-typed options.
        CacheWriteError: the cache cannot be written (a read-only data folder: pass ``cache_dir``).
    """
    _check_options(image_size, test_fraction)
    if root is None:
        raise DataNotFoundError(f"the folder benchmark needs run.data_root DIR: {_LAYOUT}")
    root = Path(root)
    split: dict[str, Any] = {"tasks": tasks, "classes_per_task": classes_per_task, "mean": mean, "std": std}
    if root.is_file() and root.suffix == ".npz":
        arrays = _read_npz(root, image_size)
        names = arrays.get("class_names")
        if "x_test" in arrays:
            if test_fraction is not None:
                raise BenchmarkOptionError(
                    f"{root} holds x_test and y_test: benchmark.test_fraction applies only without them"
                )
            train_x, train_y = arrays["x_train"], arrays["y_train"]
            test_x, test_y = arrays["x_test"], arrays["y_test"]
        else:
            classes, inverse = np.unique(arrays["y_train"], return_inverse=True)
            if names is not None and len(names) != len(classes):
                raise BenchmarkFormatError(f"{root}: {len(names)} class_names for {len(classes)} classes")
            train_rows, test_rows = _split(inverse.astype(np.int64), test_fraction, names)
            x, y = arrays["x_train"], arrays["y_train"]
            train_x, train_y, test_x, test_y = x[train_rows], y[train_rows], x[test_rows], y[test_rows]
        bench = benchmark_from_tensors(
            torch.from_numpy(train_x),
            torch.from_numpy(train_y),
            torch.from_numpy(test_x),
            torch.from_numpy(test_y),
            class_names=names,
            name="folder",
            defaults=FOLDER_DEFAULTS,
            **split,
        )
        return bench if "x_test" in arrays else _noted_split(bench, f"{root} has no x_test", test_fraction)
    listing = read_folder_listing(root)
    if listing.split_given and test_fraction is not None:
        raise BenchmarkOptionError(
            f"{root} has train/ and test/: benchmark.test_fraction applies only to a single tree"
        )
    path = folder_cache_path(root, cache_dir)
    digest = listing.digest(image_size)
    pixels = _read_cache(path, digest, len(listing.paths))
    if pixels is None:
        pixels, _ = _decode(listing, image_size, progress or no_progress)
        _write_cache(path, pixels, digest, listing)
    if listing.split_given:
        train_rows, test_rows = np.flatnonzero(listing.is_train), np.flatnonzero(~listing.is_train)
    else:
        train_rows, test_rows = _split(listing.labels, test_fraction, listing.class_names)
    images, labels = torch.from_numpy(pixels), torch.from_numpy(listing.labels)
    train_index, test_index = torch.from_numpy(train_rows), torch.from_numpy(test_rows)
    bench = benchmark_from_tensors(
        images[train_index],
        labels[train_index],
        images[test_index],
        labels[test_index],
        class_names=listing.class_names,
        name="folder",
        defaults=FOLDER_DEFAULTS,
        **split,
    )
    return bench if listing.split_given else _noted_split(bench, f"{root} has no test/", test_fraction)


def _noted_split(bench: Benchmark, why: str, fraction: float | None) -> Benchmark:
    """``bench`` with a note saying that its test set was split off from the training images."""
    share = DEFAULT_TEST_FRACTION if fraction is None else float(fraction)
    note = (
        f"{why}: the test set is {share:.0%} of each class's images, held out (seeded; "
        "benchmark.test_fraction sets the share)"
    )
    return dataclasses.replace(bench, notes=(*bench.notes, note))
