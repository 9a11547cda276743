"""Pass 2, the worker's side: replay tapes, verify them, and encode their frames.

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

A job may be a segment of an episode, drawn from the physics state pass 1 recorded at its
start (:mod:`rolltape.rendering` plans and joins them). Each output is encoded on a thread
of its own (:class:`encode.BackgroundWriter`) while the next frame is drawn, except beside
ALE, which holds the GIL (:func:`encoding_beside`). A worker that
cannot draw says "backend_failed", and the executor tries the next backend. What a job asks
and what it answers (:class:`RenderRequest`, :class:`RenderResult`) are records of
:mod:`rolltape.pass2.request`, which whoever only builds requests imports instead of this.

May import: envs, tape, errors, the render side (request, backends, cameras, encode). Never:
policies, pass 1, torch or SB3, the orchestrator, an executor, outputs (:data:`FORBIDDEN`;
tests/test_layout.py proves it from the source and in a running worker).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rolltape.envs.digests import BIG_OBS, DIGEST_BATCH
from rolltape.envs.ids import check_tape_env_module
from rolltape.envs.state import ALE_STEPS_AGAIN, continue_atari
from rolltape.errors import UsageError
from rolltape.pass2.backends import select_backend_in_this_process
from rolltape.pass2.cameras import (
    CameraRig,
    Compositor,
    draw_overlay,
    separate_path,
)
from rolltape.pass2.request import (  # the types: their own module, for whoever only asks
    QUALITY,
    Divergence,
    RenderOptions,
    RenderRequest,
    RenderResult,
)
from rolltape.tape import MJWARP, Tape, sum_rewards

if TYPE_CHECKING:
    from rolltape.pass2.encode import BackgroundWriter, FrameWriter


class BackendFailure(Exception):
    """The GL backend cannot draw here (no context, blank frames): try the next one."""


# --------------------------------------------------------------------------------------
# In the render worker
# --------------------------------------------------------------------------------------

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


class Replayer:
    """Replays tapes inside one worker, keeping envs (and their GL contexts) for reuse.

    ``run`` draws frames ``req.frames`` (all of them by default) of one tape: frame f is the
    state after f steps. A segment that starts at f > 0 continues from the recorded state
    after f - 1 steps (MuJoCo's integration state, or ALE's emulator state with its RNG)
    and steps once before drawing, so its frames are the very frames an unsplit replay
    draws.
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

    def env_for(self, spec: dict[str, Any], req: RenderRequest, draw: bool) -> tuple[str, Any]:
        """(key, env): this worker's env of ``spec`` at the request's size and quality,
        made on first use and kept for the next tape (its GL context with it)."""
        from rolltape.envs.build import make_env

        key = json.dumps([spec, draw, req.width, req.height, req.quality], sort_keys=True)
        if key not in self._envs:
            self._envs[key] = make_env(spec, "rgb_array" if draw else None,
                                       width=req.width, height=req.height)
        return key, self._envs[key]

    def reset(self, key: str, env: Any, tape: Tape, draw: bool, quality: str,
              first: int = 0) -> Any:
        """Reset with the tape's seed and, when drawing, aim the camera as a fresh viewer.
        Returns the reset observation, or None for a tape that begins mid-episode.
        ``first``: the frame the replay draws first. An Atari segment (first > 0) puts a
        recorded emulator state in next, so its reset needs no seed (ALE reloads its ROM at
        every seeded reset: 0.09 s). A MuJoCo one keeps it: a tracking camera starts from
        where the seeded reset put the body."""
        seeded = first == 0 or not tape.has_ale_state
        obs = _reset_as_recorded(env, tape) if seeded else env.reset()[0]
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
        from rolltape.envs.build import may_load_mujoco, mujoco_warnings
        from rolltape.pass2.encode import open_writer

        start = time.perf_counter()
        # when the job began: a worker niced beside pass 1 may be put back to 0 meanwhile
        niceness = os.nice(0)
        tape = Tape.load(req.tape)
        spec = dict(tape.env)
        if req.env_id is not None:
            spec["id"] = req.env_id
        else:
            check_tape_env_module(tape.env_id, req.tape)  # checked by the parent too
        draw = bool(req.outputs)
        # Images pass 1 drew with another GL backend are left out of the comparison.
        apart = ImagesApart.of(tape, self.backend or os.environ.get("MUJOCO_GL"))
        if apart is not None and req.rtol == 0 and req.atol == 0:
            tape = apart.tape
        else:
            apart = None
        key, env = self.env_for(spec, req, draw)
        check_same_env(tape, env, req.tape)
        mode = req.mode
        if mode == "restore" and not tape.can_restore:
            raise UsageError(f"Tape '{req.tape}' has no MuJoCo or ALE state, so it cannot be "
                             "drawn in restore mode; use --mode resim.")
        first, stop = req.frames or tape.frame_range
        fps = req.fps or float(env.metadata.get("render_fps") or 30)
        rig = CameraRig(env, req.cameras) if draw else None
        # One list of output paths per stream: every camera in "separate", else one stream.
        if rig is not None and req.layout == "separate":
            streams = [[separate_path(p, cam) for p in req.outputs] for cam in rig.names]
        else:
            streams = [list(req.outputs)]
        outputs = [p for paths in streams for p in paths]

        def open_all() -> list[list[Any]]:
            return [[encoding_beside(open_writer(p, fps=fps, overwrite=req.overwrite),
                                     spec["id"]) for p in paths] for paths in streams]

        writers = open_all()
        compositor = Compositor(req.layout)
        returns = np.concatenate([[0.0], np.cumsum(tape.rewards)])

        def reset(first: int = 0) -> Any:
            return self.reset(key, env, tape, draw, req.quality, first)

        def emit(index: int) -> None:
            if draw and index < first:  # drawn in training, before the window: aged, dropped
                assert rig is not None
                rig.frames()
                return
            if draw:
                assert rig is not None  # made whenever it draws
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

        checked = None if req.mode == "restore" else apart.what if apart else checked_by(tape, req)
        try:
            divergence, rewards = None, None
            if mode in ("resim", "auto") and tape.meta.get("backend") == MJWARP:
                # MuJoCo Warp made it: re-simulated there, drawn from the states it recorded
                divergence, rewards, checked = self.resim_mjwarp(
                    tape, req, stop, None if draw else emit)
                if draw:
                    self._restore(tape, env, first, stop, reset, emit)
                mode = "restore" if draw else "verify"
            elif mode in ("resim", "auto"):
                divergence, rewards = self.resim(tape, env, req, first, stop, reset, emit,
                                                 view=apart.view if apart else None)
                if divergence is not None and mode == "auto" and tape.can_restore and draw:
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
            # Only MuJoCo draws with the worker's GL backend: ALE's screens and pygame's
            # frames (classic control, Box2D) are drawn without it, so none is named.
            backend=self.backend if draw and may_load_mujoco(spec["id"]) else None,
            steps=tape.length, frames=frames,
            verified=None if req.mode == "restore" else divergence is None,
            checked=checked,
            divergence=divergence,
            replay_return=None if rewards is None else sum_rewards(rewards),
            seconds=time.perf_counter() - start, warnings=tuple(mujoco_warnings()),
            torch_loaded="torch" in sys.modules, forbidden_loaded=forbidden_modules(),
            rewards=tuple(rewards or ()), fps=fps,
            niceness=niceness, cameras=tuple(rig.names) if rig is not None else (),
            camera_hint=hint,
        )

    def resim(self, tape: Tape, env: Any, req: RenderOptions, first: int, stop: int,
              reset: Callable[[int], Any], emit: Callable[[int], None],
              observe: Callable[[int, Any, Any], None] | None = None,
              digests_later: bool = False, view: Callable[[Any], Any] | None = None
               ) -> tuple[Divergence | None, list[float]]:
        """Step the recorded actions, comparing each step with pass 1; draw frames
        first..stop-1. Without a recorded state to continue from (a window of a tape of
        another env), the frames before ``first`` are simulated from the reset, not drawn.
        ``observe(index, obs, info)`` sees the reset observation (index 0, info None) and
        each step's (an export keeps them: :mod:`rolltape.pass2.export`); one that keeps
        them may check their digests itself, all at once (``digests_later``:
        :func:`first_wrong_digest`), which costs less than one by one. ``view`` maps each
        observation to what is compared (:class:`ImagesApart`) before any of that."""
        from rolltape.envs.digests import obs_digest
        from rolltape.envs.state import continue_from

        divergence: Divergence | None = None
        from_reset = first == 0 or not tape.can_continue
        obs = reset(0 if from_reset else first)
        if view is not None and obs is not None:
            obs = view(obs)
        drawn = drawn_before(tape, first) if from_reset else set()
        if from_reset:
            if (tape.obs_digest is not None and obs is not None and not digests_later
                    and obs_digest(obs) != int(tape.obs_digest[0])):
                divergence = Divergence(0, "reset observation", "pass-1 digest", "another digest")
            if observe is not None:
                observe(0, obs, None)
            if first == 0 or 0 in drawn:
                emit(0)
            begin = 0
        else:  # from the state before ``first``; its step draws frame ``first``
            if tape.physics is not None:
                continue_from(env, tape.physics[first - 1])
            else:
                continue_atari(env, tape, first - 1)
            begin = first - 1
        rewards = []
        # Large observations (screens) are digested in batches: one digest is a loop over
        # the observation's words, which numpy runs across many rows as cheaply as one.
        pending = _PendingDigests(tape, req.rtol == 0 and req.atol == 0 and not digests_later)
        # A caller that checks digests later gets the exact comparison of rewards and flags
        # later too, all steps at once (first_wrong_step): the same answer, without a call
        # per step in the loop.
        later = digests_later and from_reset and req.rtol == 0 and req.atol == 0
        flags: list[tuple[bool, bool]] = []
        for t in range(begin, stop - 1):
            obs, reward, term, trunc, info = env.step(tape.actions[t])
            if view is not None:
                obs = view(obs)
            rewards.append(float(reward))
            if observe is not None:
                observe(t + 1, obs, info)
            if later:
                flags.append((term, trunc))
            elif divergence is None:
                defer = pending.takes(obs)
                # A segment's time limit counter starts at its first step: skip truncation.
                divergence = compare_step(tape, t, float(reward), bool(term),
                                          bool(trunc) if from_reset else bool(tape.truncated[t]),
                                          None if digests_later or defer else obs,
                                          req.rtol, req.atol)
                if defer and divergence is None:
                    pending.add(t, obs)
                if divergence is not None or pending.full:
                    divergence = pending.flush() or divergence  # the earlier step comes first
            if t + 1 >= first or t + 1 in drawn:
                emit(t + 1)
            if (term or trunc) and t + 1 < tape.length and from_reset:
                break  # ended early: already reported as a divergence at this step
        if later and divergence is None:
            divergence = first_wrong_step(tape, rewards, flags)
        if divergence is None:
            divergence = pending.flush()
        return divergence, rewards

    def resim_mjwarp(self, tape: Tape, req: RenderRequest, stop: int,
                     emit: Callable[[int], None] | None = None
                     ) -> tuple[Divergence | None, list[float], str]:
        """(divergence, rewards, what was compared) of a MuJoCo Warp tape re-simulated on
        MJWarp as one world (:func:`resim_worlds`) up to frame ``stop - 1``; ``emit(index)``
        hears of each frame re-simulated (progress, when nothing is drawn)."""
        device, spec = mjwarp_device(tape), mjwarp_spec(tape, req)
        key = json.dumps(["mjwarp", spec, device, 1], sort_keys=True)
        if key not in self._envs:
            self._envs[key] = mjwarp_worlds(spec, device, 1)
        [(divergence, rewards)] = resim_worlds(self._envs[key], [tape], [stop], req.rtol,
                                               req.atol, emit)
        return divergence, rewards, mjwarp_checked(tape, device, req)

    def _restore(self, tape: Tape, env: Any, first: int, stop: int,
                 reset: Callable[[int], Any], emit: Callable[[int], None]) -> None:
        """Draw the recorded states themselves, no simulation. An Atari screen is not part of
        its emulator state: frame t is drawn by restoring state t-1 and taking the recorded
        action t-1 from it (one emulator step, RNG included in the state)."""
        from rolltape.envs.state import restore_state

        reset(first)
        if tape.has_ale_state and not tape.has_state:
            for t in range(first, stop):
                if t:
                    continue_atari(env, tape, t - 1, again=ALE_STEPS_AGAIN if t == first else 0)
                    env.step(tape.actions[t - 1])
                emit(t)
            return
        assert tape.qpos is not None and tape.qvel is not None  # restore needs has_state
        for t in range(first, stop):
            restore_state(env, tape.qpos[t], tape.qvel[t])
            emit(t)


