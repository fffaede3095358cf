"""Exceptions for problems a user can cause with data: each message names the problem and the fix.

A fix names what its reader sets as this package knows it, never a command-line flag: a run's
setting by its dotted key (``run.data_root``, ``run.protocol``, ``benchmark.cache_dir=DIR``), an
import's input by :func:`~xder_data.prepare_data`'s argument or :class:`~xder_data.ImportOptions`'
field (``prepare_data.source``, ``ImportOptions.num_frames``), and the files to make by the call
that makes them (:func:`prepare_call`, :func:`download_call`). A front end words them its own way:
``xder-run`` prints each as its flag or command (:func:`xder_cli.arguments.error_line`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BenchmarkFormatError",
    "BenchmarkOptionError",
    "CacheWriteError",
    "ClassOrderError",
    "DataError",
    "DataNotFoundError",
    "ImportOptionError",
    "UnknownBenchmarkError",
    "UnknownImporterError",
    "UnknownProtocolError",
    "UnsafePickleError",
    "download_call",
    "one_line",
    "prepare_call",
]


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (for the one-line errors of the readers)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def prepare_call(kind: str, data_root: str | Path, source: str | Path | None = None) -> str:
    """How a fix says to make a benchmark's files: the :func:`~xder_data.prepare_data` call, e.g.
    ``prepare_data('ntu60', 'ROOT', source='DIR')`` (``source`` left out where None)."""
    given = "" if source is None else f", source='{source}'"
    return f"prepare_data('{kind}', '{data_root}'{given})"


def download_call(dataset: str, data_root: str | Path) -> str:
    """How a fix says to download a dataset: the :func:`~xder_data.download_data` call, e.g.
    ``download_data('cifar100', 'ROOT')``."""
    return f"download_data('{dataset}', '{data_root}')"


class DataError(Exception):
    """Base class: a mistake in the user's data or data options, reported in one line."""


class DataNotFoundError(DataError):
    """A file or folder a benchmark needs is missing or unreadable."""


class BenchmarkFormatError(DataError):
    """A file exists but is not in the expected on-disk format (wrong key, shape, layout)."""


class UnsafePickleError(BenchmarkFormatError):
    """A data pickle that would load something other than data (a function or class outside the
    few that data files use): refused before it runs (:func:`xder_data._pickle.load_data_pickle`)."""


class BenchmarkOptionError(DataError, ValueError):
    """A benchmark option that the benchmark does not take, or whose value does not fit the data
    (e.g. classes that do not divide into the tasks asked for)."""


class CacheWriteError(DataError):
    """A reader's cache of decoded data cannot be written (e.g. a read-only data folder)."""


class UnknownBenchmarkError(DataError, KeyError):
    """No benchmark is registered under the requested name."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class UnknownImporterError(DataError, KeyError):
    """No importer (``xder-run data prepare KIND``), or no download (``xder-run data download
    DATASET``), is registered under the requested name."""

    def __str__(self) -> str:  # as UnknownBenchmarkError: no quotes around the message
        return str(self.args[0]) if self.args else ""


class ImportOptionError(DataError, ValueError):
    """Import options that do not fit the importer: no source where the kind needs one, an option
    its format does not take (e.g. a test split for a layout that keeps its own), or a value out of
    range."""


class ClassOrderError(DataError, ValueError):
    """A class order that is not a known name nor a permutation of the classes."""


class UnknownProtocolError(DataError, ValueError):
    """A benchmark defines no protocol of the requested name."""
