"""``coco-stitch``: COCO 2017 objects stitched onto CIFAR-100 images, the secondary-targets set of X-DER.

The paper (Sec. "Analysis of Model Explanations for Secondary Targets" and App. "Secondary Targets:
experiment details") probes a model pre-trained on Split CIFAR-100 at 64x64 with a synthetic set:
a COCO 2017 instance of one class, cut by its ground-truth mask, pasted on a 2x-upscaled CIFAR-100
image of another class; 50000 train and 10000 test examples drawn from random pairs of the 17
classes the two data sets share (:data:`SHARED_CLASSES`, the paper's list). A linear classifier on
frozen features is then trained (sigmoid + binary cross-entropy over the 100 CIFAR logits) and
scored by F1 and pointing accuracy on the secondary targets.

:func:`prepare_coco_stitch` builds the set from the official files::

    <coco_root>/annotations/instances_train2017.json   COCO instances (docs/data-formats.md)
    <coco_root>/annotations/instances_val2017.json
    <coco_root>/train2017/*.jpg, <coco_root>/val2017/*.jpg
    <data_root>/cifar-100-python/{train,test,meta}      read by :mod:`xder_data.cifar100`

and writes ``<data_root>/coco_stitch/train.h5`` and ``test.h5`` (HDF5; each written under a
``.partial`` name and renamed once both are complete). Each file holds, for N examples of side S:

* ``images``: uint8 (N, 3, S, S), the stitched images;
* ``primary_labels``: int64 (N,), the CIFAR-100 fine label of the background image;
* ``secondary_labels``: int64 (N,), the CIFAR-100 fine label of the pasted COCO object;
* ``masks``: bool (N, S, S), the pasted object's pixels (gzip-compressed);
* ``boxes``: int32 (N, 4), top, left, height and width of the pasted object's box;
* ``cifar_rows``: int64 (N,), the background's row in CIFAR-100's ``train`` or ``test`` file;
* ``coco_annotation_ids``, ``coco_image_ids``: int64 (N,), the pasted COCO instance and its photo;
* ``class_names``: bytes (100,), CIFAR-100's ``fine_label_names``;

plus attributes recording every generation setting (``format``, ``version``, ``split``, ``size``,
``seed``, ``scale``, ``min_area``, ``upscale``, ``object_resize``, ``coco_annotations``).

Generation (deterministic given ``seed``; train and test draw from the two children of
``numpy.random.SeedSequence(seed)``, so the test set does not depend on ``n_train``):

* Pair: the primary class a is uniform over the 17, the secondary b uniform over the other 16
  (``b = (a + k) mod 17``, k uniform in 1..16), so every ordered pair of distinct classes is
  equally likely.
* Background: a CIFAR-100 image of class a, uniform among that class's images (the ``train`` file
  for the train set, ``test`` for the test set), upscaled to S x S (64: the paper's 2x). The paper
  used the CAI super-resolution API, which cannot run offline; this module upsamples with
  :func:`xder_data.cifar100.upsample_images` (bilinear, no antialiasing), exactly as
  ``seq-cifar100`` with ``image_size=64`` does, so the background is what the probed backbone saw
  during its pre-training.
* Object: a COCO instance of class b, uniform among the class's eligible instances (train2017 for
  the train set, val2017 for the test set, sorted by annotation id). Crowd annotations
  (``iscrowd=1``) and instances whose ``area`` is below ``min_area`` (default 1024 = 32², COCO's
  boundary between small and medium objects, so no pasted object is blown up from a few pixels)
  are skipped, and so are instances left without a polygon of at least three points (polygons
  with fewer are dropped first). The mask (polygons or RLE, decoded with pycocotools: the
  ``[coco]`` extra) is cut from the photo with the photo's pixels by the mask's tight bounding box.
* Scale: the object's longest side becomes ``round(s * S)`` pixels with s uniform in
  ``scale = (0.35, 0.6)`` (22 to 38 pixels at 64), its aspect ratio kept (each side rounded, at
  least 1). The pixels are resized with premultiplied alpha (bilinear with antialiasing of
  ``[rgb * mask, mask]``, colour = the first three channels divided by the fourth), so that no
  background of the COCO photo bleeds into the object's edge; the pasted mask is the resized mask
  at or above 0.5 (for an object so thin that no pixel reaches 0.5, its most-covered pixels).
* Location: uniform over the positions that keep the object's box fully inside the image.
* Paste: the object's colour replaces the background where the mask is set; everywhere else the
  image is the upscaled CIFAR-100 image, untouched.

Labels are CIFAR-100 fine ids: a COCO category maps to the CIFAR-100 class of the same name. The
paper's list includes *mouse*, although CIFAR-100's mouse is the animal and COCO's the computer
mouse: a secondary label 50 names a computer mouse, a primary 50 the rodent (mind it when reading
per-class results).

The benchmark ``coco-stitch`` reads the two files: one task over CIFAR-100's 100-class label
space (so that a model pre-trained on Split CIFAR-100 at 64x64 is probed as it is),
``train_y``/``test_y`` the primary labels, ``train_secondary_y``/``test_secondary_y`` the secondary
ones, ``test_masks`` the pasted objects' masks (for the pointing game). Training batches get a
random crop after 4 * S / 32 pixels of zero padding (8 at 64) and a flip, then CIFAR-100's
normalisation; test batches the normalisation. Protocol: the paper's
linear evaluation trains 50 epochs with SGD; its learning rate and batch size are not stated, so
lr 0.1 (constant) and batch 32 (Split CIFAR-100's) are this project's choices; no buffer; the CIFAR
ResNet18 (width 64).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from xder_data.augment import Compose, CropFlip, Normalize
from xder_data.benchmark import Benchmark, BenchmarkDefaults, Progress, no_progress, register_benchmark
from xder_data.cifar100 import CIFAR100_MEAN, CIFAR100_STD, seq_cifar100, upsample_images
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, download_call, one_line, prepare_call

__all__ = [
    "COCO_STITCH_DEFAULTS",
    "COCO_STITCH_FOLDER",
    "DEFAULT_MIN_AREA",
    "DEFAULT_SCALE",
    "SHARED_CLASSES",
    "SKIP_REASONS",
    "COCOStitchReport",
    "SharedClass",
    "coco_stitch",
    "coco_stitch_paths",
    "decode_mask",
    "paste_instance",
    "prepare_coco_stitch",
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

SKIP_REASONS = ("crowd", "small", "degenerate")
"""Why a shared-class COCO annotation is left out (:attr:`COCOStitchReport.skipped`)."""

_CIFAR_IDS = np.array([shared.cifar_id for shared in SHARED_CLASSES], dtype=np.int64)

COCO_STITCH_FOLDER = "coco_stitch"
DEFAULT_SCALE = (0.35, 0.6)
"""Range of the pasted object's longest side, as a fraction of the image side."""
DEFAULT_MIN_AREA = 1024.0
"""Smallest COCO ``area`` (mask pixels) an instance needs to be pasted: 32², COCO's small/medium
boundary."""

