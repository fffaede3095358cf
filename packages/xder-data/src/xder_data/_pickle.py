"""The one reader of the data sets' pickles: CIFAR-10/100's official files, the authors'
miniImageNet cache pickles and NTU-60's label files.

A pickle is a program: ``pickle.load`` calls whatever function the file names, so a data file from
a mirror, a shared drive or a colleague's folder could run any code on the machine that reads it.
These formats hold only data, so :func:`load_data_pickle` builds only data: dicts, lists, tuples,
strings, bytes and numbers (which pickles make without naming a function), and numpy arrays,
dtypes and scalars through numpy's own reconstruction functions. Any other function or class a
file names is refused before anything runs (:class:`~xder_data.errors.UnsafePickleError`, one line
naming the file and what it tried to load).
"""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path
from typing import Any

from xder_data.errors import UnsafePickleError

__all__ = ["ALLOWED_GLOBALS", "load_data_pickle"]

# (module, name) as a pickle names them: numpy 1 writes numpy.core.*, numpy 2 numpy._core.*.
ALLOWED_GLOBALS = frozenset(
    {
        *(
            (f"numpy.{core}.{module}", name)
            for core in ("core", "_core")
            for module, name in (
                ("multiarray", "_reconstruct"),  # ndarray.__reduce__
                ("multiarray", "scalar"),  # numpy scalars (np.int64(3) in a label list)
                ("numeric", "_frombuffer"),  # arrays pickled with protocol 5
            )
        ),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes pickled by Python 3 with protocol 2 (latin-1 only, below)
        ("collections", "OrderedDict"),
    }
)


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of bytes call it: ``encode(text, "latin1")``."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1")


class _DataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, path: Path, encoding: str) -> None:
        super().__init__(file, encoding=encoding)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafePickleError(
                f"{self.path}: refused: the pickle would load {module}.{name}, which is not data "
                "(a data file holds only dicts, lists, strings, numbers and numpy arrays); "
                "the file is not what it claims to be: get it from the dataset's official source"
            )
        if (module, name) == ("_codecs", "encode"):
            return _latin1_encode
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self.path}: refused: the pickle refers to an outside object ({pid!r})")


def load_data_pickle(path: str | Path, *, encoding: str = "latin1") -> Any:
    """Unpickle the data file ``path`` (Python 2 or 3 pickles; ``encoding`` decodes Python 2
    ``str``), building only data (see the module docstring).

    Raises:
        UnsafePickleError: the file names any other function or class; nothing it names has run.
        OSError, and what a corrupt pickle raises (``pickle.UnpicklingError``, ``EOFError``...):
            for the caller to turn into its own one-line error.
    """
    path = Path(path)
    with path.open("rb") as file:
        return _DataUnpickler(file, path, encoding).load()
