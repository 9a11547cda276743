"""The one error type users see.

Every mistake a user can make (a bad path, an unknown env id, a corrupt tape) is raised as
:class:`UsageError` with one sentence that names what is wrong and how to fix it. The CLI
prints that sentence and exits with status 2; nothing else is printed.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: one sentence naming the problem and the fix."""

    exit_code = 2


class DivergenceError(Exception):
    """A replay did not earn what pass 1 earned and the user asked to fail on that."""

    exit_code = 1