FORMAT = "xder-coco-stitch"
VERSION = 1
N_CLASSES = 100
_SPLITS = ("train", "test")
_COCO_SPLITS = {"train": "train2017", "test": "val2017"}
_BLOCK = 256  # examples rendered and written at a time
_UPSCALE = "bilinear, align_corners=False, no antialiasing (xder_data.cifar100.upsample_images)"
_OBJECT_RESIZE = "bilinear with antialiasing, premultiplied alpha; mask = resized mask >= 0.5"

COCO_STITCH_DEFAULTS = BenchmarkDefaults(
    epochs=50,  # App. "Secondary Targets: experiment details": "SGD optimizer for 50 epochs"
    batch_size=32,  # not stated for the probe: Split CIFAR-100's batch 32 (this project's choice)
    minibatch_size=32,
    lr=0.1,  # not stated: this project's choice for a linear probe with plain SGD
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="none",
    buffer_size=0,  # linear evaluation: the backbone is frozen, nothing is replayed
    optimizer="sgd",
    backbone="resnet18-cifar",  # the Split CIFAR-100 backbone it probes (width 64)
    backbone_options={"width": 64, "in_channels": 3},
    drop_last=False,  # as the papers' protocols (a DataLoader's default)
)

"""Wraps the iterable a converter walks through (e.g. ``tqdm``); the identity by default."""


