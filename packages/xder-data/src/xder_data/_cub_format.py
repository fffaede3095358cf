"""CUB-200-2011 as distributed (docs/data-formats.md, "CUB-200-2011"): the txt listings, the
annotations, and the decoding of one image or segmentation mask into the benchmark's geometry.

Every reader checks what it reads and raises :class:`~xder_data.errors.DataNotFoundError` (a file
is missing or cannot be opened) or :class:`~xder_data.errors.BenchmarkFormatError` (a file is not
in the distributed format) with a one-line message naming the file, and the line where there is one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line

__all__ = [
    "CUB200_FOLDER",
    "N_CLASSES",
    "SEGMENTATIONS_FOLDER",
    "Listing",
    "PartLocations",
    "decode_image",
    "decode_mask",
    "image_size",
    "mask_path",
    "nearest_rows",
    "one_line",
    "read_boxes",
    "read_listing",
    "read_part_locations",
]

CUB200_FOLDER = "CUB_200_2011"
SEGMENTATIONS_FOLDER = "segmentations"
N_CLASSES = 200
_ARCHIVE_FIX = "re-extract CUB_200_2011.tgz"
_SEGMENTATIONS_FIX = "re-extract segmentations.tgz"


# ---------------------------------------------------------------------------------------------
# Space-separated tables


def _read_table(path: Path, spec: str, *, text_last: bool = False) -> list[tuple[int, list[str]]]:
    """The non-blank lines of ``path`` as ``(line number, fields)``, each with ``len(spec.split())``
    fields (the last one may hold spaces when ``text_last``)."""
    columns = len(spec.split())
    if not path.is_file():
        raise DataNotFoundError(f"{path}: missing; {_ARCHIVE_FIX} so that it holds every listing file")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise DataNotFoundError(f"{path}: cannot read ({one_line(exc)})") from exc
    except UnicodeDecodeError as exc:
        raise BenchmarkFormatError(
            f"{path}: not a UTF-8 text file ({one_line(exc)}); {_ARCHIVE_FIX}"
        ) from exc
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split(None, columns - 1) if text_last else line.split()
        if not fields:
            continue
        if len(fields) != columns:
            shown = line.strip()
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise BenchmarkFormatError(
                f"{path}: line {number}: {len(fields)} columns in {shown!r}, expected {columns} ({spec})"
            )
        rows.append((number, fields))
    if not rows:
        raise BenchmarkFormatError(f"{path}: empty, expected lines of '{spec}'; {_ARCHIVE_FIX}")
    return rows


def _int(path: Path, number: int, text: str, what: str, low: int = 1, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BenchmarkFormatError(f"{path}: line {number}: {what} {text!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise BenchmarkFormatError(f"{path}: line {number}: {what} {value} out of range (expected {bound})")
    return value


def _float(path: Path, number: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BenchmarkFormatError(f"{path}: line {number}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise BenchmarkFormatError(f"{path}: line {number}: {what} {text!r} is not finite")
    return value


def _by_image(path: Path, rows: list[tuple[int, list[str]]], known: dict[int, int]) -> dict[int, int]:
    """Line of each image id (column 0), checking that the ids are exactly those of images.txt."""
    lines: dict[int, int] = {}
    for number, fields in rows:
        image_id = _int(path, number, fields[0], "image id")
        if image_id in lines:
            raise BenchmarkFormatError(
                f"{path}: line {number}: image id {image_id} listed again (first on line {lines[image_id]})"
            )
        if image_id not in known:
            raise BenchmarkFormatError(f"{path}: line {number}: image id {image_id} is not in images.txt")
        lines[image_id] = number
    if len(lines) != len(known):
        absent = min(set(known) - set(lines))
        raise BenchmarkFormatError(
            f"{path}: image id {absent} (images.txt line {known[absent]}) has no line; {_ARCHIVE_FIX}"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# The listing


@dataclass(frozen=True, eq=False)
class Listing:
    """images.txt, classes.txt, image_class_labels.txt and train_test_split.txt, in image-id order.

    Attributes:
        folder: ``<root>/CUB_200_2011``.
        image_ids: (N,) int64, ascending.
        names: relative paths under ``images/`` (``<class_dir>/<file>.jpg``).
        image_lines: (N,) the line of each image in images.txt (for messages).
        labels: (N,) int64, class id - 1.
        is_train: (N,) bool.
        class_dirs: classes.txt names (the image folders) in class-id order.
    """

    folder: Path
    image_ids: np.ndarray
    names: tuple[str, ...]
    image_lines: np.ndarray
    labels: np.ndarray
    is_train: np.ndarray
    class_dirs: tuple[str, ...]

    def digest(self) -> str:
        """sha256 of the parsed listing: changes whenever an image, its class or its split does."""
        digest = hashlib.sha256()
        for c, name in enumerate(self.class_dirs, start=1):
            digest.update(f"class {c} {name}\n".encode())
        for image_id, name, label, train in zip(
            self.image_ids.tolist(), self.names, self.labels.tolist(), self.is_train.tolist(), strict=True
        ):
            digest.update(f"{image_id} {name} {label + 1} {int(train)}\n".encode())
        return digest.hexdigest()

    def rows(self, split: str) -> np.ndarray:
        """Positions (into the image-id order) of the ``"train"`` or ``"test"`` images."""
        return np.flatnonzero(self.is_train if split == "train" else ~self.is_train)

    def image_path(self, i: int) -> Path:
        return self.folder / "images" / self.names[i]

    def where(self, i: int) -> str:
        return f"{self.folder / 'images.txt'} line {int(self.image_lines[i])}"


def _folder(root: Path) -> Path:
    folder = root / CUB200_FOLDER
    if not folder.is_dir():
        raise DataNotFoundError(
            f"{folder}: CUB-200-2011 folder not found; extract CUB_200_2011.tgz under {root}"
        )
    return folder


def read_listing(root: Path) -> Listing:
    """Read and cross-check the four listing files of ``<root>/CUB_200_2011``."""
    folder = _folder(root)
    classes_path = folder / "classes.txt"
    class_dirs: list[str] = []
    for number, (text_id, name) in _read_table(classes_path, "<class_id> <class_name>"):
        class_id = _int(classes_path, number, text_id, "class id")
        if class_id != len(class_dirs) + 1:
            raise BenchmarkFormatError(
                f"{classes_path}: line {number}: class id {class_id}, expected {len(class_dirs) + 1} "
                "(ids 1..200 in order)"
            )
        class_dirs.append(name)
    if len(class_dirs) != N_CLASSES:
        raise BenchmarkFormatError(
            f"{classes_path}: {len(class_dirs)} classes, expected the {N_CLASSES} of CUB-200-2011"
        )

    images_path = folder / "images.txt"
    image_lines: dict[int, int] = {}
    names: dict[int, str] = {}
    for number, (text_id, name) in _read_table(images_path, "<image_id> <image_name>"):
        image_id = _int(images_path, number, text_id, "image id")
        if image_id in image_lines:
            raise BenchmarkFormatError(
                f"{images_path}: line {number}: image id {image_id} listed again "
                f"(first on line {image_lines[image_id]})"
            )
        parts = PurePosixPath(name).parts
        if len(parts) != 2 or ".." in parts or name.startswith("/"):
            raise BenchmarkFormatError(
                f"{images_path}: line {number}: image name {name!r} is not '<class_dir>/<file>'"
            )
        image_lines[image_id] = number
        names[image_id] = name

    labels_path = folder / "image_class_labels.txt"
    classes: dict[int, int] = {}
    label_rows = _read_table(labels_path, "<image_id> <class_id>")
    _by_image(labels_path, label_rows, image_lines)
    for number, (text_id, text_class) in label_rows:
        image_id = int(text_id)
        class_id = _int(labels_path, number, text_class, "class id", 1, N_CLASSES)
        folder_name = PurePosixPath(names[image_id]).parts[0]
        if folder_name != class_dirs[class_id - 1]:
            raise BenchmarkFormatError(
                f"{labels_path}: line {number}: image {image_id} ({names[image_id]}) is put in class "
                f"{class_id} ({class_dirs[class_id - 1]}), but it lies in folder {folder_name!r}"
            )
        classes[image_id] = class_id

    split_path = folder / "train_test_split.txt"
    split: dict[int, bool] = {}
    split_rows = _read_table(split_path, "<image_id> <is_training_image>")
    _by_image(split_path, split_rows, image_lines)
    for number, (text_id, text_flag) in split_rows:
        split[int(text_id)] = bool(_int(split_path, number, text_flag, "is_training_image", 0, 1))

    ids = np.array(sorted(image_lines), dtype=np.int64)
    is_train = np.array([split[i] for i in ids.tolist()], dtype=bool)
    for flag, what in ((True, "training"), (False, "test")):
        if not (is_train == flag).any():
            raise BenchmarkFormatError(f"{split_path}: no {what} image (the benchmark needs both splits)")
    return Listing(
        folder=folder,
        image_ids=ids,
        names=tuple(names[i] for i in ids.tolist()),
        image_lines=np.array([image_lines[i] for i in ids.tolist()], dtype=np.int64),
        labels=np.array([classes[i] - 1 for i in ids.tolist()], dtype=np.int64),
        is_train=is_train,
        class_dirs=tuple(class_dirs),
    )


# ---------------------------------------------------------------------------------------------
# Annotations


def read_boxes(listing: Listing) -> np.ndarray:
    """bounding_boxes.txt as (N, 4) float64 ``(x, y, width, height)`` in image-id order."""
    path = listing.folder / "bounding_boxes.txt"
    rows = _read_table(path, "<image_id> <x> <y> <width> <height>")
    known = dict(zip(listing.image_ids.tolist(), listing.image_lines.tolist(), strict=True))
    _by_image(path, rows, known)
    position = {image_id: i for i, image_id in enumerate(listing.image_ids.tolist())}
    boxes = np.empty((len(listing.image_ids), 4), dtype=np.float64)
    for number, fields in rows:
        values = [_float(path, number, text, what) for text, what in zip(fields[1:], "xywh", strict=True)]
        if values[2] < 0 or values[3] < 0:
            raise BenchmarkFormatError(f"{path}: line {number}: negative box width or height")
        boxes[position[int(fields[0])]] = values
    return boxes


@dataclass(frozen=True, eq=False)
class PartLocations:
    """parts/parts.txt and parts/part_locs.txt: ``names`` (P,), ``points`` (N, P, 2) float64 (x, y)
    and ``visible`` (N, P) bool, in image-id and part-id order."""

    names: tuple[str, ...]
    points: np.ndarray
    visible: np.ndarray


def read_part_locations(listing: Listing) -> PartLocations:
    parts_path = listing.folder / "parts" / "parts.txt"
    part_names: list[str] = []
    for number, (text_id, name) in _read_table(parts_path, "<part_id> <part_name>", text_last=True):
        part_id = _int(parts_path, number, text_id, "part id")
        if part_id != len(part_names) + 1:
            raise BenchmarkFormatError(
                f"{parts_path}: line {number}: part id {part_id}, expected {len(part_names) + 1} "
                "(ids 1..P in order)"
            )
        part_names.append(name.strip())
    n_parts = len(part_names)

    path = listing.folder / "parts" / "part_locs.txt"
    rows = _read_table(path, "<image_id> <part_id> <x> <y> <visible>")
    position = {image_id: i for i, image_id in enumerate(listing.image_ids.tolist())}
    points = np.zeros((len(position), n_parts, 2), dtype=np.float64)
    visible = np.zeros((len(position), n_parts), dtype=bool)
    seen = np.zeros((len(position), n_parts), dtype=np.int64)  # line of each (image, part)
    for number, (text_image, text_part, text_x, text_y, text_visible) in rows:
        image_id = _int(path, number, text_image, "image id")
        if image_id not in position:
            raise BenchmarkFormatError(f"{path}: line {number}: image id {image_id} is not in images.txt")
        part = _int(path, number, text_part, "part id", 1, n_parts) - 1
        i = position[image_id]
        if seen[i, part]:
            raise BenchmarkFormatError(
                f"{path}: line {number}: image {image_id} part {part + 1} listed again "
                f"(first on line {seen[i, part]})"
            )
        seen[i, part] = number
        points[i, part] = (_float(path, number, text_x, "x"), _float(path, number, text_y, "y"))
        visible[i, part] = _int(path, number, text_visible, "visible", 0, 1) == 1
    if not seen.all():
        i, part = np.argwhere(seen == 0)[0]
        raise BenchmarkFormatError(
            f"{path}: no line for image {listing.image_ids[i]} part {part + 1} "
            f"(every image lists all {n_parts} parts); {_ARCHIVE_FIX}"
        )
    return PartLocations(names=tuple(part_names), points=points, visible=visible)


# ---------------------------------------------------------------------------------------------
# Images and masks

# What Pillow raises on a file it cannot decode (UnidentifiedImageError is an OSError).
_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError)


def _open_error(path: Path, exc: BaseException, what: str, fix: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(f"{path}: unreadable {what} ({one_line(exc)}); {fix}")


def decode_image(listing: Listing, i: int, size: int) -> tuple[np.ndarray, tuple[int, int], str]:
    """Image i as RGB, resized to ``size`` x ``size`` with Pillow's bilinear filter (what
    torchvision's ``Resize((size, size))`` does to a PIL image).

    Returns:
        ``(pixels (3, size, size) uint8, (width, height) of the original, its PIL mode)``.
    """
    from PIL import Image

    path = listing.image_path(i)
    if not path.is_file():
        raise DataNotFoundError(f"{path}: image missing (listed in {listing.where(i)}); {_ARCHIVE_FIX}")
    try:
        with Image.open(path) as image:
            mode = image.mode
            rgb = image.convert("RGB")
    except (*_DECODE_ERRORS, Image.DecompressionBombError) as exc:
        raise _open_error(
            path, exc, "image", f"replace it from CUB_200_2011.tgz ({listing.where(i)})"
        ) from exc
    resized = rgb.resize((size, size), Image.Resampling.BILINEAR)
    pixels = np.ascontiguousarray(np.asarray(resized, dtype=np.uint8).transpose(2, 0, 1))
    return pixels, rgb.size, mode


def image_size(listing: Listing, i: int) -> tuple[int, int]:
    """``(width, height)`` of image i, from its header only."""
    from PIL import Image

    path = listing.image_path(i)
    if not path.is_file():
        raise DataNotFoundError(f"{path}: image missing (listed in {listing.where(i)}); {_ARCHIVE_FIX}")
    try:
        with Image.open(path) as image:
            return image.size
    except (*_DECODE_ERRORS, Image.DecompressionBombError) as exc:
        raise _open_error(
            path, exc, "image", f"replace it from CUB_200_2011.tgz ({listing.where(i)})"
        ) from exc


def mask_path(root: Path, listing: Listing, i: int) -> Path:
    """``<root>/segmentations/<class_dir>/<image stem>.png``."""
    return root / SEGMENTATIONS_FOLDER / PurePosixPath(listing.names[i]).with_suffix(".png")


def nearest_rows(n_in: int, n_out: int) -> np.ndarray:
    """Source index of each output index of a nearest resize: ``floor((j + 0.5) * n_in / n_out)``
    (pixel centres matched, as Pillow's NEAREST and torch's ``nearest-exact``)."""
    return np.minimum((2 * np.arange(n_out) + 1) * n_in // (2 * n_out), n_in - 1)


def decode_mask(
    root: Path, listing: Listing, i: int, image_size: tuple[int, int], size: int
) -> tuple[np.ndarray, str]:
    """The soft segmentation mask of image i in the test geometry (nearest resize to ``size``).

    The mask must have the image's size. ``LA`` masks keep their ``L`` band (the alpha band is
    dropped); any other mode is converted to ``L`` by Pillow.

    Returns:
        ``(values (size, size) uint8, the file's PIL mode)``.
    """
    from PIL import Image

    path = mask_path(root, listing, i)
    fix = f"{_SEGMENTATIONS_FIX} under {root}"
    if not path.is_file():
        raise DataNotFoundError(
            f"{path}: segmentation mask missing (for {listing.where(i)}); {fix}, or load with masks=False"
        )
    try:
        with Image.open(path) as image:
            mode = image.mode
            gray = image.getchannel("L") if mode == "LA" else image.convert("L")
    except (*_DECODE_ERRORS, Image.DecompressionBombError) as exc:
        raise _open_error(path, exc, "mask", fix) from exc
    if gray.size != image_size:
        raise BenchmarkFormatError(
            f"{path}: mask is {gray.size[0]}x{gray.size[1]}, but its image is "
            f"{image_size[0]}x{image_size[1]} ({listing.where(i)}); {fix}"
        )
    values = np.asarray(gray, dtype=np.uint8)
    width, height = image_size
    return values[np.ix_(nearest_rows(height, size), nearest_rows(width, size))], mode
