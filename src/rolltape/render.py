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

With more workers than tapes, a long episode is split into segments, each drawn from the
physics state pass 1 recorded at its start; mp4/webm parts are joined by copying packets
(:func:`encode.join_videos`), other formats through lossless frames. Each output is
encoded on a thread of its own (:class:`encode.BackgroundWriter`) while the next frame is
drawn.

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
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence

import numpy as np

from .cameras import CameraRig, Compositor, check_layout, draw_overlay, separate_path
from .backends import (DEFAULT_ORDER, gl_environment, parse_backends,
                       select_backend_in_this_process)
from .artifacts import refuse_existing
from .encode import format_from_path
from .envs import check_tape_env_module
from .errors import UsageError
from .executors import describe_exit, spawn_worker, stop_worker, stop_workers
from .tape import sum_rewards

MODES = ("resim", "restore", "auto")
#: Render workers draw off screen. Classic-control envs draw with pygame, whose SDL would
#: otherwise probe X11 and Wayland for a display (and sound devices) it never uses, and
#: print "error: XDG_RUNTIME_DIR is invalid or not set" where there is none. SDL's dummy
#: drivers ask for nothing; a value the user set is kept.
HEADLESS_SDL = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
DATA_SUFFIXES = (".npz", ".jsonl")  # outputs without pixels, written by the parent


@dataclass(frozen=True)
class RenderRequest:
    """One tape to replay, and what to make of it (no outputs: verify only, nothing drawn)."""

    tape: str
    outputs: tuple[str, ...] = ()
    mode: str = "resim"
    width: int | None = None
    height: int | None = None
    cameras: tuple[str, ...] = ()  # see rolltape.cameras; () is the env's own view
    layout: str = "single"  # how several cameras share a frame (or "separate" files)
    overlay: bool = False  # write step, reward and return onto each frame
    fps: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    overwrite: bool = False
    env_id: str | None = None  # replay against another env than the tape's (checked)
    quality: str = "full"  # a QUALITY preset
    frames: tuple[int, int] | None = None  # draw only frames [first, stop): one segment


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
    rewards: tuple[float, ...] = ()  # the replay's rewards (to join segments' returns exactly)
    fps: float = 0.0  # frame rate the outputs were written at
    segments: int = 1  # how many workers drew parts of this episode
    niceness: int = 0  # the worker's CPU priority (10 when it ran beside pass 1)
    cameras: tuple[str, ...] = ()  # the cameras that drew the frames ("default": env.render())
    camera_hint: str | None = None  # a --camera track:BODY suggestion when the view lost the robot

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        del row["rewards"]
        row["divergence"] = asdict(self.divergence) if self.divergence else None
        row["divergence_text"] = self.divergence.describe() if self.divergence else None
        from .envs import json_safe  # NaN (a replay of NaN rewards) is null in JSON

        return json_safe(json.loads(json.dumps(row, default=_plain)))


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class BackendFailure(Exception):
    """The GL backend cannot draw here (no context, blank frames): try the next one."""


# --------------------------------------------------------------------------------------
# In the render worker
# --------------------------------------------------------------------------------------

QUALITY = {
    # full: exactly what Gymnasium's env.render() draws (the model's own settings).
    "full": None,
    # balanced: soft shadows from a small shadow map, no reflections, 2x multisampling.
    "balanced": {"shadow": True, "reflection": False, "shadowsize": 1024, "offsamples": 2},
    # fast: no shadows, no reflections, no multisampling; the robot stays plain to see.
    "fast": {"shadow": False, "reflection": False, "shadowsize": 0, "offsamples": 0},
}