def mjwarp_device(tape: Tape) -> str:
    """The Warp device that re-simulates an MJWarp ``tape``: the one that made it when this
    machine has it, else the CPU (:func:`rolltape.envs.mjwarp.warp_device`)."""
    from rolltape.envs.mjwarp import warp_device

    recorded = tape.meta.get("device")
    return warp_device(recorded if isinstance(recorded, str) else None)


def mjwarp_spec(tape: Tape, req: RenderRequest) -> dict[str, Any]:
    """The env an MJWarp ``tape`` is re-simulated on: its own, or ``--env``'s id."""
    return tape.env if req.env_id is None else {**tape.env, "id": req.env_id}


def mjwarp_worlds(spec: dict[str, Any], device: str, worlds: int) -> Any:
    """An :class:`rolltape.envs.mjwarp.MJWarpEnv` of ``worlds`` worlds of the env ``spec``."""
    from rolltape.envs.mjwarp import MJWarpEnv

    return MJWarpEnv.of(spec, worlds, device=device)


def mjwarp_checked(tape: Tape, device: str, req: RenderOptions) -> str:
    """What a re-simulation on MJWarp compared, and where (RenderResult.checked)."""
    recorded = tape.meta.get("device")
    what = "observations and states" if req.rtol == 0 and req.atol == 0 else "rewards"
    return f"{what} on MJWarp ({device}{f'; made on {recorded}' if recorded != device else ''})"


