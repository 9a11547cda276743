"""The local executor: jobs run in fresh worker processes on this machine.

Two shapes of work, both given as plain data and a worker entry point by the orchestrator
(this module imports no work of its own):

- :func:`run_shares`: one worker per share of the work (pass 1), each reporting small
  messages as it goes, and sent its next piece whenever it finishes one where the work is
  dealt piece by piece; a worker that dies or falls silent fails the run.
- :class:`BackendPool`: jobs dealt to up to N workers, each started with one backend's
  environment (pass 2, where a backend is a GL library); a worker that crashes, hangs or
  says its backend cannot work fails only its job, which is retried on the next backend.
  :func:`warm_workers` starts such workers ahead of their jobs.

:class:`LocalExecutor` is the executor (``--executor local``) made of these.

May import: the launcher, the executor contract, errors. Never: policies, torch, the render
side, outputs.

Example (not run: it spawns processes):
    >>> for kind, payload in run_shares(policy_worker, chunks, (0, False), env={}, timeout=600,
    ...                                 units=("episode",), stalled=describe):
    ...     print(kind)
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Generator, Mapping, Sequence, cast

from rolltape.errors import RunFailed, UsageError
from rolltape.executors.base import Message, RenderWork, ShareWork
from rolltape.executors.fallback import BackendFallback
from rolltape.executors.launch import (
    describe_exit,
    signals_deferred,
    spawn_worker,
    stop_worker,
    stop_workers,
)


def run_shares(target: Callable[..., None], shares: Sequence[Any], args: tuple[Any, ...], *,
               env: Mapping[str, str | None], timeout: float, units: tuple[str, ...],
               stalled: Callable[[int, int], str], timeout_name: str = "its timeout",
               deal: Callable[[int], Any | None] | None = None
               ) -> Generator[tuple[str, Any], None, None]:
    """Run ``target(share, *args, conn)`` for each share in its own worker and yield its
    ``(kind, payload)`` messages as they arrive, until each has sent ("done", ...). With
    ``deal``, worker k starts on ``deal(k)`` and is sent ``deal(k)`` again after each
    ("done", ...) until that is None (see :class:`~rolltape.executors.base.ShareWork`);
    ``stalled``'s unit count is then of its current piece.

    A worker's ("usage_error", text) is raised as :class:`UsageError`, its ("error",
    (line, traceback)) as :class:`RunFailed`; so is a worker that dies, or sends no message
    of a kind in ``units`` (one finished unit of work) for ``timeout`` seconds, with
    ``stalled(share index, units finished)`` naming what it was doing. Every worker is
    stopped when this generator ends, however it ends."""
    if deal is not None:
        shares = [deal(k) for k in range(len(shares))]  # a piece of each share to begin
    workers = [spawn_worker(target, share, *args, env=env) for share in shares]
    share_of = {w.conn: k for k, w in enumerate(workers)}
    running = {w.conn: w for w in workers}
    finished = {w.conn: 0 for w in workers}
    heard = {w.conn: time.monotonic() for w in workers}
    try:
        while running:
            # wait() answers with some of the objects it was given: these Connections.
            for conn in cast("list[Connection]", wait(list(running), timeout=min(timeout, 5.0))):
                worker = running[conn]
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    worker.proc.wait(5)
                    raise RunFailed(f"A worker {describe_exit(worker.proc.returncode)} while "
                                    f"playing {stalled(share_of[conn], finished[conn])}."
                                    ) from None
                if kind == "usage_error":
                    raise UsageError(payload)
                if kind == "error":
                    raise RunFailed(f"A worker failed: {payload[0]}.", payload[1])
                if kind in units:
                    finished[conn] += 1
                    heard[conn] = time.monotonic()
                if kind == "done":
                    piece = deal(share_of[conn]) if deal is not None else None
                    if piece is None:
                        del running[conn]
                    else:
                        finished[conn], heard[conn] = 0, time.monotonic()
                    if deal is not None:
                        try:
                            conn.send(piece)
                        except OSError:
                            pass  # it died just now: its end of the pipe says so next
                yield kind, payload
            for conn, at in heard.items():
                if conn in running and time.monotonic() - at > timeout:
                    raise RunFailed(f"A worker finished nothing for {timeout:.0f} s "
                                    f"({timeout_name}) while playing "
                                    f"{stalled(share_of[conn], finished[conn])}; it was stopped.")
    finally:
        stop_workers(workers)


def warm_workers(target: Callable[..., None], backend: str, args: tuple[Any, ...],
                 workers: int, environment: Callable[[str | None, int], dict[str, str]],
                 cwd_on_path: bool = True, python: str | None = None) -> list[Any]:
    """Start ``workers`` processes of ``target(backend, *args, conn)`` before their jobs are
    known (pass 2's workers while pass 1 runs), for a :class:`BackendPool` to use: their
    interpreters and imports are ready when the first job comes. ``python``: the
    interpreter they run (default: this one's)."""
    return [spawn_worker(target, backend, *args, env=environment(backend, workers),
                         cwd_on_path=cwd_on_path, python=python) for _ in range(workers)]


class Prestart(list[Any]):
    """Workers to start ahead of their jobs (:func:`warm_workers`), but only once the run is
    known to go ahead: empty until :meth:`start` (called again, it does nothing). A run
    refused by its first worker (a checkpoint that does not load) starts none."""

    def __init__(self, starter: Callable[[], list[Any]] | None = None) -> None:
        super().__init__()
        self._starter = starter

    def start(self, *_: Any) -> None:
        """Start them now (any arguments are ignored: it can be an ``on_row`` callback)."""
        starter, self._starter = self._starter, None
        if starter is not None:
            with signals_deferred():  # a Ctrl-C meanwhile must not lose one started
                self.extend(starter())


@dataclass
class _Slot:
    worker: Any = None
    backend: str | None = None
    job: int | None = None
    last_heard: float = 0.0
    args: tuple[Any, ...] | None = None  # what its worker was started with (its priority)


def normal_priority(pid: int) -> bool:
    """Put every thread of process ``pid`` back at the normal CPU priority (nice 0, out of
    SCHED_IDLE). Linux lets only a privileged process (root, CAP_SYS_NICE) lower a niceness,
    so this is False where it is refused (or there is no such process)."""
    import os

    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]  # not Linux: the process alone
    try:
        for tid in threads:
            if getattr(os, "SCHED_IDLE", None) is not None and \
                    os.sched_getscheduler(tid) == os.SCHED_IDLE:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, 0)
    except (OSError, AttributeError):
        return False
    return True


