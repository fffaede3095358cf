"""``seq-ntu60``: Split NTU-60 (NTU RGB+D 60 skeletons, cross-subject), 6 tasks x 10 actions.

The benchmark reads ``<root>/ntu60/xsub.h5``, which :func:`prepare_ntu60` writes from the raw
``.skeleton`` files and :func:`import_ntu60_stgcn` / :func:`import_ntu60_efficientgcn` from the
two common preprocessed distributions (docs/data-formats.md, "NTU RGB+D 60").

The HDF5 layout: groups ``train`` and ``test``, each with ``data`` float32 (N, 3, T, 25, 2) in
"CTVM" order (x/y/z, frames, joints, bodies) chunked per sample, ``label`` int64 (action - 1),
``length`` int32 and ``name`` S20 (``S001C001P001R001A001``); attributes ``layout``,
``num_class``, ``benchmark``, ``num_frames``, ``max_bodies``, ``body_selection``,
``missing_skeletons_removed`` and ``source`` (``raw``, ``st-gcn`` or ``efficientgcn``).

Conversion choices (the paper: X-DER App. "Details on Split-NTU60"):

* Split: X-sub, by the official training subjects (:data:`XSUB_TRAIN_SUBJECTS`); setups
  S001-S017 and actions A001-A060 only (NTU-120 files in the folder are skipped and counted).
* Bodies: a body is identified by its position in the frame (the k-th body listed is body k, as
  the NTU, ST-GCN and EfficientGCN readers do; bodyIDs are not used). Two are kept, by
  EfficientGCN's motion energy (:func:`body_energy`, descending) or the first two positions.
* Frames: a frame is *valid* when a kept body has a non-zero joint there. Frames where the Kinect
  tracked nobody (bodyCount 0) are dropped rather than kept as zeros, so that interpolation never
  pulls a skeleton towards the origin. ``length`` is the number of valid frames.
* Time: the valid frames only (never the zero padding) are resampled to ``num_frames`` (80, as
  the paper) by linear interpolation with both ends kept (:func:`resample_frames`); a single
  valid frame is repeated.
* Missing skeletons: samples with no frame holding a body, and samples named in the official
  missing-skeleton list when one is given, are skipped and counted.
* Malformed files (a name that is not ``SsssCcccPpppRrrrAaaa.skeleton``, a bad token, a
  truncated file) raise :class:`~xder_data.errors.BenchmarkFormatError` naming the file and line,
  unless ``on_error="skip"``, which counts them in the report instead.

Benchmark choices:

* Class order: the paper's six task lists, by action name, mapped to the official ids
  (:data:`PAPER_TASKS`, :data:`PAPER_NAME_TO_ACTION`, :data:`PAPER_CLASS_ORDER`). The reader
  numbers its classes in that order, so the natural order *is* the paper's: class ``i`` is the
  official action ``PAPER_CLASS_ORDER[i] + 1`` (``class_names`` holds the official names).
  ``label_order="official"`` numbers classes by action id, ``label_order="charon"`` as CHARON's
  ``xder_perm`` is applied there (:data:`CHARON_CLASS_ORDER`).
* Storage: float16 tensors (N, 3, T, 25, 2); raw camera coordinates (metres, up to about 5),
  where float16 rounds to within 1-2 mm, below the Kinect's own noise.
* Transforms (:mod:`xder_data.skeleton`): training = the paper's noise (0.01, 0.02) and rotation
  (±30°) then the normalisation; test = the normalisation (default: subtract body 0's first-frame
  mid-spine). X-DER's strong views add a random shear (off-diagonal coefficients in ±0.3), the
  spatial augmentation of skeleton contrastive learning; the paper does not say which strong
  augmentation it used on NTU, so this is this project's choice.
* Protocol: 70 epochs, a cosine schedule with a 10-epoch warm-up and EfficientGCN-B0 (paper,
  Sec. "Training details"); SGD lr 0.1 with momentum 0.9 (the SGD row of the NTU grid, App.
  "Hyperparameter Choice"); buffer 500 (the one NTU-60 size of Table 1). The paper does not
  state the NTU batch sizes: batch 32 and replay minibatch 32 are this project's fixed choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import h5py
import numpy as np
import torch

from xder_data._ntu_conversion import (
    SKIP_REASONS,
    XSUB_TRAIN_SUBJECTS,
    NTUConversionReport,
    import_ntu60_efficientgcn,
    import_ntu60_stgcn,
    prepare_ntu60,
    resample_valid,
)
from xder_data._ntu_format import (
    NUM_CLASSES,
    SampleName,
    SkeletonRecording,
    body_energy,
    check_labels,
    check_layout,
    ntu60_path,
    parse_sample_name,
    read_missing_list,
    read_skeleton,
    resample_frames,
    select_bodies,
)
from xder_data.augment import Compose
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, prepare_call
from xder_data.skeleton import SkeletonAugment, SkeletonNormalize

__all__ = [
    "CHARON_CLASS_ORDER",
    "CHARON_XDER_PERM",
    "LABEL_ORDERS",
    "NTU60_ACTION_NAMES",
    "PAPER_CLASS_ORDER",
    "PAPER_NAME_TO_ACTION",
    "PAPER_TASKS",
    "SEQ_NTU60_DEFAULTS",
    "SKIP_REASONS",
    "STRONG_SHEAR",
    "XSUB_TRAIN_SUBJECTS",
    "NTUConversionReport",
    "SampleName",
    "SkeletonRecording",
    "body_energy",
    "import_ntu60_efficientgcn",
    "import_ntu60_stgcn",
    "ntu60_path",
    "parse_sample_name",
    "prepare_ntu60",
    "read_missing_list",
    "read_skeleton",
    "resample_frames",
    "resample_valid",
    "select_bodies",
    "seq_ntu60",
]

# ---------------------------------------------------------------------------------------------
# Constants

NTU60_ACTION_NAMES: tuple[str, ...] = (
    "drink water",
    "eat meal/snack",
    "brushing teeth",
    "brushing hair",
    "drop",
    "pickup",
    "throw",
    "sitting down",
    "standing up (from sitting position)",
    "clapping",
    "reading",
    "writing",
    "tear up paper",
    "wear jacket",
    "take off jacket",
    "wear a shoe",
    "take off a shoe",
    "wear on glasses",
    "take off glasses",
    "put on a hat/cap",
    "take off a hat/cap",
    "cheer up",
    "hand waving",
    "kicking something",
    "reach into pocket",
    "hopping (one foot jumping)",
    "jump up",
    "make a phone call/answer phone",
    "playing with phone/tablet",
    "typing on a keyboard",
    "pointing to something with finger",
    "taking a selfie",
    "check time (from watch)",
    "rub two hands together",
    "nod head/bow",
    "shake head",
    "wipe face",
    "salute",
    "put the palms together",
    "cross hands in front (say stop)",
    "sneeze/cough",
    "staggering",
    "falling",
    "touch head (headache)",
    "touch chest (stomachache/heart pain)",
    "touch back (backache)",
    "touch neck (neckache)",
    "nausea or vomiting condition",
    "use a fan (with hand or paper)/feeling warm",
    "punching/slapping other person",
    "kicking other person",
    "pushing other person",
    "pat on back of other person",
    "point finger at the other person",
    "hugging other person",
    "giving something to other person",
    "touch other person's pocket",
    "handshaking",
    "walking towards each other",
    "walking apart from each other",
)
"""The official action names (NTU RGB+D README); action ``a`` (1-based) is ``[a - 1]``."""

PAPER_TASKS: tuple[tuple[str, ...], ...] = (
    (
        "put on glasses",
        "cross hands in front",
        "falling down",
        "staggering",
        "fan self",
        "salute",
        "throw",
        "punch/slap",
        "pushing",
        "put palms together",
    ),
    (
        "hand waving",
        "sneeze/cough",
        "type on a keyboard",
        "nod head/bow",
        "check time (from watch)",
        "brush teeth",
        "hugging",
        "wipe face",
        "eat meal",
        "shaking hands",
    ),
    (
        "put on jacket",
        "reading",
        "take off a shoe",
        "put on a shoe",
        "tear up paper",
        "reach into pocket",
        "point to something",
        "drink water",
        "kicking something",
        "sit down",
    ),
    (
        "headache",
        "pat on back",
        "play with phone/tablet",
        "writing",
        "stand up",
        "back pain",
        "walking towards",
        "shake head",
        "walking apart",
        "touch pocket",
    ),
    (
        "take off glasses",
        "point finger",
        "brush hair",
        "taking a selfie",
        "giving object",
        "take off jacket",
        "take off a hat/cap",
        "kicking",
        "phone call",
        "hopping",
    ),
    (
        "rub two hands",
        "nausea/vomiting",
        "jump up",
        "clapping",
        "drop",
        "chest pain",
        "neck pain",
        "put on a hat/cap",
        "cheer up",
        "pick up",
    ),
)
"""The paper's six tasks, in its words and order (App. "Details on Split-NTU60")."""

