"""Pass 2: replay tapes in isolated render processes, verify them, and encode their frames.

A render worker is a spawned process that chooses its GL backend (``MUJOCO_GL``) before
MuJoCo is imported, imports the simulator and the encoder but never a policy framework,
and replays tapes one after another, keeping its envs (and their GL contexts) across tapes.

Two ways to draw a tape:

- ``resim``: reset with the tape's seed and step its actions; every step's reward,
  termination and observation digest is compared with pass 1. Frames = steps + 1.
- ``restore`` (MuJoCo): set each recorded physics state and draw it; shows what pass 1
  did even where re-simulation would differ. ``auto`` resims and falls back to restore.
  Its frames differ slightly from resim's: after a step Gymnasium draws body poses computed
  at the start of the last physics substep, restore draws the recorded state itself.

The parent tries backends in order (egl, then osmesa by default). A worker that crashes,
hangs or draws blank frames fails only its current tape, which is retried on the next
backend; the reason is kept.

Example:
    >>> results = render([RenderRequest("runs/x/tapes/policy-0000.npz", ["ep0.mp4"])])
    >>> results[0].verified, results[0].frames
    (True, 1001)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence

import numpy as np

from .backends import (DEFAULT_ORDER, gl_environment, parse_backends,
                       select_backend_in_this_process)
from .errors import UsageError
from .executors import describe_exit, spawn_worker, stop_worker

MODES = ("resim", "restore", "auto")


@dataclass(frozen=True)
class RenderRequest:
    """One tape to replay, and what to make of it (no outputs: verify only, nothing drawn)."""

    tape: str
    outputs: tuple[str, ...] = ()
    mode: str = "resim"
    width: int | None = None
    height: int | None = None
    camera: str | None = None
    fps: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    overwrite: bool = False
    env_id: str | None = None  # replay against another env than the tape's (checked)


@dataclass(frozen=True)
class Divergence:
    """The first step where the replay differs from pass 1."""

    step: int
    field: str
    expected: Any
    got: Any
    diff: float | None = None

    def describe(self) -> str:
        extra = f" (difference {self.diff:.3g})" if self.diff is not None else ""
        return f"step {self.step}: {self.field} was {self.expected!r} in pass 1, {self.got!r} on replay{extra}"


@dataclass(frozen=True)
class RenderResult:
    """What pass 2 did with one tape."""

    tape: str
    outputs: tuple[str, ...]
    mode: str  # the mode that drew the frames: "resim", "restore" or "verify"
    backend: str | None
    steps: int
    frames: int
    verified: bool | None  # None when nothing was re-simulated (restore)
    divergence: Divergence | None
    replay_return: float | None
    seconds: float
    failures: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (backend, reason)
    warnings: tuple[str, ...] = ()  # what MuJoCo warned about in the worker
    torch_loaded: bool = False  # isolation check: a render worker must never import torch

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["divergence"] = asdict(self.divergence) if self.divergence else None
        row["divergence_text"] = self.divergence.describe() if self.divergence else None
        return json.loads(json.dumps(row, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class BackendFailure(Exception):
    """The GL backend cannot draw here (no context, blank frames): try the next one."""


# --------------------------------------------------------------------------------------
# In the render worker
# --------------------------------------------------------------------------------------

class _Replayer:
    """Replays tapes inside one worker, keeping envs (and their GL contexts) for reuse."""

    def __init__(self, backend: str | None, progress: Callable[[int], None]) -> None:
        self.backend = backend
        self.progress = progress
        self._envs: dict[str, Any] = {}
        self._drawn_once: set[str] = set()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    def _env(self, spec: dict[str, Any], req: RenderRequest, draw: bool) -> tuple[str, Any]:
        from .envs import make_env

        key = json.dumps([spec, draw, req.width, req.height, req.camera], sort_keys=True)
        if key not in self._envs:
            self._envs[key] = make_env(spec, "rgb_array" if draw else None,
                                       width=req.width, height=req.height, camera=req.camera)
        return key, self._envs[key]

    def _draw(self, key: str, env: Any) -> np.ndarray:
        if key in self._drawn_once:
            return env.render()
        # The first frame of a new context is where a broken backend shows itself.
        from gymnasium.error import DependencyNotInstalled

        try:
            frame = env.render()
        except DependencyNotInstalled as exc:
            raise UsageError(f"Env '{env.spec.id}' cannot draw here: {exc}.") from None
        except Exception as exc:
            raise BackendFailure(f"could not draw: {type(exc).__name__}: {exc}") from None
        if frame is None or frame.size == 0 or frame.min() == frame.max():
            raise BackendFailure("it rendered blank frames")
        self._drawn_once.add(key)
        return frame

    def run(self, req: RenderRequest) -> RenderResult:
        from .encode import open_writer
        from .envs import mujoco_warnings
        from .tape import Tape

        start = time.perf_counter()
        tape = Tape.load(req.tape)
        spec = dict(tape.env)
        if req.env_id is not None:
            spec["id"] = req.env_id
        draw = bool(req.outputs)
        key, env = self._env(spec, req, draw)
        _check_same_env(tape, env, req.tape)
        mode = req.mode
        if mode == "restore" and not tape.has_state:
            raise UsageError(f"Tape '{req.tape}' has no MuJoCo state, so it cannot be drawn in "
                             "restore mode; use --mode resim.")
        fps = req.fps or float(env.metadata.get("render_fps") or 30)
        writers = [open_writer(path, fps=fps, overwrite=req.overwrite) for path in req.outputs]
        try:
            divergence, frames, replay_return = None, 0, None
            if mode in ("resim", "auto"):
                divergence, frames, replay_return = self._resim(tape, key, env, writers, req, draw)
                if divergence is not None and mode == "auto" and tape.has_state and draw:
                    for w in writers:
                        w.abort()
                    writers = [open_writer(p, fps=fps, overwrite=req.overwrite)
                               for p in req.outputs]
                    mode = "restore"
                    frames = self._restore(tape, key, env, writers)
                else:
                    mode = "resim" if draw else "verify"
            else:
                frames = self._restore(tape, key, env, writers)
            for w in writers:
                w.close()
        except BaseException:
            for w in writers:
                w.abort()
            raise
        verified = None if req.mode == "restore" else divergence is None
        return RenderResult(
            tape=req.tape, warnings=tuple(mujoco_warnings()), outputs=tuple(req.outputs), mode=mode,
            backend=self.backend if draw else None, steps=tape.length, frames=frames,
            verified=verified, divergence=divergence, replay_return=replay_return,
            seconds=time.perf_counter() - start, torch_loaded="torch" in sys.modules,
        )

    def _resim(self, tape: Any, key: str, env: Any, writers: list[Any], req: RenderRequest,
               draw: bool) -> tuple[Divergence | None, int, float]:
        from .envs import obs_digest

        def emit() -> None:
            frame = self._draw(key, env)
            for w in writers:
                w.write(frame)

        divergence: Divergence | None = None
        obs, _ = env.reset(seed=tape.seed, options=tape.options)
        if tape.obs_digest is not None and obs_digest(obs) != int(tape.obs_digest[0]):
            divergence = Divergence(0, "reset observation", "pass-1 digest", "another digest")
        frames = 0
        if draw:
            emit()
            frames = 1
        rewards = []
        for t in range(tape.length):
            obs, reward, term, trunc, _ = env.step(tape.actions[t])
            rewards.append(float(reward))
            if divergence is None:
                divergence = _compare_step(tape, t, float(reward), bool(term), bool(trunc),
                                           obs, req.rtol, req.atol)
            if draw:
                emit()
                frames += 1
            if (t + 1) % 25 == 0:
                self.progress(t + 1)
            if (term or trunc) and t + 1 < tape.length:
                break  # ended early: already reported as a divergence at this step
        if not draw:
            frames = 0
        return divergence, frames, math.fsum(rewards)

    def _restore(self, tape: Any, key: str, env: Any, writers: list[Any]) -> int:
        from .envs import restore_state

        env.reset(seed=tape.seed, options=tape.options)
        for t in range(tape.length + 1):
            restore_state(env, tape.qpos[t], tape.qvel[t])
            frame = self._draw(key, env)
            for w in writers:
                w.write(frame)
            if (t + 1) % 25 == 0:
                self.progress(t + 1)
        return tape.length + 1


def _compare_step(tape: Any, t: int, reward: float, term: bool, trunc: bool, obs: Any,
                  rtol: float, atol: float) -> Divergence | None:
    from .envs import obs_digest

    expected = float(tape.rewards[t])
    same = reward == expected if rtol == 0 and atol == 0 else math.isclose(
        reward, expected, rel_tol=rtol, abs_tol=atol)
    if not same:
        return Divergence(t, "reward", expected, reward, abs(reward - expected))
    if term != bool(tape.terminated[t]):
        return Divergence(t, "terminated", bool(tape.terminated[t]), term)
    if trunc != bool(tape.truncated[t]):
        return Divergence(t, "truncated", bool(tape.truncated[t]), trunc)
    # With a tolerance the observation may differ in its last bits; only rewards are judged.
    if tape.obs_digest is not None and rtol == 0 and atol == 0:
        if obs_digest(obs) != int(tape.obs_digest[t + 1]):
            return Divergence(t, "observation", "pass-1 digest", "another digest")
    return None


def _check_same_env(tape: Any, env: Any, path: str) -> None:
    """Refuse to replay a tape on an env whose action or state shapes differ from its own."""
    from .envs import mujoco_data

    space = env.action_space
    shape = tuple(getattr(space, "shape", None) or ())
    recorded = tuple(tape.actions.shape[1:])
    data = mujoco_data(env)
    mismatch = None
    if shape != recorded:
        mismatch = f"actions of shape {recorded}, the env takes {shape}"
    elif tape.has_state and data is not None and tape.qpos.shape[1] != data.qpos.shape[0]:
        mismatch = f"{tape.qpos.shape[1]} position coordinates, the env has {data.qpos.shape[0]}"
    if mismatch:
        raise UsageError(
            f"Tape '{path}' was recorded on {tape.env_id} and does not fit "
            f"{env.spec.id if env.spec else 'this env'} ({mismatch}); render it with its own env."
        )


def render_worker(backend: str | None, conn: Any) -> None:
    """Entry point of a spawned render process: one GL backend, many tapes."""
    try:
        if backend is not None:
            select_backend_in_this_process(backend)  # before anything imports mujoco
            _inject_fault(backend)
            try:
                import mujoco  # noqa: F401  (the import itself fails for a missing GL library)
            except Exception as exc:
                conn.send(("backend_failed", None, f"import mujoco failed: {exc}"))
                return
        replayer = _Replayer(backend, lambda n: conn.send(("progress", current[0], n)))
        current: list[Any] = [None]
        while True:
            msg = conn.recv()
            if msg is None:
                break
            job_id, req = msg
            current[0] = job_id
            try:
                conn.send(("done", job_id, replayer.run(req)))
            except BackendFailure as exc:
                conn.send(("backend_failed", job_id, str(exc)))
                return
            except UsageError as exc:
                conn.send(("usage_error", job_id, str(exc)))
            except Exception as exc:
                conn.send(("error", job_id, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        replayer.close()
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass


def _inject_fault(backend: str) -> None:
    """Test hook: ROLLTAPE_FAULT=crash:egl or hang:egl makes that backend's worker misbehave.

    A real GL segfault or driver hang cannot be caused on demand, so the fallback tests use
    this; it does nothing unless the variable is set.
    """
    fault = os.environ.get("ROLLTAPE_FAULT", "")
    kind, _, which = fault.partition(":")
    if which != backend:
        return
    if kind == "crash":
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        time.sleep(3600)


# --------------------------------------------------------------------------------------
# In the parent
# --------------------------------------------------------------------------------------

@dataclass
class _Slot:
    worker: Any = None
    backend: str | None = None
    job: int | None = None
    last_heard: float = 0.0


def render(
    requests: Sequence[RenderRequest],
    *,
    backends: str | Sequence[str] = DEFAULT_ORDER,
    workers: int = 1,
    timeout: float = 120.0,
    executor: str = "local",
    on_progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, RenderResult], None] | None = None,
) -> list[RenderResult | None]:
    """Replay each request in spawned workers; return one result per request, in order.

    A request that fails on every backend gets None and the reasons are raised at the end
    as one :class:`UsageError` (after every other request has finished), so that results
    already made are kept. ``on_progress(i, frames_done)`` and ``on_result(i, result)`` let
    a caller show progress and save results as they come.
    """
    order = list(parse_backends(backends))
    for req in requests:
        if req.mode not in MODES:
            raise UsageError(f"Unknown mode '{req.mode}'; use one of {', '.join(MODES)}.")
    if workers < 1:
        raise UsageError(f"--render-workers must be at least 1, got {workers}.")
    if executor == "ray":
        from .ray_executor import render_on_ray

        return render_on_ray(requests, order, timeout=timeout, on_result=on_result)
    results: list[RenderResult | None] = [None] * len(requests)
    pending = deque(range(len(requests)))
    failures: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(requests))}
    dead: list[tuple[str, str]] = []  # backends that failed, with why
    usage_errors: list[str] = []
    slots = [_Slot() for _ in range(min(workers, max(1, len(requests))))]

    def backend_for(req: RenderRequest) -> str | None:
        if not req.outputs:
            return None  # verification draws nothing and needs no GL
        alive = [b for b in order if b not in {d for d, _ in dead}]
        return alive[0] if alive else ""

    def kill(slot: _Slot) -> None:
        if slot.worker is not None:
            slot.worker.conn.close()
            stop_worker(slot.worker, grace=0.1)
        slot.worker = slot.job = None

    def backend_died(slot: _Slot, reason: str) -> None:
        i = slot.job
        if slot.backend is not None:
            if slot.backend not in {d for d, _ in dead}:
                dead.append((slot.backend, reason))
            if i is not None:
                failures[i].append((slot.backend, reason))
        if i is not None:
            pending.appendleft(i)
        kill(slot)

    try:
        while pending or any(s.job is not None for s in slots):
            for slot in slots:
                if slot.job is not None or not pending:
                    continue
                i = pending.popleft()
                backend = backend_for(requests[i])
                if backend == "":  # every backend has failed
                    continue
                if slot.worker is None or slot.backend != backend or not slot.worker.alive():
                    kill(slot)
                    env = gl_environment(backend) if backend else {}
                    slot.worker = spawn_worker(render_worker, backend, env=env)
                    slot.backend = backend
                slot.job, slot.last_heard = i, time.monotonic()
                slot.worker.conn.send((i, requests[i]))
            busy = [s for s in slots if s.job is not None]
            if not busy:
                break
            ready = wait([s.worker.conn for s in busy], timeout=0.5)
            for slot in busy:
                if slot.worker.conn in ready:
                    _handle(slot, requests, results, failures, usage_errors, backend_died,
                            on_progress, on_result)
                elif time.monotonic() - slot.last_heard > timeout:
                    backend_died(slot, f"it hung (no progress for {timeout:.0f} s)")
    finally:
        for slot in slots:
            if slot.worker is not None:
                stop_worker(slot.worker)

    problems = list(usage_errors)
    unfinished = [i for i, r in enumerate(results) if r is None and requests[i].outputs]
    if unfinished and len(dead) == len(order):
        reasons = "; ".join(f"{b}: {why}" for b, why in dead)
        problems.append(f"Every GL backend failed ({reasons}); run `rolltape doctor` to see "
                        "what each needs.")
    if problems:
        raise UsageError(" ".join(problems))
    return results


def _handle(slot: _Slot, requests: Sequence[RenderRequest], results: list[RenderResult | None],
            failures: dict[int, list[tuple[str, str]]], usage_errors: list[str],
            backend_died: Callable[[_Slot, str], None],
            on_progress: Callable[[int, int], None] | None,
            on_result: Callable[[int, RenderResult], None] | None) -> None:
    try:
        msg = slot.worker.conn.recv()
    except (EOFError, OSError):
        slot.worker.proc.wait(5)
        backend_died(slot, f"the render process {describe_exit(slot.worker.proc.returncode)}")
        return
    kind, i, payload = msg
    slot.last_heard = time.monotonic()
    if kind == "progress":
        if on_progress is not None and i is not None:
            on_progress(i, payload)
        return
    if kind == "backend_failed":
        if i is None:
            i = slot.job
        backend_died(slot, payload)
        return
    i = slot.job
    slot.job = None
    if kind == "done":
        result = replace(payload, failures=tuple(failures[i]))
        results[i] = result
        if on_result is not None:
            on_result(i, result)
    elif kind == "usage_error":
        usage_errors.append(payload)
    else:
        usage_errors.append(f"Rendering '{requests[i].tape}' failed: {payload.splitlines()[0]}"
                            " (rerun with the same command to reproduce).")
