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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import h5py
import numpy as np
import torch

from xder_data._ntu_format import (
    NUM_CLASSES,
    SPLITS,
    BodySelection,
    H5Writer,
    SampleName,
    SkeletonRecording,
    body_energy,
    check_labels,
    check_layout,
    layout_attrs,
    parse_sample_name,
    read_missing_list,
    read_skeleton,
    resample_frames,
    select_bodies,
    unique_names,
    valid_frames,
)
from xder_data._pickle import load_data_pickle
from xder_data.augment import Compose
from xder_data.benchmark import Benchmark, BenchmarkDefaults, Progress, no_progress, register_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, UnsafePickleError, prepare_call
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

XSUB_TRAIN_SUBJECTS: frozenset[int] = frozenset(
    (1, 2, 4, 5, 8, 9, 13, 14, 15, 16, 17, 18, 19, 25, 27, 28, 31, 34, 35, 38)
)
"""The cross-subject training performers (st-gcn ``ntu_gendata.py``, EfficientGCN
``ntu_reader.py``); every other performer is a test subject."""

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

_NTU60_MAX_SETUP = 17
_READ_BLOCK = 512
_PREPARE_HINT = f"run `{prepare_call('ntu60', 'ROOT', source='DIR')}`"


# ---------------------------------------------------------------------------------------------
# Conversion


SKIP_REASONS = ("missing_list", "no_body", "not_ntu60", "malformed")


@dataclass(frozen=True, kw_only=True)
class NTUConversionReport:
    """What a conversion wrote and what it left out.

    Attributes:
        path: the HDF5 file written.
        train, test: samples written to each split.
        skipped: samples left out, by reason: ``missing_list`` (named in the official
            missing-skeleton list), ``no_body`` (no frame holds a body), ``not_ntu60`` (setup
            above S017 or action above A060), ``malformed`` (only with ``on_error="skip"``).
        malformed: one line per malformed file (with ``on_error="skip"``).
    """

    path: Path
    train: int
    test: int
    skipped: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    malformed: tuple[str, ...] = ()

    @property
    def skipped_missing(self) -> int:
        """Samples skipped for a missing skeleton (listed as missing, or without any body)."""
        return self.skipped.get("missing_list", 0) + self.skipped.get("no_body", 0)


def ntu60_path(root: str | Path) -> Path:
    """Where the converted X-sub file lives under a data root: ``<root>/ntu60/xsub.h5``."""
    return Path(root) / "ntu60" / "xsub.h5"


def resample_valid(
    x: np.ndarray, num_frames: int, length: int | None = None
) -> tuple[np.ndarray, int] | None:
    """Drop the padding and the frames without a body, then resample the rest.

    Args:
        x: ``(3, T, 25, 2)``, zero-padded after the valid part.
        num_frames: frames of the result.
        length: frames of ``x`` to consider (the rest is padding); all of them when None.

    Returns:
        ``(data (3, num_frames, 25, 2) float32, valid frame count)``, or None without any
        non-zero frame.
    """
    frames = valid_frames(x[:, :length])
    if len(frames) == 0:
        return None
    return resample_frames(x[:, frames], num_frames), len(frames)


def _check_num_frames(num_frames: int) -> None:
    if not isinstance(num_frames, int) or num_frames < 1:
        raise ValueError(f"num_frames must be a positive integer, got {num_frames!r}")


def _split_of(sample: SampleName) -> str:
    return "train" if sample.subject in XSUB_TRAIN_SUBJECTS else "test"


def _in_ntu60(sample: SampleName) -> bool:
    return 1 <= sample.setup <= _NTU60_MAX_SETUP and 1 <= sample.action <= NUM_CLASSES


