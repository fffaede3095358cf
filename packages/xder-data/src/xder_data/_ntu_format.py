"""NTU RGB+D on-disk machinery: the raw ``.skeleton`` parser, body selection, time resampling, the
project's HDF5 layout (where it lives, writer and validator) and the arrays and label pickles of
the two preprocessed distributions (ST-GCN's, EfficientGCN's). Public names are re-exported by
:mod:`xder_data.ntu60`; see docs/data-formats.md, "NTU RGB+D 60", for the formats.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import h5py
import numpy as np

from xder_data._pickle import load_data_pickle
from xder_data.errors import BenchmarkFormatError, DataNotFoundError, UnsafePickleError

NUM_JOINTS = 25
MAX_BODIES = 2
NUM_CLASSES = 60
NAME_LENGTH = 20
_JOINT_VALUES = 12  # x y z depthX depthY colorX colorY orientW orientX orientY orientZ trackingState
_BODY_VALUES = (
    10  # bodyID clippedEdges handLeft{Confidence,State} handRight{...} isRestricted leanX leanY tracking
)
_NAME = re.compile(r"S(\d{3})C(\d{3})P(\d{3})R(\d{3})A(\d{3})")

BodySelection = Literal["energy", "first"]


# ---------------------------------------------------------------------------------------------
# Sample names


@dataclass(frozen=True)
class SampleName:
    """The fields of an NTU sample name ``SsssCcccPpppRrrrAaaa`` (all 1-based, as written)."""

    name: str
    setup: int
    camera: int
    subject: int
    replication: int
    action: int


def parse_sample_name(name: str) -> SampleName | None:
    """Parse ``S001C002P003R002A013`` (an optional ``.skeleton`` suffix or folder is dropped).

    Returns:
        The fields, or None when ``name`` is not an NTU sample name.
    """
    stem = Path(name).name
    stem = stem.removesuffix(".skeleton")
    match = _NAME.fullmatch(stem)
    if match is None:
        return None
    setup, camera, subject, replication, action = (int(g) for g in match.groups())
    return SampleName(stem, setup, camera, subject, replication, action)


def read_missing_list(path: str | Path) -> frozenset[str]:
    """Read the official ``NTU_RGBD_samples_with_missing_skeletons.txt``: 3 header lines, then one
    sample name per line (blank lines ignored; a ``.skeleton`` suffix is accepted).

    Raises:
        DataNotFoundError: the file does not exist.
        BenchmarkFormatError: a line after the header is not a sample name (names file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"missing-skeleton list {path} does not exist")
    names = set()
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines[3:], start=4):
        text = line.strip()
        if not text:
            continue
        parsed = parse_sample_name(text)
        if parsed is None:
            raise BenchmarkFormatError(
                f"{path}: line {number}: {text[:40]!r} is not a sample name like S001C001P001R001A001"
            )
        names.add(parsed.name)
    return frozenset(names)


# ---------------------------------------------------------------------------------------------
# The raw .skeleton parser


@dataclass(frozen=True, eq=False)
class SkeletonRecording:
    """One parsed ``.skeleton`` file.

    Attributes:
        path: the file read.
        body_counts: ``(F,)`` int64, the bodyCount of every frame.
        joints: ``(F, B, 25, 3)`` float64 camera-space x, y, z in metres, with ``B`` the largest
            bodyCount in the file. Bodies are identified by their position in the frame (the
            k-th body listed in a frame is body k, as the NTU, ST-GCN and EfficientGCN readers do);
            positions a frame does not fill are zeros.
    """

    path: Path
    body_counts: np.ndarray
    joints: np.ndarray

    @property
    def num_frames(self) -> int:
        return len(self.body_counts)


