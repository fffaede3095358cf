"""Importing an image-folder copy of a dataset (shared by the CIFAR-10, CIFAR-100 and miniImageNet
importers).

A copy is a folder or a tar archive (``.tar``, ``.tar.gz``...) holding ``<split>/<class>/<file>``,
optionally under one leading folder; hidden files and folders (a name starting with ``.``) are
ignored, as are files at other depths. :class:`ImageCopy` lists its images (:meth:`~ImageCopy.entries`;
an archive is read once, front to back, and its payloads kept in memory, a folder's files are read
when decoded), checks its class folders and per-class counts, and decodes each image with Pillow into
an RGB uint8 array of the dataset's size. Every problem is a one-line :class:`BenchmarkFormatError`
(``<source>: <problem>; expected <layout>``).

:func:`staged_folder` writes an importer's output atomically: into a staging folder inside the data
root, moved into place only once every file is complete.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line

__all__ = ["Entry", "ImageCopy", "staged_folder"]

Entry = tuple[str, str, str, Callable[[], bytes]]
"""``(split, class folder, file name, read)`` of one image of the source."""


def _split_parts(relative: PurePosixPath, splits: Sequence[str]) -> tuple[str, str, str] | None:
    """``(split, class, file)`` of a path ``[prefix/]split/class/file``, else None."""
    parts = relative.parts
    if len(parts) >= 3 and parts[-3] in splits and not any(p.startswith(".") for p in parts):
        return parts[-3], parts[-2], parts[-1]
    return None


@dataclass(frozen=True)
class ImageCopy:
    """The expected layout of an image-folder copy of one dataset.

    Attributes:
        dataset: how messages name it, e.g. ``"CIFAR-10"``.
        splits: the two split folders, e.g. ``("train", "test")``.
        size: the side of every image (32 for CIFAR, 84 for miniImageNet).
        layout: what a message says was expected, e.g. ``"an image-folder copy of CIFAR-10: ..."``.
    """

    dataset: str
    splits: tuple[str, ...]
    size: int
    layout: str

    def bad(self, source: Path, problem: str) -> BenchmarkFormatError:
        """``<source>: <problem>; expected <layout>``."""
        return BenchmarkFormatError(f"{source}: {problem}; expected {self.layout}")

    def entries(self, source: Path) -> list[Entry]:
        """The images of ``source`` (a folder, in sorted path order, or a tar archive, in its order).

        Raises:
            DataNotFoundError: ``source`` does not exist.
            BenchmarkFormatError: it is neither a folder nor a readable tar archive.
        """
        if not source.exists():
            raise DataNotFoundError(
                f"{source}: no such folder or archive: give prepare_data.source an image-folder copy"
            )
        if source.is_dir():
            return list(self._folder_entries(source))
        try:
            with tarfile.open(source, "r:*") as tar:
                return list(self._archive_entries(tar))
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise self.bad(source, f"neither a folder nor a readable tar archive ({one_line(exc)})") from exc

    def _folder_entries(self, source: Path) -> Iterator[Entry]:
        for path in sorted(source.rglob("*")):
            found = _split_parts(PurePosixPath(path.relative_to(source).as_posix()), self.splits)
            if found is not None and path.is_file():
                yield (*found, path.read_bytes)

    def _archive_entries(self, tar: tarfile.TarFile) -> Iterator[Entry]:
        for member in tar:
            found = _split_parts(PurePosixPath(member.name), self.splits)
            if found is not None and member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file always has a payload
                payload = handle.read()

                def read(payload: bytes = payload) -> bytes:  # binds this member's payload
                    return payload

                yield (*found, read)

    def check_classes(self, source: Path, entries: Sequence[Entry], classes: Sequence[str] | None) -> None:
        """Every split holds images, in exactly the class folders ``classes`` (when given) or, when
        ``classes`` is None, in the same class folders as the first split."""
        found = {split: {cls for s, cls, _, _ in entries if s == split} for split in self.splits}
        for split in self.splits:
            if not found[split]:
                raise self.bad(source, f"holds no {split}/<class>/ images")
        for split in self.splits:
            expected = classes if classes is not None else sorted(found[self.splits[0]])
            unexpected = sorted(found[split] - set(expected))
            missing = [c for c in expected if c not in found[split]]
            if unexpected or missing:
                what = [f"unexpected {split}/{unexpected[0]}/"] if unexpected else []
                what += [f"no images in {split}/{missing[0]}/"] if missing else []
                problem = " and ".join(what)
                if classes is None:
                    problem += f" (every class needs images in {' and '.join(f'{s}/' for s in self.splits)})"
                raise self.bad(source, problem)

    def check_counts(self, source: Path, entries: Sequence[Entry], per_class: Mapping[str, int]) -> None:
        """Each class folder of split ``s`` holds exactly ``per_class[s]`` images."""
        counts = Counter((split, cls) for split, cls, _, _ in entries)
        for (split, cls), count in sorted(counts.items()):
            if count != per_class[split]:
                raise self.bad(
                    source, f"{split}/{cls}/ holds {count} images, expected {per_class[split]} per class"
                )

    def decode(self, source: Path, where: str, read: Callable[[], bytes]) -> tuple[np.ndarray, bool]:
        """One image as (size, size, 3) uint8 RGB, and whether it had to be converted to RGB.

        Raises:
            BenchmarkFormatError: Pillow cannot read it, or it is not ``size`` x ``size``.
        """
        from PIL import Image

        try:
            with Image.open(io.BytesIO(read())) as image:
                size, mode = image.size, image.mode
                rgb = image.convert("RGB")
        except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
            raise self.bad(source, f"{where} is not an image Pillow can read ({one_line(exc)})") from exc
        if size != (self.size, self.size):
            raise self.bad(
                source,
                f"{where} is {size[0]}x{size[1]}, but {self.dataset} images are {self.size}x{self.size}: "
                "resize the copy first",
            )
        return np.asarray(rgb, dtype=np.uint8), mode != "RGB"


@contextmanager
def staged_folder(root: Path, folder: str, names: Sequence[str]) -> Iterator[Path]:
    """Yield a new staging folder inside ``root``; when the block completes, put the files ``names``
    written there into ``<root>/<folder>/``; the staging folder is removed either way.

    A ``folder`` not yet in ``root`` is the staging folder renamed (one rename); an existing one has
    each file replaced in one rename (other files in it are kept). A failure inside the block leaves
    ``root`` as it was (``root`` itself is created if missing).
    """
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{folder}-{uuid.uuid4().hex[:12]}"
    staging.mkdir()  # not tempfile.mkdtemp: its 0700 mode would stay on the renamed folder
    try:
        yield staging
        target = root / folder
        if not target.exists():
            os.replace(staging, target)
            return
        for name in names:
            os.replace(staging / name, target / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
