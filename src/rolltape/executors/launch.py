"""Where workers run. The default is local fresh processes; nothing here imports torch or GL.

A worker is a new Python interpreter (``python -c _CHILD``, started as
:mod:`rolltape.interpreter` starts every one), never a fork. Unlike multiprocessing's spawn
it does not re-run the caller's ``__main__``, so ``rolltape.evaluate`` works from a script
without a ``__main__`` guard.
Parent and child talk over a socket pair with small pickled messages.

A worker dies with the orchestrator however it ends, SIGKILL included (its program's first
lines see to it: :func:`rolltape.interpreter.python_command`). Linux ties
``PR_SET_PDEATHSIG`` to the *thread* that started the child, so a worker wanted from
another thread (pass 2 beside pass 1, training's background renders) is started by one
long-lived spawner thread instead, which lasts as long as the process.

May import: errors, the interpreter launcher and the standard library. Never: the work (it starts whatever entry point
it is given).

Example (not run: it spawns a process):
    >>> worker = spawn_worker(policy_worker, jobs, 0, env={"MUJOCO_GL": None})
    >>> message = worker.conn.recv()
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterable, Iterator, Mapping

from rolltape.errors import Interrupted, UsageError
from rolltape.interpreter import python_command


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


@dataclass
class Worker:
    """A running worker process and our end of its pipe."""

    proc: subprocess.Popen[bytes]
    conn: Connection

    def alive(self) -> bool:
        return self.proc.poll() is None


def spawn_worker(target: Callable[..., None], *args: Any,
                 env: Mapping[str, str | None] | None = None,
                 cwd_on_path: bool = True) -> Worker:
    """Run ``target(*args, conn)`` in a new interpreter; ``env`` sets (or, with None, removes)
    variables of the child's environment. ``cwd_on_path=False`` keeps the current folder
    off the child's ``sys.path``, so that it imports installed modules only (a render
    worker: a tape is data, and a file beside it must not be imported as code); pass-1
    workers keep it, since ``--policy file.py:attr`` and env modules are the user's own."""
    child_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    ours, theirs = socket.socketpair()
    cmd = python_command(_CHILD, target.__module__, target.__qualname__, str(theirs.fileno()),
                         keep_cwd=cwd_on_path)
    try:
        proc = _start(cmd, theirs.fileno(), child_env)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    theirs.close()  # so our recv() sees EOF when the child dies
    conn = Connection(ours.detach())
    conn.send(args)
    return Worker(proc, conn)


_spawn_requests: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _start(cmd: list[str], fd: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Popen from the main thread, or from the spawner thread (see the module's note)."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(cmd, pass_fds=(fd,), env=env)
    with _spawner_lock:
        # A daemon thread: it lasts until the process exits. (A ThreadPoolExecutor's thread
        # is joined and ended at interpreter shutdown, before atexit: its workers were then
        # SIGKILLed by PDEATHSIG mid-write, leaving half-written videos.)
        if _spawner is None:
            _spawner = threading.Thread(target=_spawn_forever, name="rolltape-spawner",
                                        daemon=True)
            _spawner.start()
    done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    _spawn_requests.put((cmd, fd, env, done))
    ok, value = done.get()
    if not ok:
        raise value
    return value


def _spawn_forever() -> None:
    while True:
        cmd, fd, env, done = _spawn_requests.get()
        try:
            done.put((True, subprocess.Popen(cmd, pass_fds=(fd,), env=env)))
        except BaseException as exc:  # handed to the thread that asked
            done.put((False, exc))


def stop_worker(worker: Worker, grace: float = 2.0) -> None:
    """Ask politely (None on the pipe), then terminate, then kill. Safe to call twice."""
    stop_workers([worker], grace)


def stop_workers(workers: Iterable[Worker], grace: float = 2.0) -> None:
    """Stop every worker, all at once, and wait until each has exited, even when Ctrl-C
    comes again meanwhile: a worker left running would go on writing into the run."""
    workers = [w for w in workers if w is not None]
    with signals_deferred():
        for worker in workers:  # first tell all of them, so that they stop in parallel
            if not worker.conn.closed:
                try:
                    worker.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
        for stop in (None, "terminate", "kill"):
            alive = [w for w in workers if w.proc.poll() is None]
            if not alive:
                break
            for worker in alive:
                if stop is not None:
                    getattr(worker.proc, stop)()
            for worker in alive:
                try:
                    worker.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    pass
        for worker in workers:
            worker.proc.wait()
            if not worker.conn.closed:
                worker.conn.close()


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Run a block to its end even if SIGINT or SIGTERM arrives: the signal is noted and
    raised when the block ends, unless the block is cleaning up after an exception (the
    first Ctrl-C, say), which then goes on with its message."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    caught: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException:
        _restore(old)
        raise
    _restore(old)
    if caught and sys.exc_info()[0] is None:
        raise KeyboardInterrupt if caught[0] == signal.SIGINT else Interrupted(caught[0])


def _restore(handlers: Mapping[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


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
# SIGINT is ignored: Ctrl-C reaches the whole process group, and the parent decides what
# stops, in order (so that no worker writes on after the command returned). SIGTERM (the
# parent's stop_workers, or a SIGTERM to the whole group) exits through Python, so that a
# half-written video or tape is removed on the way out, not left in the user's folder.
_CHILD = """
import importlib, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
from multiprocessing.connection import Connection
module, qualname, fd = sys.argv[1:4]
conn = Connection(int(fd))
args = conn.recv()
target = importlib.import_module(module)
for part in qualname.split("."):
    target = getattr(target, part)
target(*args, conn)
"""
