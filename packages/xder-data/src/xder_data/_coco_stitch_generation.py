"""COCO-stitch generation: :func:`prepare_coco_stitch` draws every pair, background, object, scale
and location of both splits, pastes the objects and writes the two files
(:mod:`xder_data._coco_stitch_format`). Public names are re-exported by :mod:`xder_data.coco_stitch`.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from xder_data._coco_format import (
    COCO_SPLITS,
    CocoSplit,
    coco_fix,
    cut_instance,
    is_number,
    load_mask_api,
    read_coco,
)
from xder_data._coco_stitch_format import (
    BLOCK,
    CIFAR_IDS,
    FORMAT,
    SHARED_CLASSES,
    SPLITS,
    VERSION,
    SharedClass,
    StitchWriter,
    coco_stitch_paths,
)
from xder_data.benchmark import Progress, no_progress
from xder_data.cifar100 import seq_cifar100, upsample_images
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, download_call

__all__ = [
    "DEFAULT_MIN_AREA",
    "DEFAULT_SCALE",
    "COCOStitchReport",
    "paste_instance",
    "prepare_coco_stitch",
]

DEFAULT_SCALE = (0.35, 0.6)
"""Range of the pasted object's longest side, as a fraction of the image side."""
DEFAULT_MIN_AREA = 1024.0
"""Smallest COCO ``area`` (mask pixels) an instance needs to be pasted: 32², COCO's small/medium
boundary."""

_UPSCALE = "bilinear, align_corners=False, no antialiasing (xder_data.cifar100.upsample_images)"
_OBJECT_RESIZE = "bilinear with antialiasing, premultiplied alpha; mask = resized mask >= 0.5"


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
# Planning and rendering


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


def _render(
    writer: StitchWriter,
    plan: _Plan,
    cifar_x: torch.Tensor,
    cifar_rows_of: Sequence[np.ndarray],
    coco: CocoSplit,
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
        if i % BLOCK == 0:
            backgrounds = upsample_images(cifar_x[torch.from_numpy(rows[i : i + BLOCK])], size).numpy()
            block = {key: [] for key in ("images", "masks", "boxes")}
        pixels, mask = cut_instance(coco, instances[i])
        height, width = _scaled_size(mask.shape[0], mask.shape[1], float(plan.scale[i]), size)
        top = int(plan.top_fraction[i] * (size - height + 1))
        left = int(plan.left_fraction[i] * (size - width + 1))
        image, pasted = paste_instance(backgrounds[i % BLOCK], pixels, mask, top, left, height, width)
        block["images"].append(image)
        block["masks"].append(pasted)
        block["boxes"].append((top, left, height, width))
        if (i + 1) % BLOCK == 0 or i + 1 == n:
            stop = i + 1
            picked = instances[start:stop]
            writer.write(
                start,
                {
                    "images": np.stack(block["images"]),
                    "masks": np.stack(block["masks"]),
                    "boxes": np.asarray(block["boxes"], dtype=np.int32),
                    "primary_labels": CIFAR_IDS[plan.primary[start:stop]],
                    "secondary_labels": CIFAR_IDS[plan.secondary[start:stop]],
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
    if not is_number(min_area) or min_area < 0:
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
    load_mask_api()  # fail before reading anything
    coco_root, data_root = Path(coco_root), Path(data_root)
    annotation_paths = {
        split: coco_root / "annotations" / f"instances_{COCO_SPLITS[split]}.json" for split in SPLITS
    }
    for path in annotation_paths.values():
        if not path.is_file():
            raise DataNotFoundError(
                f"{path}: COCO annotation file missing: {coco_fix(coco_root, 'annotations_trainval2017.zip')}"
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
    seeds = dict(zip(SPLITS, np.random.SeedSequence(seed).spawn(2), strict=True))
    counts = {"train": n_train, "test": n_test}
    # Read both annotation files, plan both splits and find every photo before rendering anything,
    # so that a bad file is reported in seconds rather than after the training split is drawn.
    cocos, plans, rows_of = {}, {}, {}
    for split in SPLITS:
        cocos[split] = read_coco(annotation_paths[split], coco_root / COCO_SPLITS[split], min_area)
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
    writers: list[StitchWriter] = []
    try:
        for split in SPLITS:
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
            writer = StitchWriter(paths[split], counts[split], size, attrs, cifar.class_names or ())
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
        eligible={split: dict(zip(names, map(len, cocos[split].pools), strict=True)) for split in SPLITS},
        skipped={split: dict(cocos[split].skipped) for split in SPLITS},
        primary_counts={split: _histogram(plans[split].primary, names) for split in SPLITS},
        secondary_counts={split: _histogram(plans[split].secondary, names) for split in SPLITS},
    )


def _histogram(indices: np.ndarray, names: Sequence[str]) -> dict[str, int]:
    return dict(zip(names, np.bincount(indices, minlength=len(names)).tolist(), strict=True))


def _check_images(coco: CocoSplit, plan: _Plan) -> None:
    """Report a missing photo before any rendering starts."""
    needed = {coco.pools[b][j].image_id for b, j in zip(plan.secondary, plan.instance_pick, strict=True)}
    for image_id in sorted(needed):
        path = coco.image_dir / coco.images[image_id][0]
        if not path.is_file():
            raise DataNotFoundError(
                f"{path}: COCO image missing (image {image_id} of {coco.path.name}): "
                f"{coco_fix(coco.path.parent.parent, coco.image_dir.name + '.zip')}"
            )
