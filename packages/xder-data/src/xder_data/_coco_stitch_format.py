"""COCO-stitch on disk: the classes the set draws from (:data:`SHARED_CLASSES`) and the project's
HDF5 layout of ``<data_root>/coco_stitch/{train,test}.h5``, its writer and its validator. Public
names are re-exported by :mod:`xder_data.coco_stitch`; the layout is described there and in
docs/data-formats.md."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from xder_data.errors import BenchmarkFormatError, prepare_call

__all__ = [
    "BLOCK",
    "CIFAR_IDS",
    "COCO_STITCH_FOLDER",
    "FORMAT",
    "N_CLASSES",
    "SHARED_CLASSES",
    "SPLITS",
    "VERSION",
    "SharedClass",
    "StitchWriter",
    "bad_file",
    "check_file",
    "coco_stitch_paths",
    "prepare_hint",
    "read_labels",
]


@dataclass(frozen=True)
class SharedClass:
    """A class of both COCO 2017 and CIFAR-100 (the same name in both).

    Attributes:
        name: the class name (COCO's category ``name`` and CIFAR-100's fine label name).
        coco_id: COCO's category id (non-contiguous, 1..90).
        cifar_id: CIFAR-100's fine label (index in ``meta``'s alphabetical ``fine_label_names``).
    """

    name: str
    coco_id: int
    cifar_id: int


SHARED_CLASSES: tuple[SharedClass, ...] = (
    SharedClass("bed", 65, 5),
    SharedClass("cup", 47, 28),
    SharedClass("chair", 62, 20),
    SharedClass("clock", 85, 22),
    SharedClass("bicycle", 2, 8),
    SharedClass("elephant", 22, 31),
    SharedClass("apple", 53, 0),
    SharedClass("bowl", 51, 10),
    SharedClass("bottle", 44, 9),
    SharedClass("keyboard", 76, 39),
    SharedClass("motorcycle", 4, 48),
    SharedClass("train", 7, 90),
    SharedClass("bear", 23, 3),
    SharedClass("bus", 6, 13),
    SharedClass("mouse", 74, 50),  # COCO: computer mouse; CIFAR-100: the animal (module docstring)
    SharedClass("couch", 63, 25),
    SharedClass("orange", 55, 53),
)
"""The 17 classes of the paper's list (App. "Primary and secondary datasets"), in its order; the
ids are COCO 2017's category ids and CIFAR-100's fine labels, checked against both files'
names by :func:`prepare_coco_stitch`."""

CIFAR_IDS = np.array([shared.cifar_id for shared in SHARED_CLASSES], dtype=np.int64)

COCO_STITCH_FOLDER = "coco_stitch"

FORMAT = "xder-coco-stitch"
VERSION = 1
N_CLASSES = 100
SPLITS = ("train", "test")
BLOCK = 256  # examples rendered and written at a time


def prepare_hint(root: Path | str = "ROOT") -> str:
    return f"run `{prepare_call('coco-stitch', root, source='COCO_DIR')}`"


def coco_stitch_paths(root: str | Path) -> dict[str, Path]:
    """Where the two files live under a data root: ``{"train": <root>/coco_stitch/train.h5, ...}``."""
    folder = Path(root) / COCO_STITCH_FOLDER
    return {split: folder / f"{split}.h5" for split in SPLITS}


class StitchWriter:
    """One split's HDF5 file, written under ``<name>.partial`` and renamed by :meth:`commit`."""

    def __init__(self, path: Path, n: int, size: int, attrs: Mapping[str, Any], class_names: Sequence[str]):
        self.path = path
        self.tmp = path.with_name(path.name + ".partial")
        self.file = h5py.File(self.tmp, "w")
        block = min(n, BLOCK)
        self.file.create_dataset("images", (n, 3, size, size), dtype=np.uint8, chunks=(block, 3, size, size))
        self.file.create_dataset(
            "masks", (n, size, size), dtype=bool, chunks=(block, size, size), compression="gzip"
        )
        for key in (
            "primary_labels",
            "secondary_labels",
            "cifar_rows",
            "coco_annotation_ids",
            "coco_image_ids",
        ):
            self.file.create_dataset(key, (n,), dtype=np.int64)
        self.file.create_dataset("boxes", (n, 4), dtype=np.int32)
        self.file.create_dataset("class_names", data=np.array([name.encode("utf-8") for name in class_names]))
        self.file.attrs.update(dict(attrs))

    def write(self, start: int, columns: Mapping[str, np.ndarray]) -> None:
        for key, values in columns.items():
            self.file[key][start : start + len(values)] = values

    def close(self) -> None:
        self.file.flush()
        self.file.close()
        with open(self.tmp, "rb") as handle:
            os.fsync(handle.fileno())

    def commit(self) -> None:
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self.file.id.valid:
            self.file.close()
        self.tmp.unlink(missing_ok=True)


_KIND_NAMES = {"b": "bool", "i": "int"}
_INT_KEYS = ("primary_labels", "secondary_labels", "cifar_rows", "coco_annotation_ids", "coco_image_ids")


def bad_file(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(f"{path}: {problem}; {prepare_hint(path.parent.parent)} to rebuild it")


def check_file(path: Path, handle: h5py.File) -> int:
    """Validate one file's layout; returns its image side S."""
    if handle.attrs.get("format") not in (FORMAT, FORMAT.encode()):
        raise bad_file(path, f"format attribute is {handle.attrs.get('format')!r}, expected {FORMAT!r}")
    for key in ("images", "masks", "boxes", "class_names", *_INT_KEYS):
        if key not in handle or not isinstance(handle[key], h5py.Dataset):
            raise bad_file(path, f"dataset '{key}' missing")
    images = handle["images"]
    n = images.shape[0] if images.ndim else -1
    if (
        images.dtype != np.uint8
        or images.ndim != 4
        or images.shape[1] != 3
        or images.shape[2] != images.shape[3]
    ):
        raise bad_file(path, f"'images' is {images.dtype} {images.shape}, expected uint8 (N, 3, S, S)")
    size: int = images.shape[2]
    expected = {"masks": ((n, size, size), "b"), "boxes": ((n, 4), "i")}
    expected.update({key: ((n,), "i") for key in _INT_KEYS})
    for key, (shape, kind) in expected.items():
        dataset = handle[key]
        if dataset.shape != shape or dataset.dtype.kind != kind:
            raise bad_file(
                path,
                f"'{key}' is {dataset.dtype} {dataset.shape}, expected {_KIND_NAMES[kind]} {shape}",
            )
    names = handle["class_names"]
    if names.shape != (N_CLASSES,) or names.dtype.kind != "S":
        raise bad_file(
            path, f"'class_names' is {names.dtype} {names.shape}, expected {N_CLASSES} byte strings"
        )
    return size


def read_labels(path: Path, handle: h5py.File, key: str) -> torch.Tensor:
    labels = np.asarray(handle[key][...], dtype=np.int64)
    bad = np.flatnonzero((labels < 0) | (labels >= N_CLASSES))
    if len(bad):
        raise bad_file(
            path, f"'{key}' row {int(bad[0])} is {int(labels[bad[0]])}, expected 0..{N_CLASSES - 1}"
        )
    return torch.from_numpy(labels)
