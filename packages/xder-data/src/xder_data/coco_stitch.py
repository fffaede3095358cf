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

Generation (deterministic given ``seed``) is described where it is done,
:mod:`xder_data._coco_stitch_generation`: the pairs of classes, the backgrounds (CIFAR-100 upscaled
with :func:`xder_data.cifar100.upsample_images`, as ``seq-cifar100`` with ``image_size=64``), the
eligible COCO instances (``min_area``, crowds and degenerate polygons skipped), the scale, the
location and the paste.

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

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from xder_data._coco_format import SKIP_REASONS, decode_mask
from xder_data._coco_stitch_format import (
    COCO_STITCH_FOLDER,
    FORMAT,
    N_CLASSES,
    SHARED_CLASSES,
    VERSION,
    SharedClass,
    bad_file,
    check_file,
    coco_stitch_paths,
    prepare_hint,
    read_labels,
)
from xder_data._coco_stitch_generation import (
    DEFAULT_MIN_AREA,
    DEFAULT_SCALE,
    COCOStitchReport,
    paste_instance,
    prepare_coco_stitch,
)
from xder_data.augment import Compose, CropFlip, Normalize
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.cifar100 import CIFAR100_MEAN, CIFAR100_STD
from xder_data.errors import DataNotFoundError, one_line

__all__ = [
    "COCO_STITCH_DEFAULTS",
    "COCO_STITCH_FOLDER",
    "DEFAULT_MIN_AREA",
    "DEFAULT_SCALE",
    "FORMAT",
    "SHARED_CLASSES",
    "SKIP_REASONS",
    "VERSION",
    "COCOStitchReport",
    "SharedClass",
    "coco_stitch",
    "coco_stitch_paths",
    "decode_mask",
    "paste_instance",
    "prepare_coco_stitch",
]

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
        raise DataNotFoundError(f"coco-stitch needs a data root holding coco_stitch/: {prepare_hint()}")
    paths = coco_stitch_paths(root)
    for path in paths.values():
        if not path.is_file():
            raise DataNotFoundError(f"{path}: COCO-stitch file missing: {prepare_hint(root)}")
    data: dict[str, dict[str, Any]] = {}
    for split, path in paths.items():
        # Handles live only inside this call: h5py objects are neither picklable nor fork-safe.
        try:
            handle = h5py.File(path, "r")
        except OSError as exc:
            raise bad_file(path, f"not a readable HDF5 file ({one_line(exc)})") from None
        with handle:
            size = check_file(path, handle)
            try:
                data[split] = {
                    "size": size,
                    "x": torch.from_numpy(np.ascontiguousarray(handle["images"][...])),
                    "y": read_labels(path, handle, "primary_labels"),
                    "secondary": read_labels(path, handle, "secondary_labels"),
                    "names": tuple(name.decode("utf-8") for name in handle["class_names"][...]),
                }
                if split == "test":
                    data[split]["masks"] = torch.from_numpy(np.asarray(handle["masks"][...], dtype=bool))
            except (OSError, UnicodeDecodeError) as exc:  # a truncated file fails only when read
                raise bad_file(path, f"cannot be read in full ({one_line(exc)})") from None
    train, test = data["train"], data["test"]
    if train["size"] != test["size"]:
        raise bad_file(paths["test"], f"images are {test['size']} px but train.h5 holds {train['size']} px")
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