def resim_worlds(sim: Any, tapes: Sequence[Tape], stops: Sequence[int], rtol: float,
                 atol: float, stepped: Callable[[int], None] | None = None
                 ) -> list[tuple[Divergence | None, list[float]]]:
    """(divergence, rewards) of each of ``tapes`` (MuJoCo Warp tapes of one env, actions of
    one dtype) re-simulated as world i of ``sim`` (an MJWarpEnv of ``len(tapes)`` worlds),
    from the reset of its seed up to its frame ``stops[i] - 1``: rewards and flags as
    :func:`compare_step` judges them (the time limit from the tape's env), and, without a
    tolerance, each observation's digest and each state (qpos, qvel), exactly. A world that
    diverged or ended steps on with zero actions, unjudged: worlds do not touch each other.
    Every world is judged at once, step by step (a batch's worlds cost one comparison, not
    one each); :func:`compare_step` and :func:`first_wrong_state` say how a world that
    differs differs. ``stepped(index)`` hears of each frame re-simulated."""
    from rolltape.envs.digests import obs_digests
    from rolltape.envs.mjwarp import time_limit

    n, exact = len(tapes), rtol == 0 and atol == 0
    judged = np.asarray(stops) - 1  # steps each tape is judged on
    longest = int(judged.max())
    actions = _stacked([t.actions for t in tapes], longest)
    expected = _stacked([t.rewards for t in tapes], longest)
    ends = [_stacked([t.terminated for t in tapes], longest),
            _stacked([t.truncated for t in tapes], longest)]
    qpos, qvel = (_stacked([getattr(t, name) for t in tapes], longest + 1)
                  for name in ("qpos", "qvel"))
    has_digests = np.array([t.obs_digest is not None for t in tapes])
    digests = _stacked([t.obs_digest if t.obs_digest is not None else
                        np.zeros(len(t.rewards) + 1, np.uint64) for t in tapes], longest + 1)
    limits = np.array([time_limit(t.env) for t in tapes])
    divergences: list[Divergence | None] = [None] * n
    wrong = np.zeros(n, dtype=bool)

    def same(obs: np.ndarray, frame: int) -> np.ndarray:
        """(n,) bool: each world's observation digest and state are the tape's, exactly."""
        now = sim.current
        return ((~has_digests | (obs_digests(obs) == digests[frame]))
                & (now.qpos == qpos[frame]).all(axis=1) & (now.qvel == qvel[frame]).all(axis=1))

    obs = sim.reset([tape.seed for tape in tapes])
    if exact:
        for i in np.flatnonzero(~same(obs, 0)).tolist():
            divergences[i] = first_wrong_state(tapes[i], 0, sim.current, i) or \
                Divergence(0, "reset observation", "pass-1 digest", "another digest")
            wrong[i] = True
    if stepped is not None:
        stepped(0)
    got = np.zeros((longest, n))
    played = np.zeros(n, dtype=int)
    for t in range(longest):
        live = (t < judged) & ~wrong
        if not live.any():
            break
        obs, reward, terminated = sim.step(actions[t] * live[:, None].astype(actions.dtype))
        got[t] = reward
        truncated = (t + 1 == limits) & ~terminated
        if exact:
            ok = (reward == expected[t]) | (np.isnan(reward) & np.isnan(expected[t]))
        else:  # math.isclose, as compare_step judges it
            ok = (reward == expected[t]) | (np.abs(reward - expected[t]) <= np.maximum(
                rtol * np.maximum(np.abs(reward), np.abs(expected[t])), atol))
        ok &= (terminated == ends[0][t]) & (truncated == ends[1][t])
        if exact:
            ok &= same(obs, t + 1)
        for i in np.flatnonzero(live & ~ok).tolist():  # how it differs, in compare_step's words
            divergences[i] = compare_step(
                tapes[i], t, float(reward[i]), bool(terminated[i]), bool(truncated[i]), obs[i],
                rtol, atol) or (first_wrong_state(tapes[i], t + 1, sim.current, i)
                                if exact else None)
            wrong[i] = divergences[i] is not None
        played[live] = t + 1
        if stepped is not None:
            stepped(t + 1)
    return [(divergences[i], got[:played[i], i].tolist()) for i in range(n)]


