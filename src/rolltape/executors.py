"""Where workers run. The default is local fresh processes; nothing here imports torch or GL.

A worker is a new Python interpreter (``python -c _CHILD``), never a fork: a
forked child would inherit the parent's modules and any GL or torch thread state, which is
what isolation must avoid. Unlike multiprocessing's spawn it does not re-run the caller's
``__main__``, so ``rolltape.evaluate`` works from a script without a ``__main__`` guard,
and the child's environment (``MUJOCO_GL``...) is fixed before its interpreter starts.
Parent and child talk over a socket pair with small pickled messages.

Example:
    >>> worker = spawn_worker(policy_worker, jobs, 0, env={"MUJOCO_GL": None})
    >>> message = worker.conn.recv()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Mapping


@dataclass
class Worker:
    """A running worker process and our end of its pipe."""

    proc: subprocess.Popen[bytes]
    conn: Connection

    def alive(self) -> bool:
        return self.proc.poll() is None


def spawn_worker(target: Callable[..., None], *args: Any,
                 env: Mapping[str, str | None] | None = None) -> Worker:
    """Run ``target(*args, conn)`` in a new interpreter; ``env`` sets (or, with None, removes)
    variables of the child's environment."""
    child_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    ours, theirs = socket.socketpair()
    cmd = [sys.executable, "-c", _CHILD, target.__module__, target.__qualname__,
           str(theirs.fileno())]
    proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), env=child_env)
    theirs.close()  # so our recv() sees EOF when the child dies
    conn = Connection(ours.detach())
    conn.send(args)
    return Worker(proc, conn)


def stop_worker(worker: Worker, grace: float = 2.0) -> None:
    """Ask politely (None on the pipe), then terminate, then kill. Safe to call twice."""
    if not worker.conn.closed:
        try:
            worker.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
    for stop in (None, worker.proc.terminate, worker.proc.kill):
        if stop is not None and worker.proc.poll() is None:
            stop()
        try:
            worker.proc.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    worker.proc.wait()
    if not worker.conn.closed:
        worker.conn.close()


def describe_exit(returncode: int | None) -> str:
    """'crashed with SIGSEGV' style text for a dead worker's exit status."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"crashed with {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


# The child's whole program: read the arguments from the pipe, import the target, call it.
_CHILD = """
import importlib, sys
from multiprocessing.connection import Connection
module, qualname, fd = sys.argv[1:4]
conn = Connection(int(fd))
args = conn.recv()
target = importlib.import_module(module)
for part in qualname.split("."):
    target = getattr(target, part)
target(*args, conn)
"""