def _prepare_view(env: Any, quality: str) -> None:
    """Make a MuJoCo env draw as a fresh ``env.render()`` after ``reset`` would.

    Gymnasium aims its free camera at the bodies when it makes the viewer, that is at the
    first render. A worker keeps envs across tapes and segments, so after each reset the
    camera is aimed again from the reset state, exactly as a fresh viewer would be. The
    quality preset must be set before the viewer (and its GL context) exist, because the
    shadow map and multisample buffers are sized when the context is made.
    """
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is None:
        return
    import mujoco

    mode = env.unwrapped.render_mode
    fresh = renderer._viewers.get(mode) is None
    preset = QUALITY[quality]
    if fresh and preset is not None:
        env.unwrapped.model.vis.quality.shadowsize = preset["shadowsize"]
        env.unwrapped.model.vis.quality.offsamples = preset["offsamples"]
    viewer = renderer._get_viewer(mode)  # makes the viewer (and GL context) when fresh
    if not fresh:
        # A worker keeps one env (and GL context) per env and settings: the one about to
        # draw must be current again after another env drew.
        viewer.make_context_current()
        viewer._init_camera()
        renderer._set_cam_config()
    if preset is not None:
        viewer.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = preset["shadow"]
        viewer.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = preset["reflection"]


class _Replayer:
    """Replays tapes inside one worker, keeping envs (and their GL contexts) for reuse.

    ``run`` draws frames ``req.frames`` (all of them by default) of one tape: frame f is the
    state after f steps. A segment that starts at f > 0 continues from the recorded
    integration state after f - 1 steps and steps once before drawing, so its frames are
    the very frames an unsplit replay draws.
    """

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

        key = json.dumps([spec, draw, req.width, req.height, req.quality], sort_keys=True)
        if key not in self._envs:
            self._envs[key] = make_env(spec, "rgb_array" if draw else None,
                                       width=req.width, height=req.height)
        return key, self._envs[key]

    def _reset(self, key: str, env: Any, tape: Any, draw: bool, quality: str) -> Any:
        """Reset with the tape's seed and, when drawing, aim the camera as a fresh viewer."""
        obs, _ = env.reset(seed=tape.seed, options=tape.options)
        if not draw:
            return obs
        if key in self._drawn_once:
            _prepare_view(env, quality)
            return obs
        # The first use of a new GL context is where a broken backend shows itself.
        from gymnasium.error import DependencyNotInstalled

        try:
            _prepare_view(env, quality)
            frame = env.render()
        except DependencyNotInstalled as exc:
            raise UsageError(f"Env '{env.spec.id}' cannot draw here: {exc}.") from None
        except Exception as exc:
            hint = f" ({_WARNED[0]})" if _WARNED else ""
            raise BackendFailure(f"could not draw: {type(exc).__name__}: {exc}{hint}") from None
        if frame is None or frame.size == 0 or frame.min() == frame.max():
            raise BackendFailure("it rendered blank frames")
        self._drawn_once.add(key)
        return obs

    def run(self, req: RenderRequest) -> RenderResult:
        from .encode import BackgroundWriter, open_writer
        from .envs import mujoco_warnings
        from .tape import Tape

        start = time.perf_counter()
        tape = Tape.load(req.tape)
        spec = dict(tape.env)
        if req.env_id is not None:
            spec["id"] = req.env_id
        else:
            check_tape_env_module(tape.env_id, req.tape)  # checked by the parent too
        draw = bool(req.outputs)
        key, env = self._env(spec, req, draw)
        _check_same_env(tape, env, req.tape)
        mode = req.mode
        if mode == "restore" and not tape.has_state:
            raise UsageError(f"Tape '{req.tape}' has no MuJoCo state, so it cannot be drawn in "
                             "restore mode; use --mode resim.")
        first, stop = req.frames or (0, tape.length + 1)
        fps = req.fps or float(env.metadata.get("render_fps") or 30)
        rig = CameraRig(env, req.cameras) if draw else None
        # One list of output paths per stream: every camera in "separate", else one stream.
        if rig is not None and req.layout == "separate":
            streams = [[separate_path(p, cam) for p in req.outputs] for cam in rig.names]
        else:
            streams = [list(req.outputs)]
        outputs = [p for paths in streams for p in paths]

        def open_all() -> list[list[Any]]:
            # Encoding runs on a thread per output, overlapping the drawing of the next frame.
            return [[BackgroundWriter(open_writer(p, fps=fps, overwrite=req.overwrite))
                     for p in paths] for paths in streams]

        writers = open_all()
        compositor = Compositor(req.layout)
        returns = np.concatenate([[0.0], np.cumsum(tape.rewards)])

        def reset() -> Any:
            return self._reset(key, env, tape, draw, req.quality)

        def emit(index: int) -> None:
            if draw:
                views = rig.frames()
                if req.layout != "separate":
                    views = [compositor(views)]
                for frame, stream in zip(views, writers):
                    if req.overlay:
                        reward = float(tape.rewards[index - 1]) if index else None
                        frame = draw_overlay(frame, index, reward, float(returns[index]))
                    for w in stream:
                        w.write(frame)
            if (index + 1) % 25 == 0:
                self.progress(index + 1 - first)

        try:
            divergence, rewards = None, None
            if mode in ("resim", "auto"):
                divergence, rewards = self._resim(tape, env, req, first, stop, reset, emit)
                if divergence is not None and mode == "auto" and tape.has_state and draw:
                    for w in _flat(writers):
                        w.abort()
                    writers = open_all()
                    mode = "restore"
                    self._restore(tape, env, first, stop, reset, emit)
                else:
                    mode = "resim" if draw else "verify"
            else:
                self._restore(tape, env, first, stop, reset, emit)
            frames = _flat(writers)[0].frames_written if outputs else 0
            # Judged once per episode, by its first segment, over every recorded state.
            hint = rig.follow_hint(tape.qpos) if rig is not None and first == 0 else None
            for w in _flat(writers):
                w.close()
        except BaseException:
            for w in _flat(writers):
                w.abort()
            raise
        return RenderResult(
            tape=req.tape, outputs=tuple(outputs), mode=mode,
            backend=self.backend if draw else None, steps=tape.length, frames=frames,
            verified=None if req.mode == "restore" else divergence is None,
            divergence=divergence,
            replay_return=None if rewards is None else sum_rewards(rewards),
            seconds=time.perf_counter() - start, warnings=tuple(mujoco_warnings()),
            torch_loaded="torch" in sys.modules, rewards=tuple(rewards or ()), fps=fps,
            niceness=os.nice(0), cameras=tuple(rig.names) if rig is not None else (),
            camera_hint=hint,
        )

    def _resim(self, tape: Any, env: Any, req: RenderRequest, first: int, stop: int,
               reset: Callable[[], Any], emit: Callable[[int], None]
               ) -> tuple[Divergence | None, list[float]]:
        """Step the recorded actions, comparing each step with pass 1; draw frames first..stop-1."""
        from .envs import continue_from, obs_digest

        divergence: Divergence | None = None
        obs = reset()
        if first == 0:
            if tape.obs_digest is not None and obs_digest(obs) != int(tape.obs_digest[0]):
                divergence = Divergence(0, "reset observation", "pass-1 digest", "another digest")
            emit(0)
            begin = 0
        else:
            if tape.physics is None:
                raise UsageError(f"Tape '{req.tape}' has no physics state to start a segment from.")
            continue_from(env, tape.physics[first - 1])
            begin = first - 1
        rewards = []
        for t in range(begin, stop - 1):
            obs, reward, term, trunc, _ = env.step(tape.actions[t])
            rewards.append(float(reward))
            if divergence is None:
                # A segment's time limit counter starts at its first step: skip truncation.
                divergence = _compare_step(tape, t, float(reward), bool(term),
                                           bool(trunc) if first == 0 else bool(tape.truncated[t]),
                                           obs, req.rtol, req.atol)
            emit(t + 1)
            if (term or trunc) and t + 1 < tape.length and first == 0:
                break  # ended early: already reported as a divergence at this step
        return divergence, rewards

    def _restore(self, tape: Any, env: Any, first: int, stop: int, reset: Callable[[], Any],
                 emit: Callable[[int], None]) -> None:
        """Draw the recorded states themselves, no simulation."""
        from .envs import restore_state

        reset()
        for t in range(first, stop):
            restore_state(env, tape.qpos[t], tape.qvel[t])
            emit(t)