def _stacked(arrays: Sequence[np.ndarray], length: int) -> np.ndarray:
    """(length, len(arrays), ...): array i down column i, zeros past its end."""
    out = np.zeros((length, len(arrays), *arrays[0].shape[1:]), dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[:min(length, len(a)), i] = a[:length]
    return out


#: worlds of one MJWarp batch when ``verify`` re-simulates many tapes at once
VERIFY_WORLDS = 1024


def verify_mjwarp(requests: Sequence[RenderRequest], tapes: Sequence[Tape] | None = None,
                  on_progress: Callable[[int], None] | None = None) -> list[RenderResult]:
    """``rolltape verify`` of MuJoCo Warp tapes, many at once: the tapes of one env, device
    and action type re-simulated as the worlds of one batch (up to :data:`VERIFY_WORLDS`),
    each judged as :meth:`Replayer.resim_mjwarp` judges one. Nothing is drawn, so no GL
    and no render process: it runs here. ``tapes``: the requests' tapes, loaded already
    (else loaded here); ``on_progress(frames)``: frames re-simulated so far, all tapes
    together."""
    from rolltape.envs.build import mujoco_warnings

    tapes = list(tapes) if tapes is not None else [Tape.load(r.tape) for r in requests]
    groups: dict[str, list[int]] = {}
    specs = [mjwarp_spec(tape, req) for tape, req in zip(tapes, requests)]
    for i, tape in enumerate(tapes):
        device = mjwarp_device(tape)
        key = json.dumps([specs[i], device, str(tape.actions.dtype)], sort_keys=True)
        groups.setdefault(key, []).append(i)
    results: list[RenderResult | None] = [None] * len(requests)
    done = 0  # frames of the chunks finished
    for members in groups.values():
        for start in range(0, len(members), VERIFY_WORLDS):
            chunk = members[start:start + VERIFY_WORLDS]
            began = time.perf_counter()
            device = mjwarp_device(tapes[chunk[0]])
            stops = np.array([tapes[i].frame_range[1] for i in chunk])

            def stepped(index: int) -> None:
                if on_progress is not None and (index % 10 == 0 or index == stops.max() - 1):
                    on_progress(done + int(np.minimum(index + 1, stops).sum()))

            sim = mjwarp_worlds(specs[chunk[0]], device, len(chunk))
            try:
                judged = resim_worlds(sim, [tapes[i] for i in chunk], stops.tolist(),
                                      requests[chunk[0]].rtol, requests[chunk[0]].atol,
                                      stepped)
            finally:
                sim.close()
            done += int(stops.sum())
            seconds = (time.perf_counter() - began) / len(chunk)
            for i, (divergence, rewards) in zip(chunk, judged):
                req, tape = requests[i], tapes[i]
                results[i] = RenderResult(
                    tape=req.tape, outputs=(), mode="verify", backend=None,
                    steps=tape.length, frames=0, verified=divergence is None,
                    checked=mjwarp_checked(tape, device, req), divergence=divergence,
                    replay_return=sum_rewards(rewards), seconds=seconds,
                    warnings=tuple(mujoco_warnings()), torch_loaded="torch" in sys.modules,
                    forbidden_loaded=forbidden_modules(), rewards=tuple(rewards), fps=0.0,
                    niceness=os.nice(0))
    return [r for r in results if r is not None]


def first_wrong_state(tape: Tape, frame: int, physics: Any, world: int = 0
                      ) -> Divergence | None:
    """Frame ``frame``'s recorded qpos/qvel against world ``world`` of a re-simulation's
    ``physics`` (:class:`rolltape.envs.mjwarp.Physics`), exactly; the first that differs."""
    for name in ("qpos", "qvel"):
        recorded, got = getattr(tape, name)[frame], getattr(physics, name)[world]
        if not np.array_equal(recorded, got):
            return Divergence(max(frame - 1, 0), name, "pass-1 state", "another state",
                              float(np.nanmax(np.abs(recorded - got))))
    return None


def checked_by(tape: Tape, req: RenderOptions) -> str:
    """What a re-simulation of ``tape`` compares with pass 1: "observations" when it has
    digests and no tolerance relaxes them, else "rewards" (rewards and flags alone)."""
    exact = req.rtol == 0 and req.atol == 0
    return "observations" if tape.obs_digest is not None and exact else "rewards"


class ImagesApart:
    """The comparison of a tape whose images pass 1 drew with another GL backend than this
    worker's: different rasterizers may differ in pixels, so only the other keys' digests
    (the tape's ``obs_key_digest``) are compared, as one digest per frame. ``tape`` is the
    tape with that digest in place of ``obs_digest`` and ``view`` maps an observation to
    the row of its kept keys' digests, so every check that compares ``obs_digest`` compares
    these instead; ``what`` is the result's ``checked``."""

    def __init__(self, tape: Tape, kept: list[str], what: str) -> None:
        from rolltape.envs.digests import obs_digests

        assert tape.obs_keys is not None and tape.obs_key_digest is not None  # see of()
        columns = [tape.obs_keys.index(k) for k in kept]
        rows = np.ascontiguousarray(tape.obs_key_digest[:, columns], dtype=np.uint64)
        self.tape = replace(tape, obs_digest=obs_digests(rows))
        self.kept = kept
        self.what = what

    @classmethod
    def of(cls, tape: Tape, backend: str | None) -> ImagesApart | None:
        """None where the whole observation is compared: no images, no per-key digests,
        pass 1 drew the images with this backend, or it names none (a local pass-1 worker
        runs without a GL backend: its images are drawn otherwise, gym-pusht's by pygame,
        and compare whole as they always did)."""
        facts = tape.obs_images
        if (facts is None or tape.obs_digest is None or tape.obs_keys is None
                or tape.obs_key_digest is None):
            return None
        drew, here = facts.get("backend"), (backend or "").lower() or None
        if drew is None or drew == here:
            return None
        kept = [k for k in tape.obs_keys if k not in set(facts.get("keys") or ())]
        return cls(tape, kept, f"observations except images (pass 1 drew them with "
                               f"{drew}, pass 2 with {here or 'no GL backend'})")

    def view(self, obs: Any) -> Any:
        """The kept keys' digests of a dict observation (as pass 1 digested each key); any
        other observation as it is, whose digest then differs from the tape's."""
        from rolltape.envs.digests import array_digest, flat_items

        if not isinstance(obs, dict):
            return obs
        leaves = dict(flat_items(obs))
        if any(k not in leaves for k in self.kept):
            return obs
        return np.array([array_digest(leaves[k]) for k in self.kept], dtype=np.uint64)


def drawn_before(tape: Tape, first: int) -> set[int]:
    """Frames before ``first`` that were drawn where the tape was recorded (a training
    window that began inside another recording of its episode: ``meta["drawn_before"]``,
    inclusive ranges). A replay draws and drops them, because some envs age what they draw
    in ``render()`` (LunarLander's particles), so the window's first frames match. A damaged
    entry is ignored (it changes only frames that are checked anyway)."""
    ranges = tape.meta.get("drawn_before") if isinstance(tape.meta, dict) else None
    out: set[int] = set()
    if not isinstance(ranges, list) or first <= 0:
        return out
    for r in ranges[:10_000]:
        if (isinstance(r, list) and len(r) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in r)):
            out.update(range(max(0, r[0]), min(r[1], first - 1) + 1))
    return out


