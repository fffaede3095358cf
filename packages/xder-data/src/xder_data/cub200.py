"""``seq-cub200``: Split CUB-200 (Caltech-UCSD Birds-200-2011, Wah et al. 2011), 10 tasks x 20 classes.

Reads the data exactly as distributed (docs/data-formats.md, "CUB-200-2011")::

    <root>/CUB_200_2011/images.txt               <image_id> <class_dir>/<file>.jpg
    <root>/CUB_200_2011/classes.txt              <class_id> <class_dir>   (ids 1..200)
    <root>/CUB_200_2011/image_class_labels.txt   <image_id> <class_id>
    <root>/CUB_200_2011/train_test_split.txt     <image_id> <is_training_image>  (1 train, 0 test)
    <root>/CUB_200_2011/bounding_boxes.txt       <image_id> <x> <y> <width> <height>
    <root>/CUB_200_2011/parts/parts.txt          <part_id> <part_name>
    <root>/CUB_200_2011/parts/part_locs.txt      <image_id> <part_id> <x> <y> <visible>
    <root>/CUB_200_2011/images/<class_dir>/<file>.jpg
    <root>/segmentations/<class_dir>/<file>.png  soft masks (0..255), mode L or LA (a separate download)

Files are space-separated with 1-based ids; every id is matched across files (each image listed
once in each, its folder that of its class), and any mismatch, missing file or unreadable image or
mask raises :class:`~xder_data.errors.DataNotFoundError` or
:class:`~xder_data.errors.BenchmarkFormatError` with one line naming the file (and line).

Protocol (X-DER, App. "Details on Split CUB-200"):

* Classes in class-id order, 10 tasks x 20 classes: class id c is label c - 1 (task t holds
  class ids 20t + 1 .. 20t + 20); train and test as train_test_split.txt says (5,994 / 5,794).
* Training images are resized to 256x256, then randomly cropped to 224x224, flipped
  horizontally with probability 1/2 and rotated by up to 10 degrees (:class:`CropFlipRotate`,
  one ``affine_grid``/``grid_sample`` per batch). Test images are resized to 224x224. The
  resizes are done once, when the images are decoded (Pillow's bilinear filter on the RGB image,
  i.e. torchvision's ``Resize((s, s))`` on a PIL image), so ``train_x`` is uint8
  (N, 3, 256, 256) and ``test_x`` uint8 (N, 3, 224, 224); ``input_shape`` is the stored
  (3, 256, 256) and the network sees 224x224. Rows are in image-id order within each split.
* Normalisation by the X-DER authors' CUB statistics (mammoth's ``seq_cub200``):
  mean (0.4856, 0.4994, 0.4324), std (0.2272, 0.2226, 0.2613).
* ``test_transform`` normalises; rows that are not 224x224 (a validation split, cut from the
  256x256 training rows) are first resized to 224x224 (bilinear, antialiased) so that they are
  evaluated in the test geometry.
* ``strong_transform`` (X-DER's future preparation): :class:`~xder_data.augment.StrongAugment`
  at 224 applied to the stored 256x256 images; its random resized crop goes from 256 to 224. The
  paper does not say which strong augmentation it used on CUB.
* 70 epochs per task, RAdam, the learning rate times 0.2 at epochs 20, 40 and 60, and the
  ImageNet-layout ResNet18 (``backbone="resnet18"``) pre-trained on ImageNet. The pre-training is
  part of the protocol, but the weights are not bundled: pass torchvision's ImageNet state_dict
  with ``--set backbone.weights=PATH`` (e.g. ``resnet18-f37072fd.pth``); without it the backbone
  starts from random weights. The paper gives no learning rate, batch size or buffer size for
  CUB: lr 0.001 is RAdam's default, batch and replay minibatch 32 and a 500-example buffer are
  this project's choice.

Pointing-game ground truth (X-DER Sec. 6.4): ``Benchmark.test_masks`` (N_test, 224, 224) bool is
each test image's segmentation mask carried through the test geometry: a nearest resize to
224x224 (output pixel j takes source pixel ``floor((j + 0.5) * W / 224)``, pixel centres matched,
as Pillow's NEAREST), then binarised with ``value >= mask_threshold``. The soft value is the
average of 4-5 annotators' masks; the default 128 keeps the pixels that at least half of them
marked (docs/data-formats.md, "CUB-200-2011"); mammoth's ``> 0`` is ``mask_threshold=1``.
:func:`read_cub200_annotations` gives the test images' boxes and part locations in the same
geometry.

Decoding 11,788 JPEGs takes minutes: :func:`prepare_cub200` decodes and resizes once and writes
``<root>/cub200/cub200.h5``, which the loader reads when present. The cache records a digest of the
listing; a cache whose listing differs from the tree's is reported as stale. Without a cache the
loader decodes the tree itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from xder_data._cub_cache import (
    CACHE_FORMAT,
    CACHE_VERSION,
    IMAGE_SIZE,
    PREPARE_HINT,
    TRAIN_SIZE,
    CUB200PrepareReport,
    check_cache,
    cub200_cache_path,
    decode_into,
    open_cache,
    prepare_cub200,
    read_uint8,
    require_segmentations,
)
from xder_data._cub_format import (
    CUB200_FOLDER,
    N_CLASSES,
    SEGMENTATIONS_FOLDER,
    image_size,
    read_boxes,
    read_listing,
    read_part_locations,
)
from xder_data._hdf5 import read_attr
from xder_data.augment import Compose, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.errors import BenchmarkFormatError, BenchmarkOptionError, DataNotFoundError

__all__ = [
    "CACHE_FORMAT",
    "CACHE_VERSION",
    "CUB200_FOLDER",
    "CUB200_MEAN",
    "CUB200_STD",
    "IMAGE_SIZE",
    "MASK_THRESHOLD",
    "MAX_ROTATION",
    "SEGMENTATIONS_FOLDER",
    "SEQ_CUB200_DEFAULTS",
    "TRAIN_SIZE",
    "CUB200Annotations",
    "CUB200PrepareReport",
    "CropFlipRotate",
    "Resize",
    "cub200_cache_path",
    "prepare_cub200",
    "read_cub200_annotations",
    "seq_cub200",
]

CUB200_MEAN = (0.4856, 0.4994, 0.4324)
CUB200_STD = (0.2272, 0.2226, 0.2613)
"""The X-DER authors' CUB-200 statistics (mammoth ``seq_cub200``; docs/data-formats.md)."""
MAX_ROTATION = 10.0
"""Training rotations are drawn uniformly in [-10, 10] degrees ("10 degrees random rotation")."""
MASK_THRESHOLD = 128
"""A mask pixel is the bird when its soft value is >= 128 (docs/data-formats.md, "CUB-200-2011")."""

