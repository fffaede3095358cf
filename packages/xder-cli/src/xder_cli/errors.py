"""The command line's own user-facing errors (the library's are :mod:`xder_cli.runs.errors`)."""

from __future__ import annotations

__all__ = ["Interrupted", "UsageError"]


class UsageError(Exception):
    """A mistake in the command line: printed in one line, exit status 2."""


class Interrupted(Exception):
    """Ctrl-C during a run: the message says how to continue it (exit status 130)."""
