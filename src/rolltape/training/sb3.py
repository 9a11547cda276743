"""``rolltape.sb3``: recording and evaluating inside a Stable-Baselines3 training run.

:class:`TapeCallback` records every Nth training episode of chosen sub-envs as tapes
(:class:`~rolltape.training.record_tape.RecordTape`; their videos are drawn in background render
processes, off the loop) and, every K steps, evaluates the current policy like SB3's
``EvalCallback`` but as a rolltape run (its own tapes, seeds ``eval_seed + i``, numbers
from pass 1, VecNormalize statistics of that moment applied with training and reward
normalisation off). It logs ``eval/mean_reward``, ``eval/mean_ep_length`` and
``eval/success_rate`` (with its Wilson bounds) and rendered videos (TensorBoard), writes
SB3's ``evaluations.npz``, and draws the timeline of the run (``timeline.png`` in
``report.html``).

A ``DummyVecEnv`` gets its recording wrappers from the callback itself. Sub-envs in other
processes (``SubprocVecEnv``) cannot be wrapped from outside: build them with
:func:`make_recorded_vec_env` (or any ``RecordTape`` inside each sub-env) and the callback
uses their recordings.

May import: SB3 and torch (inside functions, this module is loaded only on use),
training.record_tape, evaluate, stats, files, errors. Never: pass 2's insides.

Example (not run: it trains):
    >>> model.learn(100_000, callback=TapeCallback(record_every=100, eval_every=10_000,
    ...                                            eval_episodes=20, out="runs/train"))
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import atomic_file, write_json, write_text
from rolltape.training.record_tape import INFO_KEY, RecordTape

try:  # only for subclassing: this module is imported when SB3 is being used
    from stable_baselines3.common.callbacks import BaseCallback
except ImportError as exc:  # pragma: no cover - SB3 is in the test extra
    raise ImportError("rolltape.sb3 needs stable-baselines3: pip install stable-baselines3"
                      ) from exc


BEST_BY = ("mean_reward", "success_rate")  # what makes an evaluation the best so far


def every(n: int) -> Callable[[int], bool]:
    """A trigger recording episodes 0, n, 2n, ... (picklable, for sub-env processes)."""
    return _Every(n)


class _Every:
    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"record_every must be a positive number of episodes, got {n!r}.")
        self.n = n

    def __call__(self, episode: int) -> bool:
        return episode % self.n == 0


def make_recorded_vec_env(env_id: str, n_envs: int = 1, *, out: str | Path = "runs/train",
                          record_every: int = 100, envs_to_record: Sequence[int] = (0,),
                          seed: int | None = None, env_kwargs: dict[str, Any] | None = None,
                          vec_env_cls: Any = None, vec_env_kwargs: dict[str, Any] | None = None,
                          **record: Any) -> Any:
    """SB3's ``make_vec_env`` for ``env_id``, with a :class:`RecordTape` (episodes 0, N,
    2N, ... into ``out/videos``, named ``train-env{i}-episode-{n}``) right on each sub-env
    of ``envs_to_record``, under SB3's Monitor: the recipe for ``SubprocVecEnv``, whose
    sub-envs live in other processes. Seeds as ``make_vec_env`` does (``seed + rank``)."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    trigger = every(record_every)
    folder = str(Path(out).absolute() / "videos")
    recorded = set(envs_to_record)
    fns: list[Callable[[], Any]] = [
        _SubEnv(env_id, dict(env_kwargs or {}), folder if i in recorded else None,
                f"train-env{i}", trigger, record, None if seed is None else seed + i)
        for i in range(n_envs)]
    venv = (vec_env_cls or DummyVecEnv)(fns, **(vec_env_kwargs or {}))
    if seed is not None:
        venv.seed(seed)
    return venv