def prepare_ntu60(
    raw_dir: str | Path,
    data_root: str | Path,
    *,
    num_frames: int = 80,
    bodies: BodySelection = "energy",
    missing_list: str | Path | None = None,
    on_error: Literal["raise", "skip"] = "raise",
    compression: str | None = None,
    progress: Progress = no_progress,
) -> NTUConversionReport:
    """Convert raw NTU RGB+D ``.skeleton`` files to ``<data_root>/ntu60/xsub.h5``.

    Args:
        raw_dir: folder holding the ``.skeleton`` files (searched recursively).
        data_root: the data root; the file goes to :func:`ntu60_path`.
        num_frames: frames per sample after resampling (the paper: 80).
        bodies: ``"energy"`` (EfficientGCN) or ``"first"`` (the first two positions, ST-GCN).
        missing_list: the official ``NTU_RGBD_samples_with_missing_skeletons.txt`` (optional;
            samples without any body are skipped either way).
        on_error: ``"raise"`` on the first malformed file, or ``"skip"`` and count it.
        compression: an h5py compression filter for ``data`` (e.g. ``"lzf"``), or None.
        progress: wraps the iterable of samples (e.g. ``tqdm``) to show progress.

    Returns:
        The counts written and skipped (by reason).

    Raises:
        DataNotFoundError: ``raw_dir`` or ``missing_list`` does not exist, or holds no
            ``.skeleton`` file.
        BenchmarkFormatError: a malformed file (with ``on_error="raise"``), naming file and line.
    """
    _check_num_frames(num_frames)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if bodies not in ("energy", "first"):
        raise ValueError(f"unknown body selection {bodies!r}: use 'energy' or 'first'")
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise DataNotFoundError(
            f"NTU raw folder {raw_dir} does not exist: give the folder nturgb+d_skeletons/ of the raw "
            ".skeleton files"
        )
    files = sorted(raw_dir.rglob("*.skeleton"))
    if not files:
        raise DataNotFoundError(
            f"no .skeleton files under {raw_dir}: give the folder nturgb+d_skeletons/ of the raw "
            ".skeleton files"
        )
    missing = read_missing_list(missing_list) if missing_list is not None else frozenset()
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    malformed: list[str] = []

    samples: list[tuple[SampleName, Path]] = []
    for path, stem in ((p, p.name) for p in files):
        sample = parse_sample_name(stem)
        if sample is None:
            message = f"{path}: not an NTU sample name (expected SsssCcccPpppRrrrAaaa.skeleton)"
            if on_error == "raise":
                raise BenchmarkFormatError(message)
            skipped["malformed"] += 1
            malformed.append(message)
        elif not _in_ntu60(sample):
            skipped["not_ntu60"] += 1
        else:
            samples.append((sample, path))
    unique_names(path for _, path in samples)

    capacity = dict.fromkeys(SPLITS, 0)
    for sample, _ in samples:
        capacity[_split_of(sample)] += 1
    writer = H5Writer(ntu60_path(data_root), num_frames, capacity, compression)
    try:
        for sample, path in progress(samples):
            if sample.name in missing:
                skipped["missing_list"] += 1
                continue
            try:
                recording = read_skeleton(path)
            except BenchmarkFormatError as error:
                if on_error == "raise":
                    raise
                skipped["malformed"] += 1
                malformed.append(str(error))
                continue
            converted = _convert_recording(recording, num_frames, bodies)
            if converted is None:
                skipped["no_body"] += 1
                continue
            data, length = converted
            writer.append(_split_of(sample), data, sample.action - 1, length, sample.name)
        writer.finish(layout_attrs(num_frames, bodies, "raw"))
    except BaseException:
        writer.abort()
        raise
    return NTUConversionReport(
        path=writer.path,
        train=writer.count["train"],
        test=writer.count["test"],
        skipped=skipped,
        malformed=tuple(malformed),
    )


def _convert_recording(
    recording: SkeletonRecording, num_frames: int, bodies: BodySelection
) -> tuple[np.ndarray, int] | None:
    """Keep two bodies, go to CTVM ``(3, F, 25, 2)``, drop empty frames, resample."""
    if recording.joints.shape[1] == 0:
        return None
    kept = select_bodies(recording.joints, bodies)  # (F, 2, 25, 3)
    return resample_valid(kept.transpose(3, 0, 2, 1), num_frames)


