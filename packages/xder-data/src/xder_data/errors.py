"""Exceptions for problems a user can cause with data: each message names the problem and the fix."""

from __future__ import annotations

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
    "one_line",
]


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (for the one-line errors of the readers)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