PAPER_NAME_TO_ACTION: Mapping[str, int] = {
    # task 1
    "put on glasses": 18,  # wear on glasses
    "cross hands in front": 40,
    "falling down": 43,  # falling
    "staggering": 42,
    "fan self": 49,  # use a fan (with hand or paper)/feeling warm
    "salute": 38,
    "throw": 7,
    "punch/slap": 50,  # punching/slapping other person
    "pushing": 52,  # pushing other person
    "put palms together": 39,
    # task 2
    "hand waving": 23,
    "sneeze/cough": 41,
    "type on a keyboard": 30,
    "nod head/bow": 35,
    "check time (from watch)": 33,
    "brush teeth": 3,
    "hugging": 55,  # hugging other person
    "wipe face": 37,
    "eat meal": 2,
    "shaking hands": 58,  # handshaking
    # task 3
    "put on jacket": 14,  # wear jacket
    "reading": 11,
    "take off a shoe": 17,
    "put on a shoe": 16,  # wear a shoe
    "tear up paper": 13,
    "reach into pocket": 25,
    "point to something": 31,  # pointing to something with finger (one person)
    "drink water": 1,
    "kicking something": 24,
    "sit down": 8,
    # task 4
    "headache": 44,  # touch head (headache)
    "pat on back": 53,  # pat on back of other person
    "play with phone/tablet": 29,
    "writing": 12,
    "stand up": 9,
    "back pain": 46,  # touch back (backache)
    "walking towards": 59,
    "shake head": 36,
    "walking apart": 60,
    "touch pocket": 57,  # touch other person's pocket
    # task 5
    "take off glasses": 19,
    "point finger": 54,  # point finger at the other person (two persons)
    "brush hair": 4,
    "taking a selfie": 32,
    "giving object": 56,  # giving something to other person
    "take off jacket": 15,
    "take off a hat/cap": 21,
    "kicking": 51,  # kicking other person (24, kicking something, is in task 3)
    "phone call": 28,
    "hopping": 26,
    # task 6
    "rub two hands": 34,
    "nausea/vomiting": 48,
    "jump up": 27,
    "clapping": 10,
    "drop": 5,
    "chest pain": 45,  # touch chest (stomachache/heart pain)
    "neck pain": 47,  # touch neck (neckache)
    "put on a hat/cap": 20,
    "cheer up": 22,
    "pick up": 6,
}
"""The paper's action names -> official action ids (1-based)."""

