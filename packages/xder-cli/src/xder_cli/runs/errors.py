"""The errors of the run as a library: each a :class:`RunError`, its message one line.

A message names what its caller set as the library knows it: a setting by its dotted key
(``run.device``), an argument by its name (``buffer_size``, ``overrides``). A front end that
spells them otherwise renders the same message with its own words, so that the library knows
nothing of it:

* where a message names one of the :data:`OPTIONS`, it holds the placeholder ``{name}``
  (written ``option("run.device")`` in the f-string that builds it);
* ``str(error)`` writes every placeholder as the option's name:
  ``run.device 'cuda': no CUDA device is available here; use run.device cpu``;
* ``error.render(spell)`` writes it as ``spell(name)``; the command line's
  :func:`xder_cli.arguments.flag` spells ``run.device`` as ``--device``:
  ``...; use --device cpu``.

:func:`render` does the same for a template kept as text (:data:`xder_cli.runs.analyses.RECORD_HINT`).
Only the names of :data:`OPTIONS` are placeholders: other braces in a message (a value, an error's
text) stay as they are.

This module imports no library package: the command line words its errors and loads its plugins
with it before it parses. :class:`NonFiniteLossError`, which extends the training loop's
:class:`xder_methods.NonFiniteLossError`, is made when first asked for (``xder_methods`` imports
torch).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

__all__ = [
    "OPTIONS",
    "AnalysisSkipped",
    "BenchError",
    "NonFiniteLossError",
    "PluginError",
    "ResultsUnreadableError",
    "RunDirBusyError",
    "RunDirError",
    "RunDirWriteError",
    "RunError",
    "SettingError",
    "TrackerError",
    "option",
    "render",
]

OPTIONS = (
    "benchmark",  # arguments of resolve_run (and resolve_config) ...
    "buffer_size",
    "method",
    "overrides",
    "preset",
    "protocol",
    "run.device",  # ... and [run] settings, given to it as keywords or overrides
    "run.loggers",
    "run.record_analyses",
    "plugin",  # load_plugin's module or file
    "train_run",  # train_run(..., resume=True) continues a run
    "analyze_run",  # analyze_run(...) analyses one
    "resume",
    "task_il",  # write_report's Task-IL tables
    "grid",  # spec_from_preset's PRESET:BENCHMARK:BUFFER:ENTRY
    "out",  # the folder of a sweep or an experiment
    "seeds",  # ExperimentOptions (and a sweep's seeds) ...
    "pairs",
    "methods",
    "paper",
    "params",
    "task",  # ... and the bench's task, backbone width and batch size
    "width",
    "batch_size",
)
"""What the library's messages name as placeholders: what a caller of the library sets, by the
name the library knows it by. A front end maps each to its own spelling."""

_PLACEHOLDER = re.compile(r"\{(" + "|".join(re.escape(name) for name in OPTIONS) + r")\}")


def option(name: str) -> str:
    """The placeholder of option ``name`` in a message: ``{name}``.

    Raises:
        ValueError: ``name`` is not one of :data:`OPTIONS` (a bug: add it there, and to the
            command line's :data:`xder_cli.arguments.FLAGS`).
    """
    if name not in OPTIONS:
        raise ValueError(f"{name!r} is not an option of xder_cli.runs.errors.OPTIONS")
    return "{" + name + "}"


def render(template: str, spell: Callable[[str], str] | None = None) -> str:
    """``template`` with each option placeholder written as ``spell(name)`` (default: the name)."""
    return _PLACEHOLDER.sub(lambda match: match[1] if spell is None else spell(match[1]), template)


class RunError(Exception):
    """What a caller of :mod:`xder_cli.runs` got wrong (or its machine lacks); the message, one
    line, says what and how to fix it. ``args[0]`` is its template (see the module docstring)."""

    @property
    def template(self) -> str:
        return str(self.args[0]) if self.args else ""

    def render(self, spell: Callable[[str], str] | None = None) -> str:
        """The message, each option written as ``spell(name)`` (default: the name)."""
        return render(self.template, spell)

    def __str__(self) -> str:
        return self.render()


class SettingError(RunError):
    """A setting the run cannot take: an unknown section or key, an ill-typed value or one out of
    its range, an unknown preset, entry or logger, an unusable device, no published table at the
    buffer size; a sweep's grid (its file or preset entry), an experiment's or a bench's options
    that cannot be planned."""


class TrackerError(RunError):
    """An experiment tracker of ``run.loggers`` whose package is missing or that fails to start."""


class PluginError(RunError):
    """A plugin could not be loaded: it fails to import, or registers a name twice."""


class RunDirError(RunError):
    """A run directory (or the folder for new ones) that cannot be used: not a run directory, an
    unreadable ``config.toml`` or checkpoint, no checkpoint yet, a lock that cannot be taken, a
    folder that cannot be created, an experiment's run directory trained with other settings."""


class RunDirBusyError(RunDirError):
    """Another process holds the run directory's lock (``holder`` says which, in words)."""

    def __init__(self, run_dir: Path, holder: str, then: str) -> None:
        super().__init__(
            f"{run_dir} is in use by {holder}: wait for that process to end (or stop it), then {then}"
        )
        self.run_dir = run_dir
        self.holder = holder


class RunDirWriteError(RunDirError):
    """A file of a run directory could not be written (disk full, no permission...)."""


class ResultsUnreadableError(RunDirError):
    """A ``results.json`` that exists but cannot be used: the message says why, in one line."""


class BenchError(RunError):
    """The fair-share bench's processes: one failed (the message ends with its error, or the
    last line it printed on stderr), or they did not get ready in time."""


class AnalysisSkipped(RunError):
    """An analysis that does not apply to this run (the message says why)."""


if TYPE_CHECKING:  # as type checkers and the API reference read it; made by __getattr__ when used
    from xder_methods import NonFiniteLossError as LoopNonFiniteLossError

    class NonFiniteLossError(RunError, LoopNonFiniteLossError):
        """The run diverged: the loop's :class:`xder_methods.NonFiniteLossError` (what callers
        catch, by the name a sweep's record gives it), with where the last good state is or what
        to change."""


_MADE_LOCK = threading.Lock()


def __getattr__(name: str) -> type[RunError]:
    """``NonFiniteLossError``: made once, when first asked for (:func:`_non_finite_loss_error`),
    so that importing this module imports no library package."""
    if name != "NonFiniteLossError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _MADE_LOCK:
        if name not in globals():
            globals()[name] = _non_finite_loss_error()
    made: type[RunError] = globals()[name]
    return made


def _non_finite_loss_error() -> type[RunError]:
    """The class :data:`NonFiniteLossError` (declared above for type checkers) at run time."""
    from xder_methods import NonFiniteLossError as LoopNonFiniteLossError

    class NonFiniteLossError(RunError, LoopNonFiniteLossError):
        """The run diverged: the loop's :class:`xder_methods.NonFiniteLossError` (what callers
        catch, by the name a sweep's record gives it), with where the last good state is or what
        to change."""

    NonFiniteLossError.__qualname__ = NonFiniteLossError.__name__  # pickled by its module's name
    return NonFiniteLossError
