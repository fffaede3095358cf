"""Exceptions a user can cause through method choices and settings (reported in one line)."""

from __future__ import annotations

__all__ = ["MethodConfigError", "MethodError", "NonFiniteLossError", "UnknownMethodError"]


class MethodError(Exception):
    """Base class of the user-facing errors of xder-methods."""


class UnknownMethodError(MethodError, KeyError):
    """No method is registered under the requested name."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class MethodConfigError(MethodError, ValueError):
    """A method setting out of its range (e.g. a negative buffer size)."""


class NonFiniteLossError(MethodError, FloatingPointError):
    """The training loss became NaN or infinite; the run stops (before the epoch's callbacks)."""