PAPER_CLASS_ORDER: tuple[int, ...] = tuple(PAPER_NAME_TO_ACTION[n] - 1 for task in PAPER_TASKS for n in task)
"""``PAPER_CLASS_ORDER[i]`` is the 0-based official action of class ``i`` in the paper's order."""

CHARON_XDER_PERM: tuple[int, ...] = (
    17, 39, 42, 41, 48, 37, 6, 49, 51, 38, 22, 40, 29, 34, 32, 2, 54, 36, 1, 57,
    13, 10, 16, 15, 12, 24, 30, 0, 23, 7, 43, 52, 28, 11, 8, 45, 58, 35, 59, 56,
    18, 53, 3, 31, 55, 14, 20, 50, 27, 25, 33, 47, 26, 9, 4, 44, 46, 19, 21, 5,
)  # fmt: skip
"""CHARON's ``xder_perm`` (``datasets/seq_nturgbd60.py``), as published. Read as an order
(entry ``i`` = the action of class ``i``) it is exactly :data:`PAPER_CLASS_ORDER`; CHARON however
applies it as ``new_label = xder_perm[action - 1]``, which is the inverse mapping and gives other
tasks (:data:`CHARON_CLASS_ORDER`)."""

CHARON_CLASS_ORDER: tuple[int, ...] = tuple(sorted(range(NUM_CLASSES), key=CHARON_XDER_PERM.__getitem__))
"""The class order CHARON's code produces: class ``i`` is the action ``a`` with
``xder_perm[a] == i``."""

