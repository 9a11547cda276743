"""Worker entry points for tests of the executors: each runs in a fresh interpreter started
by :func:`rolltape.interpreter.spawn_worker`, imported there by this module's name."""

from __future__ import annotations

import os
import signal
import time
from typing import Any


def share_worker(share: list[Any], conn: Any) -> None:
    """A pass-1-shaped worker: one ("unit", x) message per item of its share, then done.
    An item "usage", "error", "die" or "hang" plays that fault instead."""
    for item in share:
        if item == "usage":
            conn.send(("usage_error", "--thing must be positive; give 1 or more."))
            return
        if item == "error":
            conn.send(("error", ("ValueError: bad item", "Traceback: ...")))
            return
        if item == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if item == "hang":  # silent until the parent stops it (None on the pipe)
            conn.recv()
            return
        conn.send(("unit", item))
    conn.send(("done", len(share)))


def pulling_worker(share: list[Any], conn: Any) -> None:
    """share_worker that reads its next piece after each done (a dealt share), until None.
    An item ("sleep", s) sleeps s seconds first: a long unit."""
    piece: list[Any] | None = share
    while piece is not None:
        for item in piece:
            if isinstance(item, list):
                time.sleep(item[1])
            conn.send(("unit", (os.getpid(), item)))
        conn.send(("done", len(piece)))
        piece = conn.recv()


def job_worker(backend: str | None, bad: str, conn: Any) -> None:
    """A pass-2-shaped worker: answers each (i, job) with ("done", i, (backend, job * 2));
    on the backend ``bad`` it says "backend_failed" for job "fail", dies for "crash", hangs
    for "hang" and answers ("error", i, text) for "raise"."""
    while True:
        message = conn.recv()
        if message is None:
            return
        i, job = message
        conn.send(("progress", i, 1))
        if backend == bad and job == "fail":
            conn.send(("backend_failed", i, f"{backend} cannot draw here"))
        elif backend == bad and job == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif backend == bad and job == "hang":
            time.sleep(60)
        elif job == "raise":
            conn.send(("error", i, "ValueError: no such job"))
        else:
            conn.send(("done", i, (backend, job * 2)))
