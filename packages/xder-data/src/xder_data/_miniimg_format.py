"""The ``MINIIMG`` layout ``seq-miniimg`` reads (the X-DER authors' arrays, described in
:mod:`xder_data.miniimagenet`): its reader and the writer the importers build it with. Public names
are re-exported by :mod:`xder_data.miniimagenet`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from xder_data._image_copy import staged_folder
from xder_data.benchmark import Progress, no_progress
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line, prepare_call

__all__ = [
    "IMAGE_SHAPE",
    "MINIIMG_FILES",
    "MINIIMG_FOLDER",
    "N_CLASSES",
    "SIZE",
    "WNIDS_FILE",
    "ClassSplit",
    "MiniImageNetImport",
    "ReadRows",
    "import_hint",
    "read_split",
    "read_wnids",
    "write_layout",
]

MINIIMG_FOLDER = "MINIIMG"
MINIIMG_FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy")
WNIDS_FILE = "wnids.txt"

N_CLASSES = 100
SIZE = 84
IMAGE_SHAPE = (SIZE, SIZE, 3)
_CHUNK = 2048  # rows converted HWC -> CHW at a time (about 43 MB)


def import_hint(root: Path) -> str:
    return (
        f"import miniImageNet into {root} with `{prepare_call('miniimagenet', root, source='SRC')}` "
        "(xder_data.import_miniimagenet_csv, import_miniimagenet_pickle or import_miniimagenet_folders), "
        "or unzip the X-DER "
        f"authors' miniImagenet.zip so that {root / MINIIMG_FOLDER}/train_x.npy exists"
    )


# ---------------------------------------------------------------------------------------------
# Reader


def _bad(path: Path, problem: str) -> BenchmarkFormatError:
    """``<path>: <problem>; <fix>`` for a file ``<root>/MINIIMG/<name>``."""
    return BenchmarkFormatError(f"{path}: {problem}; {import_hint(path.parent.parent)}")


def _load_npy(path: Path, *, mmap: bool) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, EOFError) as exc:
        raise _bad(
            path, f"not a readable .npy array ({one_line(exc)}), truncated or not from numpy.save"
        ) from exc
    except OSError as exc:
        raise DataNotFoundError(f"{path}: cannot read ({one_line(exc)})") from exc
    if not isinstance(array, np.ndarray):  # an .npz archive under an .npy name
        raise _bad(path, "holds an .npz archive, expected a single .npy array")
    return array


def _read_images(path: Path) -> np.ndarray:
    """The memory-mapped (N, 84, 84, 3) uint8 array of ``path``."""
    images = _load_npy(path, mmap=True)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        hint = " (channels first: store HWC)" if images.shape[1:] == (3, SIZE, SIZE) else ""
        raise _bad(
            path, f"{images.dtype} array of shape {images.shape}{hint}, expected uint8 images (N, 84, 84, 3)"
        )
    return images


def _read_labels(path: Path, n_rows: int) -> np.ndarray:
    labels = _load_npy(path, mmap=False)
    if labels.ndim != 1 or len(labels) != n_rows:
        raise _bad(path, f"labels of shape {labels.shape}, expected one per image ({n_rows},)")
    if labels.dtype.kind not in "iu":
        raise _bad(path, f"labels of dtype {labels.dtype}, expected integers 0..99")
    labels = labels.astype(np.int64)
    if n_rows and (labels.min() < 0 or labels.max() >= N_CLASSES):
        raise _bad(path, f"labels span {labels.min()}..{labels.max()}, expected 0..99")
    absent = np.setdiff1d(np.arange(N_CLASSES), labels)
    if len(absent):
        raise _bad(
            path, f"class {absent[0]} has no images ({len(absent)} of 100 absent; seq-miniimg needs all)"
        )
    return labels


def _to_chw(images: np.ndarray) -> torch.Tensor:
    """(N, H, W, C) uint8 (possibly memory-mapped) -> contiguous (N, C, H, W), chunk by chunk."""
    out = torch.empty((images.shape[0], images.shape[3], *images.shape[1:3]), dtype=torch.uint8)
    view = out.numpy()
    for start in range(0, len(images), _CHUNK):
        view[start : start + _CHUNK] = images[start : start + _CHUNK].transpose(0, 3, 1, 2)
    return out


def read_wnids(folder: Path) -> tuple[str, ...] | None:
    path = folder / WNIDS_FILE
    if not path.is_file():
        return None
    wnids = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if len(wnids) != N_CLASSES or len(set(wnids)) != N_CLASSES:
        raise BenchmarkFormatError(
            f"{path}: {len(wnids)} lines ({len(set(wnids))} distinct), expected the 100 class ids in "
            "label order, one a line: fix or delete it"
        )
    return wnids


def read_split(folder: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    images = _read_images(folder / f"{split}_x.npy")
    labels = _read_labels(folder / f"{split}_y.npy", len(images))
    x = _to_chw(images)
    del images  # release the memory map
    return x, torch.from_numpy(labels)


# ---------------------------------------------------------------------------------------------
# Writer


@dataclass(frozen=True)
class MiniImageNetImport:
    """What an importer wrote.

    Attributes:
        folder: the ``MINIIMG`` folder holding the four arrays and ``wnids.txt``.
        wnids: the WordNet id of each label (sorted, so label i is the i-th smallest wnid).
        n_train, n_test: rows written to ``train_*.npy`` and ``test_*.npy``.
        resized: source images that were not 84x84 and were resized (CSV importer only).
        converted: source images that were not RGB and were converted (folders importer only).
    """

    folder: Path
    wnids: tuple[str, ...]
    n_train: int
    n_test: int
    resized: int = 0
    converted: int = 0

    @property
    def n_classes(self) -> int:
        return len(self.wnids)


ReadRows = Callable[[int, np.ndarray], np.ndarray]
"""``read(class_index, positions) -> (len(positions), 84, 84, 3) uint8``: a class's images by
their positions in the class's file order."""

