"""Pass 2 for datasets, the worker's side: replay a tape and keep what it regenerates.

A tape holds actions and digests, not observations. An export job replays one tape in a
render worker with the verification every render uses (:meth:`Replayer.resim`: each
step's reward, flags and observation digest against pass 1) and keeps each regenerated
observation, the success flag of each step's ``info`` and, when cameras are asked for, the
frames of the same replay, encoded as they come (LeRobot's AV1 settings). A verified
episode is written as one ``.npz`` (and one mp4 per camera) into the export's staging
folder; an episode that does not verify writes nothing and says where it diverged.

Observations are stored as the env returned them: an array observation as ``obs``, a dict
(or tuple) observation as one array per leaf, ``obs/KEY/SUBKEY``.

:class:`ProbeJob` runs first, in the first render worker (or :func:`probe_envs`, in a
process of its own): it builds each env without drawing and sends back its spaces, spec
and frame rate, so the orchestrator (which never imports MuJoCo) can refuse what a dataset
cannot hold before any episode is played.

With ``--renderer mjwarp`` the episodes' camera videos are drawn apart, all at once, by
:func:`draw_videos` (in a process of its own): MuJoCo Warp's batch renderer draws each
tape's recorded states (:func:`rolltape.pass2.batch.draw_batch`, the frames ``render
--renderer mjwarp`` writes), encoded as the replay's own would be, with their image
statistics; the replays then only regenerate and verify the observations.

May import: envs, tape, errors, files, the render side (replay, cameras, encode, batch).
Never: policies, pass 1, torch or SB3, the orchestrator, an executor, outputs.
"""

from __future__ import annotations

import io
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import write_bytes
from rolltape.pass2.replay import first_wrong_digest, forbidden_modules
from rolltape.pass2.request import RenderOptions