LABEL_ORDERS: Mapping[str, tuple[int, ...]] = {
    "paper": PAPER_CLASS_ORDER,
    "official": tuple(range(NUM_CLASSES)),
    "charon": CHARON_CLASS_ORDER,
}
"""The reader's class numberings (its natural orders), as 0-based official actions per class."""
STRONG_SHEAR = 0.3
"""Shear of the strong (X-DER future-preparation) skeleton augmentation; this project's choice."""

SEQ_NTU60_DEFAULTS = BenchmarkDefaults(
    epochs=70,
    batch_size=32,
    minibatch_size=32,
    lr=0.1,
    momentum=0.9,
    weight_decay=0.0,
    lr_schedule="cosine",
    warmup_epochs=10,
    buffer_size=500,
    backbone="efficientgcn-b0",
    backbone_options={},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)
_READ_BLOCK = 512
_PREPARE_HINT = f"run `{prepare_call('ntu60', 'ROOT', source='DIR')}`"
# ---------------------------------------------------------------------------------------------
# The benchmark


def _read_split(path: Path, handle: h5py.File, split: str) -> tuple[torch.Tensor, np.ndarray]:
    group = handle[split]
    labels = np.asarray(group["label"][...], dtype=np.int64)
    check_labels(path, split, labels)
    dataset = group["data"]
    out = torch.empty(dataset.shape, dtype=torch.float16)
    for start in range(0, dataset.shape[0], _READ_BLOCK):
        block = dataset[start : start + _READ_BLOCK]
        out[start : start + len(block)] = torch.from_numpy(np.ascontiguousarray(block))
    return out, labels


@register_benchmark("seq-ntu60", defaults=SEQ_NTU60_DEFAULTS)
def seq_ntu60(
    root: Path | None = None,
    *,
    label_order: Literal["paper", "official", "charon"] = "paper",
    normalization: Literal["center", "none"] = "center",
) -> Benchmark:
    """Load Split NTU-60 from ``<root>/ntu60/xsub.h5`` (see the module docstring).

    Args:
        root: the data root.
        label_order: how the reader numbers the classes (its natural order): ``"paper"`` (the
            paper's tasks), ``"official"`` (action id - 1) or ``"charon"`` (CHARON's code).
        normalization: see :class:`~xder_data.skeleton.SkeletonNormalize`.

    Raises:
        DataNotFoundError: no data root, or the file is missing.
        BenchmarkFormatError: the file is not in the layout :func:`prepare_ntu60` writes.
    """
    if label_order not in LABEL_ORDERS:
        raise ValueError(f"unknown label_order {label_order!r}: use one of {', '.join(LABEL_ORDERS)}")
    if root is None:
        raise DataNotFoundError(f"seq-ntu60 needs a data root holding ntu60/xsub.h5: {_PREPARE_HINT}")
    path = ntu60_path(root)
    if not path.is_file():
        raise DataNotFoundError(f"NTU-60 not found: {path} does not exist; {_PREPARE_HINT}")
    # The handle lives only inside this call: h5py objects are neither picklable nor fork-safe.
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise BenchmarkFormatError(f"{path}: not a readable HDF5 file ({first}); {_PREPARE_HINT}") from None
    with handle:
        check_layout(path, handle)
        train_x, train_labels = _read_split(path, handle, "train")
        test_x, test_labels = _read_split(path, handle, "test")
    order = LABEL_ORDERS[label_order]
    position = np.empty(NUM_CLASSES, dtype=np.int64)
    position[list(order)] = np.arange(NUM_CLASSES)
    normalize = SkeletonNormalize(normalization)
    return Benchmark(
        name="seq-ntu60",
        n_tasks=6,
        classes_per_task=(10,) * 6,
        class_order=tuple(order),
        input_shape=tuple(train_x.shape[1:]),
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        train_x=train_x,
        train_y=torch.from_numpy(position[train_labels]),
        test_x=test_x,
        test_y=torch.from_numpy(position[test_labels]),
        defaults=SEQ_NTU60_DEFAULTS,
        train_transform=Compose(SkeletonAugment(), normalize),
        test_transform=normalize,
        strong_transform=Compose(SkeletonAugment(shear=STRONG_SHEAR), normalize),
        class_names=tuple(NTU60_ACTION_NAMES[a] for a in order),
    )