def encoding_beside(writer: FrameWriter, env_id: str) -> FrameWriter | BackgroundWriter:
    """``writer`` fed from a thread of its own (:class:`encode.BackgroundWriter`), so that
    encoding overlaps the drawing of the next frame, where drawing lets go of the GIL (GL,
    pygame). ALE's emulator holds it, so an encoding thread beside an Atari replay waits
    for the GIL at every frame: there the writer encodes in line (1,500 Pong frames: 1.1 s
    with the thread, 0.93 s in line; a process per output, 0.9 s, pays its ~0.2 s start
    again for every episode)."""
    from rolltape.envs.ids import is_atari
    from rolltape.pass2.encode import BackgroundWriter

    return writer if is_atari(env_id) else BackgroundWriter(writer)


def _reset_as_recorded(env: Any, tape: Tape) -> Any:
    """Reset the env into the state the tape begins in, and return the reset observation
    (None when the tape begins mid-episode, where no reset observation was recorded).

    An eval tape is reset with its seed. A tape recorded in training (unseeded resets)
    carries the env's generator state from just before its reset, which is set first, so
    the unseeded reset draws the same start; for MuJoCo the recorded physics state at the
    tape's first frame is then set too (the same state, unless the env keeps state the
    generator does not explain). A tape that begins after ``start_step`` steps of its
    episode continues from that state, with the time limit advanced to match."""
    from rolltape.envs.state import (
        continue_from,
        restore_ale_state,
        set_elapsed_steps,
        set_rng_state,
    )

    if tape.reset_rng is not None:
        set_rng_state(env, tape.reset_rng)
    obs, _ = env.reset(seed=tape.seed, options=tape.options)
    if tape.reset_rng is not None and tape.has_ale_state:
        # An unseeded Atari reset: ALE's own RNG (sticky actions) is not np_random's, so the
        # emulator state recorded at the reset, RNG included, is put in (the reset screen,
        # which that state does not hold, is the replay's own and is checked by its digest).
        restore_ale_state(env, tape.ale_state_at(0))
    if (tape.reset_rng is not None or tape.start_step) and tape.physics is not None:
        import mujoco

        continue_from(env, tape.physics[0])
        mujoco.mj_forward(env.unwrapped.model, env.unwrapped.data)  # poses to draw frame 0
    if tape.start_step:
        set_elapsed_steps(env, tape.start_step)
        return None
    return obs


