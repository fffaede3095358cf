"""NTU RGB+D 60 converted into the project's HDF5 file (:mod:`xder_data._ntu_format`): from the raw
``.skeleton`` files (:func:`prepare_ntu60`) or from ST-GCN's and EfficientGCN's preprocessed arrays
(:func:`import_ntu60_stgcn`, :func:`import_ntu60_efficientgcn`), split by subject (X-sub). The
conversion choices are listed in :mod:`xder_data.ntu60`, which re-exports the public names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from xder_data._ntu_format import (
    NUM_CLASSES,
    SPLITS,
    BodySelection,
    H5Writer,
    SampleName,
    SkeletonRecording,
    find_part_folder,
    layout_attrs,
    load_part_array,
    ntu60_path,
    parse_sample_name,
    part_files,
    read_label_pickle,
    read_missing_list,
    read_skeleton,
    resample_frames,
    select_bodies,
    unique_names,
    valid_frames,
)
from xder_data.benchmark import Progress, no_progress
from xder_data.errors import BenchmarkFormatError, DataNotFoundError

__all__ = [
    "SKIP_REASONS",
    "XSUB_TRAIN_SUBJECTS",
    "NTUConversionReport",
    "import_ntu60_efficientgcn",
    "import_ntu60_stgcn",
    "prepare_ntu60",
    "resample_valid",
]

XSUB_TRAIN_SUBJECTS: frozenset[int] = frozenset(
    (1, 2, 4, 5, 8, 9, 13, 14, 15, 16, 17, 18, 19, 25, 27, 28, 31, 34, 35, 38)
)
"""The cross-subject training performers (st-gcn ``ntu_gendata.py``, EfficientGCN
``ntu_reader.py``); every other performer is a test subject."""
_NTU60_MAX_SETUP = 17


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
    folder = find_part_folder(Path(source), ("xsub",), ("train", "val"))
    parts = {"train": part_files(folder, "train"), "test": part_files(folder, "val")}
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
    folder = find_part_folder(source, ("ntu-xsub", "original/ntu-xsub"), ("train", "eval"))
    parts = {"train": part_files(folder, "train"), "test": part_files(folder, "eval")}
    return _import(
        parts, data_root, num_frames, missing_list, compression, "energy", "efficientgcn", progress
    )


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
        names, labels, lengths = read_label_pickle(label_path)
        loaded[split] = (
            load_part_array(data_path, len(names), label_path),
            names,
            labels,
            lengths,
            label_path,
        )
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