class _SubEnv:
    """A picklable factory (SubprocVecEnv sends it to a process): gym.make, RecordTape
    when this sub-env records, then SB3's Monitor."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], folder: str | None, prefix: str,
                 trigger: Callable[[int], bool], record: dict[str, Any],
                 action_seed: int | None) -> None:
        self.env_id, self.kwargs, self.folder, self.prefix = env_id, kwargs, folder, prefix
        self.trigger, self.record, self.action_seed = trigger, record, action_seed

    def __call__(self) -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        env = gym.make(self.env_id, **self.kwargs)
        if self.action_seed is not None:
            env.action_space.seed(self.action_seed)
        if self.folder is not None:
            env = RecordTape(env, self.folder, episode_trigger=self.trigger,
                             name_prefix=self.prefix, **self.record)
        return Monitor(env)


class TapeCallback(BaseCallback):
    """Record every ``record_every``-th training episode (of sub-envs ``envs_to_record``)
    as tapes and background videos; evaluate every ``eval_every`` steps as a rolltape run
    of ``eval_episodes`` episodes (seeds ``eval_seed + i``) when ``eval_every`` is given.

    Everything goes under ``out``: ``videos/`` (tapes and videos), ``evals/step-N/`` (each
    evaluation's run), ``checkpoints/``, ``evaluations.npz`` (as SB3's EvalCallback writes
    it), ``training.json`` (recorded episodes and evaluations), ``timeline.png`` and
    ``report.html``. ``video_timeout`` bounds the wait for pending videos at the end of
    training. ``eval_env`` / ``eval_env_kwargs`` / ``eval_max_episode_steps`` default to
    the training env's id and settings.

    As SB3's ``EvalCallback``: ``best_model_save_path`` gets ``best_model.zip``, the
    checkpoint of the best evaluation so far (by ``best_by``: ``"mean_reward"`` or
    ``"success_rate"``); ``callback_on_new_best`` runs after an evaluation that is a new
    best, ``callback_after_eval`` after every evaluation, each as the child of this callback
    (``self.parent`` is this callback, with ``best_mean_reward`` and ``last_mean_reward``),
    so SB3's ``StopTrainingOnRewardThreshold`` and ``StopTrainingOnNoModelImprovement`` work
    unchanged; ``verbose=1`` prints each evaluation as SB3 does.
    """

    def __init__(self, record_every: int | None = 100, eval_every: int | None = None,
                 eval_episodes: int = 10, out: str | Path = "runs/train", *,
                 envs_to_record: Sequence[int] = (0,), eval_seed: int = 0,
                 eval_env: str | None = None, eval_env_kwargs: dict[str, Any] | None = None,
                 eval_max_episode_steps: int | None = None, deterministic: bool = True,
                 eval_video: int = 0, video_timeout: float = 60.0,
                 record_options: dict[str, Any] | None = None,
                 best_model_save_path: str | Path | None = None, best_by: str = "mean_reward",
                 callback_on_new_best: BaseCallback | None = None,
                 callback_after_eval: BaseCallback | None = None, verbose: int = 0) -> None:
        from rolltape.errors import check_choice

        super().__init__(verbose)
        check_choice("best_by", best_by, BEST_BY)
        if record_every is not None:
            every(record_every)  # refuses a bad value now
        if eval_every is not None and (isinstance(eval_every, bool)
                                       or not isinstance(eval_every, int) or eval_every < 1):
            raise UsageError(f"eval_every must be a positive number of steps, got {eval_every!r}.")
        if eval_episodes < 1:
            raise UsageError(f"eval_episodes must be at least 1, got {eval_episodes}.")
        self.record_every, self.eval_every, self.eval_episodes = record_every, eval_every, eval_episodes
        self.out = Path(out)
        self.envs_to_record, self.eval_seed = tuple(envs_to_record), eval_seed
        self.eval_env, self.eval_env_kwargs = eval_env, eval_env_kwargs
        self.eval_max_episode_steps, self.deterministic = eval_max_episode_steps, deterministic
        self.eval_video, self.video_timeout = eval_video, video_timeout
        self.record_options = dict(record_options or {})
        self.recorded: list[dict[str, Any]] = []  # one row per recorded episode (tape)
        self.episodes: list[tuple[int, float, int]] = []  # (step, return, length) per episode
        self.evaluations: list[dict[str, Any]] = []
        self._video_paths: dict[str, Path] = {}  # tape -> its recording's video, read once
        self._next_eval = eval_every or 0
        # The callback never stops training itself: what fails is skipped, the first failure
        # of each kind ("evaluation", "save", "video", "summary") said once, all counted here.
        self.failures: dict[str, int] = {}
        self._eval_spec: tuple[str, dict[str, Any], int | None] | None = None
        # EvalCallback's face: what its child callbacks read from their parent.
        self.best_model_save_path = (None if best_model_save_path is None
                                     else Path(best_model_save_path))
        self.best_by = best_by
        self.best_mean_reward, self.last_mean_reward = -math.inf, -math.inf
        self.best_success_rate, self.last_success_rate = -math.inf, -math.inf
        self.callback_on_new_best, self.callback_after_eval = (callback_on_new_best,
                                                               callback_after_eval)
        for child in self._children():
            child.parent = self

    # -- SB3 hooks -----------------------------------------------------------------------
    def _children(self) -> list[BaseCallback]:
        return [c for c in (self.callback_on_new_best, self.callback_after_eval)
                if c is not None]

    def _init_callback(self) -> None:
        for child in self._children():
            child.init_callback(self.model)

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        for child in self._children():
            child.update_locals(locals_)

    def _on_training_start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        if self.record_every is not None:
            self._install_recorders(self.record_every)
        if self.eval_every is not None:  # a mistake shows now, before the first rollout
            self._eval_spec = self._check_eval_env()
        for child in self._children():
            child.on_training_start(self.locals, self.globals)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos") or ()
        for i, info in enumerate(infos):
            episode = info.get("episode")  # SB3's Monitor, on an episode's last step
            if episode is not None:
                self.episodes.append((int(self.num_timesteps), float(episode["r"]),
                                      int(episode["l"])))
            tape = info.get(INFO_KEY)
            if tape is not None:
                episode = episode or {}
                self.recorded.append({"step": int(self.num_timesteps), "env": i, "tape": tape,
                                      "monitor_return": episode.get("r"),
                                      "monitor_length": episode.get("l")})
        if self.eval_every is not None and self.num_timesteps >= self._next_eval:
            self._next_eval += self.eval_every
            return self._evaluate()
        return True

    def _on_rollout_end(self) -> None:
        self._log_new_videos()

    def _on_training_end(self) -> None:
        if self.record_every is not None:
            # The recording under way ends with training (its video is queued), then the
            # videos get ``video_timeout`` s; a script that ends without closing its env
            # (the usual one) stops its render processes at exit, so what is left is named.
            envs = self._recording_envs()
            self.training_env.env_method("finish_recording", indices=envs)
            left = self.training_env.env_method("wait_for_videos", self.video_timeout,
                                                indices=envs)
            if any(left):
                from rolltape.training.background import warn

                commands = [c for cs in self.training_env.env_method(
                    "pending_commands", indices=envs) for c in cs]
                warn(f"{sum(left)} training video(s) were not rendered within "
                     f"video_timeout={self.video_timeout:g} s; their tapes are kept, and "
                     "each is made by: " + "; ".join(f"`{c}`" for c in commands) + ".")
        if self._log_new_videos():
            # SB3 dumps its logger after each rollout; a video that finished after the last
            # one would otherwise never reach TensorBoard.
            self.logger.dump(self.num_timesteps)
        self._write_summary()

    # -- failures ------------------------------------------------------------------------
    def _failed(self, kind: str, what: str, exc: BaseException) -> None:
        """Count a failure of ``kind``; the first of each kind is said, with its cause."""
        from rolltape.training.background import warn

        self.failures[kind] = self.failures.get(kind, 0) + 1
        if self.failures[kind] == 1:
            said = ((exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc))
            lines = said.strip().splitlines()  # a traceback's last line says what happened
            cause = lines[-1] if lines else type(exc).__name__
            warn(f"TapeCallback could not {what} ({cause}); "
                 f"training goes on without it, and later failures of this kind are counted "
                 f"in failures[{kind!r}], not said again.")

    # -- recording -----------------------------------------------------------------------
    def _base_env(self) -> Any:
        from stable_baselines3.common.vec_env import VecEnvWrapper

        venv = self.training_env
        while isinstance(venv, VecEnvWrapper):
            venv = venv.venv
        return venv

    def _recording_envs(self) -> list[int]:
        wrapped = self.training_env.env_is_wrapped(RecordTape)
        return [i for i, w in enumerate(wrapped) if w]

    def _install_recorders(self, record_every: int) -> None:
        from stable_baselines3.common.vec_env import DummyVecEnv

        if self._recording_envs():
            return  # built with RecordTape inside (make_recorded_vec_env): use those
        base = self._base_env()
        if not isinstance(base, DummyVecEnv):
            raise UsageError(
                f"TapeCallback cannot add its recorders to a {type(base).__name__}, whose "
                "sub-envs run in other processes; build it with "
                "rolltape.sb3.make_recorded_vec_env(env_id, n_envs, out=..., "
                "record_every=..., vec_env_cls=SubprocVecEnv), or pass record_every=None.")
        folder = self.out / "videos"
        for i in self.envs_to_record:
            if not 0 <= i < base.num_envs:
                raise UsageError(f"envs_to_record has {i}, but the training env has "
                                 f"{base.num_envs} sub-envs.")
            base.envs[i] = RecordTape(base.envs[i], folder, episode_trigger=every(record_every),
                                      name_prefix=f"train-env{i}", **self.record_options)

    def _log_new_videos(self) -> int:
        """:meth:`_log_videos`, whose failure (a tape or video that cannot be read) is
        said once and skipped: a picture in TensorBoard is not worth the training run."""
        try:
            return self._log_videos()
        except Exception as exc:
            self._failed("video", "put the newest training video into the logger", exc)
            return 0

    def _log_videos(self) -> int:
        """Note each newly rendered training video in its row and put the newest into
        SB3's logger (TensorBoard only: one key, so a dump keeps one video, and decoding
        the others would only slow training); return how many were put (0 or 1)."""
        from stable_baselines3.common.logger import TensorBoardOutputFormat, Video

        from rolltape.tape import Tape

        newest = None
        for row in self.recorded:
            if "video" in row:  # noted already
                continue
            if row["tape"] not in self._video_paths:
                # Named after the recording (a tape may be a later part of it).
                name = Tape.load(row["tape"]).meta.get("recording", Path(row["tape"]).stem)
                self._video_paths[row["tape"]] = Path(row["tape"]).with_name(f"{name}.mp4")
            video = self._video_paths[row["tape"]]
            if video.is_file():
                row["video"] = newest = str(video)
        if newest is None or not any(isinstance(f, TensorBoardOutputFormat)
                                     for f in self.logger.output_formats):
            return 0
        import torch

        from rolltape.pass2.encode import read_frames

        frames = np.stack(list(read_frames(newest)))  # (T, H, W, C)
        clip = torch.from_numpy(frames).permute(0, 3, 1, 2)[None]
        self.logger.record("train/video", Video(clip, fps=30),
                           exclude=("stdout", "log", "json", "csv"))
        return 1

    # -- evaluation ----------------------------------------------------------------------
    def _eval_env_spec(self) -> tuple[str, dict[str, Any], int | None]:
        if self.eval_env is not None:
            return self.eval_env, dict(self.eval_env_kwargs or {}), self.eval_max_episode_steps
        spec = self.training_env.get_attr("spec", indices=[0])[0]
        if spec is None:
            raise UsageError("TapeCallback evaluates on the training env's id, but it was not "
                             "made with gym.make; pass eval_env='EnvId-v0'.")
        return (spec.id, dict(spec.kwargs or {}) if self.eval_env_kwargs is None
                else dict(self.eval_env_kwargs),
                self.eval_max_episode_steps or spec.max_episode_steps)

    def _check_eval_env(self) -> tuple[str, dict[str, Any], int | None] | None:
        """The eval env, checked as the evaluation's worker will make it (a fresh
        interpreter, in this folder); None, said once, when it cannot be made there."""
        from rolltape.training.background import warn

        try:
            env_id, kwargs, max_steps = self._eval_env_spec()
            _check_env_in_a_worker(env_id)
        except UsageError as exc:
            self.failures["evaluation"] = 1
            warn(f"TapeCallback will not evaluate: {str(exc).rstrip('.')} (training goes on "
                 "without evaluations).")
            return None
        return env_id, kwargs, max_steps

    def _evaluate(self) -> bool:
        """One evaluation; a failure of it (or of a file it writes) skips it, said once.
        Returns whether training goes on (False only when a child callback says stop)."""
        if self._eval_spec is None:
            return True  # the eval env cannot be made: said at the start of training
        step = int(self.num_timesteps)
        checkpoints = self.out / "checkpoints"
        try:
            checkpoints.mkdir(parents=True, exist_ok=True)
            model_path = self._save_model(checkpoints / f"step-{step}.zip")
            vecnormalize = self._save_vecnormalize(checkpoints / f"step-{step}-vecnormalize.pkl")
        except OSError as exc:
            self._failed("save", f"save the checkpoint of step {step} (its evaluation is "
                         "skipped)", exc)
            return True
        try:
            entry = self._run_evaluation(step, model_path, vecnormalize)
        except Exception as exc:  # a worker crash, an env the worker cannot make, a full disk
            self._failed("evaluation", f"evaluate at step {step}", exc)
            return True
        self.evaluations.append(entry)
        self._log_evaluation(entry)
        try:
            self._write_evaluations_npz()
        except OSError as exc:
            self._failed("save", "write evaluations.npz", exc)
        go_on = self._after_evaluation(entry)
        self._write_summary()
        return go_on

    def _after_evaluation(self, entry: dict[str, Any]) -> bool:
        """EvalCallback's bookkeeping: the last and best numbers, ``best_model.zip`` and the
        child callbacks; returns whether training goes on."""
        mean = entry["mean_reward"] if entry["mean_reward"] is not None else -math.inf
        rate = entry.get("success_rate", -math.inf)
        self.last_mean_reward, self.last_success_rate = mean, rate
        score, best = ((mean, self.best_mean_reward) if self.best_by == "mean_reward"
                       else (rate, self.best_success_rate))
        # Both bests are kept (StopTrainingOnRewardThreshold reads best_mean_reward);
        # best_by says which one makes the best model.
        self.best_mean_reward = max(self.best_mean_reward, mean)
        self.best_success_rate = max(self.best_success_rate, rate)
        go_on = True
        if score > best:
            if self.verbose >= 1:
                print(f"New best {self.best_by.replace('_', ' ')}!")
            entry["best"] = True
            if self.best_model_save_path is not None:
                self._save_best(Path(entry["checkpoint"]))
            if self.callback_on_new_best is not None:
                go_on = bool(self.callback_on_new_best.on_step())
        if self.callback_after_eval is not None:
            go_on = bool(self.callback_after_eval.on_step()) and go_on
        return go_on

    def _save_best(self, checkpoint: Path) -> None:
        """``best_model.zip``: a copy of the best evaluation's checkpoint, written atomically."""
        import shutil

        assert self.best_model_save_path is not None
        try:
            self.best_model_save_path.mkdir(parents=True, exist_ok=True)
            with open(checkpoint, "rb") as src, \
                    atomic_file(self.best_model_save_path / "best_model.zip") as dst:
                shutil.copyfileobj(src, dst)
        except OSError as exc:
            self._failed("save", "save best_model.zip", exc)

    def _save_model(self, path: Path) -> Path:
        """``model.save`` into a temporary sibling, renamed into place: a full disk leaves
        no half-written zip."""
        with atomic_file(path) as f:
            assert isinstance(f, io.BufferedIOBase)  # opened "wb": what SB3 saves into
            self.model.save(f)
        return path

    def _save_vecnormalize(self, path: Path) -> Path | None:
        """The VecNormalize statistics of this moment (applied frozen in the eval), saved
        atomically as ``VecNormalize.save`` would (a pickle), or None without them."""
        import pickle

        stats = self.model.get_vec_normalize_env()
        if stats is None:
            return None
        with atomic_file(path) as f:
            pickle.dump(stats, f)
        return path

    def _run_evaluation(self, step: int, model_path: Path, vecnormalize: Path | None
                        ) -> dict[str, Any]:
        """Evaluate the checkpoint as a rolltape run; its numbers as one entry."""
        from rolltape.evaluation import evaluate
        from rolltape.stats import wilson_interval

        assert self._eval_spec is not None
        env_id, env_kwargs, max_steps = self._eval_spec
        started = time.perf_counter()
        run = evaluate(env_id, f"sb3:{model_path}", vecnormalize=vecnormalize,
                       algo=type(self.model).__name__.lower(), episodes=self.eval_episodes,
                       seed=self.eval_seed, env_kwargs=env_kwargs, max_episode_steps=max_steps,
                       deterministic=self.deterministic, video=self.eval_video,
                       out=self.out / "evals" / f"step-{step}", overwrite=True, report=False)
        rows = run.results.episodes
        returns = [e.ret for e in rows]
        lengths = [e.length for e in rows]
        successes = [e.success_at_end for e in rows]  # what SB3's EvalCallback counts
        finite = [x for x in returns if x is not None]
        entry: dict[str, Any] = {
            "step": step, "returns": returns, "lengths": lengths, "successes": successes,
            "mean_reward": float(np.mean(finite)) if finite else None,
            "std_reward": float(np.std(finite)) if finite else None,
            "mean_ep_length": float(np.mean(lengths)), "run": str(run.path),
            "checkpoint": str(model_path), "seconds": time.perf_counter() - started}
        entry["ci"] = _mean_ci(finite)
        known = [s for s in successes if s is not None]
        if known:
            low, high = wilson_interval(sum(known), len(known))
            entry.update(success_rate=sum(known) / len(known), success_low=low,
                         success_high=high)
        return entry

    def _log_evaluation(self, entry: dict[str, Any]) -> None:
        """The eval/ keys SB3's EvalCallback logs (and prints, with ``verbose``), dumped at
        the evaluation's step."""
        if self.verbose >= 1:
            returns = [r for r in entry["returns"] if r is not None]
            print(f"Eval num_timesteps={entry['step']}, episode_reward="
                  f"{np.mean(returns) if returns else math.nan:.2f} +/- "
                  f"{np.std(returns) if returns else math.nan:.2f}")
            print(f"Episode length: {np.mean(entry['lengths']):.2f} +/- "
                  f"{np.std(entry['lengths']):.2f}")
            if "success_rate" in entry:
                print(f"Success rate: {100 * entry['success_rate']:.2f}%")
        if entry["mean_reward"] is not None:
            self.logger.record("eval/mean_reward", entry["mean_reward"])
        self.logger.record("eval/mean_ep_length", entry["mean_ep_length"])
        if "success_rate" in entry:
            self.logger.record("eval/success_rate", entry["success_rate"])
            self.logger.record("eval/success_rate_low", entry["success_low"])
            self.logger.record("eval/success_rate_high", entry["success_high"])
        self.logger.record("time/total_timesteps", entry["step"], exclude="tensorboard")
        try:
            self.logger.dump(entry["step"])
        except OSError as exc:
            self._failed("save", "write the training log", exc)

    def _write_evaluations_npz(self) -> None:
        """``evaluations.npz`` as SB3's EvalCallback writes it: timesteps, results
        (returns), ep_lengths, and successes when the env reports them."""
        arrays: dict[str, Any] = {
            "timesteps": np.array([e["step"] for e in self.evaluations]),
            "results": np.array([[math.nan if r is None else r for r in e["returns"]]
                                 for e in self.evaluations]),
            "ep_lengths": np.array([e["lengths"] for e in self.evaluations]),
        }
        if all("success_rate" in e for e in self.evaluations):
            arrays["successes"] = np.array([[bool(s) for s in e["successes"]]
                                            for e in self.evaluations])
        with atomic_file(self.out / "evaluations.npz") as f:
            np.savez(f, **arrays)

    # -- the run's record ------------------------------------------------------------------
    def _write_summary(self) -> None:
        try:
            self.write_summary()
        except OSError as exc:
            self._failed("save", "write training.json and report.html", exc)
        except Exception as exc:  # the timeline picture of numbers matplotlib refuses
            self._failed("summary", "draw the training summary", exc)

    def _relative(self, row: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
        """``row`` with its paths under ``keys`` relative to ``out`` (``training.json``'s
        folder), whether they were given absolute or relative to the working folder."""
        import os

        base = self.out.absolute()
        return {k: (os.path.relpath(Path(v).absolute(), base)
                    if k in keys and isinstance(v, str) and v else v) for k, v in row.items()}

    def write_summary(self) -> None:
        """``training.json``, ``timeline.png`` and ``report.html`` under ``out``."""
        from rolltape.training.timeline import draw_timeline, timeline_report

        episodes = [{"step": s, "return": r, "length": n} for s, r, n in self.episodes]
        # Every path relative to training.json, so that the folder can move.
        recorded = [self._relative(row, ("tape", "video")) for row in self.recorded]
        evaluations = [self._relative(e, ("run", "checkpoint")) for e in self.evaluations]
        write_json(self.out / "training.json", json.loads(json.dumps(
            {"recorded": recorded, "evaluations": evaluations, "episodes": episodes},
            default=str)))
        picture = draw_timeline(self.evaluations, self.recorded, self.out / "timeline.png")
        try:  # the title: what was trained on what (a VecEnv without specs has no id)
            env_id = self.training_env.get_attr("spec", [0])[0].id
        except Exception:
            env_id = "its env"
        write_text(self.out / "report.html", timeline_report(
            self.out, picture, self.evaluations, self.recorded, self.episodes,
            steps=int(self.num_timesteps), title=f"{type(self.model).__name__} on {env_id}"))


_CHECK_TIMEOUT = 120.0  # seconds a fresh interpreter may take to look the eval env up


def _check_env_in_a_worker(env_id: str) -> None:
    """Refuse an env id that a fresh interpreter in this folder (as the evaluation's
    worker is) does not know: one registered by the training script only."""
    from rolltape.envs.ids import env_spec
    from rolltape.interpreter import ChildFailed, run_once

    try:
        run_once(env_spec, env_id, timeout=_CHECK_TIMEOUT)
    except ChildFailed as exc:
        if exc.hung:
            raise UsageError(f"the eval env '{env_id}' could not be looked up within "
                             f"{_CHECK_TIMEOUT:g} s in a fresh interpreter (its module hangs "
                             "on import); fix that module or pass another eval_env.") from None
        said = str(exc) or f"it raised {exc.exception}"
        why = ("is not registered there" if said.startswith("Unknown env id")
               else f"fails there: {said.rstrip('.')}")
        raise UsageError(
            f"the eval env '{env_id}' cannot be made in the evaluation's worker process, "
            f"which does not run the training script ({why}); pass "
            f"eval_env='module:{env_id.rpartition(':')[2]}' naming the module that "
            "registers it.")


def _mean_ci(values: list[float]) -> list[float] | None:
    """Bootstrap 95% interval of the mean return (None for fewer than 2 episodes)."""
    from rolltape.stats import bootstrap_ci

    if len(values) < 2:
        return None
    low, high = bootstrap_ci(values, np.mean)
    return [float(low), float(high)]
