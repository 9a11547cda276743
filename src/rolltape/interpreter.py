"""The one way rolltape starts a fresh Python interpreter: workers, GL probes, the viewer's
env probe and benchmark children all run ``python -c PROGRAM ARGS`` built here.

A fresh interpreter, never a fork: a forked child would inherit the parent's modules and any
GL or torch thread state, which is what isolation must avoid, and its environment
(``MUJOCO_GL``...) is fixed before it starts. ``python -c`` puts the current folder first
on ``sys.path``; unless the caller keeps it (the user's own ``file.py:attr`` may live
there), the program first drops it, before any import (even the standard library's, which
a file there would shadow).

No child outlives the process that built its command: the program's first lines (before
any heavy import) ask Linux to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``),
exit at once if the parent is already gone, and watch ``os.getppid()`` on a thread (the
fallback where prctl is missing, and for a parent thread's death, see :func:`spawn_worker`).
A SIGKILLed orchestrator cannot stop its workers itself.

:func:`spawn_worker` starts a worker: ``target(*args, conn)`` in a fresh interpreter, parent
and child talking over a socket pair with small pickled messages (unlike multiprocessing's
spawn it does not re-run the caller's ``__main__``, so ``rolltape.evaluate`` works from a
script without a ``__main__`` guard). :func:`run_once` runs one function there and returns
its result (probes and checks). Linux ties ``PR_SET_PDEATHSIG`` to the *thread* that started
the child, so a worker wanted from another thread (pass 2 beside pass 1, training's
background renders) is started by one long-lived spawner thread instead, which lasts as
long as the process.

May import: errors and the standard library only (every side of the package uses it).

>>> python_command("print(1)", "a")[2].endswith("print(1)"), python_command("print(1)", "a")[3:]
(True, ['a'])
>>> python_command("print(1)", keep_cwd=True, guard=False)[2]
'print(1)'
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Sequence

from rolltape.errors import Interrupted

#: The variables that decide a process's OpenGL backend: MuJoCo reads MUJOCO_GL once, at
#: import, and PyOpenGL PYOPENGL_PLATFORM once, at first use. Pass 1 runs without them.
GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM")
NO_GL: dict[str, str | None] = dict.fromkeys(GL_VARIABLES)  # unset in a child's environment

_DROP_CWD = "import sys\nif sys.path[:1] == ['']: del sys.path[0]\n"

# Seconds between the fallback's looks at the parent: a worker notices within about this.
ORPHAN_POLL_S = 0.5

# {parent} is the pid of the process that starts the child. prctl(1, 9) is
# prctl(PR_SET_PDEATHSIG, SIGKILL): SIGKILL, since a worker may be deep in GL or torch code
# that a catchable signal would wait for; what it was writing is staging that --resume
# redoes. The getppid check after it closes the race of a parent that died before it.
_ORPHAN_GUARD = """\
def _rolltape_orphan_guard(parent):
    import os, sys, threading, time
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
        except Exception:
            pass
    def watch():
        while os.getppid() == parent:
            time.sleep({poll})
        os._exit(1)
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="rolltape-orphan-guard", daemon=True).start()
_rolltape_orphan_guard({parent})
del _rolltape_orphan_guard
"""


def python_command(program: str, *argv: str, keep_cwd: bool = False,
                   guard: bool = True, python: str | None = None) -> list[str]:
    """The command line that runs ``program`` (Python source) in a new interpreter of this
    Python (or of ``python``, another environment's, e.g. a benchmark venv's), with ``argv``
    as its ``sys.argv[1:]``; with ``guard`` (the default) the child exits when this process
    dies. Build it in the process that starts the child."""
    prelude = "" if keep_cwd else _DROP_CWD
    if guard:
        prelude += _ORPHAN_GUARD.format(parent=os.getpid(), poll=ORPHAN_POLL_S)
    return [python or sys.executable, "-c", prelude + program, *argv]


@dataclass
class Worker:
    """A running worker process and our end of its pipe."""

    proc: subprocess.Popen[bytes]
    conn: Connection

    def alive(self) -> bool:
        return self.proc.poll() is None


def spawn_worker(target: Callable[..., None], *args: Any,
                 env: Mapping[str, str | None] | None = None,
                 cwd_on_path: bool = True, cwd: str | os.PathLike[str] | None = None,
                 output: IO[bytes] | None = None, python: str | None = None) -> Worker:
    """Run ``target(*args, conn)`` in a new interpreter (of ``python``, the path of another
    environment's interpreter that can import rolltape, else this one's: a benchmark venv's
    render worker); ``env`` sets (or, with None, removes)
    variables of the child's environment. ``cwd_on_path=False`` keeps the current folder
    off the child's ``sys.path``, so that it imports installed modules only (a render
    worker: a tape is data, and a file beside it must not be imported as code); pass-1
    workers keep it, since ``--policy file.py:attr`` and env modules are the user's own.
    ``cwd``: the child's working folder; ``output``: a file for its stdout and stderr (else
    they are this process's). An interpreter :func:`spawn_ahead` started for the same
    target, environment, path and folder is used instead of a new one when there is one."""
    child_env = _child_environment(env)
    ahead = None
    if output is None:  # one started ahead prints where this process does
        with _ahead_lock:
            ahead = _ahead.pop(_ahead_key(target, child_env, cwd_on_path, cwd, python), None)
    if ahead is not None and not ahead.alive():  # killed from outside: start a fresh one
        stop_worker(ahead, grace=0.1)
        ahead = None
    worker = ahead or _spawn(target, child_env, cwd_on_path, cwd, output, (), python)
    try:
        worker.conn.send(args)
    except (BrokenPipeError, ConnectionResetError):
        pass  # it died at once (before reading): its caller reads EOF and how it exited
    return worker


def spawn_ahead(target: Callable[..., None], *, env: Mapping[str, str | None] | None = None,
                cwd_on_path: bool = True, preload: Sequence[str] = ()) -> None:
    """Start the interpreter of a later :func:`spawn_worker` ``(target, ..., env=env)`` now,
    importing ``preload`` (module names; one that fails to import is left to the target),
    while the caller still prepares the worker's arguments: a small job then does not wait
    for torch to import after its checks. Unused, it is stopped by :func:`discard_ahead`
    (or dies with this process)."""
    child_env = _child_environment(env)
    worker = _spawn(target, child_env, cwd_on_path, None, None, tuple(preload))
    key = _ahead_key(target, child_env, cwd_on_path, None)
    with _ahead_lock:
        old, _ahead[key] = _ahead.pop(key, None), worker
    if old is not None:
        stop_worker(old, grace=0.1)


def discard_ahead() -> None:
    """Stop every interpreter :func:`spawn_ahead` started that no worker has used."""
    with _ahead_lock:
        unused = list(_ahead.values())
        _ahead.clear()
    stop_workers(unused, grace=0.5)


_ahead: dict[tuple[Any, ...], Worker] = {}
_ahead_lock = threading.Lock()


def _child_environment(env: Mapping[str, str | None] | None) -> dict[str, str]:
    child_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    return child_env


def _ahead_key(target: Callable[..., None], child_env: Mapping[str, str], cwd_on_path: bool,
               cwd: str | os.PathLike[str] | None, python: str | None = None
               ) -> tuple[Any, ...]:
    return (target.__module__, target.__qualname__, cwd_on_path, python or sys.executable,
            os.path.abspath(cwd if cwd is not None else os.getcwd()),
            tuple(sorted(child_env.items())))


def _spawn(target: Callable[..., None], child_env: dict[str, str], cwd_on_path: bool,
           cwd: str | os.PathLike[str] | None, output: IO[bytes] | None,
           preload: tuple[str, ...], python: str | None = None) -> Worker:
    ours, theirs = socket.socketpair()
    cmd = python_command(_CHILD, target.__module__, target.__qualname__, str(theirs.fileno()),
                         *preload, keep_cwd=cwd_on_path, python=python)
    try:
        proc = _start(cmd, theirs.fileno(), child_env, cwd, output)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    theirs.close()  # so our recv() sees EOF when the child dies
    return Worker(proc, Connection(ours.detach()))


_spawn_requests: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def changes_to(env: Mapping[str, str]) -> dict[str, str | None]:
    """The ``env`` argument of :func:`spawn_worker` that gives a child exactly ``env``: what
    differs from this process's environment (None: removed)."""
    return {key: env.get(key) for key in set(os.environ) | set(env)
            if os.environ.get(key) != env.get(key)}