def _flat(writers: list[list[Any]]) -> list[Any]:
    return [w for stream in writers for w in stream]


class _PendingDigests:
    """Observations of steps already compared on everything else, digested a batch at a time.

    They are copied into one buffer made once (the env may reuse its arrays): a copy per
    step into fresh memory and a stack of the batch cost as much as the digest itself."""

    def __init__(self, tape: Any, judged: bool) -> None:
        self.tape = tape
        self.judged = judged and tape.obs_digest is not None
        self.steps: list[int] = []
        self.rows: np.ndarray | None = None

    def takes(self, obs: Any) -> bool:
        return (self.judged and isinstance(obs, np.ndarray) and obs.nbytes > BIG_OBS
                and (self.rows is None or (obs.shape == self.rows.shape[1:]
                                           and obs.dtype == self.rows.dtype)))

    def add(self, t: int, obs: np.ndarray) -> None:
        if self.rows is None:
            self.rows = np.empty((DIGEST_BATCH, *obs.shape), dtype=obs.dtype)
        self.rows[len(self.steps)] = obs
        self.steps.append(t)

    @property
    def full(self) -> bool:
        return len(self.steps) >= DIGEST_BATCH

    def flush(self) -> Divergence | None:
        """The first pending step whose observation differs from pass 1's, if any."""
        if not self.steps:
            return None
        from rolltape.envs.digests import obs_digests

        assert self.rows is not None  # made by the first add
        digests = obs_digests(self.rows[:len(self.steps)])
        steps, self.steps = self.steps, []
        for t, digest in zip(steps, digests):
            if int(digest) != int(self.tape.obs_digest[t + 1]):
                return Divergence(t, "observation", "pass-1 digest", "another digest")
        return None


