"""Where workers run: how many this machine may start, and signals. Nothing here imports
torch or GL.

A worker is a new Python interpreter started by :func:`rolltape.interpreter.spawn_worker`
(the mechanism lives there, below every side of the package, so that outputs and the
policy side can run a probe in a fresh interpreter with :func:`~rolltape.interpreter.
run_once` without reaching up into an executor); the names are re-exported here for the
executors.

May import: errors, the interpreter launcher and the standard library. Never: the work (it
starts whatever entry point it is given).

Example (not run: it spawns a process):
    >>> worker = spawn_worker(policy_worker, jobs, 0, False, env={"MUJOCO_GL": None})
    >>> message = worker.conn.recv()
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from rolltape.errors import Interrupted, UsageError
from rolltape.interpreter import (  # noqa: F401  (re-exported for the executors)
    ChildFailed,
    Worker,
    describe_exit,
    run_once,
    signals_deferred,
    spawn_worker,
    stop_worker,
    stop_workers,
)


def per_core(count: int) -> int:
    """A worker count as given, or one per CPU core for 0 (``--render-workers 0``).

    >>> per_core(3), per_core(0) == (os.cpu_count() or 1)
    (3, True)
    """
    return count or os.cpu_count() or 1


def worker_limit(local: bool = True) -> int:
    """The most worker processes one flag may ask for: 4 per CPU core here (at least 16),
    256 in any case (a cluster's). More only queues up, and thousands of interpreters
    starting at once stall the machine."""
    return 256 if not local else min(256, max(16, 4 * (os.cpu_count() or 1)))


def check_worker_count(flag: str, count: int, minimum: int = 1, local: bool = True) -> None:
    """Refuse a worker count below ``minimum`` or above :func:`worker_limit`, naming the flag.

    >>> check_worker_count("--workers", 0)
    Traceback (most recent call last):
    rolltape.errors.UsageError: --workers must be at least 1, got 0.
    """
    if count < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {count}.")
    limit = worker_limit(local)
    if count > limit:
        where = "on this machine (4 per CPU core, at least 16)" if local else "(256 at most)"
        raise UsageError(f"{flag} {count} is more processes than rolltape starts {where}; "
                         f"give {limit} or fewer.")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Interrupted` (as SIGINT raises
    KeyboardInterrupt), so that a terminated run cleans up like an interrupted one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
