"""miniImageNet imported from its common distributions into the ``MINIIMG`` layout
(:mod:`xder_data._miniimg_format`): the CSV distribution (``images/`` + ``train.csv``/``val.csv``/
``test.csv``) and the pickle caches (``mini-imagenet-cache-*.pkl``), pooled and re-split per class
with a seed, and image folders already split per class, kept as given. Public names are
re-exported by :mod:`xder_data.miniimagenet`."""

from __future__ import annotations

import csv
import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xder_data._image_copy import Entry, ImageCopy
from xder_data._miniimg_format import (
    IMAGE_SHAPE,
    N_CLASSES,
    SIZE,
    ClassSplit,
    MiniImageNetImport,
    write_layout,
)
from xder_data._pickle import load_data_pickle
from xder_data.benchmark import Progress, no_progress
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, UnsafePickleError, one_line

__all__ = [
    "FOLDERS",
    "import_miniimagenet_csv",
    "import_miniimagenet_folders",
    "import_miniimagenet_pickle",
]


def _plan_split(
    sizes: Sequence[int], wnids: Sequence[str], test_per_class: int, seed: int, source: Path
) -> list[ClassSplit]:
    """Per class (index order), its positions permuted by one ``default_rng(seed)``: the first
    ``test_per_class`` are test, the rest train."""
    if test_per_class < 1:
        raise ValueError(f"test_per_class must be at least 1, got {test_per_class}")
    for wnid, size in zip(wnids, sizes, strict=True):
        if size <= test_per_class:
            raise BenchmarkFormatError(
                f"{source}: class {wnid} has {size} images, too few for {test_per_class} test images "
                "and at least one training image: lower test_per_class"
            )
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(size) for size in sizes]
    return [(order[:test_per_class], order[test_per_class:]) for order in orders]


def _require_classes(source: Path, wnids: Sequence[str], where: str) -> None:
    if len(wnids) != N_CLASSES:
        raise BenchmarkFormatError(
            f"{source}: {where} name {len(wnids)} classes, expected the 100 of miniImageNet "
            "(Ravi & Larochelle's 64 + 16 + 20): pass the full distribution"
        )