def compare_step(tape: Tape, t: int, reward: float, term: bool, trunc: bool, obs: Any,
                 rtol: float, atol: float) -> Divergence | None:
    """Step ``t`` of the replay against pass 1's: the reward (exact, or within
    ``rtol``/``atol``), the termination flags, then, compared exactly, the observation's
    digest (``obs`` None: the caller checks digests itself); the first that differs, or
    None."""
    from rolltape.envs.digests import obs_digest

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
    # (obs None: the caller checks the digests itself, with first_wrong_digest.)
    if tape.obs_digest is not None and rtol == 0 and atol == 0 and obs is not None:
        if obs_digest(obs) != int(tape.obs_digest[t + 1]):
            return Divergence(t, "observation", "pass-1 digest", "another digest")
    return None


def first_wrong_step(tape: Tape, rewards: list[float], flags: list[tuple[bool, bool]]
                     ) -> Divergence | None:
    """The first of a replay's steps (from the reset) whose reward, termination or
    truncation is not exactly pass 1's, as :func:`compare_step` would report it (its
    observation aside), or None.

    >>> tape = Tape(seed=0, env={"id": "X"}, actions=np.zeros((2, 1)),
    ...             rewards=np.array([1.0, 2.0]), terminated=np.array([False, True]),
    ...             truncated=np.zeros(2, bool))
    >>> first_wrong_step(tape, [1.0, 2.0], [(False, False), (False, False)]).describe()
    'step 1: terminated was True in pass 1, False on replay'
    >>> first_wrong_step(tape, [1.0, 2.5], [(False, False), (True, False)]).describe()
    'step 1: reward was 2.0 in pass 1, 2.5 on replay (difference 0.5)'
    """
    n = len(rewards)
    if not n:
        return None
    got = np.asarray(rewards, dtype=np.float64)
    expected = tape.rewards[:n]
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    flag = np.asarray(flags, dtype=bool).reshape(n, 2)
    wrong = ~same | (flag[:, 0] != tape.terminated[:n].astype(bool)) \
        | (flag[:, 1] != tape.truncated[:n].astype(bool))
    if not wrong.any():
        return None
    t = int(np.argmax(wrong))
    return compare_step(tape, t, rewards[t], bool(flag[t, 0]), bool(flag[t, 1]), None, 0, 0)


def first_wrong_digest(tape: Tape, observations: list[Any], rtol: float = 0.0,
                       atol: float = 0.0) -> Divergence | None:
    """The first of a replay's observations (the reset's, then each step's) whose digest is
    not pass 1's, as :func:`compare_step` would report it, or None. Array observations
    are digested all at once (:func:`rolltape.envs.digests.obs_digests`, the same digest)."""
    from rolltape.envs.digests import obs_digest, obs_digests

    if tape.obs_digest is None or rtol != 0 or atol != 0 or not observations:
        return None
    if isinstance(observations[0], (dict, tuple)):
        got = np.array([obs_digest(o) for o in observations], dtype=np.uint64)
    else:
        got = obs_digests(np.stack([np.asarray(o) for o in observations]))
    wrong = np.flatnonzero(got != tape.obs_digest[:len(got)])
    if not wrong.size:
        return None
    t = int(wrong[0])
    if t == 0:
        return Divergence(0, "reset observation", "pass-1 digest", "another digest")
    return Divergence(t - 1, "observation", "pass-1 digest", "another digest")


def check_same_env(tape: Tape, env: Any, path: str) -> None:
    """Refuse to replay a tape on an env whose action or state shapes differ from its own."""
    from rolltape.envs.state import mujoco_data

    space = env.action_space
    shape = tuple(getattr(space, "shape", None) or ())
    recorded = tuple(tape.actions.shape[1:])
    data = mujoco_data(env)
    mismatch = None
    if shape != recorded:
        mismatch = f"actions of shape {recorded}, the env takes {shape}"
    elif (tape.qpos is not None and tape.qvel is not None  # has_state, spelled for mypy
          and data is not None and tape.qpos.shape[1] != data.qpos.shape[0]):
        mismatch = f"{tape.qpos.shape[1]} position coordinates, the env has {data.qpos.shape[0]}"
    if mismatch:
        raise UsageError(
            f"Tape '{path}' was recorded on {tape.env_id} and does not fit "
            f"{env.spec.id if env.spec else 'this env'} ({mismatch}); render it with its own env."
        )