# ---------------------------------------------------------------------------------------------
# Importers of the preprocessed distributions


def import_ntu60_stgcn(
    source: str | Path,
    data_root: str | Path,
    *,
    num_frames: int = 80,
    missing_list: str | Path | None = None,
    compression: str | None = None,
    progress: Progress = no_progress,
) -> NTUConversionReport:
    """Import ST-GCN's X-sub arrays (also 2s-AGCN / MS-G3D's ``*_data_joint.npy``).

    ``source`` is the ``xsub`` folder or its parent, holding ``{train,val}_data.npy`` float32
    (N, 3, T, 25, 2) and ``{train,val}_label.pkl`` = ``(names, labels)``; ``val`` becomes
    ``test``. Bodies stay as ST-GCN wrote them (the first two in the file:
    ``body_selection='first'``). The valid length is the last frame with a non-zero joint (or
    the pkl's third entry, if any); frames inside it without any joint are dropped; the rest is
    resampled to ``num_frames`` as :func:`prepare_ntu60` does.

    Raises:
        DataNotFoundError: a file is missing.
        BenchmarkFormatError: wrong shapes, a label pkl that is not the 2-tuple, a label that
            disagrees with its sample name, or a sample on the wrong side of the X-sub split.
    """
    folder = _find_folder(Path(source), ("xsub",), ("train", "val"))
    parts = {"train": _part_files(folder, "train"), "test": _part_files(folder, "val")}
    return _import(parts, data_root, num_frames, missing_list, compression, "first", "st-gcn", progress)


def import_ntu60_efficientgcn(
    source: str | Path,
    data_root: str | Path,
    *,
    num_frames: int = 80,
    missing_list: str | Path | None = None,
    compression: str | None = None,
    progress: Progress = no_progress,
) -> NTUConversionReport:
    """Import EfficientGCN's X-sub arrays.

    ``source`` is the ``ntu-xsub`` folder, its parent, or the EfficientGCN data root (holding
    ``original/ntu-xsub``), with ``{train,eval}_data.npy`` float32 (N, 3, T, 25, 2) and
    ``{train,eval}_label.pkl`` = ``(paths, labels, lengths)``; ``eval`` becomes ``test``. Bodies
    were chosen by energy. The valid length is the pkl's (clipped to T); frames inside it without
    any joint are dropped; the rest is resampled as :func:`prepare_ntu60` does. Import the
    ``original`` arrays: ``transformed`` ones are pre-normalised, which this file does not record.

    Raises:
        DataNotFoundError, BenchmarkFormatError: as :func:`import_ntu60_stgcn`.
    """
    source = Path(source)
    folder = _find_folder(source, ("ntu-xsub", "original/ntu-xsub"), ("train", "eval"))
    parts = {"train": _part_files(folder, "train"), "test": _part_files(folder, "eval")}
    return _import(
        parts, data_root, num_frames, missing_list, compression, "energy", "efficientgcn", progress
    )


def _find_folder(source: Path, subfolders: Sequence[str], parts: Sequence[str]) -> Path:
    for folder in (source, *(source / sub for sub in subfolders)):
        if all((folder / f"{part}_label.pkl").is_file() for part in parts):
            return folder
    names = ", ".join(f"{part}_data.npy + {part}_label.pkl" for part in parts)
    raise DataNotFoundError(f"{source}: expected {names} there or in {' or '.join(subfolders)}/")


def _part_files(folder: Path, part: str) -> tuple[Path, Path]:
    data = folder / f"{part}_data.npy"
    if not data.is_file() and (folder / f"{part}_data_joint.npy").is_file():
        data = folder / f"{part}_data_joint.npy"
    if not data.is_file():
        raise DataNotFoundError(f"{data} does not exist")
    return data, folder / f"{part}_label.pkl"