def _prepare_hint(root: Path | str = "ROOT") -> str:
    return f"run `{prepare_call('coco-stitch', root, source='COCO_DIR')}`"


def coco_stitch_paths(root: str | Path) -> dict[str, Path]:
    """Where the two files live under a data root: ``{"train": <root>/coco_stitch/train.h5, ...}``."""
    folder = Path(root) / COCO_STITCH_FOLDER
    return {split: folder / f"{split}.h5" for split in _SPLITS}


# ---------------------------------------------------------------------------------------------
# Masks and pasting (pure functions)


def _mask_api() -> Any:
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
    mask_api = _mask_api()
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


def _scaled_size(height: int, width: int, scale: float, size: int) -> tuple[int, int]:
    """(height, width) with the longest side ``round(scale * size)`` (at least 1), aspect kept."""
    longest = max(1, round(scale * size))
    factor = longest / max(height, width)
    return min(size, max(1, round(height * factor))), min(size, max(1, round(width * factor)))


def paste_instance(
    background: np.ndarray,
    pixels: np.ndarray,
    mask: np.ndarray,
    top: int,
    left: int,
    height: int,
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Resize an object to ``height`` x ``width`` and paste it at ``(top, left)`` with its mask as alpha.

    The object is resized with premultiplied alpha: ``[rgb * mask, mask]`` is resized bilinearly
    (with antialiasing; nothing is resampled when the size is unchanged), the colour is the first
    three channels divided by the fourth, rounded, and the binary alpha is the resized mask at or
    above 0.5 (its most-covered pixels if none reaches 0.5). Only mask pixels contribute to the
    colour, so the photo's background never bleeds into the object's edge.

    Args:
        background: (3, S, S) uint8, the image to paste on (not modified).
        pixels: (h, w, 3) uint8, the object's box in its photo.
        mask: (h, w) bool, the object's pixels in that box (at least one set).
        top: position of the resized box in ``background`` (its first row).
        left: position of the resized box in ``background`` (its first column).
        height: size of the resized box (rows); it must lie fully inside ``background``.
        width: size of the resized box (columns); it must lie fully inside ``background``.

    Returns:
        ``(image (3, S, S) uint8, pasted (S, S) bool)``: ``image`` equals the resized object where
        ``pasted`` is set and ``background`` elsewhere.
    """
    _, size_h, size_w = background.shape
    if pixels.shape[:2] != mask.shape or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"pixels {pixels.shape} and mask {mask.shape} do not match (h, w, 3) and (h, w)")
    if top < 0 or left < 0 or height < 1 or width < 1:
        raise ValueError(f"invalid box top={top}, left={left}, height={height}, width={width}")
    if top + height > size_h or left + width > size_w:
        raise ValueError(f"box {top}+{height}, {left}+{width} leaves the {size_h}x{size_w} image")
    if not mask.any():
        raise ValueError("the object's mask is empty")
    # numpy for the elementwise work, torch only for the antialiased resize: on crops of a few
    # hundred pixels a side this is several times faster than doing it all in torch.
    stacked = np.empty((4, *mask.shape), dtype=np.float32)
    stacked[3] = mask
    np.multiply(pixels.transpose(2, 0, 1), stacked[3], out=stacked[:3])
    if tuple(mask.shape) != (height, width):
        resized = F.interpolate(
            torch.from_numpy(stacked)[None],
            size=(height, width),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        stacked = resized[0].numpy()
    coverage = stacked[3]
    keep = coverage >= 0.5
    if not keep.any():  # a sliver thinner than half a pixel everywhere: keep its densest pixels
        keep = coverage >= coverage.max()
    colour = np.clip(np.rint(stacked[:3, keep] / coverage[keep]), 0, 255).astype(np.uint8)
    image = background.copy()
    region = image[:, top : top + height, left : left + width]
    region[:, keep] = colour
    pasted = np.zeros((size_h, size_w), dtype=bool)
    pasted[top : top + height, left : left + width] = keep
    return image, pasted


# ---------------------------------------------------------------------------------------------
# Reading COCO


@dataclass(frozen=True)
class _Instance:
    annotation_id: int
    image_id: int
    segmentation: Any


@dataclass(frozen=True)
class _CocoSplit:
    """The eligible instances of one annotation file, per shared class (index into SHARED_CLASSES)."""

    path: Path
    image_dir: Path
    images: dict[int, tuple[str, int, int]]  # id -> (file_name, height, width)
    pools: tuple[tuple[_Instance, ...], ...]
    skipped: Mapping[str, int]  # reason -> shared-class annotations left out


def _coco_fix(coco_root: Path, what: str) -> str:
    return (
        f"download {what} from cocodataset.org and unzip it in {coco_root} "
        "(annotations/instances_{train,val}2017.json, train2017/, val2017/)"
    )


def _bad_json(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(
        f"{path}: {problem}; not a COCO 2017 instances file: "
        f"{_coco_fix(path.parent.parent, 'annotations_trainval2017.zip')}"
    )


def _is_number(value: Any) -> bool:
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
            and all(map(_is_number, polygon))
        ]
        return polygons or None
    if isinstance(segmentation, Mapping) and "counts" in segmentation and "size" in segmentation:
        return segmentation
    raise _bad_json(path, f"annotation {ann['id']}: 'segmentation' is neither polygons nor RLE")


def _read_coco(path: Path, image_dir: Path, min_area: float) -> _CocoSplit:
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
        if not _is_number(ann["area"]) or ann["iscrowd"] not in (0, 1):
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
    return _CocoSplit(
        path=path,
        image_dir=image_dir,
        images=images,
        pools=tuple(tuple(pool) for pool in pools),
        skipped=skipped,
    )


def _load_photo(coco: _CocoSplit, instance: _Instance) -> np.ndarray:
    """The (H, W, 3) uint8 RGB photo an instance lies in, checked against the annotated size."""
    from PIL import Image

    file_name, height, width = coco.images[instance.image_id]
    path = coco.image_dir / file_name
    try:
        with Image.open(path) as image:
            photo = np.asarray(image.convert("RGB"))
    except FileNotFoundError as exc:
        raise DataNotFoundError(
            f"{path}: COCO image missing: {_coco_fix(coco.path.parent.parent, coco.image_dir.name + '.zip')}"
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


def _cut(coco: _CocoSplit, instance: _Instance) -> tuple[np.ndarray, np.ndarray]:
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


# ---------------------------------------------------------------------------------------------
# Planning and writing


@dataclass(frozen=True)
class _Plan:
    """Every random draw of one split, made up front (vectorised) from one generator."""

    primary: np.ndarray  # (N,) index into SHARED_CLASSES
    secondary: np.ndarray
    cifar_pick: np.ndarray  # (N,) position in the primary class's CIFAR rows
    instance_pick: np.ndarray  # (N,) position in the secondary class's eligible instances
    scale: np.ndarray  # (N,) longest side / image side
    top_fraction: np.ndarray  # (N,) in [0, 1): position among the admissible tops
    left_fraction: np.ndarray


def _plan(
    rng: np.random.Generator,
    n: int,
    cifar_counts: np.ndarray,
    pool_sizes: np.ndarray,
    scale: tuple[float, float],
) -> _Plan:
    n_shared = len(SHARED_CLASSES)
    primary = rng.integers(0, n_shared, n)
    secondary = (primary + rng.integers(1, n_shared, n)) % n_shared
    return _Plan(
        primary=primary,
        secondary=secondary,
        cifar_pick=rng.integers(0, cifar_counts[primary]),
        instance_pick=rng.integers(0, pool_sizes[secondary]),
        scale=rng.uniform(scale[0], scale[1], n),
        top_fraction=rng.random(n),
        left_fraction=rng.random(n),
    )


class _Writer:
    """One split's HDF5 file, written under ``<name>.partial`` and renamed by :meth:`commit`."""

    def __init__(self, path: Path, n: int, size: int, attrs: Mapping[str, Any], class_names: Sequence[str]):
        self.path = path
        self.tmp = path.with_name(path.name + ".partial")
        self.file = h5py.File(self.tmp, "w")
        block = min(n, _BLOCK)
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


def _render(
    writer: _Writer,
    plan: _Plan,
    cifar_x: torch.Tensor,
    cifar_rows_of: Sequence[np.ndarray],
    coco: _CocoSplit,
    size: int,
    progress: Progress,
) -> None:
    n = len(plan.primary)
    rows = np.array(
        [cifar_rows_of[a][j] for a, j in zip(plan.primary, plan.cifar_pick, strict=True)], np.int64
    )
    instances = [coco.pools[b][j] for b, j in zip(plan.secondary, plan.instance_pick, strict=True)]
    block: dict[str, list[Any]] = {}
    start = 0
    for i in progress(range(n)):
        if i % _BLOCK == 0:
            backgrounds = upsample_images(cifar_x[torch.from_numpy(rows[i : i + _BLOCK])], size).numpy()
            block = {key: [] for key in ("images", "masks", "boxes")}
        pixels, mask = _cut(coco, instances[i])
        height, width = _scaled_size(mask.shape[0], mask.shape[1], float(plan.scale[i]), size)
        top = int(plan.top_fraction[i] * (size - height + 1))
        left = int(plan.left_fraction[i] * (size - width + 1))
        image, pasted = paste_instance(backgrounds[i % _BLOCK], pixels, mask, top, left, height, width)
        block["images"].append(image)
        block["masks"].append(pasted)
        block["boxes"].append((top, left, height, width))
        if (i + 1) % _BLOCK == 0 or i + 1 == n:
            stop = i + 1
            picked = instances[start:stop]
            writer.write(
                start,
                {
                    "images": np.stack(block["images"]),
                    "masks": np.stack(block["masks"]),
                    "boxes": np.asarray(block["boxes"], dtype=np.int32),
                    "primary_labels": _CIFAR_IDS[plan.primary[start:stop]],
                    "secondary_labels": _CIFAR_IDS[plan.secondary[start:stop]],
                    "cifar_rows": rows[start:stop],
                    "coco_annotation_ids": np.array([inst.annotation_id for inst in picked], np.int64),
                    "coco_image_ids": np.array([inst.image_id for inst in picked], np.int64),
                },
            )
            start = stop


@dataclass(frozen=True, kw_only=True)
class COCOStitchReport:
    """What :func:`prepare_coco_stitch` wrote.

    Attributes:
        paths: ``{"train": .../train.h5, "test": .../test.h5}``.
        n_train, n_test: examples written.
        size: image side S.
        classes: the shared classes (names, COCO category ids, CIFAR-100 fine labels).
        eligible: per split, per class name, the COCO instances it could draw from.
        skipped: per split, shared-class annotations left out: ``crowd`` (``iscrowd=1``),
            ``small`` (``area`` below ``min_area``) and ``degenerate`` (no polygon of at least
            three points).
        primary_counts, secondary_counts: per split, per class name, the examples with that class
            as primary (background) or secondary (pasted object).
    """

    paths: Mapping[str, Path]
    n_train: int
    n_test: int
    size: int
    classes: tuple[SharedClass, ...]
    eligible: Mapping[str, Mapping[str, int]]
    skipped: Mapping[str, Mapping[str, int]]
    primary_counts: Mapping[str, Mapping[str, int]]
    secondary_counts: Mapping[str, Mapping[str, int]]

    @property
    def class_mapping(self) -> dict[str, tuple[int, int]]:
        """``{name: (COCO category id, CIFAR-100 fine label)}``."""
        return {shared.name: (shared.coco_id, shared.cifar_id) for shared in self.classes}


def _check_options(
    n_train: int, n_test: int, size: int, seed: int, scale: tuple[float, float], min_area: float
) -> None:
    checks = (("n_train", n_train, 1), ("n_test", n_test, 1), ("size", size, 32), ("seed", seed, 0))
    for name, value, low in checks:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, got {scale!r}")
    if not _is_number(min_area) or min_area < 0:
        raise ValueError(f"min_area must be a non-negative number, got {min_area!r}")


def prepare_coco_stitch(
    coco_root: str | Path,
    data_root: str | Path,
    *,
    n_train: int = 50000,
    n_test: int = 10000,
    size: int = 64,
    seed: int = 0,
    scale: tuple[float, float] = DEFAULT_SCALE,
    min_area: float = DEFAULT_MIN_AREA,
    progress: Progress = no_progress,
) -> COCOStitchReport:
    """Build the secondary-targets set (see the module docstring) into ``<data_root>/coco_stitch/``.

    Args:
        coco_root: folder holding ``annotations/instances_{train,val}2017.json`` and the image
            folders ``train2017/`` and ``val2017/``.
        data_root: the data root holding ``cifar-100-python/``; the files go to its
            ``coco_stitch/`` folder.
        n_train: training examples to generate (the paper: 50000).
        n_test: test examples to generate (the paper: 10000).
        size: image side S (the paper: 64, CIFAR-100 upscaled 2x).
        seed: the generation seed (a non-negative integer); the same inputs, seed and library
            versions give identical files.
        scale: range of the pasted object's longest side, as a fraction of S.
        min_area: COCO instances with a smaller ``area`` are skipped.
        progress: wraps the per-example loop of each split (e.g. ``tqdm``).

    Returns:
        The counts and the class mapping (:class:`COCOStitchReport`).

    Raises:
        ImportError: pycocotools is missing (``pip install 'xder-data[coco]'``).
        ValueError: an option is out of range.
        DataNotFoundError: an annotation file, a needed image or CIFAR-100 is missing.
        BenchmarkFormatError: an annotation file is not COCO instances JSON (or lacks a shared
            category, or an eligible instance of one), an image is unreadable or of the wrong
            size, or CIFAR-100's names do not match :data:`SHARED_CLASSES`.
    """
    _check_options(n_train, n_test, size, seed, scale, min_area)
    _mask_api()  # fail before reading anything
    coco_root, data_root = Path(coco_root), Path(data_root)
    annotation_paths = {
        split: coco_root / "annotations" / f"instances_{_COCO_SPLITS[split]}.json" for split in _SPLITS
    }
    for path in annotation_paths.values():
        if not path.is_file():
            raise DataNotFoundError(
                f"{path}: COCO annotation file missing: "
                f"{_coco_fix(coco_root, 'annotations_trainval2017.zip')}"
            )
    cifar = seq_cifar100(data_root)
    cifar_meta = data_root / "cifar-100-python" / "meta"
    for shared in SHARED_CLASSES:
        if cifar.class_names is None or cifar.class_names[shared.cifar_id] != shared.name:
            found = None if cifar.class_names is None else cifar.class_names[shared.cifar_id]
            raise BenchmarkFormatError(
                f"{cifar_meta}: fine label {shared.cifar_id} is named {found!r}, expected {shared.name!r}: "
                f"not the official CIFAR-100: run `{download_call('cifar100', data_root)}`"
            )
    cifar_splits = {"train": (cifar.train_x, cifar.train_y), "test": (cifar.test_x, cifar.test_y)}
    seeds = dict(zip(_SPLITS, np.random.SeedSequence(seed).spawn(2), strict=True))
    counts = {"train": n_train, "test": n_test}
    # Read both annotation files, plan both splits and find every photo before rendering anything,
    # so that a bad file is reported in seconds rather than after the training split is drawn.
    cocos, plans, rows_of = {}, {}, {}
    for split in _SPLITS:
        cocos[split] = _read_coco(annotation_paths[split], coco_root / _COCO_SPLITS[split], min_area)
        labels = cifar_splits[split][1].numpy()
        rows_of[split] = [np.flatnonzero(labels == shared.cifar_id) for shared in SHARED_CLASSES]
        plans[split] = _plan(
            np.random.default_rng(seeds[split]),
            counts[split],
            np.array([len(rows) for rows in rows_of[split]]),
            np.array([len(pool) for pool in cocos[split].pools]),
            scale,
        )
        _check_images(cocos[split], plans[split])
    paths = coco_stitch_paths(data_root)
    paths["train"].parent.mkdir(parents=True, exist_ok=True)
    writers: list[_Writer] = []
    try:
        for split in _SPLITS:
            attrs = {
                "format": FORMAT,
                "version": VERSION,
                "split": split,
                "size": size,
                "seed": seed,
                "scale": np.asarray(scale, dtype=np.float64),
                "min_area": float(min_area),
                "upscale": _UPSCALE,
                "object_resize": _OBJECT_RESIZE,
                "coco_annotations": annotation_paths[split].name,
            }
            writer = _Writer(paths[split], counts[split], size, attrs, cifar.class_names or ())
            writers.append(writer)
            _render(
                writer, plans[split], cifar_splits[split][0], rows_of[split], cocos[split], size, progress
            )
            writer.close()
        for writer in writers:
            writer.commit()
    finally:
        for writer in writers:
            writer.abort()
    names = [shared.name for shared in SHARED_CLASSES]
    return COCOStitchReport(
        paths=paths,
        n_train=n_train,
        n_test=n_test,
        size=size,
        classes=SHARED_CLASSES,
        eligible={split: dict(zip(names, map(len, cocos[split].pools), strict=True)) for split in _SPLITS},
        skipped={split: dict(cocos[split].skipped) for split in _SPLITS},
        primary_counts={split: _histogram(plans[split].primary, names) for split in _SPLITS},
        secondary_counts={split: _histogram(plans[split].secondary, names) for split in _SPLITS},
    )


def _histogram(indices: np.ndarray, names: Sequence[str]) -> dict[str, int]:
    return dict(zip(names, np.bincount(indices, minlength=len(names)).tolist(), strict=True))


def _check_images(coco: _CocoSplit, plan: _Plan) -> None:
    """Report a missing photo before any rendering starts."""
    needed = {coco.pools[b][j].image_id for b, j in zip(plan.secondary, plan.instance_pick, strict=True)}
    for image_id in sorted(needed):
        path = coco.image_dir / coco.images[image_id][0]
        if not path.is_file():
            raise DataNotFoundError(
                f"{path}: COCO image missing (image {image_id} of {coco.path.name}): "
                f"{_coco_fix(coco.path.parent.parent, coco.image_dir.name + '.zip')}"
            )


# ---------------------------------------------------------------------------------------------
# The benchmark

_KIND_NAMES = {"b": "bool", "i": "int"}
_INT_KEYS = ("primary_labels", "secondary_labels", "cifar_rows", "coco_annotation_ids", "coco_image_ids")


def _bad_file(path: Path, problem: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(f"{path}: {problem}; {_prepare_hint(path.parent.parent)} to rebuild it")


def _check_file(path: Path, handle: h5py.File) -> int:
    """Validate one file's layout; returns its image side S."""
    if handle.attrs.get("format") not in (FORMAT, FORMAT.encode()):
        raise _bad_file(path, f"format attribute is {handle.attrs.get('format')!r}, expected {FORMAT!r}")
    for key in ("images", "masks", "boxes", "class_names", *_INT_KEYS):
        if key not in handle or not isinstance(handle[key], h5py.Dataset):
            raise _bad_file(path, f"dataset '{key}' missing")
    images = handle["images"]
    n = images.shape[0] if images.ndim else -1
    if (
        images.dtype != np.uint8
        or images.ndim != 4
        or images.shape[1] != 3
        or images.shape[2] != images.shape[3]
    ):
        raise _bad_file(path, f"'images' is {images.dtype} {images.shape}, expected uint8 (N, 3, S, S)")
    size = images.shape[2]
    expected = {"masks": ((n, size, size), "b"), "boxes": ((n, 4), "i")}
    expected.update({key: ((n,), "i") for key in _INT_KEYS})
    for key, (shape, kind) in expected.items():
        dataset = handle[key]
        if dataset.shape != shape or dataset.dtype.kind != kind:
            raise _bad_file(
                path,
                f"'{key}' is {dataset.dtype} {dataset.shape}, expected {_KIND_NAMES[kind]} {shape}",
            )
    names = handle["class_names"]
    if names.shape != (N_CLASSES,) or names.dtype.kind != "S":
        raise _bad_file(
            path, f"'class_names' is {names.dtype} {names.shape}, expected {N_CLASSES} byte strings"
        )
    return size


def _labels(path: Path, handle: h5py.File, key: str) -> torch.Tensor:
    labels = np.asarray(handle[key][...], dtype=np.int64)
    bad = np.flatnonzero((labels < 0) | (labels >= N_CLASSES))
    if len(bad):
        raise _bad_file(
            path, f"'{key}' row {int(bad[0])} is {int(labels[bad[0]])}, expected 0..{N_CLASSES - 1}"
        )
    return torch.from_numpy(labels)


@register_benchmark("coco-stitch", defaults=COCO_STITCH_DEFAULTS)
def coco_stitch(root: Path | None) -> Benchmark:
    """Load ``coco-stitch`` from ``<root>/coco_stitch/{train,test}.h5`` (see the module docstring).

    Returns a one-task benchmark over CIFAR-100's 100 labels: ``train_x``/``test_x`` (N, 3, S, S)
    uint8, ``train_y``/``test_y`` the primary (CIFAR-100) labels, ``train_secondary_y``/
    ``test_secondary_y`` the pasted objects' labels, ``test_masks`` (N_test, S, S) bool the pasted
    objects' pixels, ``class_names`` CIFAR-100's fine names.

    Raises:
        DataNotFoundError: no data root, or a file is missing.
        BenchmarkFormatError: a file is not HDF5 or not in the layout :func:`prepare_coco_stitch`
            writes, the two files differ in size, or a label lies outside 0..99.
    """
    if root is None:
        raise DataNotFoundError(f"coco-stitch needs a data root holding coco_stitch/: {_prepare_hint()}")
    paths = coco_stitch_paths(root)
    for path in paths.values():
        if not path.is_file():
            raise DataNotFoundError(f"{path}: COCO-stitch file missing: {_prepare_hint(root)}")
    data: dict[str, dict[str, Any]] = {}
    for split, path in paths.items():
        # Handles live only inside this call: h5py objects are neither picklable nor fork-safe.
        try:
            handle = h5py.File(path, "r")
        except OSError as exc:
            raise _bad_file(path, f"not a readable HDF5 file ({one_line(exc)})") from None
        with handle:
            size = _check_file(path, handle)
            try:
                data[split] = {
                    "size": size,
                    "x": torch.from_numpy(np.ascontiguousarray(handle["images"][...])),
                    "y": _labels(path, handle, "primary_labels"),
                    "secondary": _labels(path, handle, "secondary_labels"),
                    "names": tuple(name.decode("utf-8") for name in handle["class_names"][...]),
                }
                if split == "test":
                    data[split]["masks"] = torch.from_numpy(np.asarray(handle["masks"][...], dtype=bool))
            except (OSError, UnicodeDecodeError) as exc:  # a truncated file fails only when read
                raise _bad_file(path, f"cannot be read in full ({one_line(exc)})") from None
    train, test = data["train"], data["test"]
    if train["size"] != test["size"]:
        raise _bad_file(paths["test"], f"images are {test['size']} px but train.h5 holds {train['size']} px")
    size = train["size"]
    return Benchmark(
        name="coco-stitch",
        n_tasks=1,
        classes_per_task=(N_CLASSES,),
        class_order=tuple(range(N_CLASSES)),
        input_shape=(3, size, size),
        mean=CIFAR100_MEAN,
        std=CIFAR100_STD,
        train_x=train["x"],
        train_y=train["y"],
        test_x=test["x"],
        test_y=test["y"],
        defaults=COCO_STITCH_DEFAULTS,
        # Padding scales with the side as in seq-cifar100 at image_size=S (8 px at 64).
        train_transform=Compose(
            CropFlip(size, padding=4 * size // 32, flip=True), Normalize(CIFAR100_MEAN, CIFAR100_STD)
        ),
        test_transform=Normalize(CIFAR100_MEAN, CIFAR100_STD),
        class_names=train["names"],
        test_masks=test["masks"],
        train_secondary_y=train["secondary"],
        test_secondary_y=test["secondary"],
    )