def _flat(writers: list[list[Any]]) -> list[Any]:
    return [w for stream in writers for w in stream]


def _compare_step(tape: Any, t: int, reward: float, term: bool, trunc: bool, obs: Any,
                  rtol: float, atol: float) -> Divergence | None:
    from .envs import obs_digest

    expected = float(tape.rewards[t])
    reward = math.nan if reward is None else float(reward)  # as pass 1 recorded a None
    same = (reward == expected or (math.isnan(reward) and math.isnan(expected))
            if rtol == 0 and atol == 0 else
            math.isclose(reward, expected, rel_tol=rtol, abs_tol=atol))
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


_WARNED: list[str] = []  # Python warnings raised in this worker (e.g. GLFW's own errors)


def _keep_warning(message: Any, *args: Any, **kwargs: Any) -> None:
    _WARNED.append(str(message).strip())


def render_worker(backend: str | None, niceness: int, conn: Any) -> None:
    """Entry point of a spawned render process: one GL backend, many tapes. A positive
    ``niceness`` lowers its CPU priority (and its GL threads', which inherit it)."""
    import warnings

    if niceness:
        os.nice(niceness)
    # Kept and folded into failure reasons instead of printed: GLFW, for one, says the real
    # cause ("DISPLAY ... is missing") only as a warning.
    warnings.showwarning = _keep_warning
    try:
        if backend is not None:
            select_backend_in_this_process(backend)  # before anything imports mujoco
            _inject_fault(backend)
            try:
                import mujoco  # noqa: F401  (the import itself fails for a missing GL library)
            except Exception as exc:
                conn.send(("backend_failed", None, f"import mujoco failed: {exc}"))
                return
        _import_what_jobs_need(backend)
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


