"""The CLI's own user-facing error."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A mistake in the command line or a run directory: printed in one line, exit status 2."""
