"""COCO 2017 as the COCO-stitch generator reads it: the instances annotation files (the shared
categories, the photos, the eligible instances of each shared class and the skipped ones), the
masks (polygons or RLE, decoded with pycocotools: the ``[coco]`` extra) and the objects cut from
their photos. Public names are re-exported by :mod:`xder_data.coco_stitch`; see
docs/data-formats.md for the format."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xder_data._coco_stitch_format import SHARED_CLASSES
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line

__all__ = [
    "COCO_SPLITS",
    "SKIP_REASONS",
    "CocoSplit",
    "coco_fix",
    "cut_instance",
    "decode_mask",
    "is_number",
    "load_mask_api",
    "read_coco",
]

SKIP_REASONS = ("crowd", "small", "degenerate")
"""Why a shared-class COCO annotation is left out (:attr:`COCOStitchReport.skipped`)."""

COCO_SPLITS = {"train": "train2017", "test": "val2017"}


# ---------------------------------------------------------------------------------------------
# Masks


def load_mask_api() -> Any:
    """``pycocotools.mask``, imported only when masks are decoded (the ``[coco]`` extra)."""
    try:
        from pycocotools import mask as mask_api
    except ImportError as exc:
        raise ImportError(
            f"decoding COCO masks needs pycocotools ({one_line(exc)}): pip install 'xder-data[coco]'"
        ) from exc
    return mask_api


def decode_mask(segmentation: Any, height: int, width: int) -> np.ndarray:
    """Decode a COCO ``segmentation`` into a (height, width) bool mask with pycocotools.

    Accepts the three forms of docs/data-formats.md, "COCO 2017 (coco-stitch)": a list of polygons
    ``[[x1, y1, x2, y2, ...], ...]`` (merged, as ``COCO.annToMask`` does), uncompressed RLE
    ``{"counts": [int, ...], "size": [h, w]}`` and compressed RLE (``counts`` a string).

    Raises:
        ImportError: pycocotools is not installed.
        ValueError: the segmentation is none of these forms, or its size is not (height, width).
    """
    mask_api = load_mask_api()
    if isinstance(segmentation, list):
        if not segmentation or not all(
            isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 for p in segmentation
        ):
            raise ValueError("polygons must be lists of at least three x, y pairs")
        rle = mask_api.merge(mask_api.frPyObjects(segmentation, height, width))
    elif isinstance(segmentation, Mapping) and {"counts", "size"} <= set(segmentation):
        size = segmentation["size"]
        if not isinstance(size, list | tuple) or list(size) != [height, width]:
            raise ValueError(f"RLE size {size!r} differs from the image's [{height}, {width}]")
        counts = segmentation["counts"]
        if isinstance(counts, list):
            if sum(counts) != height * width:
                raise ValueError(f"RLE runs sum to {sum(counts)}, not to {height} x {width} pixels")
            rle = mask_api.frPyObjects({"counts": counts, "size": [height, width]}, height, width)
        elif isinstance(counts, str | bytes):
            rle = {"counts": counts.encode("ascii") if isinstance(counts, str) else counts, "size": size}
        else:
            raise ValueError(f"RLE counts is a {type(counts).__name__}, expected a list or a string")
    else:
        raise ValueError("segmentation is neither a list of polygons nor an RLE dict with counts and size")
    with warnings.catch_warnings():
        # pycocotools (2.0.11) still calls numpy 2 with copy=False inside decode: harmless.
        warnings.filterwarnings("ignore", "__array__ implementation doesn't accept", DeprecationWarning)
        return np.asarray(mask_api.decode(rle), dtype=bool)


def _tight_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(y0, x0, y1, x1)`` of the set pixels (exclusive ends), or None for an empty mask."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not len(rows):
        return None
    return int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1


# ---------------------------------------------------------------------------------------------
# Reading COCO


@dataclass(frozen=True)
class _Instance:
    annotation_id: int
    image_id: int
    segmentation: Any


@dataclass(frozen=True)
class CocoSplit:
    """The eligible instances of one annotation file, per shared class (index into SHARED_CLASSES)."""

    path: Path
    image_dir: Path
    images: dict[int, tuple[str, int, int]]  # id -> (file_name, height, width)
    pools: tuple[tuple[_Instance, ...], ...]
    skipped: Mapping[str, int]  # reason -> shared-class annotations left out


def coco_fix(coco_root: Path, what: str) -> str:
    return (
        f"download {what} from cocodataset.org and unzip it in {coco_root} "
        "(annotations/instances_{train,val}2017.json, train2017/, val2017/)"
    )


def _bad_json(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(
        f"{path}: {problem}; not a COCO 2017 instances file: "
        f"{coco_fix(path.parent.parent, 'annotations_trainval2017.zip')}"
    )


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _categories(path: Path, categories: Any) -> None:
    """Check that every shared class has its category id under its name."""
    names: dict[Any, Any] = {}
    for category in categories:
        if not isinstance(category, Mapping) or "id" not in category or "name" not in category:
            raise _bad_json(path, "a category lacks 'id' or 'name'")
        names[category["id"]] = category["name"]
    for shared in SHARED_CLASSES:
        if shared.coco_id not in names:
            raise _bad_json(path, f"category {shared.coco_id} ({shared.name}) missing")
        if names[shared.coco_id] != shared.name:
            raise _bad_json(
                path,
                f"category {shared.coco_id} is named {names[shared.coco_id]!r}, expected {shared.name!r}",
            )


def _images(path: Path, images: Any) -> dict[int, tuple[str, int, int]]:
    found: dict[int, tuple[str, int, int]] = {}
    for position, image in enumerate(images):
        if not isinstance(image, Mapping):
            raise _bad_json(path, f"images[{position}] is a {type(image).__name__}, expected a dict")
        try:
            image_id, file_name = image["id"], image["file_name"]
            height, width = image["height"], image["width"]
        except KeyError as exc:
            raise _bad_json(path, f"images[{position}] lacks {exc.args[0]!r}") from None
        if not all(isinstance(v, int) for v in (image_id, height, width)) or not isinstance(file_name, str):
            raise _bad_json(path, f"images[{position}]: id, file_name, height or width of the wrong type")
        if height < 1 or width < 1 or Path(file_name).name != file_name:
            raise _bad_json(
                path, f"image {image_id}: size {width}x{height} or file name {file_name!r} invalid"
            )
        found[image_id] = (file_name, height, width)
    return found


def _usable_segmentation(path: Path, ann: Mapping[str, Any]) -> Any:
    """The annotation's segmentation, its polygons with fewer than three points dropped (a few real
    COCO annotations carry such slivers, and pycocotools would read a 4-number one as a box); None
    when no polygon remains."""
    segmentation = ann["segmentation"]
    if isinstance(segmentation, list):
        polygons = [
            polygon
            for polygon in segmentation
            if isinstance(polygon, list)
            and len(polygon) >= 6
            and len(polygon) % 2 == 0
            and all(map(is_number, polygon))
        ]
        return polygons or None
    if isinstance(segmentation, Mapping) and "counts" in segmentation and "size" in segmentation:
        return segmentation
    raise _bad_json(path, f"annotation {ann['id']}: 'segmentation' is neither polygons nor RLE")


def read_coco(path: Path, image_dir: Path, min_area: float) -> CocoSplit:
    """Parse one instances file into the eligible instances of each shared class."""
    try:
        with path.open("rb") as f:
            data = json.load(f)
    except OSError as exc:
        raise DataNotFoundError(f"{path}: cannot read ({one_line(exc)})") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise _bad_json(
            path, f"not readable JSON ({one_line(exc)}), the file is truncated or corrupt"
        ) from exc
    if not isinstance(data, Mapping):
        raise _bad_json(path, f"holds a {type(data).__name__}, expected a dict")
    for key in ("images", "annotations", "categories"):
        if key not in data:
            found = ", ".join(sorted(map(str, data))) or "none"
            raise _bad_json(path, f"key {key!r} missing (found: {found})")
        if not isinstance(data[key], list):
            raise _bad_json(path, f"{key!r} is a {type(data[key]).__name__}, expected a list")
    _categories(path, data["categories"])
    images = _images(path, data["images"])
    index_of = {shared.coco_id: k for k, shared in enumerate(SHARED_CLASSES)}
    pools: list[list[_Instance]] = [[] for _ in SHARED_CLASSES]
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    for position, ann in enumerate(data["annotations"]):
        if not isinstance(ann, Mapping):
            raise _bad_json(path, f"annotations[{position}] is a {type(ann).__name__}, expected a dict")
        category = ann.get("category_id")
        k = index_of.get(category) if isinstance(category, int) else None
        if k is None:
            continue
        missing = [key for key in ("id", "image_id", "iscrowd", "area", "segmentation") if key not in ann]
        if missing:
            raise _bad_json(path, f"annotations[{position}] lacks {missing[0]!r}")
        if not isinstance(ann["id"], int) or not isinstance(ann["image_id"], int):
            raise _bad_json(path, f"annotations[{position}]: 'id' or 'image_id' is not an integer")
        if not is_number(ann["area"]) or ann["iscrowd"] not in (0, 1):
            raise _bad_json(path, f"annotation {ann['id']}: 'area' or 'iscrowd' is not a number (0/1)")
        if ann["image_id"] not in images:
            raise _bad_json(
                path, f"annotation {ann['id']} names image {ann['image_id']}, absent from 'images'"
            )
        if ann["iscrowd"]:
            skipped["crowd"] += 1
        elif ann["area"] < min_area:
            skipped["small"] += 1
        elif (segmentation := _usable_segmentation(path, ann)) is None:
            skipped["degenerate"] += 1
        else:
            pools[k].append(_Instance(ann["id"], ann["image_id"], segmentation))
    for k, pool in enumerate(pools):
        if not pool:
            shared = SHARED_CLASSES[k]
            raise BenchmarkFormatError(
                f"{path}: no eligible instance of {shared.name!r} (category {shared.coco_id}) after "
                f"skipping crowd annotations, degenerate polygons and areas below min_area={min_area:g}: "
                "lower min_area, or use the full COCO 2017 annotations"
            )
        pool.sort(key=lambda instance: instance.annotation_id)
    return CocoSplit(
        path=path,
        image_dir=image_dir,
        images=images,
        pools=tuple(tuple(pool) for pool in pools),
        skipped=skipped,
    )


def _load_photo(coco: CocoSplit, instance: _Instance) -> np.ndarray:
    """The (H, W, 3) uint8 RGB photo an instance lies in, checked against the annotated size."""
    from PIL import Image

    file_name, height, width = coco.images[instance.image_id]
    path = coco.image_dir / file_name
    try:
        with Image.open(path) as image:
            photo = np.asarray(image.convert("RGB"))
    except FileNotFoundError as exc:
        raise DataNotFoundError(
            f"{path}: COCO image missing: {coco_fix(coco.path.parent.parent, coco.image_dir.name + '.zip')}"
        ) from exc
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # UnidentifiedImageError is OSError
        raise BenchmarkFormatError(
            f"{path}: not a readable image ({one_line(exc)}): download {coco.image_dir.name}.zip again "
            "from cocodataset.org"
        ) from exc
    if photo.shape[:2] != (height, width):
        raise BenchmarkFormatError(
            f"{path}: image is {photo.shape[1]}x{photo.shape[0]} but {coco.path.name} says {width}x{height}: "
            "the images and the annotation file do not match"
        )
    return photo


def cut_instance(coco: CocoSplit, instance: _Instance) -> tuple[np.ndarray, np.ndarray]:
    """``(pixels (h, w, 3) uint8, mask (h, w) bool)`` of an instance's tight mask box."""
    photo = _load_photo(coco, instance)
    try:
        mask = decode_mask(instance.segmentation, photo.shape[0], photo.shape[1])
    except (ValueError, TypeError) as exc:
        raise _bad_json(coco.path, f"annotation {instance.annotation_id}: bad segmentation ({exc})") from exc
    box = _tight_box(mask)
    if box is None:
        raise _bad_json(
            coco.path, f"annotation {instance.annotation_id}: segmentation decodes to an empty mask"
        )
    y0, x0, y1, x1 = box
    return photo[y0:y1, x0:x1], mask[y0:y1, x0:x1]