def _import_what_jobs_need(backend: str | None) -> None:
    """Import once, while the process starts, what every job would otherwise import on its
    first tape (PyAV, Gymnasium, PyOpenGL for the frame readback)."""
    import gymnasium  # noqa: F401

    from . import envs, tape  # noqa: F401  (cameras and encode come with this module)

    if backend is not None:
        try:
            from OpenGL import GL  # noqa: F401
        except Exception:
            pass  # cameras.rgb_only falls back to env.render()


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


class _Pool:
    """Runs render jobs on up to ``workers`` processes, moving to the next GL backend when
    one crashes, hangs or draws blank frames (the job is retried there)."""

    def __init__(self, jobs: Sequence[RenderRequest], order: list[str], workers: int,
                 timeout: float, on_progress: Callable[[int, int], None],
                 on_done: Callable[[int, RenderResult], None],
                 cancel: threading.Event | None = None, niceness: int = 0) -> None:
        self.jobs, self.order, self.timeout, self.cancel = jobs, order, timeout, cancel
        self.niceness = niceness
        self.on_progress, self.on_done = on_progress, on_done
        self.slots = [_Slot() for _ in range(min(workers, max(1, len(jobs))))]
        self.pending = deque(range(len(jobs)))
        self.failures: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(jobs))}
        self.dead: dict[str, str] = {}  # backend -> why it failed
        self.errors: list[str] = []  # bad input found by a worker

    def run(self) -> None:
        try:
            while self.pending or any(s.job is not None for s in self.slots):
                if self.cancel is not None and self.cancel.is_set():
                    break  # the caller gave up (pass 1 failed): stop the workers
                for slot in self.slots:
                    if slot.job is None and self.pending:
                        self._start(slot, self.pending.popleft())
                busy = [s for s in self.slots if s.job is not None]
                if not busy:
                    break  # every backend is dead: what is left cannot be drawn
                ready = wait([s.worker.conn for s in busy], timeout=0.5)
                for slot in busy:
                    if slot.worker.conn in ready:
                        self._receive(slot)
                    elif time.monotonic() - slot.last_heard > self.timeout:
                        self._backend_died(slot, f"it hung (no progress for {self.timeout:.0f} s)")
        finally:
            stop_workers(slot.worker for slot in self.slots)

    def _backend_for(self, job: RenderRequest) -> str | None:
        if not job.outputs:
            return None  # verification draws nothing and needs no GL
        alive = [b for b in self.order if b not in self.dead]
        return alive[0] if alive else ""

    def _start(self, slot: _Slot, i: int) -> None:
        backend = self._backend_for(self.jobs[i])
        if backend == "":
            return
        if slot.worker is None or slot.backend != backend or not slot.worker.alive():
            self._kill(slot)
            env = gl_environment(backend) if backend else {}
            env.update({k: v for k, v in HEADLESS_SDL.items() if k not in os.environ})
            if "LP_NUM_THREADS" not in os.environ:
                # Mesa's llvmpipe draws on every core by default; with several workers that
                # oversubscribes the machine, so each gets its share of the cores.
                env["LP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // len(self.slots)))
            # A tape is data: the worker imports installed modules only, unless the user
            # named an env module with --env (which may be a file in the current folder).
            slot.worker = spawn_worker(render_worker, backend, self.niceness, env=env,
                                       cwd_on_path=any(":" in (job.env_id or "")
                                                       for job in self.jobs))
            slot.backend = backend
        slot.job, slot.last_heard = i, time.monotonic()
        slot.worker.conn.send((i, self.jobs[i]))

    def _kill(self, slot: _Slot) -> None:
        if slot.worker is not None:
            slot.worker.conn.close()
            stop_worker(slot.worker, grace=0.1)
        slot.worker = slot.job = None

    def _backend_died(self, slot: _Slot, reason: str) -> None:
        if slot.backend is not None:
            self.dead.setdefault(slot.backend, reason)
            if slot.job is not None:
                self.failures[slot.job].append((slot.backend, reason))
        if slot.job is not None:
            self.pending.appendleft(slot.job)
        self._kill(slot)

    def _receive(self, slot: _Slot) -> None:
        try:
            kind, i, payload = slot.worker.conn.recv()
        except (EOFError, OSError):
            slot.worker.proc.wait(5)
            self._backend_died(slot, f"the render process "
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
        if kind == "done":
            self.on_done(i, replace(payload, failures=tuple(self.failures[i])))
        elif kind == "usage_error":
            self.errors.append(payload)
        else:
            self.errors.append(f"Rendering '{self.jobs[i].tape}' failed: "
                               f"{payload.splitlines()[0]} (rerun the command to reproduce).")


MIN_SEGMENT = 50  # frames; shorter segments cost more in process start-up than they save


def plan_segments(requests: Sequence[RenderRequest], workers: int
                  ) -> list[tuple[int, RenderRequest]]:
    """Split long episodes into segments when there are more workers than episodes, so one
    long video also uses every core. Returns (request index, job) pairs in order."""
    from .tape import Tape

    per_request = max(1, workers // max(1, len(requests)))
    jobs = []
    for i, req in enumerate(requests):
        n, total = 1, 0
        if (per_request > 1 and req.outputs and req.mode in ("resim", "restore")
                and req.layout != "separate"):
            tape = Tape.load(req.tape)
            total = tape.length + 1
            ok = tape.physics is not None if req.mode == "resim" else tape.has_state
            if ok:
                n = max(1, min(per_request, total // MIN_SEGMENT))
        if n == 1:
            jobs.append((i, req))
            continue
        bounds = [round(k * total / n) for k in range(n + 1)]
        for k in range(n):
            jobs.append((i, replace(req, outputs=_segment_outputs(req.outputs, k),
                                    frames=(bounds[k], bounds[k + 1]), overwrite=True)))
    return jobs


def _segment_outputs(outputs: Sequence[str], k: int) -> tuple[str, ...]:
    """Where segment ``k`` draws. mp4 and webm get a file of their own format each (joined
    later by copying packets, no re-encoding); gif and PNG outputs share one lossless PNG
    folder (a trailing slash makes the writer draw PNG frames) that the join reads back."""
    parts, lossless = [], None
    for out in outputs:
        path = Path(out.rstrip("/"))
        if _joined_by_packets(out):
            parts.append(str(path.with_name(f".{path.stem}.segment{k}-{os.getpid()}{path.suffix}")))
        elif lossless is None:
            lossless = str(path.with_name(f".{path.name}.segment{k}-{os.getpid()}")) + "/"
            parts.append(lossless)
    return tuple(parts)


def _join(req: RenderRequest, parts: list[RenderResult]) -> RenderResult:
    """Put segment outputs together, in order, into the requested files: mp4/webm by
    copying packets, gif/PNG by reading back the PNG frames the segments drew."""
    from .encode import join_videos, open_writer, read_frames

    fps = parts[0].fps  # the rate the segments were written at (req.fps or the env's)
    drawn = [p.outputs for p in parts]  # drawn[k][j]: segment k's j-th output
    frames = sum(p.frames for p in parts)
    frame_counts = []
    try:
        writers = [open_writer(path, fps=fps, overwrite=req.overwrite) for path in req.outputs
                   if not _joined_by_packets(path)]
        try:
            if writers:  # gif/PNG outputs: read back the one lossless folder of each segment
                lossless = next(j for j, out in enumerate(drawn[0]) if out.endswith("/"))
                for outputs in drawn:
                    for frame in read_frames(outputs[lossless]):
                        for w in writers:
                            w.write(frame)
            frame_counts += [w.frames_written for w in writers]
            for w in writers:
                w.close()
        except BaseException:
            for w in writers:
                w.abort()
            raise
        for j, path in enumerate(req.outputs):
            if _joined_by_packets(path):
                frame_counts.append(join_videos([d[j] for d in drawn], path,
                                                overwrite=req.overwrite))
    finally:
        for outputs in drawn:
            _remove(outputs)
    if any(count != frames for count in frame_counts):
        raise RuntimeError(f"Joining the segments of '{req.tape}' gave {frame_counts} frames "
                           f"where they drew {frames}; please report this.")
    divergences = [p.divergence for p in parts if p.divergence is not None]
    rewards = [r for p in parts for r in p.rewards]
    verified = None if req.mode == "restore" else not divergences
    return replace(parts[0], tape=req.tape, outputs=tuple(req.outputs), frames=frames,
                   verified=verified, divergence=divergences[0] if divergences else None,
                   replay_return=None if req.mode == "restore" else sum_rewards(rewards),
                   seconds=max(p.seconds for p in parts), segments=len(parts),
                   rewards=tuple(rewards),
                   failures=tuple(f for p in parts for f in p.failures))


def _joined_by_packets(path: str) -> bool:
    return format_from_path(path) in ("mp4", "webm")


def _remove(paths: Sequence[str]) -> None:
    """Delete segment outputs (files or PNG folders); missing ones are fine."""
    for out in paths:
        target = Path(out.rstrip("/"))
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def check_requests(requests: Sequence[RenderRequest], backends: str | Sequence[str],
                   workers: int = 1) -> list[str]:
    """Refuse bad render options up front; return the backend order."""
    from .tape import Tape

    order = list(parse_backends(backends))
    for req in requests:
        if req.mode not in MODES:
            raise UsageError(f"Unknown mode '{req.mode}'; use one of {', '.join(MODES)}.")
        if req.quality not in QUALITY:
            raise UsageError(f"Unknown quality '{req.quality}'; use one of {', '.join(QUALITY)}.")
        check_layout(req.layout, req.cameras)
        if req.env_id is None:  # a tape's own env module: only an installed one is imported
            check_tape_env_module(Tape.load(req.tape).env_id, req.tape)
        for out in req.outputs:
            if not str(out).endswith(DATA_SUFFIXES):
                format_from_path(out)
            if not req.overwrite:
                refuse_existing(out, False)
    if workers < 1:
        raise UsageError(f"--render-workers must be at least 1, got {workers}.")
    return order


def _write_records(req: RenderRequest, result: RenderResult) -> RenderResult:
    """Write the pixel-free outputs and a ``.metadata.json`` sidecar beside every output."""
    from .artifacts import provenance, write_episode_jsonl, write_sidecar, write_tape_copy
    from .envs import json_safe
    from .policies import sha256_of
    from .tape import Tape

    if not req.outputs:
        return result  # verification only: nothing was written, nothing to describe
    tape = Tape.load(req.tape)
    record = {
        **provenance(),
        "tape": {"path": req.tape, "sha256": sha256_of(req.tape), "env": tape.env,
                 "seed": tape.seed, "policy": tape.policy,
                 # Taken at eval time only: git would run the hooks of a folder the tape names.
                 "policy_git": tape.policy.get("git")},
        "config": json_safe(asdict(req)),
        "result": result.to_dict(),
    }
    data = [o for o in req.outputs if o.endswith(DATA_SUFFIXES)]
    for out in data:
        if out.endswith(".jsonl"):
            write_episode_jsonl(out, tape, record)
        else:
            write_tape_copy(out, tape, record)
    outputs = result.outputs + tuple(data)
    record["result"]["outputs"] = list(outputs)
    for out in outputs:
        write_sidecar(out, record)
    return replace(result, outputs=outputs)


def render(
    requests: Sequence[RenderRequest],
    *,
    backends: str | Sequence[str] = DEFAULT_ORDER,
    workers: int = 1,
    timeout: float = 120.0,
    executor: str = "local",
    ray_address: str | None = None,
    ray_num_gpus: float = 0.0,
    split: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, RenderResult], None] | None = None,
    cancel: threading.Event | None = None,
    background: bool = False,
) -> list[RenderResult | None]:
    """Replay each request in spawned workers; return one result per request, in order.

    With more ``workers`` than requests and ``split``, long episodes are rendered in
    segments on several workers and joined. A request that fails on every backend gets
    None and the reasons are raised at the end as one :class:`UsageError` (after every other
    request has finished), so that results already made are kept. ``on_progress(i, frames)``
    and ``on_result(i, result)`` let a caller show progress and save results as they come.
    Setting ``cancel`` (from another thread) stops the workers; unfinished requests get None.
    ``background`` runs the workers at a lower CPU priority (nice +10), so that work beside
    them (pass 1, with ``render_early``) comes first and rendering takes what is left.
    """
    order = check_requests(requests, backends, workers)
    # Pixels are drawn in workers; npz/jsonl copies and sidecars are written here after.
    drawn = [replace(r, outputs=tuple(o for o in r.outputs if not o.endswith(DATA_SUFFIXES)))
             for r in requests]
    if executor == "ray":
        from .ray_executor import check_ray, render_on_ray

        check_ray(ray_address)  # reuses the session evaluate() opened
        results = render_on_ray(drawn, order, timeout=timeout, num_gpus=ray_num_gpus)
        results = [r if r is None else _write_records(q, r) for q, r in zip(requests, results)]
        if on_result is not None:
            for i, r in enumerate(results):
                if r is not None:
                    on_result(i, r)
        return results

    jobs = plan_segments(drawn, workers if split else 1)
    owner = [i for i, _ in jobs]
    parts: dict[int, dict[int, RenderResult]] = {i: {} for i in range(len(requests))}
    need = {i: owner.count(i) for i in range(len(requests))}
    progress = [0] * len(jobs)
    results: list[RenderResult | None] = [None] * len(requests)

    def job_progress(j: int, frames: int) -> None:
        progress[j] = frames
        if on_progress is not None:
            on_progress(owner[j], sum(p for k, p in enumerate(progress) if owner[k] == owner[j]))

    def job_done(j: int, result: RenderResult) -> None:
        i = owner[j]
        parts[i][j] = result
        if len(parts[i]) < need[i]:
            return
        done = [parts[i][k] for k in sorted(parts[i])]
        result = done[0] if need[i] == 1 else _join(drawn[i], done)
        results[i] = _write_records(requests[i], result)
        if on_result is not None:
            on_result(i, results[i])

    pool = _Pool([job for _, job in jobs], order, workers, timeout, job_progress, job_done,
                 cancel, niceness=10 if background else 0)
    try:
        pool.run()
    finally:
        for i, job in jobs:  # segment outputs of a request that could not finish
            if job is not drawn[i]:
                _remove(job.outputs)
    problems = list(pool.errors)
    unfinished = [i for i, r in enumerate(results) if r is None and requests[i].outputs]
    if unfinished and len(pool.dead) == len(order):
        reasons = "; ".join(f"{b}: {why}" for b, why in pool.dead.items())
        problems.append(f"Every GL backend failed ({reasons}); run `rolltape doctor` to see "
                        "what each needs.")
    if problems:
        raise UsageError(" ".join(problems))
    return results
