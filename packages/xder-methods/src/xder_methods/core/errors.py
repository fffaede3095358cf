"""Exceptions a user can cause through method choices and settings (reported in one line)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MethodConfigError", "MethodError", "NonFiniteLossError", "UnknownMethodError", "check_settings"]


class MethodError(Exception):
    """Base class of the user-facing errors of xder-methods."""


class UnknownMethodError(MethodError, KeyError):
    """No method is registered under the requested name."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class MethodConfigError(MethodError, ValueError):
    """A method setting out of its range (e.g. a negative buffer size)."""


def check_settings(checks: Iterable[tuple[bool, str]], *, prefix: str = "") -> None:
    """The configuration checks of a settings dataclass, in order: the first ``(ok, message)`` that
    fails raises :class:`MethodConfigError` with ``prefix + message``.

    Raises:
        MethodConfigError: a check failed.
    """
    for ok, message in checks:
        if not ok:
            raise MethodConfigError(prefix + message)


class NonFiniteLossError(MethodError, FloatingPointError):
    """The training loss became NaN or infinite; the run stops (before the epoch's callbacks)."""