def _read_csv(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise DataNotFoundError(
            f"{path}: missing; the CSV distribution needs images/ plus train.csv, val.csv and test.csv"
        )
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            rows = [(n, row) for n, row in enumerate(csv.reader(f), start=1) if row]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BenchmarkFormatError(f"{path}: not a UTF-8 CSV file ({one_line(exc)})") from exc
    if not rows or [cell.strip() for cell in rows[0][1]] != ["filename", "label"]:
        header = ",".join(rows[0][1]) if rows else "nothing"
        raise BenchmarkFormatError(f"{path}: first line is {header!r}, expected the header 'filename,label'")
    entries = []
    for line, row in rows[1:]:
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise BenchmarkFormatError(f"{path}: line {line} is {','.join(row)!r}, expected 'filename,label'")
        entries.append((row[0].strip(), row[1].strip()))
    return entries


def _read_image(path: Path, listed_in: Path) -> tuple[np.ndarray, bool]:
    """An RGB image as (84, 84, 3) uint8 (bilinear resize if needed), and whether it was resized."""
    from PIL import Image

    if not path.is_file():
        raise DataNotFoundError(f"{path}: image listed in {listed_in} is missing: restore images/")
    try:
        with Image.open(path) as image:
            rgb = image.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise BenchmarkFormatError(
            f"{path}: unreadable image ({one_line(exc)}): replace it from the miniImageNet archive"
        ) from exc
    resized = rgb.size != (SIZE, SIZE)
    if resized:
        rgb = rgb.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    return np.asarray(rgb, dtype=np.uint8), resized


def import_miniimagenet_csv(
    source: str | Path,
    root: str | Path,
    *,
    test_per_class: int = 100,
    seed: int = 0,
    progress: Progress = no_progress,
) -> MiniImageNetImport:
    """Build ``<root>/MINIIMG/`` from the Ravi & Larochelle distribution.

    ``source`` holds ``images/`` and ``train.csv``, ``val.csv``, ``test.csv``, each with the header
    ``filename,label`` (rows like ``n0153282900000005.jpg,n01532829``). All three are pooled:

    * class index = position of the wnid in sorted order (label 0 is the smallest wnid);
    * a class's images in file order = their rows in train.csv, then val.csv, then test.csv;
    * per class in index order, these positions are permuted by one
      ``numpy.random.default_rng(seed)``; the first ``test_per_class`` are test, the rest train
      (600 images a class gives 500 / 100, i.e. 50,000 train and 10,000 test images);
    * each image is read with Pillow, converted to RGB and, if it is not 84x84, resized to 84x84
      with Pillow's bilinear filter.

    ``progress`` wraps the per-class loop that writes the arrays (e.g. ``tqdm``) to show progress.

    Returns:
        The counts written (:class:`MiniImageNetImport`).

    Raises:
        DataNotFoundError: a CSV, ``images/`` or a listed image is missing.
        BenchmarkFormatError: a CSV header or row is malformed, an image is unreadable, the
            files do not name 100 classes, or a class has at most ``test_per_class`` images.
    """
    source, root = Path(source), Path(root)
    images_dir = source / "images"
    if not images_dir.is_dir():
        raise DataNotFoundError(
            f"{images_dir}: missing; the CSV distribution needs images/ plus train.csv, val.csv and test.csv"
        )
    per_class: dict[str, list[tuple[str, Path]]] = {}
    for split in ("train", "val", "test"):
        csv_path = source / f"{split}.csv"
        for filename, wnid in _read_csv(csv_path):
            per_class.setdefault(wnid, []).append((filename, csv_path))
    wnids = sorted(per_class)
    _require_classes(source, wnids, "train.csv, val.csv and test.csv")
    files = [per_class[wnid] for wnid in wnids]
    splits = _plan_split([len(f) for f in files], wnids, test_per_class, seed, source)
    resized = 0

    def read(c: int, positions: np.ndarray) -> np.ndarray:
        nonlocal resized
        out = np.empty((len(positions), *IMAGE_SHAPE), dtype=np.uint8)
        for i, position in enumerate(positions):
            filename, listed_in = files[c][position]
            out[i], was_resized = _read_image(images_dir / filename, listed_in)
            resized += was_resized
        return out

    report = write_layout(root, wnids, splits, read, progress)
    return dataclasses.replace(report, resized=resized)


_CACHE_NAMES = (
    ("mini-imagenet-cache-train.pkl",),
    ("mini-imagenet-cache-val.pkl", "mini-imagenet-cache-validation.pkl"),
    ("mini-imagenet-cache-test.pkl",),
)


def _text(value: Any) -> Any:
    return value.decode("latin1") if isinstance(value, bytes) else value


def _read_cache(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(image_data (N, 84, 84, 3) uint8, {wnid: rows})`` of one cache pickle."""
    try:
        obj = load_data_pickle(path)
    except UnsafePickleError:
        raise
    except OSError as exc:
        raise DataNotFoundError(f"{path}: cannot read ({one_line(exc)})") from exc
    except Exception as exc:  # a corrupt pickle can raise nearly anything; report it in one line
        raise BenchmarkFormatError(
            f"{path}: not a readable pickle ({one_line(exc)}); the file is truncated or corrupt"
        ) from exc
    if not isinstance(obj, Mapping):
        raise BenchmarkFormatError(f"{path}: holds a {type(obj).__name__}, expected a dict")
    obj = {_text(key): value for key, value in obj.items()}
    for key in ("image_data", "class_dict"):
        if key not in obj:
            found = ", ".join(sorted(map(str, obj))) or "none"
            raise BenchmarkFormatError(f"{path}: key {key!r} missing (found: {found})")
    images, class_dict = obj["image_data"], obj["class_dict"]
    if (
        not isinstance(images, np.ndarray)
        or images.dtype != np.uint8
        or images.ndim != 4
        or images.shape[1:] != IMAGE_SHAPE
    ):
        what = f"{images.dtype} {images.shape}" if isinstance(images, np.ndarray) else type(images).__name__
        raise BenchmarkFormatError(f"{path}: 'image_data' is {what}, expected uint8 (N, 84, 84, 3)")
    if not isinstance(class_dict, Mapping):
        raise BenchmarkFormatError(f"{path}: 'class_dict' is a {type(class_dict).__name__}, expected a dict")
    classes = {}
    for wnid, rows in class_dict.items():
        try:
            rows = np.asarray(rows)
        except ValueError as exc:
            raise BenchmarkFormatError(f"{path}: class_dict[{_text(wnid)!r}] is not a list of rows") from exc
        if rows.ndim != 1 or (len(rows) and rows.dtype.kind not in "iu"):
            raise BenchmarkFormatError(f"{path}: class_dict[{_text(wnid)!r}] is not a flat list of int rows")
        rows = rows.astype(np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(images)):
            raise BenchmarkFormatError(
                f"{path}: class_dict[{_text(wnid)!r}] names rows {rows.min()}..{rows.max()}, but "
                f"image_data holds {len(images)}"
            )
        classes[str(_text(wnid))] = rows
    return images, classes


def import_miniimagenet_pickle(
    source: str | Path,
    root: str | Path,
    *,
    test_per_class: int = 100,
    seed: int = 0,
    progress: Progress = no_progress,
) -> MiniImageNetImport:
    """Build ``<root>/MINIIMG/`` from the ``mini-imagenet-cache-*.pkl`` distribution.

    ``source`` holds ``mini-imagenet-cache-train.pkl``, ``-val.pkl`` (or ``-validation.pkl``) and
    ``-test.pkl``, each a dict with ``image_data`` uint8 (N, 84, 84, 3) and ``class_dict``
    ``{wnid: [row, ...]}`` (``str`` or ``bytes`` keys). All three are pooled:

    * class index = position of the wnid in sorted order (label 0 is the smallest wnid);
    * a class's images in file order = the rows ``class_dict`` lists, in that order (train, then
      val, then test if a wnid appears in more than one file);
    * per class in index order, these positions are permuted by one
      ``numpy.random.default_rng(seed)``; the first ``test_per_class`` are test, the rest train.

    The three ``image_data`` arrays (1.27 GB in all) are held in memory while the output is
    written through memory maps; no other full copy is made.

    ``progress`` wraps the per-class loop that writes the arrays (e.g. ``tqdm``) to show progress.

    Returns:
        The counts written (:class:`MiniImageNetImport`).

    Raises:
        DataNotFoundError: a cache file is missing.
        BenchmarkFormatError: a file is truncated or not a pickle, lacks a key, has a wrong
            dtype/shape or out-of-range rows, the files do not name 100 classes, or a class has at
            most ``test_per_class`` images.
    """
    source, root = Path(source), Path(root)
    paths = []
    for names in _CACHE_NAMES:  # find all three before reading any (each is hundreds of MB)
        path = next((source / name for name in names if (source / name).is_file()), None)
        if path is None:
            raise DataNotFoundError(
                f"{source / names[0]}: missing; the pickle distribution needs "
                "mini-imagenet-cache-{train,val,test}.pkl"
            )
        paths.append(path)
    arrays: list[np.ndarray] = []
    per_class: dict[str, list[tuple[int, np.ndarray]]] = {}
    for path in paths:
        images, classes = _read_cache(path)
        for wnid, rows in classes.items():
            per_class.setdefault(wnid, []).append((len(arrays), rows))
        arrays.append(images)
    wnids = sorted(per_class)
    _require_classes(source, wnids, "the cache files")
    file_ids = [np.concatenate([np.full(len(rows), f) for f, rows in per_class[w]]) for w in wnids]
    rows_of = [np.concatenate([rows for _, rows in per_class[w]]) for w in wnids]
    splits = _plan_split([len(r) for r in rows_of], wnids, test_per_class, seed, source)

    def read(c: int, positions: np.ndarray) -> np.ndarray:
        out = np.empty((len(positions), *IMAGE_SHAPE), dtype=np.uint8)
        files, rows = file_ids[c][positions], rows_of[c][positions]
        for f in np.unique(files):
            mask = files == f
            out[mask] = arrays[f][rows[mask]]
        return out

    return write_layout(root, wnids, splits, read, progress)


_FOLDERS_LAYOUT = (
    "miniImageNet as image folders: train/<wnid>/* (training images) and val/<wnid>/* (test images) "
    "for the same 100 classes, every class with as many images as the others (500 and 100), 84x84"
)
FOLDERS = ImageCopy(dataset="miniImageNet", splits=("train", "val"), size=SIZE, layout=_FOLDERS_LAYOUT)


def import_miniimagenet_folders(
    source: str | Path, root: str | Path, *, progress: Progress = no_progress
) -> MiniImageNetImport:
    """Build ``<root>/MINIIMG/`` from image folders already split into train and test.

    ``source`` is a folder or a tar archive (``.tar``, ``.tar.gz``...) holding
    ``train/<wnid>/<file>`` and ``val/<wnid>/<file>`` (optionally under one leading folder; hidden
    files and folders ignored), e.g. ``train/n01532829/n0153282900000005.jpg``: the 100 classes in
    both, each class with as many images as every other in ``train/`` (500) and in ``val/`` (100),
    every image 84x84 in any format Pillow reads (non-RGB images are converted to RGB). The split
    is kept as given, not re-drawn:

    * class index = position of the wnid in sorted order (label 0 is the smallest wnid), as the
      other importers define it;
    * ``train/`` becomes ``train_x.npy``/``train_y.npy`` and ``val/`` becomes ``test_x.npy``/
      ``test_y.npy`` (``val/`` is the test set of Split miniImageNet);
    * rows are written class by class in index order, each class's images in file-name order.

    Every class folder and count is checked before any image is decoded; images are decoded
    straight into memory-mapped arrays (an archive's compressed payloads are held in memory,
    about 200 MB for the real data; no second copy of the 1 GB arrays is made).

    ``progress`` wraps the per-class loop that writes the arrays (e.g. ``tqdm``) to show progress.

    Returns:
        The counts written (:class:`MiniImageNetImport`, with ``converted``).

    Raises:
        DataNotFoundError: ``source`` does not exist.
        BenchmarkFormatError: not a folder nor a readable tar archive, no ``train/`` or ``val/``
            images, a class in one split but not the other, not 100 classes, a class with another
            number of images than the others, an unreadable image, or an image not 84x84.
    """
    source, root = Path(source), Path(root)
    entries = FOLDERS.entries(source)
    FOLDERS.check_classes(source, entries, None)
    wnids = sorted({cls for _, cls, _, _ in entries})
    _require_classes(source, wnids, "train/ and val/")
    per_class = {
        split: Counter(Counter(cls for s, cls, _, _ in entries if s == split).values()).most_common(1)[0][0]
        for split in FOLDERS.splits
    }
    FOLDERS.check_counts(source, entries, per_class)
    label_of = {wnid: c for c, wnid in enumerate(wnids)}
    files: list[list[Entry]] = [[] for _ in wnids]
    # Per class: its val/ (test) images, then its train/ images, each in file-name order.
    for entry in sorted(entries, key=lambda e: (e[0] != "val", e[2])):
        files[label_of[entry[1]]].append(entry)
    n_test = per_class["val"]
    splits = [(np.arange(n_test), np.arange(n_test, len(f))) for f in files]
    converted = 0

    def read(c: int, positions: np.ndarray) -> np.ndarray:
        nonlocal converted
        out = np.empty((len(positions), *IMAGE_SHAPE), dtype=np.uint8)
        for i, position in enumerate(positions):
            split, wnid, name, payload = files[c][position]
            out[i], was_converted = FOLDERS.decode(source, f"{split}/{wnid}/{name}", payload)
            converted += was_converted
        return out

    report = write_layout(root, wnids, splits, read, progress)
    return dataclasses.replace(report, converted=converted)