class _Tokens:
    """A cursor over a file's whitespace-separated tokens, converted to float64 once."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data
        self.raw = data.split()  # ASCII whitespace: LF and CRLF files give the same tokens
        try:
            self.values = np.array(self.raw, dtype=np.float64)
        except ValueError:
            bad = next(i for i, tok in enumerate(self.raw) if not _is_number(tok))
            self.fail(bad, f"{_show(self.raw[bad])} is not a number")
        self.pos = 0

    def line_of(self, index: int) -> int:
        """1-based line of token ``index`` (computed only when reporting an error)."""
        seen = 0
        lines = self.data.splitlines()
        for number, line in enumerate(lines, start=1):
            seen += len(line.split())
            if seen > index:
                return number
        return len(lines) + 1

    def fail(self, index: int, what: str) -> None:
        raise BenchmarkFormatError(f"{self.path}: line {self.line_of(index)}: {what}")

    def truncated(self, what: str) -> None:
        last = max(len(self.raw) - 1, 0)
        raise BenchmarkFormatError(f"{self.path}: line {self.line_of(last)}: file ends here, expected {what}")

    def count(self, what: str) -> int:
        """The next token as a non-negative integer count."""
        if self.pos >= len(self.values):
            self.truncated(what)
        if not self.raw[self.pos].isdigit():
            self.fail(self.pos, f"expected {what} (a non-negative integer), got {_show(self.raw[self.pos])}")
        self.pos += 1
        return int(self.values[self.pos - 1])

    def block(self, size: int, what: str) -> np.ndarray:
        """The next ``size`` values."""
        end = self.pos + size
        if end > len(self.values):
            self.truncated(what)
        out = self.values[self.pos : end]
        self.pos = end
        return out


def _show(token: bytes) -> str:
    return repr(token[:30].decode("ascii", errors="replace"))


def _is_number(token: bytes) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def read_skeleton(path: str | Path) -> SkeletonRecording:
    """Parse a raw NTU ``.skeleton`` file (LF or CRLF line endings; whitespace tokens).

    Layout: ``frameCount``, then per frame ``bodyCount`` and per body 10 body values (the first an
    integer bodyID), ``jointCount`` (always 25) and 25 lines of 12 joint values, of which the first
    three are x, y, z. Frames with ``bodyCount`` 0 are kept (their joints are zeros).

    Raises:
        BenchmarkFormatError: a token that is not a number, a count that is not a non-negative
            integer, a jointCount other than 25, a non-finite coordinate, a truncated file or data
            after the last frame; the message names the file and the line.
    """
    path = Path(path)
    tokens = _Tokens(path, path.read_bytes())
    frame_count = tokens.count("the frame count")
    if frame_count > len(tokens.values) - tokens.pos:  # every frame holds at least its body count
        tokens.truncated(f"{frame_count} frames, found {len(tokens.values) - 1} values after the count")
    body_counts = np.zeros(frame_count, dtype=np.int64)
    per_frame: list[list[np.ndarray]] = []
    for frame in range(frame_count):
        bodies = tokens.count(f"the body count of frame {frame + 1} of {frame_count}")
        body_counts[frame] = bodies
        joints = []
        for body in range(bodies):
            where = f"frame {frame + 1} of {frame_count}, body {body + 1} of {bodies}"
            start = tokens.pos
            tokens.block(_BODY_VALUES, f"the body values of {where}")
            if not tokens.raw[start].isdigit():
                tokens.fail(start, f"expected an integer bodyID ({where}), got {_show(tokens.raw[start])}")
            joint_count_at = tokens.pos
            joint_count = tokens.count(f"the joint count of {where}")
            if joint_count != NUM_JOINTS:
                tokens.fail(joint_count_at, f"expected jointCount 25 ({where}), got {joint_count}")
            start = tokens.pos
            values = tokens.block(NUM_JOINTS * _JOINT_VALUES, f"25 joint lines ({where})")
            xyz = values.reshape(NUM_JOINTS, _JOINT_VALUES)[:, :3]
            if not np.isfinite(xyz).all():
                bad = int(np.flatnonzero(~np.isfinite(values.reshape(NUM_JOINTS, _JOINT_VALUES)[:, :3]))[0])
                tokens.fail(start + (bad // 3) * _JOINT_VALUES + bad % 3, f"non-finite coordinate ({where})")
            joints.append(xyz)
        per_frame.append(joints)
    if tokens.pos != len(tokens.values):
        tokens.fail(tokens.pos, f"unexpected data after the last of {frame_count} frames")
    max_bodies = int(body_counts.max(initial=0))
    out = np.zeros((frame_count, max_bodies, NUM_JOINTS, 3), dtype=np.float64)
    for frame, joints in enumerate(per_frame):
        for body, xyz in enumerate(joints):
            out[frame, body] = xyz
    return SkeletonRecording(path=path, body_counts=body_counts, joints=out)


# ---------------------------------------------------------------------------------------------
# Bodies and time


def body_energy(joints: np.ndarray) -> np.ndarray:
    """EfficientGCN's body "energy": per body, over the frames where it has a non-zero joint,
    ``std(x) + std(y) + std(z)`` (population std over those frames and all 25 joints).

    Args:
        joints: ``(F, B, V, 3)``.

    Returns:
        ``(B,)`` float64; 0 for a body with no non-zero frame.
    """
    energy = np.zeros(joints.shape[1], dtype=np.float64)
    for body in range(joints.shape[1]):
        track = joints[:, body]  # (F, V, 3)
        present = (track != 0).any(axis=(1, 2))
        if present.any():
            energy[body] = float(track[present].reshape(-1, 3).std(axis=0).sum())
    return energy


def select_bodies(
    joints: np.ndarray, method: BodySelection = "energy", count: int = MAX_BODIES
) -> np.ndarray:
    """Keep ``count`` bodies: by descending :func:`body_energy` (ties: lower position first) or the
    first ``count`` positions (``"first"``, ST-GCN). Missing bodies are zeros.

    Args:
        joints: ``(F, B, V, 3)``.

    Returns:
        ``(F, count, V, 3)``; body 0 is the most energetic one with ``"energy"``.
    """
    if method == "energy":
        order = np.argsort(-body_energy(joints), kind="stable")[:count]
    elif method == "first":
        order = np.arange(min(count, joints.shape[1]))
    else:
        raise ValueError(f"unknown body selection {method!r}: use 'energy' or 'first'")
    out = np.zeros((joints.shape[0], count, *joints.shape[2:]), dtype=joints.dtype)
    out[:, : len(order)] = joints[:, order]
    return out


def resample_frames(x: np.ndarray, num_frames: int) -> np.ndarray:
    """Resample the valid frames ``x: (C, L, V, M)`` (no padding) to ``(C, num_frames, V, M)``.

    Output frame k samples position ``p_k = k (L - 1) / (num_frames - 1)`` (both ends kept, i.e.
    ``align_corners=True``), interpolating linearly between frames ``floor(p_k)`` and the next one.
    A body absent from one of the two frames (all its joints zero) is not blended with zeros:
    that output takes the nearer frame (the later one at a tie), so it is either the real body or
    absent. ``L = 1`` repeats the frame.

    Returns:
        float32 ``(C, num_frames, V, M)``.
    """
    length = x.shape[1]
    if length < 1:
        raise ValueError("resample_frames needs at least one valid frame")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    x = np.asarray(x, dtype=np.float64)
    if num_frames == 1:
        pos = np.zeros(1)
    else:
        pos = np.arange(num_frames, dtype=np.float64) * ((length - 1) / (num_frames - 1))
    low = np.minimum(np.floor(pos).astype(np.int64), length - 1)
    high = np.minimum(low + 1, length - 1)
    weight = (pos - low)[None, :, None, None]
    lerp = x[:, low] * (1 - weight) + x[:, high] * weight
    present = (x != 0).any(axis=(0, 2))  # (L, M)
    both = (present[low] & present[high])[None, :, None, :]
    nearest = np.where(weight < 0.5, x[:, low], x[:, high])
    return np.where(both, lerp, nearest).astype(np.float32)


def valid_frames(x: np.ndarray) -> np.ndarray:
    """Indices of the frames of ``x: (C, T, V, M)`` with at least one non-zero joint."""
    return np.flatnonzero((x != 0).any(axis=(0, 2, 3)))


# ---------------------------------------------------------------------------------------------
# The HDF5 layout


SPLITS = ("train", "test")


def ntu60_path(root: str | Path) -> Path:
    """Where the converted X-sub file lives under a data root: ``<root>/ntu60/xsub.h5``."""
    return Path(root) / "ntu60" / "xsub.h5"


class H5Writer:
    """Writes ``<path>`` atomically (a temporary file renamed on success) in the project layout:
    groups ``train``/``test`` with ``data`` float32 (N, 3, T, 25, 2) chunked per sample, ``label``
    int64, ``length`` int32 and ``name`` S20."""

    def __init__(
        self, path: Path, num_frames: int, capacity: dict[str, int], compression: str | None
    ) -> None:
        self.path = path
        self.tmp = path.with_name(path.name + ".partial")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = h5py.File(self.tmp, "w")
        self.count = dict.fromkeys(SPLITS, 0)
        shape = (3, num_frames, NUM_JOINTS, MAX_BODIES)
        for split in SPLITS:
            group = self.file.create_group(split)
            n = capacity.get(split, 0)
            group.create_dataset(
                "data",
                shape=(n, *shape),
                maxshape=(None, *shape),
                dtype=np.float32,
                chunks=(1, *shape),
                compression=compression,
            )
            group.create_dataset("label", shape=(n,), maxshape=(None,), dtype=np.int64)
            group.create_dataset("length", shape=(n,), maxshape=(None,), dtype=np.int32)
            group.create_dataset("name", shape=(n,), maxshape=(None,), dtype=f"S{NAME_LENGTH}")

    def append(self, split: str, data: np.ndarray, label: int, length: int, name: str) -> None:
        group, row = self.file[split], self.count[split]
        if row >= group["label"].shape[0]:
            for key in ("data", "label", "length", "name"):
                group[key].resize(max(2 * row, 16), axis=0)
        group["data"][row] = data
        group["label"][row] = label
        group["length"][row] = length
        group["name"][row] = name.encode("ascii")
        self.count[split] = row + 1

    def finish(self, attrs: dict[str, object]) -> None:
        for split in SPLITS:
            for key in ("data", "label", "length", "name"):
                self.file[split][key].resize(self.count[split], axis=0)
        self.file.attrs.update(attrs)
        self.file.flush()
        self.file.close()
        with open(self.tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self.file.id.valid:
            self.file.close()
        self.tmp.unlink(missing_ok=True)


def layout_attrs(num_frames: int, body_selection: str, source: str) -> dict[str, object]:
    """The file attributes of the project's layout (docs/data-formats.md, "The converted file")."""
    return {
        "layout": "CTVM",
        "num_class": NUM_CLASSES,
        "benchmark": "xsub",
        "num_frames": num_frames,
        "max_bodies": MAX_BODIES,
        "body_selection": body_selection,
        "missing_skeletons_removed": True,
        "source": source,
    }


