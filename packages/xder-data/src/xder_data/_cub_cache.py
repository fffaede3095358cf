"""CUB-200-2011 decoded once: every image (and test mask) decoded and resized into the training and
test geometry (:data:`TRAIN_SIZE`, :data:`IMAGE_SIZE`), and the cache :func:`prepare_cub200` writes
to ``<root>/cub200/cub200.h5``, its layout, writer and validator. Public names are re-exported by
:mod:`xder_data.cub200`."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch import Tensor

from xder_data._cub_format import (
    SEGMENTATIONS_FOLDER,
    Listing,
    decode_image,
    decode_mask,
    one_line,
    read_listing,
)
from xder_data._hdf5 import read_attr
from xder_data.benchmark import Progress, no_progress
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, prepare_call

__all__ = [
    "CACHE_FORMAT",
    "CACHE_VERSION",
    "IMAGE_SIZE",
    "PREPARE_HINT",
    "TRAIN_SIZE",
    "CUB200PrepareReport",
    "check_cache",
    "cub200_cache_path",
    "decode_into",
    "open_cache",
    "prepare_cub200",
    "read_uint8",
    "require_segmentations",
]

TRAIN_SIZE = 256
"""Training images are stored resized to 256x256 (App. "Details on Split CUB-200")."""
IMAGE_SIZE = 224
"""The network's input size: the training crop and the test resize."""

CACHE_FORMAT = "xder-cub200"
CACHE_VERSION = 1
PREPARE_HINT = f"prepare the cache once with `{prepare_call('cub200', 'ROOT')}`"


# ---------------------------------------------------------------------------------------------
# Decoding and the cache


def cub200_cache_path(root: str | Path) -> Path:
    """Where :func:`prepare_cub200` writes its cache under a data root: ``<root>/cub200/cub200.h5``."""
    return Path(root) / "cub200" / "cub200.h5"


def require_segmentations(root: Path) -> None:
    folder = root / SEGMENTATIONS_FOLDER
    if not folder.is_dir():
        raise DataNotFoundError(
            f"{folder}: segmentation masks not found; extract segmentations.tgz under {root}, "
            "or load with masks=False"
        )


@dataclass(frozen=True, eq=False)
class _Decoded:
    train_size: np.ndarray  # (N_train, 2) int64 (width, height) of the originals
    test_size: np.ndarray
    image_modes: Counter[str]
    mask_modes: Counter[str]


def decode_into(
    root: Path,
    listing: Listing,
    train_x: Any,
    test_x: Any,
    test_masks: Any | None,
    progress: Progress = no_progress,
) -> _Decoded:
    """Decode every image (and test mask) in image-id order into the row-indexable sinks
    ``train_x`` (N_train, 3, 256, 256), ``test_x`` (N_test, 3, 224, 224) and ``test_masks``
    (N_test, 224, 224) uint8 soft values (numpy arrays or HDF5 datasets)."""
    n = len(listing.image_ids)
    row = np.empty(n, dtype=np.int64)  # row of image i within its split
    for split in ("train", "test"):
        positions = listing.rows(split)
        row[positions] = np.arange(len(positions))
    sizes = {
        True: np.empty((int(listing.is_train.sum()), 2), dtype=np.int64),
        False: np.empty((int((~listing.is_train).sum()), 2), dtype=np.int64),
    }
    image_modes: Counter[str] = Counter()
    mask_modes: Counter[str] = Counter()
    for i in progress(range(n)):
        train = bool(listing.is_train[i])
        pixels, size, mode = decode_image(listing, i, TRAIN_SIZE if train else IMAGE_SIZE)
        image_modes[mode] += 1
        r = int(row[i])
        (train_x if train else test_x)[r] = pixels
        sizes[train][r] = size
        if not train and test_masks is not None:
            values, mask_mode = decode_mask(root, listing, i, size, IMAGE_SIZE)
            mask_modes[mask_mode] += 1
            test_masks[r] = values
    return _Decoded(sizes[True], sizes[False], image_modes, mask_modes)


@dataclass(frozen=True, kw_only=True)
class CUB200PrepareReport:
    """What :func:`prepare_cub200` wrote.

    Attributes:
        path: the cache file.
        n_train, n_test: images written to each split.
        masks: whether the test masks were written.
        image_modes: PIL mode -> number of images (all are converted to RGB).
        mask_modes: PIL mode -> number of masks (``LA`` keeps its ``L`` band).
    """

    path: Path
    n_train: int
    n_test: int
    masks: bool
    image_modes: Mapping[str, int]
    mask_modes: Mapping[str, int]