def _start(cmd: list[str], fd: int, env: dict[str, str], cwd: Any = None,
           output: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """Popen from the main thread, or from the spawner thread (see the module's note)."""
    global _spawner
    options = {"pass_fds": (fd,), "env": env, "cwd": cwd, "stdout": output, "stderr": output}
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(cmd, **options)
    with _spawner_lock:
        # A daemon thread: it lasts until the process exits. (A ThreadPoolExecutor's thread
        # is joined and ended at interpreter shutdown, before atexit: its workers were then
        # SIGKILLed by PDEATHSIG mid-write, leaving half-written videos.)
        if _spawner is None:
            _spawner = threading.Thread(target=_spawn_forever, name="rolltape-spawner",
                                        daemon=True)
            _spawner.start()
    done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    _spawn_requests.put((cmd, options, done))
    ok, value = done.get()
    if not ok:
        raise value
    return value


def _spawn_forever() -> None:
    while True:
        cmd, options, done = _spawn_requests.get()
        try:
            done.put((True, subprocess.Popen(cmd, **options)))
        except BaseException as exc:  # handed to the thread that asked
            done.put((False, exc))


class ChildFailed(Exception):
    """:func:`run_once`'s child raised (``exception``: its type's name), died or ``hung``
    (``exception`` None); the message says which in words. ``returncode``: how a child that
    died exited; ``output``: what it printed, when :func:`run_once` captured it."""

    def __init__(self, text: str, exception: str | None = None, hung: bool = False,
                 returncode: int | None = None, output: str = "") -> None:
        super().__init__(text)
        self.exception, self.hung = exception, hung
        self.returncode, self.output = returncode, output


def run_once(fn: Callable[..., Any], *args: Any, env: Mapping[str, str | None] | None = None,
             timeout: float | None = None, cwd_on_path: bool = True,
             cwd: str | os.PathLike[str] | None = None, capture: bool = False,
             python: str | None = None) -> Any:
    """``fn(*args)`` in a fresh interpreter (a module-level function or a partial of one;
    its arguments and result travel pickled), for a probe, a check or a benchmark child that
    must not import MuJoCo, GL or a user's module into this process. ``env``,
    ``cwd_on_path``, ``cwd`` and ``python`` as :func:`spawn_worker`; ``capture``: keep what the child
    prints off this terminal (a failure carries it in :attr:`ChildFailed.output`).

    Raises:
        ChildFailed: ``fn`` raised (the message is its own, ``exception`` its type's name),
            the child died, or it gave no answer within ``timeout`` seconds (it is then
            stopped).
    """
    with tempfile.TemporaryFile() if capture else nullcontext() as printed:
        worker = spawn_worker(_answer_once, fn, *args, env=env, cwd_on_path=cwd_on_path,
                              cwd=cwd, output=printed, python=python)
        try:
            if not worker.conn.poll(timeout):
                raise ChildFailed(f"it gave no answer within {timeout:g} s", hung=True,
                                  output=_read_back(printed))
            try:
                kind, value = worker.conn.recv()
            except (EOFError, ConnectionResetError):  # it died (reset: with our args unread)
                worker.proc.wait(5)
                code = worker.proc.returncode
                raise ChildFailed(f"it {describe_exit(code)}", returncode=code,
                                  output=_read_back(printed)) from None
        finally:
            stop_worker(worker, grace=0.5)
        if kind == "raised":
            raise ChildFailed(value[1], exception=value[0], output=_read_back(printed))
    return value


def _read_back(printed: IO[bytes] | None) -> str:
    if printed is None:
        return ""
    printed.seek(0)
    return printed.read().decode(errors="replace")


def _answer_once(fn: Callable[..., Any], *args: Any) -> None:
    """(In the child.) Call ``fn`` with the arguments that follow it; send back its result
    or the exception it raised."""
    *call, conn = args
    try:
        answer: tuple[str, Any] = ("ok", fn(*call))
    except Exception as exc:
        answer = ("raised", (type(exc).__name__, str(exc)))
    conn.send(answer)
    conn.close()


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
# A target that returned has closed what it wrote and said so over the pipe: the child
# then leaves with os._exit, skipping the interpreter's teardown, which with torch and
# SB3 loaded took 1-6 s (measured on 2 cores) while the parent waited for the exit.
#
# A SIGTERM that lands while a finalizer runs (a weakref callback, a __del__) raises its
# SystemExit where Python cannot raise: it printed "Exception ignored ... Traceback" and the
# child went on as if never signalled. The hook raises the same exit again 10 ms later, at
# the main thread's next step, quietly: through a timer's SIGALRM, since nothing in the hook
# may wait (the exit would land in the hook); the child is leaving, so whatever else used
# SIGALRM no longer matters.
_CHILD = """
import importlib, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
def _unraisable(u, default=sys.unraisablehook):
    if not isinstance(u.exc_value, SystemExit):
        return default(u)
    code = u.exc_value.code
    signal.signal(signal.SIGALRM, lambda signum, frame: sys.exit(code))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
sys.unraisablehook = _unraisable
from multiprocessing.connection import Connection
module, qualname, fd = sys.argv[1:4]
conn = Connection(int(fd))
for name in sys.argv[4:]:  # started ahead (spawn_ahead): import while the parent prepares
    try:
        importlib.import_module(name)
    except Exception:
        pass  # the target imports it again and reports what is wrong
args = conn.recv()
if args is None:  # started ahead, then not needed
    os._exit(0)
target = importlib.import_module(module)
for part in qualname.split("."):
    target = getattr(target, part)
target(*args, conn)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""