N_TASKS = 10
CLASSES_PER_TASK = 20

SEQ_CUB200_DEFAULTS = BenchmarkDefaults(
    epochs=70,  # App. "Details on Split CUB-200": "70 epochs on each tasks"
    batch_size=32,  # not given by the paper: this project's choice
    minibatch_size=32,  # not given by the paper: this project's choice
    lr=0.001,  # not given by the paper: RAdam's default learning rate
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="multistep",
    milestones=(20, 40, 60),  # "scaling the learning rate by 0.2 at epochs 20, 40, and 60"
    lr_gamma=0.2,
    buffer_size=500,  # not given by the paper for CUB: the smallest buffer of Table 1 (CIFAR-100, NTU-60)
    optimizer="radam",  # "with RAdam"
    backbone="resnet18",  # ImageNet-layout ResNet18; pass ImageNet weights with backbone.weights
    backbone_options={},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)


def _to_unit_float(x: Tensor) -> Tensor:
    return x.to(torch.float32).mul_(1 / 255) if x.dtype == torch.uint8 else x.to(torch.float32)


# ---------------------------------------------------------------------------------------------
# Transforms


class CropFlipRotate:
    """Random crop, horizontal flip and rotation, batched with per-sample parameters.

    The paper's training augmentation: the parameter distributions and geometry of torchvision's
    ``RandomCrop(size)``, ``RandomHorizontalFlip(0.5)`` and ``RandomRotation(degrees)`` applied in
    this order to each PIL image, with bilinear interpolation for the rotation (torchvision's
    default would be nearest; the paper does not say). Per sample, drawn in this order from
    ``generator``:

    * crop offsets ``top`` and ``left``, uniform integers in ``[0, H - size]`` and ``[0, W - size]``;
    * a flip with probability 1/2 (when ``flip``);
    * an angle uniform in ``[-degrees, degrees]``; positive angles turn the picture
      counter-clockwise (torchvision's convention) about the centre of the crop.

    The three steps are one ``affine_grid``/``grid_sample`` over the batch (bilinear). As when
    rotating a cropped PIL image, the result depends on the crop's pixels only: points that the
    rotation brings from outside the crop are zero (the rotated corners), and points within half
    a pixel of the crop's edge take the edge pixel. Each output equals Pillow's
    ``crop``, ``transpose(FLIP_LEFT_RIGHT)`` and ``rotate(angle, BILINEAR)`` of that image to
    float32 rounding (about 2e-5 on [0, 1]).

    Call: ``x: (B, C, H, W)`` uint8 (or float in [0, 1]) -> float32 ``(B, C, size, size)`` in [0, 1].
    """

    def __init__(self, size: int = IMAGE_SIZE, degrees: float = MAX_ROTATION, *, flip: bool = True) -> None:
        if size < 1 or degrees < 0:
            raise ValueError(f"CropFlipRotate needs size >= 1 and degrees >= 0, got {size}, {degrees}")
        self.size = int(size)
        self.degrees = float(degrees)
        self.flip = flip

    def sample(
        self,
        batch: int,
        height: int,
        width: int,
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-sample parameters: ``(top (B,) int64, left (B,) int64, flipped (B,) bool,
        angle (B,) float32 degrees)``."""
        span_h, span_w = height - self.size, width - self.size
        if span_h < 0 or span_w < 0:
            raise ValueError(f"crop {self.size} is larger than the input {height}x{width}")
        top = torch.randint(0, span_h + 1, (batch,), generator=generator, device=device)
        left = torch.randint(0, span_w + 1, (batch,), generator=generator, device=device)
        if self.flip:
            flipped = torch.rand(batch, generator=generator, device=device) < 0.5
        else:
            flipped = torch.zeros(batch, dtype=torch.bool, device=device)
        angle = (2 * torch.rand(batch, generator=generator, device=device) - 1) * self.degrees
        return top, left, flipped, angle

    def apply(self, x: Tensor, top: Tensor, left: Tensor, flipped: Tensor, angle: Tensor) -> Tensor:
        """The transform with given parameters (see :meth:`sample`); deterministic."""
        batch, channels, height, width = x.shape
        size = self.size
        x = _to_unit_float(x)
        radians = angle.to(device=x.device, dtype=torch.float32) * (math.pi / 180)
        cos, sin = torch.cos(radians), torch.sin(radians)
        sign = 1.0 - 2.0 * flipped.to(device=x.device, dtype=torch.float32)
        # Output point p (normalised crop coordinates, y down) samples the flipped crop at R^-1 p,
        # R the counter-clockwise rotation as seen on screen; the flip negates x afterwards.
        theta = torch.zeros(batch, 2, 3, device=x.device)
        theta[:, 0, 0] = sign * cos
        theta[:, 0, 1] = -sign * sin
        theta[:, 1, 0] = sin
        theta[:, 1, 1] = cos
        grid = F.affine_grid(theta, [batch, channels, size, size], align_corners=False)
        inside = (grid.abs() <= 1).all(dim=-1)  # the point lies on the crop
        edge = 1 - 1 / size  # centres of the crop's border pixels
        grid = grid.clamp(-edge, edge)
        # From crop to input coordinates (align_corners=False: -1 and 1 are the outer edges).
        scale = torch.tensor([size / width, size / height], device=x.device)
        shift = torch.stack(
            [(2 * left.to(x.device) + size) / width - 1, (2 * top.to(x.device) + size) / height - 1], dim=1
        ).to(torch.float32)
        grid = grid * scale + shift[:, None, None, :]
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return out * inside[:, None].to(out.dtype)

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        batch, _, height, width = x.shape
        return self.apply(x, *self.sample(batch, height, width, generator, x.device))

    def __repr__(self) -> str:
        return f"CropFlipRotate(size={self.size}, degrees={self.degrees}, flip={self.flip})"


class Resize:
    """Deterministic bilinear resize to ``size`` x ``size`` (antialiased, as Pillow's filter);
    inputs already of that size pass through unchanged. The generator is ignored.

    Call: ``x: (B, C, H, W)`` -> ``x`` itself if ``H == W == size``, else float32
    ``(B, C, size, size)`` in [0, 1] (uint8 inputs are scaled by 1/255).
    """

    def __init__(self, size: int = IMAGE_SIZE) -> None:
        if size < 1:
            raise ValueError(f"Resize needs size >= 1, got {size}")
        self.size = int(size)

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if tuple(x.shape[-2:]) == (self.size, self.size):
            return x
        return F.interpolate(
            _to_unit_float(x),
            size=(self.size, self.size),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )

    def __repr__(self) -> str:
        return f"Resize(size={self.size})"


def _require_root(root: Path | str | None) -> Path:
    if root is None:
        raise DataNotFoundError(
            f"seq-cub200 needs a data root: pass run.data_root ROOT, the folder holding {CUB200_FOLDER}/ "
            f"(from CUB_200_2011.tgz) and {SEGMENTATIONS_FOLDER}/ (from segmentations.tgz)"
        )
    return Path(root)


# ---------------------------------------------------------------------------------------------
# Annotations for the pointing game


@dataclass(frozen=True, kw_only=True, eq=False)
class CUB200Annotations:
    """The test images' boxes and part locations in the test geometry (resize to ``size`` x ``size``).

    Rows follow the benchmark's test rows (image-id order), which no class order or validation
    split reorders. A point (x, y) of an original image of width W and height H maps to
    ``(x * scale[0], y * scale[1])`` with ``scale = (size / W, size / H)``: coordinates are taken
    as continuous with the origin at the image's top-left corner, so pixel (row r, column c) covers
    ``[c, c + 1) x [r, r + 1)``, the convention of the image and mask resizes. (Whether CUB's
    coordinates count pixels from 0 or 1 is not documented; the difference is under one original
    pixel.)

    Attributes:
        image_ids: (N,) int64 CUB image ids of the test rows.
        image_sizes: (N, 2) int64 (width, height) of the originals.
        scale: (N, 2) float64 (size / width, size / height).
        boxes: (N, 4) float32 (x, y, width, height) of each bounding box, mapped.
        part_names: the P part names of parts.txt, in part-id order.
        parts: (N, P, 2) float32 (x, y) of each part centre, mapped; NaN where not visible.
        part_visible: (N, P) bool.
        size: the test geometry's side (224).
    """

    image_ids: Tensor
    image_sizes: Tensor
    scale: Tensor
    boxes: Tensor
    part_names: tuple[str, ...]
    parts: Tensor
    part_visible: Tensor
    size: int = IMAGE_SIZE

    def box_masks(self) -> Tensor:
        """(N, size, size) bool: the pixels whose centre lies in the box (edges included)."""
        centres = torch.arange(self.size, dtype=torch.float64) + 0.5
        x, y, w, h = self.boxes.to(torch.float64).unbind(dim=1)
        cols = (centres >= x[:, None]) & (centres <= (x + w)[:, None])
        rows = (centres >= y[:, None]) & (centres <= (y + h)[:, None])
        return rows[:, :, None] & cols[:, None, :]

    def part_masks(self, parts: Sequence[str] | None = None) -> Tensor:
        """(N, size, size) bool: the pixel holding each visible part (of ``parts``, by name; all by
        default). Use it with a pointing tolerance to score "within r pixels of a visible part"."""
        names = self.part_names if parts is None else tuple(parts)
        unknown = [name for name in names if name not in self.part_names]
        if unknown:
            raise ValueError(f"unknown part {unknown[0]!r}: choose from {', '.join(self.part_names)}")
        chosen = [self.part_names.index(name) for name in names]
        n = self.parts.shape[0]
        out = torch.zeros(n, self.size, self.size, dtype=torch.bool)
        visible = self.part_visible[:, chosen]
        image, k = torch.nonzero(visible, as_tuple=True)
        points = self.parts[:, chosen][image, k].to(torch.float64)
        cols = points[:, 0].floor().long().clamp(0, self.size - 1)
        rows = points[:, 1].floor().long().clamp(0, self.size - 1)
        out[image, rows, cols] = True
        return out


def read_cub200_annotations(root: str | Path, *, cache: bool = True) -> CUB200Annotations:
    """The test images' bounding boxes and visible part locations, mapped into the 224x224 test
    geometry (see :class:`CUB200Annotations`).

    The original image sizes come from the cache when there is one (``cache``), else from each
    test image's header.

    Raises:
        DataNotFoundError: a listing or annotation file or a test image is missing.
        BenchmarkFormatError: a malformed line, ids that do not match, a stale cache.
    """
    root = _require_root(root)
    listing = read_listing(root)
    boxes = read_boxes(listing)
    locations = read_part_locations(listing)
    test = listing.rows("test")
    path = cub200_cache_path(root)
    if cache and path.is_file():
        with open_cache(path) as handle:
            check_cache(path, handle, listing)
            sizes = np.asarray(handle["test_image_size"][...], dtype=np.int64)
    else:
        sizes = np.array([image_size(listing, int(i)) for i in test], dtype=np.int64).reshape(-1, 2)
    if (sizes < 1).any():
        raise BenchmarkFormatError(f"{path}: an image size is not positive; delete it and {PREPARE_HINT}")
    scale = IMAGE_SIZE / sizes.astype(np.float64)  # (N, 2): (sx, sy)
    mapped_boxes = boxes[test] * np.concatenate([scale, scale], axis=1)
    visible = locations.visible[test]
    points = locations.points[test] * scale[:, None, :]
    points[~visible] = np.nan
    return CUB200Annotations(
        image_ids=torch.from_numpy(listing.image_ids[test].copy()),
        image_sizes=torch.from_numpy(sizes),
        scale=torch.from_numpy(scale),
        boxes=torch.from_numpy(mapped_boxes.astype(np.float32)),
        part_names=locations.names,
        parts=torch.from_numpy(points.astype(np.float32)),
        part_visible=torch.from_numpy(visible.copy()),
    )


# ---------------------------------------------------------------------------------------------
# The benchmark


def _class_name(class_dir: str) -> str:
    """``001.Black_footed_Albatross`` -> ``Black_footed_Albatross``."""
    prefix, dot, rest = class_dir.partition(".")
    return rest if dot and prefix.isdigit() and rest else class_dir


@register_benchmark("seq-cub200", defaults=SEQ_CUB200_DEFAULTS)
def seq_cub200(
    root: Path | None,
    *,
    masks: bool = True,
    mask_threshold: int = MASK_THRESHOLD,
    cache: bool = True,
) -> Benchmark:
    """Load Split CUB-200 from ``<root>`` in class-id order (see the module docstring).

    Args:
        root: the data root holding ``CUB_200_2011/`` and ``segmentations/``.
        masks: build ``test_masks`` from the segmentations (False: ``test_masks`` is None and
            ``segmentations/`` is not needed).
        mask_threshold: a mask pixel is the bird when its soft value is >= this (1..255; 128 by
            default, 1 reproduces mammoth's ``> 0``).
        cache: read ``<root>/cub200/cub200.h5`` (:func:`prepare_cub200`) when it exists; the
            tree is decoded directly otherwise, which takes minutes for the full data set.

    Returns:
        ``train_x`` (5994, 3, 256, 256) uint8, ``test_x`` (5794, 3, 224, 224) uint8 for the real
        data, labels class id - 1, ``test_masks`` (N_test, 224, 224) bool, ``class_names``.

    Raises:
        DataNotFoundError: no root, or a listing file, image, mask or ``segmentations/`` is
            missing, or the cache was prepared without masks.
        BenchmarkFormatError: a malformed or inconsistent listing, an unreadable image or mask,
            a mask of another size than its image, or a stale or corrupt cache.
        BenchmarkOptionError: ``mask_threshold`` out of 1..255 (a ValueError).
    """
    if not isinstance(mask_threshold, int) or not 1 <= mask_threshold <= 255:
        raise BenchmarkOptionError(
            f"benchmark.mask_threshold must be an integer in 1..255, got {mask_threshold!r}"
        )
    root = _require_root(root)
    listing = read_listing(root)
    path = cub200_cache_path(root)
    mask_values: Tensor | None = None
    if cache and path.is_file():
        with open_cache(path) as handle:
            check_cache(path, handle, listing)
            if masks and not read_attr(handle, "masks"):
                raise DataNotFoundError(
                    f"{path}: prepared without segmentation masks; re-run the preparation with "
                    f"{root / SEGMENTATIONS_FOLDER} in place, or load with masks=False"
                )
            train_x = read_uint8(handle["train_x"])
            test_x = read_uint8(handle["test_x"])
            if masks:
                mask_values = read_uint8(handle["test_mask_values"])
    else:
        if masks:
            require_segmentations(root)
        n_train, n_test = int(listing.is_train.sum()), int((~listing.is_train).sum())
        train_np = np.empty((n_train, 3, TRAIN_SIZE, TRAIN_SIZE), dtype=np.uint8)
        test_np = np.empty((n_test, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
        masks_np = np.empty((n_test, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8) if masks else None
        decode_into(root, listing, train_np, test_np, masks_np)
        train_x, test_x = torch.from_numpy(train_np), torch.from_numpy(test_np)
        mask_values = None if masks_np is None else torch.from_numpy(masks_np)
    normalize = Normalize(CUB200_MEAN, CUB200_STD)
    return Benchmark(
        name="seq-cub200",
        n_tasks=N_TASKS,
        classes_per_task=(CLASSES_PER_TASK,) * N_TASKS,
        class_order=tuple(range(N_CLASSES)),
        input_shape=(3, TRAIN_SIZE, TRAIN_SIZE),
        mean=CUB200_MEAN,
        std=CUB200_STD,
        train_x=train_x,
        train_y=torch.from_numpy(listing.labels[listing.rows("train")]),
        test_x=test_x,
        test_y=torch.from_numpy(listing.labels[listing.rows("test")]),
        defaults=SEQ_CUB200_DEFAULTS,
        train_transform=Compose(CropFlipRotate(IMAGE_SIZE, MAX_ROTATION), normalize),
        test_transform=Compose(Resize(IMAGE_SIZE), normalize),
        strong_transform=StrongAugment(IMAGE_SIZE, CUB200_MEAN, CUB200_STD),
        class_names=tuple(_class_name(d) for d in listing.class_dirs),
        test_masks=None if mask_values is None else mask_values >= mask_threshold,
    )