def prepare_cub200(
    root: str | Path, *, masks: bool = True, progress: Progress = no_progress
) -> CUB200PrepareReport:
    """Decode and resize CUB-200-2011 once into ``<root>/cub200/cub200.h5`` (:func:`cub200_cache_path`).

    The file is written under ``cub200.h5.partial`` and renamed when complete. It holds
    ``train_x`` uint8 (N_train, 3, 256, 256), ``test_x`` uint8 (N_test, 3, 224, 224),
    ``test_mask_values`` uint8 (N_test, 224, 224) (the soft masks in the test geometry, before
    binarising, so that the loader can apply any threshold), ``{train,test}_image_id`` int64 and
    ``{train,test}_image_size`` int64 (N, 2) (width, height of the originals); attributes
    ``format``, ``version``, ``train_size``, ``image_size``, ``masks`` and ``listing_sha256``.

    Args:
        root: the data root holding ``CUB_200_2011/`` (and ``segmentations/`` when ``masks``).
        masks: also decode the test images' segmentation masks.
        progress: wraps the per-image loop (e.g. ``tqdm``) to show progress.

    Raises:
        DataNotFoundError: a listing file, image, mask or the segmentations folder is missing.
        BenchmarkFormatError: a malformed listing line, ids that do not match, an unreadable
            image or mask, or a mask of another size than its image.
    """
    root = Path(root)
    listing = read_listing(root)
    if masks:
        require_segmentations(root)
    path = cub200_cache_path(root)
    partial = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    n_train, n_test = int(listing.is_train.sum()), int((~listing.is_train).sum())
    try:
        with h5py.File(partial, "w") as handle:
            train_x = handle.create_dataset("train_x", (n_train, 3, TRAIN_SIZE, TRAIN_SIZE), np.uint8)
            test_x = handle.create_dataset("test_x", (n_test, 3, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
            mask_values = (
                handle.create_dataset("test_mask_values", (n_test, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
                if masks
                else None
            )
            decoded = decode_into(root, listing, train_x, test_x, mask_values, progress)
            for split in ("train", "test"):
                handle[f"{split}_image_id"] = listing.image_ids[listing.rows(split)]
            handle["train_image_size"] = decoded.train_size
            handle["test_image_size"] = decoded.test_size
            handle.attrs.update(_cache_attrs(listing, masks))
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return CUB200PrepareReport(
        path=path,
        n_train=n_train,
        n_test=n_test,
        masks=masks,
        image_modes=dict(decoded.image_modes),
        mask_modes=dict(decoded.mask_modes),
    )


def _cache_attrs(listing: Listing, masks: bool) -> dict[str, Any]:
    return {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "train_size": TRAIN_SIZE,
        "image_size": IMAGE_SIZE,
        "masks": masks,
        "listing_sha256": listing.digest(),
    }


def open_cache(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise BenchmarkFormatError(
            f"{path}: not a readable HDF5 file ({one_line(exc)}); delete it and {PREPARE_HINT}"
        ) from None


def check_cache(path: Path, handle: h5py.File, listing: Listing) -> None:
    """Raise unless ``handle`` is a complete cache of ``listing`` at this version."""
    fix = f"delete it and {PREPARE_HINT}"
    if read_attr(handle, "format") != CACHE_FORMAT or read_attr(handle, "version") != CACHE_VERSION:
        raise BenchmarkFormatError(
            f"{path}: not a {CACHE_FORMAT} cache of version {CACHE_VERSION} "
            f"(format {read_attr(handle, 'format')!r}, version {read_attr(handle, 'version')!r}); {fix}"
        )
    if read_attr(handle, "train_size") != TRAIN_SIZE or read_attr(handle, "image_size") != IMAGE_SIZE:
        raise BenchmarkFormatError(f"{path}: written for other image sizes; {fix}")
    if read_attr(handle, "listing_sha256") != listing.digest():
        raise BenchmarkFormatError(
            f"{path}: stale cache, its listing differs from {listing.folder} (images, classes or split "
            f"changed); {fix}"
        )
    expected: dict[str, tuple[tuple[int, ...], type[np.generic]]] = {
        "train_x": ((int(listing.is_train.sum()), 3, TRAIN_SIZE, TRAIN_SIZE), np.uint8),
        "test_x": ((int((~listing.is_train).sum()), 3, IMAGE_SIZE, IMAGE_SIZE), np.uint8),
    }
    for split in ("train", "test"):
        count = expected[f"{split}_x"][0][0]
        expected[f"{split}_image_id"] = ((count,), np.int64)
        expected[f"{split}_image_size"] = ((count, 2), np.int64)
    if read_attr(handle, "masks"):
        expected["test_mask_values"] = ((expected["test_x"][0][0], IMAGE_SIZE, IMAGE_SIZE), np.uint8)
    for key, (shape, dtype) in expected.items():
        dataset = handle.get(key)
        if not isinstance(dataset, h5py.Dataset) or dataset.shape != shape or dataset.dtype != dtype:
            found = "missing" if not isinstance(dataset, h5py.Dataset) else f"{dataset.dtype} {dataset.shape}"
            raise BenchmarkFormatError(
                f"{path}: dataset {key!r} is {found}, expected {np.dtype(dtype)} {shape}; {fix}"
            )
    for split in ("train", "test"):
        if not np.array_equal(handle[f"{split}_image_id"][...], listing.image_ids[listing.rows(split)]):
            raise BenchmarkFormatError(f"{path}: {split} image ids differ from the listing; {fix}")


def read_uint8(dataset: h5py.Dataset) -> Tensor:
    out = torch.empty(dataset.shape, dtype=torch.uint8)
    if out.numel():
        dataset.read_direct(out.numpy())
    return out
