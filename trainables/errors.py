"""The one exception type for mistakes a user can fix (bad path, bad space file, bad option).

The CLI turns a :class:`UserError` into one line on stderr and exit code 2, with no traceback.
Its message must say what was expected, what arrived, and how to fix it.
"""

from __future__ import annotations

__all__ = ["UserError", "TrialFailed"]


class UserError(ValueError):
    """A mistake in the user's input: the message says what was expected, what came, the fix."""


class TrialFailed(RuntimeError):
    """A trial cannot go on (NaN loss, out of memory): it fails alone and the study goes on."""