@dataclass(frozen=True)
class ExportResult:
    """What replaying one tape for a dataset gave."""

    tape: str
    verified: bool
    divergence: str | None  # the first divergent step, in words, when not verified
    steps: int
    seconds: float
    files: tuple[str, ...] = ()  # the episode's npz and its videos (none when not verified)
    torch_loaded: bool = False  # isolation check, as a render's
    forbidden_loaded: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ExportJob(RenderOptions):
    """One tape to replay for a dataset: ``out`` is the episode's ``.npz``, ``videos`` one
    mp4 per camera of :attr:`cameras` (none: observations only), at ``fps``."""

    tape: str
    out: str
    videos: tuple[str, ...] = ()
    fps: float = 30.0
    success_key: str | None = "is_success"
    video_options: dict[str, str] = field(default_factory=dict)
    # LeRobot's frames are (observation, action) pairs: a video holds the frames of the
    # observations each step acted on, not the last one (False). Minari keeps every one.
    last_frame: bool = True
    env_id: str | None = None  # the env to replay on, when the user trusted the tape's module

    def perform(self, replayer: Any) -> ExportResult:
        """Replay the tape on ``replayer`` (a render worker's, whose envs it reuses)."""
        from rolltape.envs.ids import check_tape_env_module
        from rolltape.pass2.cameras import CameraRig
        from rolltape.pass2.encode import finishing, open_av1_writer
        from rolltape.pass2.replay import check_same_env, encoding_beside
        from rolltape.tape import Tape

        start = time.perf_counter()
        tape = Tape.load(self.tape)
        if tape.start_step or tape.window is not None:
            raise UsageError(f"Tape '{self.tape}' begins mid-episode (a training recording), "
                             "so it cannot be a dataset episode; export an eval run's tapes.")
        spec = dict(tape.env)
        if self.env_id is not None:
            spec["id"] = self.env_id
        else:
            check_tape_env_module(tape.env_id, self.tape)
        if self.mode == "restore" and tape.physics is None and not tape.has_ale_state:
            raise UsageError(f"Tape '{self.tape}' holds no MuJoCo or ALE states, so --mode "
                             "restore cannot export it; use --mode resim.")
        draw = bool(self.videos)
        key, env = replayer.env_for(spec, self, draw)
        check_same_env(tape, env, self.tape)
        rig = CameraRig(env, self.cameras) if draw else None
        writers = [encoding_beside(open_av1_writer(p, self.fps, overwrite=True,
                                                   options=self.video_options or None),
                                   spec["id"]) for p in self.videos]
        observations: list[Any] = []
        success = np.zeros(tape.length + 1, dtype=bool)
        frames = tape.length + 1 if self.last_frame else tape.length
        sampled = set(sample_indices(frames)) if draw else set()
        image_stats = [ImageStats() for _ in self.videos]

        def observe(index: int, obs: Any, info: Any) -> None:
            # (A copy: some envs return views of their buffers. An array's, without _copy's
            # type checks, on the path every step of a common env takes.)
            observations.append(obs.copy() if type(obs) is np.ndarray else _copy(obs))
            if info and self.success_key is not None:
                success[index] = bool(info.get(self.success_key, False))

        def emit(index: int) -> None:
            if rig is not None and index < frames:
                for k, (frame, writer) in enumerate(zip(rig.frames(), writers)):
                    writer.write(frame)
                    if index in sampled:
                        image_stats[k].add(frame)

        def reset(first: int = 0) -> Any:
            return replayer.reset(key, env, tape, draw, self.quality, first)

        with finishing(writers):
            if self.mode == "restore":
                divergence = _step_from_states(tape, env, self, reset, emit, observe, draw)
            else:
                divergence, _ = replayer.resim(tape, env, self, 0, tape.length + 1, reset,
                                               emit, observe, digests_later=True)
            # The observations' digests, all at once; the first divergence of either kind.
            wrong = first_wrong_digest(tape, observations, self.rtol, self.atol)
            if wrong is not None and (divergence is None or wrong.step < divergence.step
                                      or (wrong.step == divergence.step
                                          and wrong.field == "reset observation")):
                divergence = wrong
            if divergence is not None:
                for w in writers:
                    w.abort()
                return ExportResult(self.tape, False, divergence.describe(), tape.length,
                                    time.perf_counter() - start,
                                    torch_loaded="torch" in sys.modules,
                                    forbidden_loaded=forbidden_modules())
            arrays: dict[str, Any] = {f"obs{name}": np.stack(rows) for name, rows in
                                      _leaves(observations).items()}
            arrays.update(actions=tape.actions, rewards=tape.rewards,
                          terminated=tape.terminated, truncated=tape.truncated,
                          success=success)
            for k, stats in enumerate(image_stats):
                for name, value in stats.result().items():
                    arrays[f"image_stats/{k}/{name}"] = value
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        write_bytes(self.out, buffer.getvalue())  # last: its presence says "episode done"
        return ExportResult(self.tape, True, None, tape.length, time.perf_counter() - start,
                            files=(self.out, *self.videos), torch_loaded="torch" in sys.modules,
                            forbidden_loaded=forbidden_modules())


#: Episodes drawn at once by an export on MuJoCo Warp: each holds an AV1 encoder while its
#: round is drawn (SVT-AV1 at LeRobot's settings: 7 MB at 64x64, 8 MB at 128x128, measured),
#: so a round of 256 costs ~2 GB of encoders; render's rounds (PNGs, H.264) are larger.
EXPORT_WORLDS = 256


@dataclass(frozen=True)
class BatchVideos:
    """The camera videos of an export's episodes, drawn on MuJoCo Warp: for tape ``i``,
    ``videos[i]`` (one AV1 mp4 of its first ``length`` frames: a dataset's frames are the
    observations its actions were taken on) and then ``stats[i]`` (an ``.npz`` of the
    frames' :class:`ImageStats` as ``image_stats/0/NAME``, as an :class:`ExportJob` stores
    them; written last, its presence says the episode's video is whole)."""

    tapes: tuple[str, ...]
    videos: tuple[str, ...]
    stats: tuple[str, ...]
    env_ids: tuple[str | None, ...]
    camera: str
    width: int | None
    height: int | None
    fps: float
    video_options: dict[str, str] = field(default_factory=dict)
    worlds: int = EXPORT_WORLDS


