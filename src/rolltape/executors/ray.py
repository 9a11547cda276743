"""The Ray executor: pass 1 and pass 2 as Ray tasks, on one machine or on a cluster.

Selected with ``executor="ray"`` (``--executor ray``); the local executor never imports
this module's dependencies, and importing this module never imports ray (every ``import
ray`` is inside a function), so ``import rolltape`` stays light.

What the local executor guarantees holds here too:

- Pass 1 runs :func:`rollout.run_policy_job` itself, with no GL variable in the process,
  so a tape is the same whichever executor made it (all arrays bitwise; the header differs
  only in ``wall_s``).
- Pass 2 gives every request a task whose ``runtime_env`` sets ``MUJOCO_GL`` (and
  ``PYOPENGL_PLATFORM``): Ray keeps a separate pool of worker processes per distinct
  runtime_env and starts each with those variables, so mujoco reads the right backend when
  it is first imported. A backend that fails (``BackendFailure``), crashes its worker or
  hangs past ``timeout`` is marked dead and the request is retried on the next one.

On a multi-machine cluster a task runs on another machine and cannot see the driver's disk,
so tapes and videos travel as bytes: a task writes into a temporary folder on its own node,
reads the files back and returns them; the driver writes them atomically (temporary file,
then ``os.replace``) at the paths the caller asked for. Policy files (checkpoints,
VecNormalize statistics, policy modules) are still read by the task from its own node, so
on a cluster they must sit at the same path on every node (shared storage).

May import: Ray (lazily), the job types of pass 1 and pass 2 it ships as tasks. Never: the
orchestrator.

Example (not run: it needs a Ray cluster):
    >>> check_ray()  # starts a local Ray instance, or connects to RAY_ADDRESS
    >>> for kind, payload in run_pass1_on_ray(split_jobs(jobs, 4)):
    ...     print(kind)
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from rolltape.errors import RunFailed, UsageError, check_choice
from rolltape.files import write_bytes

if TYPE_CHECKING:  # only for annotations: the real imports happen where they are used
    from rolltape.pass2.replay import RenderRequest, RenderResult
    from rolltape.pass1.rollout import PolicyJob

__all__ = ["check_ray", "render_on_ray", "run_pass1_on_ray"]

_INSTALL_HINT = "install the ray extra: pip install 'rolltape[ray]'"
_GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM")
_EPISODES_PER_TASK = 4  # at most; small tasks give progress, each task reloads the policy
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
    chain, seen = [], exc
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
# Files as bytes (a task's node is not the driver's)
# --------------------------------------------------------------------------------------

def _write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` at ``path`` (its folder made if need be), atomically."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, data)


def _place_folder(path: Path, files: dict[str, bytes]) -> None:
    """Put a folder of PNG frames at ``path`` atomically (replacing an old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        old = None
        if os.path.lexists(path):
            if path.is_dir():
                old = path.with_name(f"{path.name}.old-{os.getpid()}")
                os.rename(path, old)
            else:
                os.remove(path)
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_output(path: Path) -> bytes | dict[str, bytes]:
    if path.is_dir():  # PNG frames
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    return path.read_bytes()


def _unmap(text: str, paths: dict[str, str]) -> str:
    """Name the caller's paths, not the task's temporaries, in a message."""
    for local, original in paths.items():
        text = text.replace(local, original)
    return text


def _clear_gl_variables() -> None:
    # Only meaningful before mujoco is imported; a reused worker has already chosen.
    if "mujoco" not in sys.modules:
        for var in _GL_VARIABLES:
            os.environ.pop(var, None)


def _forget_mujoco_warnings() -> None:
    """A Ray worker outlives a run (a local worker does not): report each task's own
    MuJoCo warnings, not those of whatever ran in this process before."""
    from rolltape import envs

    envs._MUJOCO_WARNINGS.clear()


# --------------------------------------------------------------------------------------
# Pass 1
# --------------------------------------------------------------------------------------

def _pass1_task(jobs: list[PolicyJob]) -> dict[str, Any]:
    """Runs on a Ray worker: play ``jobs`` exactly as a local pass-1 worker would, with
    tapes saved in a temporary folder on this node and returned as bytes."""
    # Pass 1 never renders: a GL backend in the environment could only add risk.
    _clear_gl_variables()
    _forget_mujoco_warnings()
    from rolltape.envs import mujoco_warnings
    from rolltape.pass1.rollout import run_policy_job

    tmp = Path(tempfile.mkdtemp(prefix="rolltape-pass1-"))
    messages: list[tuple[str, Any]] = []
    originals: dict[str, str] = {}
    try:
        for job in jobs:
            local = []
            for ep in job.episodes:
                path = str(tmp / f"{len(originals):05d}-{Path(ep.tape_path).name}")
                originals[path] = ep.tape_path
                local.append(replace(ep, tape_path=path))
            run_policy_job(replace(job, episodes=local), messages.append)
        out: list[tuple[str, Any]] = []
        for kind, payload in messages:
            if kind == "episode":
                local_path = payload["tape"]
                payload = {**payload, "tape": originals[local_path]}
                out.append(("tape", (originals[local_path], Path(local_path).read_bytes())))
            out.append((kind, payload))
        return {"messages": out, "warnings": mujoco_warnings()}
    except UsageError as exc:
        # Returned, not raised: the driver re-raises it as a plain UsageError.
        return {"usage_error": _unmap(str(exc), originals)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pass1_tasks(chunks: list[list[PolicyJob]]) -> list[list[PolicyJob]]:
    """Cut each worker's share into tasks of a few episodes, dealt round-robin across the
    chunks so every worker's share advances together."""
    total = sum(len(job.episodes) for chunk in chunks for job in chunk)
    size = max(1, min(_EPISODES_PER_TASK, math.ceil(total / (4 * max(1, len(chunks))))))
    per_chunk = [[[replace(job, episodes=job.episodes[k:k + size])]
                  for job in chunk for k in range(0, len(job.episodes), size)]
                 for chunk in chunks]
    tasks = []
    for row in range(max((len(c) for c in per_chunk), default=0)):
        tasks.extend(c[row] for c in per_chunk if row < len(c))
    return tasks


def run_pass1_on_ray(chunks: list[list[PolicyJob]]) -> Iterator[tuple[str, Any]]:
    """Run pass 1 as Ray tasks; yield the messages :func:`rollout.run_pass1` yields:
    ("policy", description with "role"), ("episode", row), ("done", MuJoCo warnings).

    At most ``len(chunks)`` tasks (the ``--workers`` count) run at once. Each episode's
    tape is written at its ``tape_path`` before its row is yielded.

    Raises:
        UsageError: bad input found inside a task (same message as the local executor).
        RunFailed: a task failed otherwise, or its worker died.
    """
    check_ray()
    ray = _import_ray()
    from ray.exceptions import RayError, RayTaskError

    # A rerun is harmless (tapes are written by the driver), and survives a lost node.
    remote = ray.remote(max_retries=1)(_pass1_task)
    todo = deque(_pass1_tasks(chunks))
    limit = max(1, len(chunks))
    running: list[Any] = []
    try:
        while todo or running:
            while todo and len(running) < limit:
                running.append(remote.remote(todo.popleft()))
            ready, running = ray.wait(running, num_returns=1)
            try:
                answer = ray.get(ready[0])
            except RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, UsageError):
                    raise UsageError(str(cause)) from None
                raise RunFailed(f"Pass 1 failed: {_one_line(cause or exc)}.",
                                getattr(exc, "traceback_str", "")) from None
            except RayError as exc:
                raise RunFailed(f"A pass-1 worker died ({type(exc).__name__}: "
                                f"{_one_line(exc)}).") from None
            if "usage_error" in answer:
                raise UsageError(answer["usage_error"])
            for kind, payload in answer["messages"]:
                if kind == "tape":
                    _write_atomic(*payload)
                else:
                    yield kind, payload
            yield "done", answer["warnings"]
    finally:
        for ref in running:  # an error or an abandoned generator: stop the rest
            ray.cancel(ref, force=True)


# --------------------------------------------------------------------------------------
# Pass 2
# --------------------------------------------------------------------------------------

# A Ray worker runs many tasks; like a local render worker it keeps its envs and GL
# contexts across tapes. One worker serves one runtime_env, hence one backend.
_REPLAYERS: dict[str | None, Any] = {}


def _render_task(backend: str | None, req: RenderRequest, tape: bytes | None,
                 formats: tuple[str, ...]) -> tuple[str, Any, Any]:
    """Runs on a Ray worker: replay one tape from its bytes, return (kind, payload, files).

    kind is "done" (payload: RenderResult with the caller's paths; files: one bytes or
    {name: bytes} per output), "backend_failed", "usage_error" or "error" (payload: text).
    """
    from rolltape.pass2.backends import _mujoco_gl_already_read, gl_environment, select_backend_in_this_process
    from rolltape.pass2.replay import BackendFailure, _inject_fault, _Replayer

    if backend is None:
        _clear_gl_variables()  # verification draws nothing and needs no GL
    else:
        wanted = gl_environment(backend)["MUJOCO_GL"]
        if os.environ.get("MUJOCO_GL") != wanted:
            return ("backend_failed", f"the Ray worker started with MUJOCO_GL="
                    f"{os.environ.get('MUJOCO_GL')!r}, not {wanted!r} (runtime_env ignored)",
                    None)
        try:
            select_backend_in_this_process(backend)  # before anything imports mujoco
        except RuntimeError as exc:
            return "backend_failed", str(exc), None
        _inject_fault(backend)  # test hook (ROLLTAPE_FAULT), as in a local render worker
        try:
            import mujoco  # noqa: F401  (the import itself fails for a missing GL library)
        except Exception as exc:
            return "backend_failed", f"import mujoco failed: {exc}", None
        read = _mujoco_gl_already_read()
        if read != wanted:
            return "backend_failed", f"mujoco was imported with MUJOCO_GL={read!r}", None
    _forget_mujoco_warnings()
    tmp = Path(tempfile.mkdtemp(prefix="rolltape-render-"))
    local_tape = tmp / Path(req.tape).name
    paths = {str(local_tape): req.tape}
    outputs = []
    for k, (original, fmt) in enumerate(zip(req.outputs, formats)):
        # The suffix (or its absence, for PNG frames) tells the writer the format.
        local = tmp / (f"out{k}.{fmt}" if fmt != "png" else f"out{k}")
        paths[str(local)] = original
        outputs.append(str(local))
    try:
        if tape is not None:  # None: the caller's tape does not exist; let Tape.load say so
            local_tape.write_bytes(tape)
        replayer = _REPLAYERS.get(backend)
        if replayer is None:
            replayer = _REPLAYERS[backend] = _Replayer(backend, progress=lambda n: None)
        try:
            result = replayer.run(replace(req, tape=str(local_tape), outputs=tuple(outputs),
                                          overwrite=True))
        except BackendFailure as exc:
            _REPLAYERS.pop(backend, None)
            replayer.close()
            return "backend_failed", str(exc), None
        files = [_read_output(Path(p)) for p in outputs]
        return "done", replace(result, tape=req.tape, outputs=tuple(req.outputs)), files
    except UsageError as exc:
        return "usage_error", _unmap(str(exc), paths), None
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        return "error", _unmap(text, paths), None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _task_env(backend: str | None) -> dict[str, str]:
    """The runtime_env variables of a render task for ``backend``."""
    from rolltape.pass2.backends import gl_environment

    # Verify-only tasks get a runtime_env of their own too, so they never share a worker
    # with pass 1 (which may have imported torch) and keep torch_loaded meaningful.
    env = dict(gl_environment(backend)) if backend else {"ROLLTAPE_RAY_WORKER": "verify"}
    if backend:  # drawing: no display or sound probing by pygame, as in local workers
        from rolltape.pass2.replay import HEADLESS_SDL

        env.update({k: v for k, v in HEADLESS_SDL.items() if k not in os.environ})
    if os.environ.get("ROLLTAPE_FAULT"):  # test hook: reach the worker as it reaches local ones
        env["ROLLTAPE_FAULT"] = os.environ["ROLLTAPE_FAULT"]
    return env


def render_on_ray(requests: Sequence[RenderRequest], backends: Sequence[str],
                  timeout: float = 120.0,
                  on_result: Callable[[int, RenderResult], None] | None = None,
                  num_gpus: float = 0) -> list[RenderResult | None]:
    """Replay each request in its own Ray task; return one result per request, in order.

    Backends are tried in order as :func:`render.render` tries them: a request whose task
    raises ``BackendFailure``, whose worker dies or which runs past ``timeout`` seconds
    (it is then cancelled) marks that backend dead and is retried on the next one; each
    (backend, reason) is kept in the result's ``failures``. Output files are written here,
    at the requested paths. ``num_gpus`` is asked for by every task that draws.

    Raises:
        UsageError: after every request has finished, when some failed on every backend
            (each reason is listed) or hit bad input.
    """
    from rolltape.pass2.encode import format_from_path, open_writer
    from rolltape.pass2.replay import MODES

    check_ray()
    ray = _import_ray()
    from ray.exceptions import RayError, RayTaskError, WorkerCrashedError

    order = list(backends)
    for req in requests:
        check_choice("mode", req.mode, MODES)
    remote = ray.remote(max_retries=0)(_render_task)  # a crash is handled here, by fallback
    results: list[RenderResult | None] = [None] * len(requests)
    failures: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(requests))}
    dead: list[tuple[str, str]] = []
    usage_errors: list[str] = []
    formats: dict[int, tuple[str, ...]] = {}
    tapes: dict[int, Any] = {}
    pending: deque[int] = deque()
    for i, req in enumerate(requests):
        try:
            formats[i] = tuple(format_from_path(p) for p in req.outputs)
            for path in req.outputs:
                # The same checks (and messages) a local writer makes before it starts.
                open_writer(path, fps=req.fps or 30, overwrite=req.overwrite).abort()
        except UsageError as exc:
            usage_errors.append(str(exc))
            continue
        pending.append(i)
    cluster = ray.cluster_resources()
    # The hang timeout runs from submission, so only submit what can start at once.
    limit = int(cluster.get("CPU", 1))
    if num_gpus:
        limit = min(limit, int(cluster.get("GPU", 0) / num_gpus))
    limit = max(1, limit)
    running: dict[Any, tuple[int, str | None, float]] = {}

    def backend_for(req: RenderRequest) -> str | None:
        if not req.outputs:
            return None
        alive = [b for b in order if b not in {d for d, _ in dead}]
        return alive[0] if alive else ""

    def backend_died(i: int, backend: str | None, reason: str) -> None:
        if backend is None:  # verify only: no backend to blame, report it as an error
            usage_errors.append(f"Rendering '{requests[i].tape}' failed: {reason} "
                                "(rerun with the same command to reproduce).")
            return
        if backend not in {d for d, _ in dead}:
            dead.append((backend, reason))
        failures[i].append((backend, reason))
        pending.appendleft(i)

    try:
        while pending or running:
            while pending and len(running) < limit:
                i = pending.popleft()
                req = requests[i]
                backend = backend_for(req)
                if backend == "":  # every backend has failed
                    continue
                if i not in tapes:  # put once, reused by a retry on the next backend
                    tape_file = Path(req.tape)
                    tapes[i] = ray.put(tape_file.read_bytes()) if tape_file.is_file() else None
                options: dict[str, Any] = {"runtime_env": {"env_vars": _task_env(backend)}}
                if backend and num_gpus:
                    options["num_gpus"] = num_gpus
                ref = remote.options(**options).remote(backend, req, tapes[i], formats[i])
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
                except WorkerCrashedError:  # a GL crash (or a lost node) killed the worker
                    backend_died(i, backend, "crash: the Ray worker died while rendering")
                    continue
                except RayError as exc:  # e.g. the runtime_env could not be set up
                    backend_died(i, backend, f"Ray could not run the task "
                                 f"({type(exc).__name__}: {_one_line(exc)})")
                    continue
                if kind == "backend_failed":
                    backend_died(i, backend, payload)
                elif kind == "usage_error":
                    usage_errors.append(payload)
                elif kind == "error":
                    usage_errors.append(f"Rendering '{requests[i].tape}' failed: "
                                        f"{payload.splitlines()[0]} (rerun with the same "
                                        "command to reproduce).")
                else:
                    for path, data in zip(requests[i].outputs, files):
                        if isinstance(data, dict):
                            _place_folder(Path(path), data)
                        else:
                            _write_atomic(path, data)
                    result = replace(payload, failures=tuple(failures[i]))
                    results[i] = result
                    if on_result is not None:
                        on_result(i, result)
            now = time.monotonic()
            for ref, (i, backend, started) in list(running.items()):
                if now - started > timeout:
                    ray.cancel(ref, force=True)  # kills the worker, and its GL context
                    del running[ref]
                    backend_died(i, backend, f"it hung (no result after {timeout:.0f} s)")
    finally:
        for ref in running:
            ray.cancel(ref, force=True)

    problems = list(usage_errors)
    unfinished = [i for i, r in enumerate(results)
                  if r is None and requests[i].outputs and i in formats]
    if unfinished and order and len(dead) == len(order):
        reasons = "; ".join(f"{b}: {why}" for b, why in dead)
        problems.append(f"Every GL backend failed ({reasons}); run `rolltape doctor` to see "
                        "what each needs.")
    if problems:
        raise UsageError(" ".join(problems))
    return results