ClassSplit = tuple[np.ndarray, np.ndarray]
"""``(test positions, train positions)`` of one class, in the order its rows are written."""


def write_layout(
    root: Path,
    wnids: Sequence[str],
    splits: Sequence[ClassSplit],
    read: ReadRows,
    progress: Progress = no_progress,
) -> MiniImageNetImport:
    """Write ``<root>/MINIIMG/`` from each class's test and train positions: classes in index
    order, each class's rows in the order given. The arrays are written through memory maps into
    a staging folder inside ``root`` and moved into place once complete
    (:func:`~xder_data._image_copy.staged_folder`), so a failure leaves nothing half-written."""
    n_test = sum(len(test) for test, _ in splits)
    n_train = sum(len(train) for _, train in splits)
    with staged_folder(root, MINIIMG_FOLDER, (*MINIIMG_FILES, WNIDS_FILE)) as staging:
        arrays = {
            split: np.lib.format.open_memmap(
                staging / f"{split}_x.npy", mode="w+", dtype=np.uint8, shape=(count, *IMAGE_SHAPE)
            )
            for split, count in (("train", n_train), ("test", n_test))
        }
        labels = {"train": np.empty(n_train, dtype=np.int64), "test": np.empty(n_test, dtype=np.int64)}
        cursor = {"train": 0, "test": 0}
        for c, (test, train) in progress(list(enumerate(splits))):
            for split, positions in (("test", test), ("train", train)):
                start, stop = cursor[split], cursor[split] + len(positions)
                arrays[split][start:stop] = read(c, positions)
                labels[split][start:stop] = c
                cursor[split] = stop
        for split in ("train", "test"):
            arrays[split].flush()
            with (staging / f"{split}_y.npy").open("wb") as f:
                np.save(f, labels[split])
                f.flush()
                os.fsync(f.fileno())
        del arrays
        (staging / WNIDS_FILE).write_text("".join(f"{wnid}\n" for wnid in wnids), encoding="utf-8")
    return MiniImageNetImport(
        folder=root / MINIIMG_FOLDER, wnids=tuple(wnids), n_train=n_train, n_test=n_test
    )
