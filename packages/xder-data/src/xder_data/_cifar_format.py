"""Reading and writing the pickled "python version" files of CIFAR-10 and CIFAR-100 (docs/data-formats.md).

Both distributions are pickled dicts written by Python 2: ``data`` uint8 (N, 3072) with the R, G and B
planes of a 32x32 image per row, labels as lists of int, names as lists of str. The files are read
with ``encoding='latin1'`` (as torchvision does) and their keys are normalised, so files written by
Python 2 and fixtures written by Python 3 with ``bytes`` or ``str`` keys all load. Every problem is a
one-line :class:`BenchmarkFormatError` or :class:`DataNotFoundError` that names the file and the fix.

The importers from image-folder copies (``prepare_cifar10``, ``prepare_cifar100``) share
:func:`decode_copy` (every image decoded, each split shuffled with a fixed seed) and
:func:`write_pickle`, which writes as Python 2 did, so that the files load like the official ones.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from xder_data._image_copy import Entry, ImageCopy
from xder_data._pickle import load_data_pickle
from xder_data.errors import (
    BenchmarkFormatError,
    DataNotFoundError,
    UnsafePickleError,
    download_call,
    one_line,
    prepare_call,
)

__all__ = ["CifarFiles", "CifarImport", "Split", "decode_copy", "split_dict", "write_pickle"]

ROW_SIZE = 3 * 32 * 32


def _text(value: Any) -> Any:
    return value.decode("latin1") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class CifarFiles:
    """The files of one CIFAR distribution under a data root.

    Attributes:
        dataset: how messages name it, e.g. ``"CIFAR-100"``.
        benchmark: the benchmark that reads it, e.g. ``"seq-cifar100"``.
        folder: the folder the official archive unpacks to, e.g. ``"cifar-100-python"``.
        archive: the official archive's name.
        download: the :func:`~xder_data.download_data` name.
        prepare: also suggest importing a copy with :func:`~xder_data.prepare_data` of this kind
            in fixes (or "").
    """

    dataset: str
    benchmark: str
    folder: str
    archive: str
    download: str
    prepare: str = ""

    def fix(self, root: Path) -> str:
        """What the user should do to get the files under ``root`` (a file given as the root is
        most often the image archive itself: it is imported, not downloaded into)."""
        if root.is_file():
            source = f"`{prepare_call(self.prepare, 'data', source=root)}`"
            return (
                f"{root} is a file, not a folder: run.data_root names the folder that holds {self.folder}/"
                + (f"; import an image archive with {source}" if self.prepare else "")
            )
        text = f"run `{download_call(self.download, root)}`"
        if self.prepare:
            text += f", import an image-folder copy with `{prepare_call(self.prepare, root, source='DIR')}`,"
        return f"{text} or unpack {self.archive} under {root}"

    def path(self, root: Path | str | None) -> Path:
        """``<root>/<folder>``, which must exist."""
        if root is None:
            raise DataNotFoundError(
                f"{self.benchmark} needs a data root: pass run.data_root ROOT (the folder that holds "
                f"{self.folder}/), after `{download_call(self.download, 'ROOT')}`"
            )
        root = Path(root)
        folder = root / self.folder
        if not folder.is_dir():
            raise DataNotFoundError(f"{folder}: {self.dataset} folder not found: {self.fix(root)}")
        return folder

    def file(self, root: Path, name: str) -> Path:
        """``<root>/<folder>/<name>``, which must exist."""
        path = self.path(root) / name
        if not path.is_file():
            raise DataNotFoundError(f"{path}: {self.dataset} file missing: {self.fix(root)}")
        return path

    def bad(self, path: Path, problem: str) -> BenchmarkFormatError:
        """``<path>: <problem>; <fix>`` for a file ``<root>/<folder>/<name>``."""
        return BenchmarkFormatError(
            f"{path}: {problem}; not the official {self.dataset} python version: "
            f"{self.fix(path.parent.parent)}"
        )

    def read_pickle(self, path: Path) -> dict[str, Any]:
        """Unpickle ``path`` (Python 2 or 3) into a dict with ``str`` keys, building only data
        (:func:`~xder_data._pickle.load_data_pickle`: any other global is refused, nothing runs)."""
        try:
            obj = load_data_pickle(path)
        except UnsafePickleError:
            raise
        except OSError as exc:
            raise DataNotFoundError(
                f"{path}: cannot read ({one_line(exc)}): {self.fix(path.parent.parent)}"
            ) from exc
        except Exception as exc:  # a corrupt pickle can raise nearly anything; report it in one line
            raise self.bad(
                path, f"not a readable pickle ({one_line(exc)}), the file is truncated or corrupt"
            ) from exc
        if not isinstance(obj, Mapping):
            raise self.bad(path, f"holds a {type(obj).__name__}, expected a dict")
        return {_text(key): value for key, value in obj.items()}

    def require_keys(self, path: Path, obj: Mapping[str, Any], keys: tuple[str, ...]) -> None:
        missing = [key for key in keys if key not in obj]
        if missing:
            found = ", ".join(sorted(map(str, obj))) or "none"
            raise self.bad(path, f"key {missing[0]!r} missing (found: {found})")

    def images(self, path: Path, obj: Mapping[str, Any]) -> np.ndarray:
        """``obj['data']`` as (N, 3, 32, 32) uint8 (each row is the R, then G, then B plane)."""
        data = obj["data"]
        if not isinstance(data, np.ndarray):
            raise self.bad(path, f"'data' is a {type(data).__name__}, expected a uint8 ndarray")
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW_SIZE:
            raise self.bad(
                path,
                f"'data' is {data.dtype} with shape {data.shape}, expected uint8 (N, {ROW_SIZE}) "
                "(the R, G and B planes of a 32x32 image per row)",
            )
        return np.ascontiguousarray(data).reshape(data.shape[0], 3, 32, 32)

    def labels(self, path: Path, obj: Mapping[str, Any], key: str, n_rows: int, n_classes: int) -> np.ndarray:
        """``obj[key]``: one int label in ``0..n_classes-1`` per data row, as (N,) int64."""
        value = obj[key]
        if not isinstance(value, list | tuple | np.ndarray):
            raise self.bad(path, f"{key!r} is a {type(value).__name__}, expected a list of int")
        try:
            labels = np.asarray(value)
        except ValueError as exc:
            raise self.bad(path, f"{key!r} is not a flat list of int ({one_line(exc)})") from exc
        if labels.ndim != 1 or len(labels) != n_rows:
            raise self.bad(
                path, f"{key!r} has shape {labels.shape}, expected one label per data row ({n_rows},)"
            )
        if n_rows and labels.dtype.kind not in "iu":
            raise self.bad(path, f"{key!r} holds {labels.dtype} values, expected int")
        labels = labels.astype(np.int64)
        if n_rows and (labels.min() < 0 or labels.max() >= n_classes):
            raise self.bad(path, f"{key!r} spans {labels.min()}..{labels.max()}, expected 0..{n_classes - 1}")
        return labels

    def filenames(self, path: Path, obj: Mapping[str, Any], n_rows: int) -> None:
        """Check that ``obj['filenames']`` names every data row."""
        filenames = obj["filenames"]
        if not isinstance(filenames, list | tuple | np.ndarray) or len(filenames) != n_rows:
            raise self.bad(path, f"'filenames' is not a list of {n_rows} names (one per data row)")

    def names(self, path: Path, obj: Mapping[str, Any], key: str, count: int) -> tuple[str, ...]:
        """``obj[key]``: ``count`` class names."""
        value = obj[key]
        if not isinstance(value, list | tuple) or len(value) != count:
            size = len(value) if isinstance(value, list | tuple) else type(value).__name__
            raise self.bad(path, f"{key!r} holds {size} entries, expected a list of {count} names")
        names = tuple(_text(name) for name in value)
        if not all(isinstance(name, str) for name in names):
            raise self.bad(path, f"{key!r} must hold strings")
        return names


# ---------------------------------------------------------------------------------------------
# Writing, for the importers from image-folder copies


@dataclass(frozen=True)
class CifarImport:
    """What an importer from an image-folder copy wrote: the folder and the images per split."""

    folder: Path
    n_train: int
    n_test: int
    converted: int
    """Images that were not RGB (e.g. greyscale) and were converted to RGB."""


Split = tuple[np.ndarray, np.ndarray, list[str]]
"""``(images (N, 3, 32, 32) uint8, labels (N,) int64, names)`` of one split, in file order."""


def decode_copy(
    copy: ImageCopy,
    source: Path,
    entries: Sequence[Entry],
    classes: Sequence[str],
    progress: Callable[[Iterable[Any]], Iterable[Any]],
    seed: int = 0,
) -> tuple[dict[str, Split], int]:
    """Decode every image of a checked copy and shuffle each split.

    Images are decoded in (split, label, file name) order (label = position of the class folder
    in ``classes``), then each split's rows are permuted by one ``numpy.random.default_rng(seed)``
    (the train split first), as the official files hold the images in a shuffled order. A split's
    names are ``<class>/<file>``.

    Returns:
        ``({split: (images, labels, names)}, how many images were converted to RGB)``.
    """
    label_of = {name: i for i, name in enumerate(classes)}
    ordered = sorted(entries, key=lambda e: (e[0], label_of[e[1]], e[2]))
    images = np.empty((len(ordered), 3, copy.size, copy.size), dtype=np.uint8)
    converted = 0
    for i, (split, cls, name, read) in enumerate(progress(ordered)):
        pixels, was_converted = copy.decode(source, f"{split}/{cls}/{name}", read)
        images[i] = pixels.transpose(2, 0, 1)
        converted += was_converted
    rng = np.random.default_rng(seed)
    splits = {}
    for split in copy.splits:
        rows = np.array([i for i, e in enumerate(ordered) if e[0] == split])
        rows = rows[rng.permutation(len(rows))]
        labels = np.array([label_of[ordered[r][1]] for r in rows], dtype=np.int64)
        names = [f"{ordered[r][1]}/{ordered[r][2]}" for r in rows]
        splits[split] = (images[rows], labels, names)
    return splits, converted


def split_dict(
    images: np.ndarray, names: Sequence[str], batch_label: str, labels: Mapping[str, np.ndarray]
) -> dict[bytes, Any]:
    """A ``train``/``test``/``data_batch_N`` dict as the official files hold it: ``batch_label``, the
    label lists ``labels`` (e.g. ``{"labels": ...}`` or fine and coarse), ``data`` (N, 3072) uint8 in
    R, G, B plane order and ``filenames``; keys and strings as ``bytes`` (Python 2's ``str``)."""
    return {
        b"batch_label": batch_label.encode(),
        **{key.encode(): [int(y) for y in values] for key, values in labels.items()},
        b"data": np.ascontiguousarray(images.reshape(len(images), -1)),
        b"filenames": [name.encode() for name in names],
    }


class _Python2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (SHORT_BINSTRING/BINSTRING), as the official files were
    written: they load with ``str`` keys under ``encoding='latin1'`` (torchvision) and with
    ``bytes`` keys under ``encoding='bytes'``."""

    dispatch: ClassVar[dict[type, Any]] = dict(pickle._Pickler.dispatch)

    if TYPE_CHECKING:  # undocumented pickle._Pickler members that typeshed's stub leaves out
        write: Callable[[bytes], object]

        def memoize(self, obj: object) -> None: ...

    def _save_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_python2_str


def write_pickle(path: Path, obj: dict[bytes, Any]) -> None:
    """Pickle ``obj`` (protocol 2, ``bytes`` as Python 2 ``str``) to ``path`` and fsync it."""
    with path.open("wb") as handle:
        _Python2Pickler(handle, protocol=2).dump(obj)
        handle.flush()
        os.fsync(handle.fileno())