def check_layout(path: Path, handle: h5py.File) -> dict[str, int]:
    """Validate an open project HDF5 file; returns the row count of each split.

    Raises:
        BenchmarkFormatError: naming the file and the first thing that is wrong.
    """
    layout = handle.attrs.get("layout", "CTVM")
    if isinstance(layout, bytes):
        layout = layout.decode("ascii", errors="replace")
    if layout != "CTVM":
        raise BenchmarkFormatError(
            f"{path}: layout attribute is {layout!r}, expected 'CTVM' (N, 3, T, 25, 2)"
        )
    rows: dict[str, int] = {}
    frames: int | None = None
    for split in SPLITS:
        if split not in handle or not isinstance(handle[split], h5py.Group):
            raise BenchmarkFormatError(f"{path}: group '{split}' missing")
        group = handle[split]
        for key in ("data", "label", "length", "name"):
            if key not in group or not isinstance(group[key], h5py.Dataset):
                raise BenchmarkFormatError(f"{path}: dataset '{split}/{key}' missing")
        data, label, length, name = (group[k] for k in ("data", "label", "length", "name"))
        shape = data.shape
        if len(shape) != 5 or shape[1] != 3 or shape[3] != NUM_JOINTS or shape[4] != MAX_BODIES:
            raise BenchmarkFormatError(
                f"{path}: '{split}/data' has shape {shape}, expected (N, 3, T, {NUM_JOINTS}, {MAX_BODIES})"
            )
        if frames is not None and shape[2] != frames:
            raise BenchmarkFormatError(f"{path}: train and test hold {frames} and {shape[2]} frames")
        frames = shape[2]
        if data.dtype not in (np.float32, np.float16):
            raise BenchmarkFormatError(
                f"{path}: '{split}/data' has dtype {data.dtype}, expected float32 (or float16)"
            )
        for key, dataset, kind in (("label", label, "i"), ("length", length, "i"), ("name", name, "S")):
            if dataset.ndim != 1 or dataset.shape[0] != shape[0]:
                raise BenchmarkFormatError(
                    f"{path}: '{split}/{key}' has shape {dataset.shape}, expected ({shape[0]},)"
                )
            if dataset.dtype.kind != kind:
                expected = {"label": "int64", "length": "int32", "name": "bytes S20"}[key]
                raise BenchmarkFormatError(
                    f"{path}: '{split}/{key}' has dtype {dataset.dtype}, expected {expected}"
                )
        rows[split] = shape[0]
    return rows


