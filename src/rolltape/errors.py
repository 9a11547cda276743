"""The one error type users see.

Every mistake a user can make (a bad path, an unknown env id, a corrupt tape) is raised as
:class:`UsageError` with one sentence that names what is wrong and how to fix it. The CLI
prints that sentence and exits with status 2; nothing else is printed.

May import: nothing of rolltape (every module imports it).
"""

from __future__ import annotations

from typing import Sequence


class UsageError(Exception):
    """Bad input from the user: one sentence naming the problem and the fix."""

    exit_code = 2


class DivergenceError(Exception):
    """A replay did not earn what pass 1 earned and the user asked to fail on that."""

    exit_code = 1


class RunFailed(Exception):
    """A run stopped by a fault (a worker crashed or hung, the disk filled): the message
    says what was kept and how to continue or discard it; ``detail`` keeps the traceback
    (for status.json), never printed."""

    exit_code = 1

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class EnvRaised(RuntimeError):
    """An env raised in another process (an env server's): ``kind`` is its exception's type
    name and the message is its own, so that a failed episode reads as it does locally.

    >>> str(EnvRaised("ValueError", "boom")), EnvRaised("ValueError", "boom").kind
    ('boom', 'ValueError')
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SessionReclaimed(Exception):
    """An env server gave a worker's spare session to a client that had none: the episode
    it was playing there is played again on another session (its tape is the same)."""


class Interrupted(BaseException):
    """A signal stopped the work: SIGTERM (exit status 143), or Ctrl-C (130) once the
    message says what was kept and how to continue. A BaseException, as KeyboardInterrupt
    is, so that ``except Exception`` never swallows it; not a KeyboardInterrupt, because
    the command-line parser turns those into a bare exit status and the message is lost."""

    def __init__(self, signum: int = 15, message: str = "") -> None:
        super().__init__(message or f"stopped by signal {signum}")
        self.signum = signum
        self.exit_code = 128 + signum
        self.explained = bool(message)  # else the CLI says what stopped (cli.interrupted_line)

    @staticmethod
    def heading(stopped: BaseException) -> str:
        """'Interrupted (SIGTERM)' or, for Ctrl-C, 'Interrupted': how every message of a
        stopped command begins.

        >>> Interrupted.heading(Interrupted(15)), Interrupted.heading(KeyboardInterrupt())
        ('Interrupted (SIGTERM)', 'Interrupted')
        """
        return "Interrupted (SIGTERM)" if getattr(stopped, "signum", 2) == 15 else "Interrupted"

    @classmethod
    def saying(cls, stopped: BaseException, message: str) -> Interrupted:
        """The same stop (Ctrl-C, or the signal ``stopped`` carries), now with ``message``."""
        return cls(stopped.signum if isinstance(stopped, Interrupted) else 2, message)


def check_choice(what: str, value: object, choices: Sequence[str],
                 flag: str | None = None) -> None:
    """Refuse ``value`` unless it is one of ``choices``: the one check of every enumerated
    option (``--mode``, ``--quality``, ...), naming it (and the ``flag`` that sets it, for a
    choice the Python API makes too) and what it may be.

    >>> check_choice("--mode", "sideways", ("resim", "restore"))
    Traceback (most recent call last):
    rolltape.errors.UsageError: Unknown --mode 'sideways'; use one of resim, restore.
    >>> check_choice("mode", "sideways", ("resim", "restore"), "--mode")
    Traceback (most recent call last):
    rolltape.errors.UsageError: Unknown mode 'sideways' (--mode); use one of resim, restore.
    """
    if value not in choices:
        where = f" ({flag})" if flag else ""
        raise UsageError(f"Unknown {what} '{value}'{where}; use one of {', '.join(choices)}.")
