"""Recording during training: :class:`RecordTape`, a Gymnasium wrapper with the trigger
semantics of Gymnasium 1.x ``RecordVideo`` that records tapes in the loop (cheap) and has
their videos drawn by render processes in the background (:mod:`.background`), and
:func:`record_sub_envs`, its vector version for ``gymnasium.vector``.

Nothing is drawn in the training loop: the wrapper never calls ``env.render()`` and works
on an env made with ``render_mode=None``. Training resets are unseeded (autoreset; SB3 seeds
once), so each tape carries the env's generator state from just before its reset, for
MuJoCo the physics state of every frame, and for Atari (ale-py) the emulator state of every
frame, whose RNG (sticky actions) ``np_random`` does not hold: pass 2 sets them and replays
the episode exactly. A tape of another env that a step trigger began mid-episode starts at
the reset, with every observation's digest from there, and carries its window
(``Tape.window``): pass 2 re-simulates from the reset, checks every step, and draws the
window only, having drawn (and dropped) the frames earlier recordings drew in that episode,
since some envs age what they draw in ``render()`` (LunarLander's particles).

May import: envs, tape, pass1.rollout (the recording helpers), training.background,
errors, gymnasium. Never: policies, torch or SB3, the render workers' insides.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from rolltape.envs.digests import DIGEST_BATCH
from rolltape.envs.ids import env_spec
from rolltape.envs.state import AleLog, PhysicsLog, mujoco_data, rng_state
from rolltape.errors import UsageError
from rolltape.pass1.fields import digest_all, kept_obs, tape_fields
from rolltape.pass2.formats import file_suffixes
from rolltape.tape import Tape
from rolltape.training.background import (
    BackgroundRenderer,
    VideoDone,
    VideoJob,
    output_paths,
    remove_stale_partials,
    render_command,
    warn,
)

INFO_KEY = "tape"  # info[INFO_KEY] at the end of a recorded episode: the tape's path
_STORABLE = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
             gym.spaces.MultiBinary)
_MEDIA = tuple(file_suffixes())  # what a folder of earlier recordings holds


class _Piece:
    """One episode's part of a recording. Its tape begins at ``begin`` (an episode step:
    0 is the reset; later only on MuJoCo, whose physics state a replay can set) and its
    window of frames to draw at ``first`` (frame f is the state after f steps), and it has
    reached frame ``last``."""

    def __init__(self, env: gym.Env, begin: int, first: int, first_obs: Any,
                 episode: int, started: float) -> None:
        self.begin, self.first, self.last = begin, first, first
        self.first_obs = first_obs  # the observation at frame ``begin``
        self.episode, self.started = episode, started
        self.physics = PhysicsLog.for_env(env)  # None but on MuJoCo, where begin == first
        if self.physics is not None:
            self.physics.record()
        self.success: Any = None
        self.metrics: Any = None


class RecordTape(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Record triggered episodes (or step ranges) as tapes; render their videos elsewhere.

    Triggers, counters and names are those of ``gymnasium.wrappers.RecordVideo``:
    ``episode_trigger(episode_id)`` starts a recording at a reset, ``step_trigger(step_id)``
    after a step (both counters start at -1, so the first reset is episode 0 and the first
    step is step 0); with neither, the capped-cubic schedule (episodes 0, 1, 8, 27, ...,
    then every 1000th). ``video_length`` 0 records whole episodes; otherwise a recording
    stops after ``video_length + 1`` frames and runs on across resets. A recording named
    ``{name_prefix}-episode-{n}`` or ``{name_prefix}-step-{n}`` gives ``{name}.npz`` in
    ``video_folder`` (``{name}-part{k}.npz`` for the k-th further episode it spans) and, in
    the background, the verified video ``{name}.mp4`` (``formats`` for others). The
    ``recording`` flag after every reset and step, and the frames of each video, are
    RecordVideo's on every env: a recording that begins mid-episode starts its tape from
    that step's physics state on MuJoCo, and elsewhere at the episode's reset with the
    window of frames to draw (the running episode's actions are kept for that, no frames).
    Frames of steps taken after an episode ended, before its reset, are counted but not
    drawn (a tape cannot hold them).

    ``render=False`` records tapes only (render them later with ``rolltape render``).
    Videos wait in a queue of ``queue_size``; when it is full the video is dropped with a
    warning (its tape is kept), unless ``on_full="block"``. ``close()`` waits up to
    ``close_timeout`` seconds for pending videos and leaves the rest as tapes, saying so.
    At the end of a recorded episode, ``info["tape"]`` is its tape's path.

    Put it right on the env ``gym.make`` returns (wrappers that change observations or
    rewards go outside it): a replay rebuilds the env from its id and checks every reward.

    Example (not run: it trains):
        >>> env = RecordTape(gym.make("HalfCheetah-v5"), "videos",
        ...                  episode_trigger=lambda n: n % 250 == 0, name_prefix="training")
    """

    def __init__(self, env: gym.Env, video_folder: str | os.PathLike[str],
                 episode_trigger: Callable[[int], bool] | None = None,
                 step_trigger: Callable[[int], bool] | None = None,
                 video_length: int = 0, name_prefix: str = "rl-video",
                 fps: float | None = None, *, formats: Sequence[str] = ("mp4",),
                 render: bool = True, render_workers: int = 1, queue_size: int = 8,
                 on_full: str = "drop", close_timeout: float = 60.0,
                 width: int | None = None, height: int | None = None,
                 backends: str | Sequence[str] = ("egl", "osmesa"), overwrite: bool = True,
                 on_video: Callable[[VideoDone], None] | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, video_folder=video_folder, episode_trigger=episode_trigger,
            step_trigger=step_trigger, video_length=video_length, name_prefix=name_prefix)
        gym.Wrapper.__init__(self, env)
        for what, trigger in (("episode_trigger", episode_trigger),
                              ("step_trigger", step_trigger)):
            if trigger is not None and not callable(trigger):
                raise UsageError(f"RecordTape's {what} must be a function of the {what[:-8]} "
                                 f"number returning True to record, got {trigger!r:.40}.")
        if isinstance(video_length, bool) or not isinstance(video_length, int) or video_length < 0:
            raise UsageError(f"RecordTape's video_length must be 0 (whole episodes) or a "
                             f"positive number of frames, got {video_length!r}.")
        if not isinstance(env.action_space, _STORABLE):
            raise UsageError(f"RecordTape stores actions as arrays of numbers, so it cannot "
                             f"record an env whose action space is {env.action_space}; "
                             "flatten it (gymnasium.wrappers.FlattenObservation's action "
                             "analogue) to a Box, Discrete, MultiDiscrete or MultiBinary space.")
        if env.spec is None:
            raise UsageError("RecordTape needs an env made with gym.make (a replay rebuilds "
                             "it from its id); register your env and make it by id.")
        _check_options(video_folder, name_prefix, formats, fps, close_timeout, width, height,
                       backends)
        if episode_trigger is None and step_trigger is None:
            episode_trigger = capped_cubic_video_schedule
        self.episode_trigger, self.step_trigger = episode_trigger, step_trigger
        self.video_length: float = video_length if video_length != 0 else math.inf
        self.name_prefix = name_prefix
        self.video_folder = Path(video_folder).absolute()
        if self.video_folder.is_dir() and any(p.suffix in _MEDIA
                                              for p in self.video_folder.iterdir()):
            if not overwrite:
                raise UsageError(f"'{self.video_folder}' already holds videos or tapes; choose "
                                 "another video_folder, or pass overwrite=True.")
            gym.logger.warn(f"Overwriting existing videos at {self.video_folder} folder (try "
                            "specifying a different `video_folder` for the `RecordTape` "
                            "wrapper if this is not desired)")
        self.video_folder.mkdir(parents=True, exist_ok=True)
        self.formats = tuple(formats)
        output_paths(self.video_folder, name_prefix, self.formats)  # refuses a bad format now
        spec = env.spec
        self._spec = env_spec(spec.id, dict(spec.kwargs or {}), spec.max_episode_steps)
        if render and (width is not None or height is not None):
            from rolltape.envs.build import check_sizing

            try:  # refused now: each video would fail in its render process
                check_sizing(spec.id, spec.id)
            except UsageError:
                raise UsageError(f"RecordTape's width and height cannot size {spec.id}, which "
                                 "draws its frames at its own size; drop them.") from None
        self._mujoco = mujoco_data(env) is not None
        self.close_timeout = close_timeout
        remove_stale_partials(self.video_folder)  # of an earlier run's killed render worker
        self.renderer = BackgroundRenderer(
            workers=render_workers, queue_size=queue_size, on_full=on_full,
            backends=backends, width=width, height=height, fps=fps,
            on_done=on_video) if render else None
        self.step_id = -1
        self.episode_id = -1
        self.recording = False
        self.tapes: list[str] = []  # every tape written, in order
        self.write_failures = 0
        self._name: str | None = None
        self._frames = 0
        self._parts: list[str] = []  # tapes of the recording under way
        self._piece: _Piece | None = None
        # The running episode. A step trigger may start a recording mid-episode; a replay
        # can set the state there only on MuJoCo, so elsewhere the tape begins at the reset
        # and the episode's steps so far are kept (one append per step, no observations).
        self._keep_steps = step_trigger is not None and not self._mujoco
        self._steps: list[tuple[Any, ...]] | None = None  # (action, reward, term, trunc, obs)
        self._steps_from = 0  # the episode step of _steps[0]
        self._reset_args: tuple[Any, ...] = (None, None, None)  # seed, options, rng
        self._reset_obs: Any = None
        self._episode_started = 0.0
        self._episode_step = 0
        self._episode_over = False  # terminated or truncated, not reset yet
        self._episode_tape: str | None = None
        self._ale: AleLog | None = None  # Atari: the emulator state of each frame so far
        self._drawn: list[list[int]] = []  # frames of this episode a recording drew, as ranges

    # -- the Gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        # What the unseeded reset draws from, read before it draws (a dict, once an episode).
        rng = rng_state(self.env) if seed is None else None
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode_id += 1
        if self._piece is not None:  # reset before the episode ended: its piece ends here
            self._end_piece()
        self._reset_args = (seed, options, rng)
        self._episode_started = time.perf_counter()
        self._episode_step, self._episode_over, self._episode_tape = 0, False, None
        self._steps, self._steps_from = ([] if self._keep_steps else None), 0
        self._drawn = []
        # RecordVideo's order: a whole-episode recording ends, an episode trigger starts
        # one (ending any other), and a recording under way counts this reset's frame.
        if self.recording and self.video_length == math.inf:
            self._stop()
        if self.episode_trigger is not None and self.episode_trigger(self.episode_id):
            self._start(f"{self.name_prefix}-episode-{self.episode_id}")
        # Kept when a tape may begin at this reset (a copy: an env may reuse its buffer).
        self._reset_obs = kept_obs(obs) if self.recording or self._keep_steps else None
        # Atari: ALE's sticky-action RNG lives in the emulator, which no unseeded reset of a
        # replay reproduces; its state (RNG included) from this reset on is kept instead.
        self._ale = AleLog.for_env(self.env) if self.recording or self._keep_steps else None
        if self._ale is not None:
            self._ale.record()
        if self.recording:
            if self._steps is None:
                self._steps = []
            self._piece = _Piece(self.env, 0, 0, self._reset_obs, self.episode_id,
                                 self._episode_started)
            self._count_frame(0)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.step_id += 1
        self._episode_step += 1
        if self.step_trigger is not None and self.step_trigger(self.step_id):
            self._start(f"{self.name_prefix}-step-{self.step_id}")
        steps = self._steps
        if self._ale is not None and not self._episode_over:
            self._ale.record()
        if self.recording and steps is None:  # MuJoCo: a recording begins here
            steps = self._steps = []
            self._steps_from = self._episode_step - 1
        if steps is not None and not self._episode_over:
            # Every step keeps its observation (screens become digests a batch at a time),
            # so a tape checks each frame, a window begun mid-episode included.
            steps.append((_kept(action), reward, terminated, truncated, kept_obs(obs)))
            if not len(steps) % DIGEST_BATCH:
                _digest_last_batch(steps)
        if self.recording:
            self._record_frame(obs, terminated or truncated, info)
        if terminated or truncated:
            self._episode_over = True
            if self._piece is not None:
                self._end_piece()
            if self._episode_tape is not None:
                info = {**info, INFO_KEY: self._episode_tape}
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the env; finish the recording under way; wait up to ``close_timeout`` s
        for pending videos, then leave their tapes (and say which) for ``rolltape render``."""
        super().close()
        self.finish_recording()
        if self.renderer is not None:
            left = self.renderer.close(self.close_timeout)
            if left:
                warn(f"{len(left)} video(s) were not rendered within close_timeout="
                     f"{self.close_timeout:g} s; their tapes are kept: "
                     + "; ".join(f"`{render_command(job)}`" for job in left) + ".")

    def finish_recording(self) -> None:
        """End the recording under way now (its tape is written and its video queued), as
        ``close`` does: at the end of training, the last recorded episode gets its video."""
        if self.recording:
            self._stop()

    def wait_for_videos(self, timeout: float | None = 60.0) -> int:
        """Wait up to ``timeout`` s for the videos queued so far; returns how many are
        still pending (SB3 reaches it in every sub-env with ``env_method``)."""
        return 0 if self.renderer is None else self.renderer.wait(timeout)

    def pending_commands(self) -> list[str]:
        """The ``rolltape render`` command of each video still queued or being drawn."""
        return [] if self.renderer is None else [render_command(j)
                                                 for j in self.renderer.pending()]

    # -- recordings ----------------------------------------------------------------------
    def _start(self, name: str) -> None:
        if self.recording:
            self._stop()
        self.recording, self._name, self._frames, self._parts = True, name, 0, []

    def _record_frame(self, obs: Any, done: bool, info: dict[str, Any]) -> None:
        """The frame after this step belongs to the recording under way."""
        piece, n = self._piece, self._episode_step
        if piece is None and not self._episode_over:  # a step trigger mid-episode
            if self._mujoco:  # the tape begins at this state, set by the replay
                piece = _Piece(self.env, n, n, kept_obs(obs), self.episode_id,
                               time.perf_counter())
            else:  # the tape begins at the reset; its window, here
                piece = _Piece(self.env, 0, n, self._reset_obs, self.episode_id,
                               self._episode_started)
            self._piece = piece
        elif piece is not None and piece.physics is not None:
            piece.physics.record()
        if piece is not None and done:
            piece.success, piece.metrics = info.get("is_success"), info.get("metrics")
        self._count_frame(n)

    def _count_frame(self, frame: int) -> None:
        if self._piece is not None:
            self._piece.last = frame
            if self._drawn and self._drawn[-1][1] == frame - 1:
                self._drawn[-1][1] = frame
            else:
                self._drawn.append([frame, frame])
        self._frames += 1
        if self._frames > self.video_length:
            self._stop()

    def _end_piece(self) -> None:
        """Write the tape of the piece under way."""
        piece, self._piece = self._piece, None
        assert piece is not None and self._name is not None and self._steps is not None
        k = len(self._parts)
        path = self.video_folder / (f"{self._name}.npz" if k == 0 else
                                    f"{self._name}-part{k}.npz")
        seed, options, rng = self._reset_args
        steps = self._steps[piece.begin - self._steps_from:piece.last - self._steps_from]
        physics = piece.physics.arrays() if piece.physics is not None else (None, None, None)
        if not steps:  # a recording of one frame: a reset, or a trigger on the last step
            fields = _no_steps(seed, options, piece.first_obs, self.env.action_space, physics)
        else:
            fields = tape_fields(seed, options, piece.first_obs, steps, physics,
                                 piece.success, piece.metrics, piece.started)
        if self._ale is not None:  # non-MuJoCo tapes begin at the reset: states 0..last
            blob, offsets = self._ale.arrays()
            if blob is not None and offsets is not None and len(offsets) > piece.last + 1:
                fields["ale_state"] = blob[:offsets[piece.last + 1]].copy()
                fields["ale_state_offsets"] = offsets[:piece.last + 2].copy()
        meta: dict[str, Any] = {"recording": self._name, "part": k, "episode": piece.episode,
                                "step": self.step_id}
        window = None
        if piece.first != piece.begin:
            window = (piece.first, piece.last)
            # Frames before the window that earlier recordings of this episode drew: a
            # replay draws them too (and drops them), as RecordVideo's render() calls did.
            before = [[a, min(b, piece.first - 1)] for a, b in self._drawn if a < piece.first]
            if before:
                meta["drawn_before"] = before
        tape = Tape(env=self._spec, policy={"kind": "training"}, reset_rng=rng,
                    start_step=piece.begin, window=window, meta=meta, **fields)
        try:
            tape.save(path)
        except OSError as exc:  # a full disk: nothing half-written (atomic), training goes on
            self.write_failures += 1
            said = self.renderer is not None and self.renderer.failure_said
            if self.write_failures == 1 and not said:  # one sentence for a full disk
                if self.renderer is not None:
                    self.renderer.failure_said = True
                warn(f"Could not write the tape {path} ({exc.strerror or exc}); training goes "
                     "on without it, and later tapes or videos that fail are counted "
                     "(write_failures, renderer.failed), not said again.")
            return
        self._parts.append(str(path))
        self.tapes.append(str(path))
        self._episode_tape = str(path)

    def _stop(self) -> None:
        """End the recording: write its last tape and queue its video."""
        if self._piece is not None:
            self._end_piece()
        name, parts = self._name, self._parts
        self.recording, self._name, self._parts, self._frames = False, None, [], 0
        if not parts or name is None:
            return
        if self.renderer is not None:
            self.renderer.submit(VideoJob(name, tuple(parts),
                                          output_paths(self.video_folder, name, self.formats)))


def _digest_last_batch(steps: list[tuple[Any, ...]]) -> None:
    """Replace the kept observations of the last :data:`DIGEST_BATCH` steps by their
    digests (the same digests, computed a batch at a time), whatever their size: a long
    training episode then holds a number per step, not an observation."""
    last = steps[-DIGEST_BATCH:]
    if not all(isinstance(step[-1], np.ndarray) for step in last):
        return  # already digests (kept_obs digests what is not an array)
    start = len(steps) - len(last)
    for k, digest in enumerate(digest_all([step[-1] for step in last])):
        steps[start + k] = (*last[k][:-1], int(digest))


def _kept(action: Any) -> Any:
    """A copy of an array action (a caller may reuse its buffer); scalars are values."""
    return action.copy() if isinstance(action, np.ndarray) else action


def _check_options(video_folder: str | os.PathLike[str], name_prefix: str,
                   formats: Sequence[str], fps: float | None, close_timeout: float,
                   width: int | None, height: int | None,
                   backends: str | Sequence[str]) -> None:
    """Refuse RecordTape's options that would fail later (in a render, at close), each in
    one sentence naming the option and the fix."""
    from rolltape.pass2.backends import KNOWN_BACKENDS, parse_backends

    def positive(x: Any) -> bool:
        return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                and x > 0)

    if Path(video_folder).exists() and not Path(video_folder).is_dir():
        raise UsageError(f"RecordTape's video_folder '{video_folder}' is a file; give a folder "
                         "(it is made when missing).")
    if (not isinstance(name_prefix, str) or not name_prefix or "/" in name_prefix
            or os.sep in name_prefix or name_prefix in (".", "..")):
        raise UsageError(f"RecordTape's name_prefix must be a file name without path "
                         f"separators, got {name_prefix!r:.60}; put folders in video_folder.")
    if isinstance(formats, str) or not tuple(formats):
        raise UsageError(f"RecordTape's formats must be a sequence of video formats such as "
                         f"('mp4',), got {formats!r:.40}; pass render=False to record tapes "
                         "only.")
    if fps is not None and not positive(fps):
        raise UsageError(f"RecordTape's fps must be a positive number of frames per second, "
                         f"got {fps!r:.40}; pass None for the env's render_fps.")
    for name, size in (("width", width), ("height", height)):
        if size is not None and (not positive(size) or not isinstance(size, int)):
            raise UsageError(f"RecordTape's {name} must be a positive number of pixels, got "
                             f"{size!r:.40}; pass None for the env's own size.")
    if not (isinstance(close_timeout, (int, float)) and not isinstance(close_timeout, bool)
            and close_timeout >= 0 and not math.isnan(close_timeout)):
        raise UsageError(f"RecordTape's close_timeout must be a number of seconds, 0 or more "
                         f"(math.inf waits for every video), got {close_timeout!r:.40}.")
    try:
        parse_backends(backends)
    except UsageError:
        raise UsageError(f"RecordTape's backends must name GL backends from "
                         f"{', '.join(KNOWN_BACKENDS)}, got {backends!r:.40}; pass, for "
                         "example, backends=('egl', 'osmesa').") from None


def capped_cubic_video_schedule(episode_id: int) -> bool:
    """RecordVideo's default schedule: the cubes 0, 1, 8, 27, ... below 1000, then every
    1000th episode (Gymnasium's own lives in a module that needs moviepy)."""
    if episode_id < 1000:
        return round(episode_id ** (1.0 / 3)) ** 3 == episode_id
    return episode_id % 1000 == 0


def _no_steps(seed: int | None, options: dict[str, Any] | None, first_obs: Any,
              space: gym.Space, physics: tuple[Any, Any, Any]) -> dict[str, Any]:
    """The fields of a tape of one frame and no steps."""
    from rolltape.pass1.fields import digest_all

    dtype = space.dtype if space.dtype is not None else np.int64
    return {"seed": seed, "options": options,
            "actions": np.zeros((0, *(space.shape or ())), dtype=dtype),
            "rewards": np.zeros(0), "terminated": np.zeros(0, bool),
            "truncated": np.zeros(0, bool), "obs_digest": digest_all([first_obs]),
            "qpos": physics[1], "qvel": physics[2], "physics": physics[0],
            "wall_s": 0.0}


def record_sub_envs(env_fns: Sequence[Callable[[], gym.Env]],
                    video_folder: str | os.PathLike[str], *, envs_to_record: Sequence[int] = (0,),
                    vectorization: str = "sync", autoreset_mode: Any = None,
                    name_prefix: str = "rl-video", **record: Any) -> gym.vector.VectorEnv:
    """A ``gymnasium.vector`` env (``"sync"`` or ``"async"``) whose sub-envs
    ``envs_to_record`` each record their triggered episodes with :class:`RecordTape`
    (``record`` holds its options), named ``{name_prefix}-env{i}-episode-{n}``; the
    others run bare. The wrapper sits inside each sub-env, so it sees that sub-env's own
    resets, whichever autoreset mode (NEXT_STEP, SAME_STEP) the vector env uses, and in
    an ``AsyncVectorEnv`` its tapes are written (and videos rendered) in the sub-env's
    process. A recorded episode's tape path is in ``infos["tape"]`` (masked by
    ``infos["_tape"]``; with SAME_STEP, in ``infos["final_info"]``, since the reset's info
    takes the top).
    """
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from rolltape.errors import check_choice

    check_choice("vectorization", vectorization, ("sync", "async"))
    chosen = set(envs_to_record)
    bad = sorted(i for i in chosen if not 0 <= i < len(env_fns))
    if bad:
        raise UsageError(f"envs_to_record {bad} are not sub-envs of a vector env of "
                         f"{len(env_fns)}; give indices from 0 to {len(env_fns) - 1}.")
    folder = str(Path(video_folder).absolute())
    fns = [_Recorded(fn, folder, f"{name_prefix}-env{i}", record) if i in chosen else fn
           for i, fn in enumerate(env_fns)]
    modes = [m.value for m in AutoresetMode]
    given = autoreset_mode.value if isinstance(autoreset_mode, AutoresetMode) else autoreset_mode
    if autoreset_mode is not None:
        check_choice("autoreset_mode", given, modes)  # names what gymnasium accepts
    mode = AutoresetMode.NEXT_STEP if autoreset_mode is None else AutoresetMode(given)
    cls = SyncVectorEnv if vectorization == "sync" else AsyncVectorEnv
    return cls(fns, autoreset_mode=mode)


class _Recorded:
    """A picklable env factory (AsyncVectorEnv sends it to a process) adding RecordTape."""

    def __init__(self, fn: Callable[[], gym.Env], folder: str, prefix: str,
                 record: dict[str, Any]) -> None:
        self.fn, self.folder, self.prefix, self.record = fn, folder, prefix, record

    def __call__(self) -> gym.Env:
        return RecordTape(self.fn(), self.folder, name_prefix=self.prefix, **self.record)
