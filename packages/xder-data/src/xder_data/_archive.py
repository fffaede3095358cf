"""Downloading and unpacking an official dataset archive, safely (shared by CIFAR-10 and CIFAR-100;
MNIST and Tiny ImageNet use :func:`fetch` alone).

:func:`download_folder` streams the archive to ``<root>/<archive>.part``, checks its md5 and only then
renames it; an archive already in ``root`` with the right md5 is reused. Extraction goes through a
staging folder inside ``root``, accepts only plain files and folders under the dataset's folder (no
absolute paths, ``..``, links or devices), checks that the required files are there, then moves them
into ``<root>/<folder>/``.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from xder_data.errors import BenchmarkFormatError, DataNotFoundError, one_line

__all__ = ["download_folder", "fetch", "md5_file"]


def md5_file(path: Path) -> str:
    """The md5 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(url: str, archive: Path, expected_md5: str) -> None:
    """Stream ``url`` to ``archive`` (via a ``.part`` file) and check its md5 before renaming.

    Raises:
        DataNotFoundError: the download failed.
        BenchmarkFormatError: the md5 differs (nothing is kept).
    """
    part = archive.with_name(archive.name + ".part")
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, part.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        part.unlink(missing_ok=True)
        raise DataNotFoundError(
            f"{url}: download failed ({one_line(exc)}): check the network, or fetch {archive.name} "
            f"by hand and unpack it under {archive.parent}"
        ) from exc
    got = digest.hexdigest()
    if got != expected_md5:
        part.unlink(missing_ok=True)
        raise BenchmarkFormatError(
            f"{url}: md5 {got} differs from the expected {expected_md5}: the download is corrupt or "
            f"not the official {archive.name}; retry, or fetch it by hand and unpack it under "
            f"{archive.parent}"
        )
    os.replace(part, archive)


def _safe_members(archive: Path, tar: tarfile.TarFile, folder: str) -> list[tarfile.TarInfo]:
    """The members under ``folder/``; refuse links, devices and escaping paths."""
    members = []
    for member in tar.getmembers():
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
            raise BenchmarkFormatError(
                f"{archive}: unsafe archive member {member.name!r} (absolute path, '..', link or "
                f"device); refusing to extract: delete the file and download the official {archive.name}"
            )
        if name.parts and name.parts[0] == folder:
            members.append(member)
    return members


def _extract(archive: Path, root: Path, folder: str, required: Sequence[str]) -> Path:
    """Unpack ``folder/`` from ``archive`` into ``root`` through a staging folder."""
    target = root / folder
    staging = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=root))
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = _safe_members(archive, tar, folder)
                extra: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(staging, members=members, **extra)
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise BenchmarkFormatError(
                f"{archive}: not a readable .tar.gz ({one_line(exc)}): delete it and download again"
            ) from exc
        unpacked = staging / folder
        missing = [name for name in required if not (unpacked / name).is_file()]
        if missing:
            raise BenchmarkFormatError(
                f"{archive}: holds no {folder}/{missing[0]}; not the expected archive: delete it and "
                f"download the official {archive.name}"
            )
        target.mkdir(exist_ok=True)
        for item in unpacked.iterdir():
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def download_folder(
    root: Path, url: str, archive_name: str, expected_md5: str, folder: str, required: Sequence[str]
) -> Path:
    """Download ``url`` to ``root/archive_name`` (md5-checked, reused when already there) and unpack
    its ``folder/`` into ``root``.

    Raises:
        DataNotFoundError: the download failed.
        BenchmarkFormatError: the md5 differs (nothing is kept), or the archive is unreadable,
            unsafe or lacks one of the ``required`` files of ``folder/``.
    """
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    archive = root / archive_name
    try:
        if not (archive.is_file() and md5_file(archive) == expected_md5):
            fetch(url, archive, expected_md5)
        return _extract(archive, root, folder, required)
    except BaseException:
        if created and not any(root.iterdir()):  # leave no empty data root behind (offline, Ctrl-C)
            root.rmdir()
        raise
