"""The Ray executor: work as Ray tasks, on one machine or on a cluster.

:class:`RayExecutor` is the executor (``executor="ray"``, ``--executor ray``); the local executor never imports
this module's dependencies, and importing this module never imports ray (every ``import
ray`` is inside a function), so ``import rolltape`` stays light. Like the local executor
it knows no job's insides: the orchestrator hands it plain data and the function to run.

- :func:`run_on_ray`: tasks that return files and messages (pass 1: a few episodes each).
- :class:`RayBackendPool`: jobs tried backend after backend (pass 2), by the same rule as
  the local pool (:mod:`rolltape.executors.fallback`). Each task's ``runtime_env`` carries
  its backend's variables: Ray keeps a separate pool of worker processes per distinct
  runtime_env and starts each with them, so mujoco reads the right backend when it is
  first imported.

On a multi-machine cluster a task runs on another machine and cannot see the driver's disk,
so files travel as bytes: a task writes into a temporary folder of its own node and returns
the files; the driver writes them atomically at the paths the caller asked for. Files the
work reads (checkpoints, statistics, policy modules) are read where the task runs, so on a
cluster they must sit at the same path on every node (shared storage).

May import: Ray (lazily), flags (its options), the executor contract, the launcher's neighbours (fallback,
errors, files, limits). Never: the work (pass 1, pass 2, policies, outputs) or the
orchestrator.

Example (not run: it needs a Ray cluster):
    >>> check_ray()  # starts a local Ray instance, or connects to RAY_ADDRESS
    >>> for kind, payload in run_on_ray(play_shipped, cut_into_tasks(chunks), limit=4):
    ...     print(kind)
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Sequence

from rolltape.errors import RunFailed, UsageError
from rolltape.executors.base import RenderWork, ShareWork
from rolltape.executors.fallback import BackendFallback
from rolltape.files import write_bytes, write_folder
from rolltape.flags import SCALE, flag
from rolltape.limits import check_gpus

__all__ = ["RayBackendPool", "RayExecutor", "check_ray", "run_on_ray"]

_INSTALL_HINT = "install the ray extra: pip install 'rolltape[ray]'"
_POLL_S = 0.5  # how often the driver looks at the clock while waiting for tasks


# --------------------------------------------------------------------------------------
# Connecting
# --------------------------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed; "
                         f"{_INSTALL_HINT}.") from None
    return ray


def check_ray(address: str | None = None, timeout: float = 30.0) -> None:
    """Make sure this process is connected to Ray; start a local instance if need be.

    ``address`` (or, when it is None, the ``RAY_ADDRESS`` environment variable) names an
    existing cluster, e.g. ``"10.0.0.5:6379"``, ``"auto"`` (the one ``ray start`` runs on
    this machine) or ``"ray://head:10001"``; without either, a private local Ray instance
    is started with every CPU of this machine (and stops with this process). If Ray
    is already initialised in this process (e.g. by the caller), that session is reused
    whatever ``address`` says.

    Raises:
        UsageError: Ray is not installed, or the cluster cannot be reached within
            ``timeout`` seconds.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None or address == "local":
        # address="local": a private instance even when `ray start` runs here (plain
        # ray.init() would join that one, and then refuses num_cpus); use "auto" to join.
        # Ray's own start-up fails (rather than hangs) when it cannot start: no bound needed.
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
                 log_to_driver=False)
        return
    deadline = time.monotonic() + timeout
    _check_reachable(address, timeout)
    # Measured with ray 2.60: ray.init(address="127.0.0.1:1") does not fail, it retries
    # forever in practice (GcsClient waits ~41 s per attempt, RAY_NUM_REDIS_GET_RETRIES=20
    # attempts, i.e. ~14 min, logging a warning every 5 s). Ray's knobs for this
    # (RAY_gcs_rpc_server_reconnect_timeout_s, RAY_NUM_REDIS_GET_RETRIES) are per-process
    # settings read once by the C++ core, and shortening them would also make a healthy
    # long run less tolerant of a GCS hiccup. So: a TCP check above catches a wrong
    # host/port at once, and ray.init runs in a daemon thread that we stop waiting for at
    # the deadline (it cannot be cancelled; it dies with the process), which also covers a
    # port that listens but is not a Ray head.
    outcome: dict[str, BaseException] = {}

    def connect() -> None:
        try:
            ray.init(address=address, log_to_driver=False)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    # ray.init installs a SIGTERM -> sys.exit handler (so atexit cleanup runs) only from the
    # main thread, and warns otherwise: install the same handler here, silence the warning.
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
    quiet = _DropMessage("SIGTERM handler is not set")
    ray_logger = logging.getLogger("ray._private.worker")
    ray_logger.addFilter(quiet)
    try:
        thread = threading.Thread(target=connect, name="rolltape-ray-init", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        ray_logger.removeFilter(quiet)
    if thread.is_alive():
        raise UsageError(f"Ray at '{address}' did not answer within {timeout:g} s; give the "
                         "address of a running Ray head node (ray start --head prints it) "
                         "with RAY_ADDRESS, or leave it unset to run Ray on this machine.")
    if "error" in outcome:
        raise UsageError(_connect_failure(address, outcome["error"])) from None


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _connect_failure(address: str, exc: BaseException) -> str:
    """One sentence for a failed ray.init; the real cause is often a few exceptions deep."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(e) for e in chain)
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
        # Ray >= 2.5x: `ray start` turns on token authentication; drivers must opt in.
        return (f"Ray at '{address}' refused the connection because it uses token "
                "authentication; set RAY_AUTH_MODE=token and make the cluster's token "
                "available (~/.ray/auth_token or RAY_AUTH_TOKEN).")
    return (f"Cannot connect to Ray at '{address}' ({_one_line(exc)}); check RAY_ADDRESS, "
            "or leave it unset to run Ray on this machine.")


def _check_reachable(address: str, timeout: float) -> None:
    """Fail fast when nothing listens at ``address`` (host:port, optionally ray://)."""
    if address == "auto":
        return  # Ray finds the address itself, and says so at once when it cannot
    client = address.startswith("ray://")
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = rest.rpartition(":")
    if not sep or not port_text.isdigit():
        host, port_text = rest, "10001" if client else "6379"  # Ray's default ports
    host = host.strip("[]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port_text)), timeout=min(timeout, 10.0)):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(f"Cannot reach Ray at '{address}' ({why}); start a cluster with "
                         "`ray start --head` and give its address with RAY_ADDRESS, or "
                         "leave it unset to run Ray on this machine.") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------------------
# Pass 1: tasks that return files and messages
# --------------------------------------------------------------------------------------

def _write_files(files: dict[str, bytes | dict[str, bytes]]) -> None:
    """Write a task's files at the caller's paths: bytes as a file, {name: bytes} as a
    folder (PNG frames), each atomically."""
    for path, data in files.items():
        if isinstance(data, dict):
            write_folder(path, data)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_bytes(path, data)


def run_on_ray(task: Callable[[Any], dict[str, Any]], tasks: Sequence[Any], limit: int
               ) -> Generator[tuple[str, Any], None, None]:
    """Run ``task(t)`` for each of ``tasks`` as Ray tasks, at most ``limit`` at once.

    A task answers {"files": {path: bytes}, "messages": [(kind, payload), ...]}: the files
    are written (atomically) before its messages are yielded, so a message may name them;
    or {"usage_error": text}, raised here as :class:`UsageError`.

    Raises:
        UsageError: a task found bad input.
        RunFailed: a task raised, or its worker died.
    """
    check_ray()
    ray = _import_ray()
    from ray.exceptions import RayError, RayTaskError

    # A rerun is harmless (files are written here), and survives a lost node.
    remote = ray.remote(max_retries=1)(task)
    todo = deque(tasks)
    running: list[Any] = []
    try:
        while todo or running:
            while todo and len(running) < max(1, limit):
                running.append(remote.remote(todo.popleft()))
            ready, running = ray.wait(running, num_returns=1)
            try:
                answer = ray.get(ready[0])
            except RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, UsageError):
                    raise UsageError(str(cause)) from None
                raise RunFailed(f"A Ray task failed: {_one_line(cause or exc)}.",
                                getattr(exc, "traceback_str", "")) from None
            except RayError as exc:
                raise RunFailed(f"A Ray worker died ({type(exc).__name__}: "
                                f"{_one_line(exc)}).") from None
            if "usage_error" in answer:
                raise UsageError(answer["usage_error"])
            _write_files(answer["files"])
            yield from answer["messages"]
    finally:
        for ref in running:  # an error or an abandoned generator: stop the rest
            ray.cancel(ref, force=True)


# --------------------------------------------------------------------------------------
# Pass 2: jobs tried backend after backend
# --------------------------------------------------------------------------------------

class RayBackendPool:
    """Runs ``jobs`` as Ray tasks ``task(backend, job, ship(job))``, each in a worker
    started with ``environment(backend, n)``'s variables, moving to the next backend of
    ``order`` when one fails (the same rule and attributes as the local
    :class:`~rolltape.executors.local.BackendPool`).

    Ray keeps a separate pool of worker processes per distinct ``runtime_env``, so every
    backend (and "no backend") gets processes of its own that read the variables when they
    start, before anything imports a GL library. A task answers (kind, payload, files):
    "done" (payload: the result; files written here at their paths, then ``on_done(i,
    payload)``), "backend_failed" (the backend is dead, the job retried on the next), or
    "usage_error" / "error" (kept in ``errors``). A worker that dies, or a task that runs
    past ``timeout`` s (it is then cancelled, which kills its worker), fails its backend.
    ``num_gpus`` is asked for by every task that has a backend."""

    def __init__(self, task: Callable[..., tuple[str, Any, Any]], jobs: Sequence[Any],
                 order: Sequence[str], timeout: float, *, needs_backend: Sequence[bool],
                 environment: Callable[[str | None, int], dict[str, str]],
                 ship: Callable[[Any], Any], on_done: Callable[[int, Any], None],
                 num_gpus: float = 0.0) -> None:
        self.task, self.jobs, self.timeout, self.num_gpus = task, jobs, timeout, num_gpus
        self.needs_backend, self.environment = needs_backend, environment
        self.ship, self.on_done = ship, on_done
        self.fallback = BackendFallback(order, len(jobs))
        self.errors: list[tuple[int, str, str]] = []

    def _task_options(self, backend: str | None, limit: int) -> dict[str, Any]:
        env = dict(self.environment(backend, limit))
        if backend is None:
            # Never share a worker with pass 1 (which may have imported torch).
            env["ROLLTAPE_RAY_WORKER"] = "no-backend"
        if os.environ.get("ROLLTAPE_FAULT"):  # test hook: reach the worker as local ones do
            env["ROLLTAPE_FAULT"] = os.environ["ROLLTAPE_FAULT"]
        options: dict[str, Any] = {"runtime_env": {"env_vars": env}}
        if backend and self.num_gpus:
            options["num_gpus"] = self.num_gpus
        return options

    def _died(self, i: int, backend: str | None, reason: str, pending: deque[int]) -> None:
        if backend is None:  # no backend to blame: an error of this job
            self.errors.append((i, "error", reason))
            return
        self.fallback.died(i, backend, reason)
        pending.appendleft(i)

    def run(self) -> None:
        check_ray()
        ray = _import_ray()
        from ray.exceptions import RayError, RayTaskError, WorkerCrashedError

        remote = ray.remote(max_retries=0)(self.task)  # a crash is handled here, by fallback
        cluster = ray.cluster_resources()
        # The hang timeout runs from submission, so only submit what can start at once.
        limit = int(cluster.get("CPU", 1))
        if self.num_gpus:
            limit = min(limit, int(cluster.get("GPU", 0) / self.num_gpus))
        limit = max(1, limit)
        pending = deque(range(len(self.jobs)))
        shipped: dict[int, Any] = {}  # put once, reused by a retry on the next backend
        running: dict[Any, tuple[int, str | None, float]] = {}
        try:
            while pending or running:
                while pending and len(running) < limit:
                    i = pending.popleft()
                    backend = self.fallback.backend_for(self.needs_backend[i])
                    if backend == "":  # every backend has failed
                        continue
                    if i not in shipped:
                        shipped[i] = ray.put(self.ship(self.jobs[i]))
                    ref = remote.options(**self._task_options(backend, limit)).remote(
                        backend, self.jobs[i], shipped[i])
                    running[ref] = (i, backend, time.monotonic())
                if not running:
                    break
                ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
                for ref in ready:
                    i, backend, _ = running.pop(ref)
                    try:
                        kind, payload, files = ray.get(ref)
                    except RayTaskError as exc:
                        cause = getattr(exc, "cause", None) or exc
                        kind, payload, files = "error", f"{type(cause).__name__}: {cause}", None
                    except WorkerCrashedError:  # a GL crash (or a lost node) killed it
                        self._died(i, backend, "crash: the Ray worker died", pending)
                        continue
                    except RayError as exc:  # e.g. the runtime_env could not be set up
                        self._died(i, backend, f"Ray could not run the task "
                                   f"({type(exc).__name__}: {_one_line(exc)})", pending)
                        continue
                    if kind == "backend_failed":
                        self._died(i, backend, payload, pending)
                    elif kind == "done":
                        _write_files(files)
                        self.on_done(i, payload)
                    else:
                        self.errors.append((i, kind, payload))
                now = time.monotonic()
                for ref, (i, backend, started) in list(running.items()):
                    if now - started > self.timeout:
                        ray.cancel(ref, force=True)  # kills the worker, and its GL context
                        del running[ref]
                        self._died(i, backend, f"it hung (no result after "
                                   f"{self.timeout:.0f} s)", pending)
        finally:
            for ref in running:
                ray.cancel(ref, force=True)


# --------------------------------------------------------------------------------------
# The executor
# --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RayOptions:
    """The Ray executor's own options, offered by every verb that takes ``--executor``."""

    address: str | None = flag(
        None, "With --executor ray: the cluster (host:port, auto, ray://host:10001); default "
        "RAY_ADDRESS, else a private local Ray.", panel=SCALE, names=("--ray-address",))
    render_gpus: float = flag(0.0, "With --executor ray: GPUs each render task asks for.",
                              panel=SCALE, names=("--ray-render-gpus",))


class RayExecutor:
    """Ray tasks, on this machine or a cluster (``--executor ray``): ``address`` as
    :func:`check_ray` takes it, ``render_gpus`` the GPUs each render task asks for."""

    name = "ray"
    runs_workers = warms_workers = splits_segments = shares_disk = False
    OPTIONS = RayOptions

    def __init__(self, address: str | None = None, render_gpus: float = 0.0) -> None:
        check_gpus("--ray-render-gpus", render_gpus)
        self.address, self.render_gpus = address, render_gpus

    def check(self) -> None:
        check_ray(self.address)

    def run_shares(self, work: ShareWork, shares: Sequence[Any]
                   ) -> Generator[tuple[str, Any], None, None]:
        if work.task is None:
            raise UsageError("This work runs in worker processes of this machine only; drop "
                             "--executor ray.")
        return run_on_ray(work.task, work.cut(list(shares)), limit=len(shares))

    def render_pool(self, work: RenderWork, jobs: Sequence[Any], order: Sequence[str],
                    workers: int, timeout: float, *,
                    on_progress: Callable[[int, int], None],
                    on_done: Callable[[int, Any], None], cancel: Any = None,
                    warm: Sequence[Any] = ()) -> RayBackendPool:
        if work.python is not None:  # a benchmark venv's tapes: its interpreter is here
            raise UsageError("These tapes are drawn by render workers of a benchmark's venv "
                             "on this machine, which Ray does not start; drop --executor ray "
                             "(or ask for no video with --video 0).")
        self.check()  # reuses the session evaluate() opened
        return RayBackendPool(work.task, jobs, order, timeout,
                              needs_backend=work.needs_backend, environment=work.environment,
                              ship=work.ship, on_done=on_done, num_gpus=self.render_gpus)

    def warm_render_workers(self, work: RenderWork, backend: str, workers: int
                            ) -> list[Any]:
        return []  # Ray keeps its own pools of workers