def draw_videos(job: BatchVideos) -> Any:
    """Draw and encode ``job``'s videos (:class:`BatchVideos`); returns the batch's
    :class:`rolltape.pass2.batch.BatchResult` (its env, camera, size, Warp's device)."""
    import contextlib

    from rolltape.pass2.batch import BatchRequest, draw_batch
    from rolltape.pass2.encode import open_av1_writer

    request = BatchRequest(tapes=job.tapes, outputs=((),) * len(job.tapes),
                           env_ids=job.env_ids, width=job.width, height=job.height,
                           camera=job.camera, fps=job.fps, worlds=job.worlds)

    @contextlib.contextmanager
    def episode(i: int, frames: int) -> Any:
        sampled, stats = set(sample_indices(frames)), ImageStats()
        with open_av1_writer(job.videos[i], job.fps, overwrite=True,
                             options=job.video_options or None) as writer:
            def write(index: int, rgb: np.ndarray, *_: Any) -> None:
                writer.write(rgb)
                if index in sampled:
                    stats.add(rgb)

            yield write
        arrays: dict[str, Any] = {f"image_stats/0/{name}": value
                                  for name, value in stats.result().items()}
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        write_bytes(job.stats[i], buffer.getvalue())

    return draw_batch(request, episode, last_frame=False)


def _step_from_states(tape: Any, env: Any, job: ExportJob, reset: Callable[[], Any],
                      emit: Callable[[int], None], observe: Callable[[int, Any, Any], None],
                      draw: bool) -> Any:
    """``--mode restore``: each step t is simulated from the state pass 1 recorded before
    it (not from the replay's own previous step), its reward and flags compared with the
    tape's (its observation is checked by the caller, against pass 1's digest); frame t
    is drawn from the recorded state t itself, as ``rolltape render --mode restore`` draws.

    Why not read observations off the restored states: an env's observation is what its
    ``step`` returned, and that is not a function of the state it ends in (Gymnasium's
    MuJoCo envs report body positions computed before the last substep, Ant contact
    forces computed only inside a step), so it would be another array than pass 1's and
    fail its digest. One step from the recorded state gives pass 1's very observation
    (and the info with its success flag) and cannot inherit an earlier step's error.
    Returns the first divergence, or None."""
    from rolltape.envs.state import continue_from, restore_ale_state, restore_state
    from rolltape.pass2.replay import compare_step

    observe(0, reset(), None)
    mujoco = tape.physics is not None
    for t in range(tape.length):
        if draw:
            if mujoco:
                restore_state(env, tape.qpos[t], tape.qvel[t])
            emit(t)  # an ALE screen is the one the last step (or the reset) drew
        if mujoco:
            continue_from(env, tape.physics[t])
        else:
            restore_ale_state(env, tape.ale_state_at(t))
        obs, reward, term, trunc, info = env.step(tape.actions[t])
        observe(t + 1, obs, info)
        divergence = compare_step(tape, t, float(reward), bool(term), bool(trunc), None,
                                  job.rtol, job.atol)
        if divergence is not None:
            return divergence
    if draw:
        if mujoco:
            restore_state(env, tape.qpos[tape.length], tape.qvel[tape.length])
        emit(tape.length)
    return None