_WARNED: list[str] = []  # Python warnings raised in this worker (e.g. GLFW's own errors)


#: What a render worker must never import: a policy framework, the policy side, the
#: orchestrator or an executor (tests/test_layout.py checks the source says so too).
FORBIDDEN = ("torch", "stable_baselines3", "rolltape.policies", "rolltape.pass1",
             "rolltape.evaluation", "rolltape.rendering", "rolltape.cli", "rolltape.executors")


def forbidden_modules() -> tuple[str, ...]:
    """The modules of :data:`FORBIDDEN` this process has imported (none, in a worker)."""
    # Importing a submodule imports its package first, so a look-up per name finds any;
    # the walk over every loaded module (~20 ms: each job asks) is only done to name them.
    if not any(f in sys.modules for f in FORBIDDEN):
        return ()
    return tuple(sorted(m for m in sys.modules
                        if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)))


def _keep_warning(message: Any, *args: Any, **kwargs: Any) -> None:
    _WARNED.append(str(message).strip())


def render_worker(backend: str | None, niceness: int, start_niceness: int, conn: Any) -> None:
    """Entry point of a spawned render process: one GL backend, many tapes. A positive
    ``niceness`` lowers its CPU priority (and its GL threads', which inherit it); a positive
    ``start_niceness`` lowers only that of its start (imports, on a thread of its own: a
    worker started ahead, while pass 1 plays, then draws at the normal priority)."""
    import warnings

    if niceness:
        os.nice(niceness)
        idle_priority_class()
    # Kept and folded into failure reasons instead of printed: GLFW, for one, says the real
    # cause ("DISPLAY ... is missing") only as a warning.
    warnings.showwarning = _keep_warning
    try:
        failed = _in_thread_at_niceness(start_niceness, _start, backend)
        if failed:
            conn.send(("backend_failed", None, failed))
            return
        replayer = Replayer(backend, lambda n: conn.send(("progress", current[0], n)))
        current: list[Any] = [None]
        while True:
            msg = conn.recv()
            if msg is None:
                break
            job_id, req = msg
            current[0] = job_id
            try:
                # A job that is not a render (an export's) plays itself on this replayer.
                done = (replayer.run(req) if isinstance(req, RenderRequest)
                        else req.perform(replayer))
                conn.send(("done", job_id, done))
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
    else:
        # Asked to stop, every job done and its outputs closed: exit now. Tearing down the
        # interpreter (numpy, PyAV, the simulators' modules) took 0.3-0.8 s, which the
        # command that waits for its workers to exit (stop_workers) spent doing nothing.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def idle_priority_class() -> bool:
    """Put this thread, and the threads it starts from now on (llvmpipe's), in Linux's
    SCHED_IDLE class: they run only on CPU time nothing else wants. Nice +10 alone still
    took ~10% of a busy core (CFS weights 110 vs 1024): PPO kept 0.94 of its speed beside
    background videos on 2 cores (bench ``training_background_video``). False where there is no such class (not Linux) or it is refused."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return False
    return True


def _in_thread_at_niceness(niceness: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, on a thread whose niceness is raised by ``niceness`` (on Linux a
    thread's priority is its own, and a process cannot raise it back), or here if 0."""
    if not niceness:
        return fn(*args)
    import threading

    out: list[Any] = [None]

    def run() -> None:
        os.nice(niceness)
        out[0] = fn(*args)

    thread = threading.Thread(target=run, name="rolltape-start")
    thread.start()
    thread.join()
    return out[0]


def _start(backend: str | None) -> str | None:
    """Make this process ready to draw with ``backend``; return why it cannot, or None."""
    if backend is not None:
        select_backend_in_this_process(backend)  # before anything imports mujoco
        inject_fault(backend)
        try:
            import mujoco  # noqa: F401  (the import itself fails for a missing GL library)
        except Exception as exc:
            return f"import mujoco failed: {exc}"
    _import_what_jobs_need(backend)
    return None


def _import_what_jobs_need(backend: str | None) -> None:
    """Import once, while the process starts, what every job would otherwise import on its
    first tape (PyAV, Gymnasium, PyOpenGL for the frame readback)."""
    import gymnasium  # noqa: F401

    from rolltape import tape  # noqa: F401
    from rolltape.envs import build, digests, state  # noqa: F401
    from rolltape.pass2 import encode  # noqa: F401  (PyAV's codecs: ~0.15 s)

    if backend is not None:
        try:
            from OpenGL import GL  # noqa: F401
        except Exception:
            pass  # cameras.rgb_only falls back to env.render()


def inject_fault(backend: str) -> None:
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