class BackendPool:
    """Runs ``jobs`` on up to ``workers`` processes of ``target(backend, *args, conn)``,
    moving to the next backend of ``order`` when one crashes, hangs (no message for
    ``timeout`` s) or reports ("backend_failed", i, why); the job is retried there
    (:class:`~rolltape.executors.fallback.BackendFallback`, the rule Ray's pool follows too).

    A worker receives ``(i, job)`` and answers ("progress", i, n), ("done", i, result),
    ("usage_error", i, text) or ("error", i, text). ``needs_backend[i]`` False runs job i
    with no backend (None). ``environment(backend, workers)`` gives a worker's variables.
    After :meth:`run`, ``fallback.failures[i]`` lists (backend, why) for each job,
    ``fallback.dead`` the backends that failed, ``errors`` (i, kind, text) what workers
    refused or raised. ``started`` are workers of ``order[0]`` started ahead by
    :func:`warm_workers`, used before any new one is spawned. ``widen`` (N, event): once
    the event is set (from another thread), up to N more workers may run (cores that
    other work gave back). ``calm`` (args, event): workers run niced beside other work
    (pass 1) until the event is set, then at the normal priority: each is put back in
    place where the OS allows it (:func:`normal_priority`), else it is replaced by one
    started with ``args`` after its current job, and every new worker starts with them.
    ``python``: the interpreter every worker runs (default: this one's)."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...],
                 jobs: Sequence[Any], order: Sequence[str], workers: int, timeout: float, *,
                 needs_backend: Sequence[bool],
                 environment: Callable[[str | None, int], dict[str, str]],
                 on_progress: Callable[[int, int], None],
                 on_done: Callable[[int, Any], None],
                 cancel: Any = None, cwd_on_path: bool = True,
                 started: Sequence[Any] = (), widen: tuple[int, Any] | None = None,
                 calm: tuple[tuple[Any, ...], Any] | None = None,
                 python: str | None = None) -> None:
        self.target, self.args, self.jobs, self.python = target, args, jobs, python
        self.timeout, self.cancel, self.cwd_on_path = timeout, cancel, cwd_on_path
        self.needs_backend, self.environment = needs_backend, environment
        self.on_progress, self.on_done = on_progress, on_done
        self.slots = [_Slot() for _ in range(min(workers, max(1, len(jobs))))]
        # Workers started ahead (warm_workers) on the first backend; what is not needed stops.
        for slot, worker in zip(self.slots, started):
            slot.worker, slot.backend = worker, order[0] if order else None
            slot.args = args  # started for this pool's jobs
        stop_workers(started[len(self.slots):])
        self.pending = deque(range(len(jobs)))
        self.fallback = BackendFallback(order, len(jobs))
        self.errors: list[tuple[int, str, str]] = []
        self.widen, self.calm = widen, calm

    def run(self) -> None:
        try:
            while self.pending or any(s.job is not None for s in self.slots):
                if self.cancel is not None and self.cancel.is_set():
                    break  # the caller gave up (pass 1 failed): stop the workers
                if self.widen is not None and self.widen[1].is_set():
                    more = min(self.widen[0], len(self.jobs) - len(self.slots))
                    self.slots.extend(_Slot() for _ in range(max(0, more)))
                    self.widen = None
                if self.calm is not None and self.calm[1].is_set():
                    self._calm_down()
                for slot in self.slots:
                    if slot.job is None and self.pending:
                        self._start(slot, self.pending.popleft())
                busy = [s for s in self.slots if s.job is not None]
                if not busy:
                    break  # every backend is dead: what is left cannot be done
                ready = wait([s.worker.conn for s in busy], timeout=0.5)
                for slot in busy:
                    if slot.worker.conn in ready:
                        self._receive(slot)
                    elif time.monotonic() - slot.last_heard > self.timeout:
                        self._backend_died(slot, f"it hung (no progress for {self.timeout:.0f} s)")
        finally:
            stop_workers(slot.worker for slot in self.slots)

    def _calm_down(self) -> None:
        """The work beside is done: workers from now on at the normal priority."""
        assert self.calm is not None
        self.args, self.calm = self.calm[0], None
        for slot in self.slots:
            if slot.worker is not None and slot.worker.alive() and \
                    normal_priority(slot.worker.proc.pid):
                slot.args = self.args  # else _start replaces it once its job is done

    def _start(self, slot: _Slot, i: int) -> None:
        backend = self.fallback.backend_for(self.needs_backend[i])
        if backend == "":
            return
        # A job that draws with no GL (verification, an Atari screen) runs on whatever worker
        # is there; one that draws needs a worker started on its backend.
        if slot.worker is None or not slot.worker.alive() or slot.args != self.args or (
                backend is not None and slot.backend != backend):
            self._kill(slot)
            slot.worker = spawn_worker(self.target, backend, *self.args,
                                       env=self.environment(backend, len(self.slots)),
                                       cwd_on_path=self.cwd_on_path, python=self.python)
            slot.backend, slot.args = backend, self.args
        slot.job, slot.last_heard = i, time.monotonic()
        slot.worker.conn.send((i, self.jobs[i]))

    def _kill(self, slot: _Slot) -> None:
        if slot.worker is not None:
            slot.worker.conn.close()
            stop_worker(slot.worker, grace=0.1)
        slot.worker = slot.job = None

    def _backend_died(self, slot: _Slot, reason: str) -> None:
        if slot.backend is not None and slot.job is not None:
            self.fallback.died(slot.job, slot.backend, reason)
        elif slot.backend is not None:
            self.fallback.dead.setdefault(slot.backend, reason)
        if slot.job is not None:
            self.pending.appendleft(slot.job)
        self._kill(slot)

    def _receive(self, slot: _Slot) -> None:
        try:
            kind, i, payload = slot.worker.conn.recv()
        except (EOFError, OSError):
            slot.worker.proc.wait(5)
            self._backend_died(slot, f"the worker process "
                                     f"{describe_exit(slot.worker.proc.returncode)}")
            return
        slot.last_heard = time.monotonic()
        if kind == "progress":
            self.on_progress(i, payload)
            return
        if kind == "backend_failed":
            self._backend_died(slot, payload)
            return
        i, slot.job = slot.job, None
        assert i is not None, "a worker answered with no job given to it"
        if kind == "done":
            self.on_done(i, payload)
        else:
            self.errors.append((i, kind, payload))


class LocalExecutor:
    """Fresh worker processes on this machine (the default; :mod:`rolltape.executors.base`
    says what an executor is)."""

    name = "local"
    runs_workers = warms_workers = splits_segments = shares_disk = True
    OPTIONS = None  # no options of its own (Ray's: executors.ray.RayOptions)

    def check(self) -> None:
        return None  # nothing to connect to

    def run_shares(self, work: ShareWork, shares: Sequence[Any]) -> Generator[Message, None, None]:
        return run_shares(work.worker, shares, work.args, env=work.env, timeout=work.timeout,
                          units=work.units, stalled=work.stalled,
                          timeout_name=work.timeout_name, deal=work.deal)

    def render_pool(self, work: RenderWork, jobs: Sequence[Any], order: Sequence[str],
                    workers: int, timeout: float, *,
                    on_progress: Callable[[int, int], None],
                    on_done: Callable[[int, Any], None], cancel: Any = None,
                    warm: Sequence[Any] = (), widen: tuple[int, Any] | None = None,
                    calm: tuple[tuple[Any, ...], Any] | None = None) -> BackendPool:
        return BackendPool(work.worker, work.args, jobs, order, workers, timeout,
                           needs_backend=work.needs_backend, environment=work.environment,
                           on_progress=on_progress, on_done=on_done, cancel=cancel,
                           cwd_on_path=work.cwd_on_path, started=warm, widen=widen, calm=calm,
                           python=work.python)

    def warm_render_workers(self, work: RenderWork, backend: str, workers: int
                            ) -> list[Any]:
        return warm_workers(work.worker, backend, work.args, workers, work.environment,
                            cwd_on_path=work.cwd_on_path, python=work.python)