#: The quantiles LeRobot's statistics hold (q01, q10, q50, q90, q99).
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def feature_stats(array: np.ndarray, axis: int | tuple[int, ...] = 0) -> dict[str, np.ndarray]:
    """min, max, mean, std, count and quantiles of ``array`` over ``axis`` (0: per element
    of a vector feature; (0, 2, 3): per channel of (N, C, H, W) images, kept as (C, 1, 1)),
    as LeRobot's ``meta/stats.json`` holds them.

    >>> feature_stats(np.array([[0.0, 1.0], [2.0, 3.0]]))["mean"].tolist()
    [1.0, 2.0]
    """
    keep = not isinstance(axis, int)
    values = np.asarray(array, dtype=np.float64)
    out = {"min": values.min(axis=axis, keepdims=keep), "max": values.max(axis=axis, keepdims=keep),
           "mean": values.mean(axis=axis, keepdims=keep),
           "std": values.std(axis=axis, keepdims=keep),
           "count": np.array([values.shape[0]], dtype=np.int64)}
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(values, q, axis=axis, keepdims=keep)
    if keep:  # (1, C, 1, 1) -> (C, 1, 1)
        out = {k: (v[0] if k != "count" else v) for k, v in out.items()}
    return out


def sample_indices(length: int) -> list[int]:
    """The frames LeRobot samples from an episode of ``length`` frames for image statistics
    (evenly spaced; 100 of them up to 464 frames, growing as length^0.75 after)."""
    count = min(length, max(100, min(10_000, int(length ** 0.75))))
    return np.round(np.linspace(0, length - 1, count)).astype(int).tolist()


def _downsample(frame: np.ndarray) -> np.ndarray:
    """A frame as LeRobot's statistics see it (a view): a side of 300 pixels or more is
    strided down to about 150."""
    height, width = frame.shape[:2]
    if max(height, width) < 300:
        return frame
    step = int(width / 150) if width > height else int(height / 150)
    return frame[::step, ::step]


class ImageStats:
    """:func:`feature_stats` of a camera's sampled RGB frames (downsampled as LeRobot's
    are), per channel in [0, 1], kept as 256 counts per channel: a frame costs three
    ``bincount`` calls, no frame is held, and min, max, mean, std and the quantiles all
    come from the counts (the same numbers, to float rounding, as over the stacked frames,
    which cost 0.6 s an episode at 640x480, 10% of the export).

    >>> stats = ImageStats()
    >>> stats.add(np.full((2, 2, 3), 255, np.uint8)); stats.add(np.zeros((2, 2, 3), np.uint8))
    >>> stats.result()["mean"].ravel().tolist(), stats.result()["count"].tolist()
    ([0.5, 0.5, 0.5], [2])
    """

    def __init__(self) -> None:
        self.counts: np.ndarray | None = None  # (channels, 256)
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        small = _downsample(frame)
        if self.counts is None:
            self.counts = np.zeros((small.shape[2], 256), dtype=np.int64)
        for c in range(small.shape[2]):
            self.counts[c] += np.bincount(small[..., c].ravel(), minlength=256)
        self.frames += 1

    def result(self) -> dict[str, np.ndarray]:
        """The statistics, each of shape (channels, 1, 1), and ``count`` (frames)."""
        assert self.counts is not None, "no frame was added"
        levels = np.arange(256) / 255.0
        n = self.counts.sum(axis=1)
        seen = self.counts > 0
        mean = self.counts @ levels / n
        std = np.sqrt((self.counts * (levels - mean[:, None]) ** 2).sum(axis=1) / n)
        out = {"min": levels[seen.argmax(axis=1)], "max": levels[255 - seen[:, ::-1].argmax(axis=1)],
               "mean": mean, "std": std}
        cumulative = self.counts.cumsum(axis=1)

        def value(rank: np.ndarray) -> np.ndarray:
            """Each channel's value at 0-based ``rank`` of its sorted pixels."""
            return levels[[np.searchsorted(c, r, side="right") for c, r in zip(cumulative, rank)]]

        for q in QUANTILES:  # np.quantile's default (linear) between the two nearest values
            at = q * (n - 1)
            below = np.floor(at).astype(np.int64)
            low, high = value(below), value(np.minimum(below + 1, n - 1))
            out[f"q{round(q * 100):02d}"] = low + (high - low) * (at - below)
        out = {k: v.reshape(-1, 1, 1) for k, v in out.items()}
        out["count"] = np.array([self.frames], dtype=np.int64)
        return out