def _read_label_pickle(path: Path) -> tuple[list[str], list[int], list[int] | None]:
    """``(names, labels)`` or ``(paths, labels, lengths)``."""
    try:
        content = load_data_pickle(path, encoding="utf-8")
    except UnsafePickleError:
        raise
    except Exception as error:  # any unpickling failure is a format problem of this file
        raise BenchmarkFormatError(f"{path}: not a readable label pickle ({type(error).__name__})") from None
    if not isinstance(content, tuple | list) or len(content) not in (2, 3):
        raise BenchmarkFormatError(
            f"{path}: expected a 2-tuple (names, labels) or a 3-tuple (paths, labels, lengths)"
        )
    names = [str(n.decode() if isinstance(n, bytes) else n) for n in content[0]]
    try:
        labels = [int(v) for v in content[1]]
        lengths = None if len(content) == 2 else [int(v) for v in content[2]]
    except (TypeError, ValueError):
        raise BenchmarkFormatError(f"{path}: labels and lengths must be integers") from None
    if len(labels) != len(names) or (lengths is not None and len(lengths) != len(names)):
        raise BenchmarkFormatError(f"{path}: names, labels and lengths differ in length")
    return names, labels, lengths


def _load_array(path: Path, count: int, label_path: Path) -> np.ndarray:
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        raise BenchmarkFormatError(f"{path}: not a .npy array ({error})".split("\n")[0]) from None
    shape = data.shape
    if len(shape) != 5 or shape[1] != 3 or shape[3] != 25 or shape[4] != 2:
        raise BenchmarkFormatError(f"{path}: shape {shape}, expected (N, 3, T, 25, 2)")
    if shape[0] != count:
        raise BenchmarkFormatError(f"{path}: {shape[0]} samples but {label_path.name} lists {count}")
    return data


def _import(
    parts: dict[str, tuple[Path, Path]],
    data_root: str | Path,
    num_frames: int,
    missing_list: str | Path | None,
    compression: str | None,
    body_selection: str,
    source: str,
    progress: Progress = no_progress,
) -> NTUConversionReport:
    _check_num_frames(num_frames)
    missing = read_missing_list(missing_list) if missing_list is not None else frozenset()
    loaded = {}
    for split, (data_path, label_path) in parts.items():
        names, labels, lengths = _read_label_pickle(label_path)
        loaded[split] = (_load_array(data_path, len(names), label_path), names, labels, lengths, label_path)
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    capacity = {split: len(entry[1]) for split, entry in loaded.items()}
    writer = H5Writer(ntu60_path(data_root), num_frames, capacity, compression)
    try:
        for split, (data, names, labels, lengths, label_path) in loaded.items():
            for i, (name, label) in progress(list(enumerate(zip(names, labels, strict=True)))):
                sample = parse_sample_name(name)
                where = f"{label_path}: entry {i}"
                if sample is None:
                    raise BenchmarkFormatError(f"{where}: {name[:40]!r} is not an NTU sample name")
                if not 0 <= label < NUM_CLASSES or label != sample.action - 1:
                    raise BenchmarkFormatError(
                        f"{where}: label {label} does not match {sample.name} (expected {sample.action - 1})"
                    )
                if _split_of(sample) != split:
                    raise BenchmarkFormatError(
                        f"{where}: subject {sample.subject} of {sample.name} is not an X-sub {split} "
                        "subject (is this the X-view split?)"
                    )
                if sample.name in missing:
                    skipped["missing_list"] += 1
                    continue
                x = np.asarray(data[i], dtype=np.float64)
                if lengths is None:
                    frames = valid_frames(x)
                    length = int(frames[-1]) + 1 if len(frames) else 0
                else:
                    length = min(max(lengths[i], 0), x.shape[1])
                converted = resample_valid(x, num_frames, length)
                if converted is None:
                    skipped["no_body"] += 1
                    continue
                writer.append(split, converted[0], label, converted[1], sample.name)
        writer.finish(layout_attrs(num_frames, body_selection, source))
    except BaseException:
        writer.abort()
        raise
    return NTUConversionReport(
        path=writer.path, train=writer.count["train"], test=writer.count["test"], skipped=skipped
    )


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