def check_labels(path: Path, split: str, labels: np.ndarray) -> None:
    """Raise if a label lies outside 0..59."""
    bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
    if len(bad):
        raise BenchmarkFormatError(
            f"{path}: '{split}/label' row {int(bad[0])} is {int(labels[bad[0]])}, "
            f"expected 0..{NUM_CLASSES - 1}"
        )


def unique_names(paths: Iterable[Path]) -> dict[str, Path]:
    """Map sample stems to paths, raising on a name found twice."""
    found: dict[str, Path] = {}
    for path in paths:
        stem = path.name.removesuffix(".skeleton")
        if stem in found:
            raise BenchmarkFormatError(f"{path}: sample {stem} also found at {found[stem]}")
        found[stem] = path
    return found


# ---------------------------------------------------------------------------------------------
# The preprocessed distributions (ST-GCN's and EfficientGCN's arrays and label pickles)


def find_part_folder(source: Path, subfolders: Sequence[str], parts: Sequence[str]) -> Path:
    for folder in (source, *(source / sub for sub in subfolders)):
        if all((folder / f"{part}_label.pkl").is_file() for part in parts):
            return folder
    names = ", ".join(f"{part}_data.npy + {part}_label.pkl" for part in parts)
    raise DataNotFoundError(f"{source}: expected {names} there or in {' or '.join(subfolders)}/")


def part_files(folder: Path, part: str) -> tuple[Path, Path]:
    data = folder / f"{part}_data.npy"
    if not data.is_file() and (folder / f"{part}_data_joint.npy").is_file():
        data = folder / f"{part}_data_joint.npy"
    if not data.is_file():
        raise DataNotFoundError(f"{data} does not exist")
    return data, folder / f"{part}_label.pkl"


def read_label_pickle(path: Path) -> tuple[list[str], list[int], list[int] | None]:
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


def load_part_array(path: Path, count: int, label_path: Path) -> np.ndarray:
    try:
        data: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        raise BenchmarkFormatError(f"{path}: not a .npy array ({error})".split("\n")[0]) from None
    shape = data.shape
    if len(shape) != 5 or shape[1] != 3 or shape[3] != 25 or shape[4] != 2:
        raise BenchmarkFormatError(f"{path}: shape {shape}, expected (N, 3, T, 25, 2)")
    if shape[0] != count:
        raise BenchmarkFormatError(f"{path}: {shape[0]} samples but {label_path.name} lists {count}")
    return data