def _copy(obs: Any) -> Any:
    """The observation, detached from the env's buffers (some envs return views)."""
    if isinstance(obs, dict):
        return {k: _copy(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_copy(v) for v in obs)
    return np.array(obs, copy=True)


def _leaves(rows: list[Any]) -> dict[str, list[Any]]:
    """Per-step observations as one list per leaf: '' for an array observation,
    '/KEY/...' for the leaves of a dict or tuple one (keys in the space's order)."""
    if rows and isinstance(rows[0], np.ndarray):  # an array observation: one leaf
        return {"": rows}
    out: dict[str, list[Any]] = {}

    def walk(value: Any, name: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{name}/{k}")
        elif isinstance(value, tuple):
            for k, v in enumerate(value):
                walk(v, f"{name}/{k}")
        else:
            out.setdefault(name, []).append(value)

    for row in rows:
        walk(row, "")
    return out


def nest(arrays: dict[str, np.ndarray], space: Any) -> Any:
    """An episode's stored ``obs...`` arrays back in the shape of ``space`` (an array, or
    dicts and tuples of them)."""
    from gymnasium import spaces

    def build(sub: Any, name: str) -> Any:
        if isinstance(sub, spaces.Dict):
            return {k: build(s, f"{name}/{k}") for k, s in sub.spaces.items()}
        if isinstance(sub, spaces.Tuple):
            return tuple(build(s, f"{name}/{k}") for k, s in enumerate(sub.spaces))
        return arrays[name]

    return build(space, "obs")


@dataclass(frozen=True)
class ProbeJob:
    """Build each env spec without drawing and answer, per spec, (observation space, action
    space, Gymnasium EnvSpec, frame rate); a camera the env lacks is a UsageError. Sent to
    a render worker before its replays (or run by :func:`probe_worker`)."""

    specs: tuple[dict[str, Any], ...]
    cameras: tuple[str, ...]
    trusted: tuple[str, ...] = ()  # env ids whose module the user trusted (--trust-module)
    tapes: tuple[str, ...] = ()  # the tape each spec comes from (named when refused)

    def perform(self, replayer: Any = None) -> list[tuple[Any, ...]]:
        from rolltape.envs.build import make_env
        from rolltape.envs.ids import check_tape_env_module
        from rolltape.pass2.cameras import check_cameras

        out = []
        for k, spec in enumerate(self.specs):
            if spec["id"] not in self.trusted:  # a tape is data: it may not name code
                check_tape_env_module(spec["id"], self.tapes[k] if k < len(self.tapes)
                                      else f"of env {spec['id']}")
            env = make_env(spec)
            try:
                if self.cameras:
                    check_cameras(env, self.cameras)
                fps = float(env.metadata.get("render_fps") or 30)
                out.append((env.observation_space, env.action_space, _sendable(env.spec),
                            fps))
            finally:
                env.close()
        return out


def _sendable(spec: Any) -> Any:
    """``spec`` as the orchestrator can unpickle it: the factory of a user's file
    (``FILE.py:ATTR``, executed here as a module of a made-up name) becomes the tape's env
    id, as text; the orchestrator cannot import that module (nor may it run the file)."""
    import dataclasses

    entry = getattr(spec, "entry_point", None)
    if callable(entry) and str(getattr(entry, "__module__", "")).startswith("rolltape_env_"):
        return dataclasses.replace(spec, entry_point=f"{spec.id}")
    return spec


def probe_envs(specs: list[dict[str, Any]], cameras: tuple[str, ...],
               trusted: tuple[str, ...] = (), tapes: tuple[str, ...] = ()
               ) -> list[tuple[Any, ...]]:
    """:class:`ProbeJob` as a function, for a process of its own
    (:func:`rolltape.interpreter.run_once`)."""
    return ProbeJob(tuple(specs), tuple(cameras), tuple(trusted), tuple(tapes)).perform()
