"""Recording during training (:mod:`rolltape.training`): what a tape of every episode costs
PPO's training throughput (``training_tapes``), what background videos of every 10th
episode cost next to Gymnasium's ``RecordVideo`` drawing them inline
(``training_background_video``), and what the wrapper costs a step when it is not
recording (``record_tape_step_cost``).

May import: bench.common; rolltape, SB3 and torch inside functions. Never: bench itself, a
sibling module.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import rolltape.bench.common as common


def _sizes(ctx: common.Context) -> dict[str, int]:
    """Training steps per run, episode length, repetitions (A B B A ...)."""
    if ctx.config.quick:
        return {"steps": 128, "episode": 30, "reps": 1, "n_steps": 64, "bare_steps": 2000}
    return {"steps": 20_000, "episode": 1000, "reps": 2, "n_steps": 2048, "bare_steps": 200_000}


def train_child(variant: str, steps: int, episode: int, n_steps: int, folder: str,
                seed: int, width: int, height: int, backend: str | None = None) -> dict[str, Any]:
    """Train PPO (MlpPolicy) for ``steps`` steps on one env with the ``variant``'s
    recording ("none", "tapes", "background", "recordvideo"); returns the wall time of
    ``learn``."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rolltape.training.record_tape import RecordTape

    torch.set_num_threads(1)
    kept: list[Any] = []

    def make() -> gym.Env:
        render_mode = "rgb_array" if variant == "recordvideo" else None
        size: dict[str, Any] = {"width": width, "height": height} if render_mode else {}
        env = gym.make(common.ENV_ID, max_episode_steps=episode, render_mode=render_mode, **size)
        if variant == "tapes":
            env = RecordTape(env, folder, episode_trigger=lambda e: True, render=False)
        elif variant == "background":
            env = RecordTape(env, folder, episode_trigger=lambda e: e % 10 == 0,
                             width=width, height=height, close_timeout=0,
                             backends=(backend,) if backend else ("egl", "osmesa"))
        elif variant == "recordvideo":
            env = _inline_video(env, folder)
        kept.append(env)
        return Monitor(env)

    venv = DummyVecEnv([make])
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=64, seed=seed, device="cpu")
    started = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - started
    venv.close()  # after the clock: videos left undone stay as tapes
    return {"learn_s": wall, "steps": steps}


def _inline_video(env: Any, folder: str) -> Any:
    """Gymnasium's RecordVideo with the same trigger (every 10th episode), drawing inline;
    without moviepy (which it needs to write files), the same frames are drawn and kept in
    memory, which is the part of its cost that lands in the training loop."""
    import gymnasium as gym

    trigger = lambda e: e % 10 == 0  # noqa: E731
    if importlib.util.find_spec("moviepy") is not None:
        return gym.wrappers.RecordVideo(env, folder, episode_trigger=trigger)

    class InlineFrames(gym.Wrapper):
        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            self.episode = -1
            self.frames: list[Any] = []

        def reset(self, **kwargs: Any) -> Any:
            out = self.env.reset(**kwargs)
            self.episode += 1
            self.frames = []
            if trigger(self.episode):
                self.frames.append(self.env.render())
            return out

        def step(self, action: Any) -> Any:
            out = self.env.step(action)
            if trigger(self.episode):
                self.frames.append(self.env.render())
            return out

    return InlineFrames(env)


def _interleaved(ctx: common.Context, variants: tuple[str, ...],
                 name: str) -> dict[str, list[float]]:
    """Wall time of ``learn`` per variant, A B B A ...; in this process (after one warm-up
    run), except RecordVideo's, which draws inline and so needs a GL backend chosen before
    MuJoCo is imported: a fresh interpreter with ``MUJOCO_GL`` set."""
    sizes = _sizes(ctx)
    times: dict[str, list[float]] = {v: [] for v in variants}

    def kwargs(variant: str, folder: Any) -> dict[str, Any]:
        return {"variant": variant, "steps": sizes["steps"], "episode": sizes["episode"],
                "n_steps": sizes["n_steps"], "folder": str(folder), "seed": common.SEED,
                "width": ctx.config.width, "height": ctx.config.height,
                "backend": ctx.backend}

    train_child(**{**kwargs("none", ctx.dir(f"{name}-warmup")), "steps": sizes["n_steps"]})
    for _, variant in common.interleaved(sizes["reps"], variants):
        folder = ctx.dir(f"{name}-{variant}")
        if variant == "recordvideo":
            result, _ = common.run_child(train_child, kwargs(variant, folder), folder,
                                         gl=ctx.backend)
        else:
            result = train_child(**kwargs(variant, folder))
        times[variant].append(result["learn_s"])
    return times


def bench_training_tapes(ctx: common.Context) -> dict[str, Any]:
    """PPO throughput with a tape of every episode vs with no recording at all."""
    sizes = _sizes(ctx)
    times = _interleaved(ctx, ("none", "tapes"), "tapes")
    # speed(tapes) / speed(none)
    ratio = common.median(times["none"]) / common.median(times["tapes"])
    return common.result(
        title="training throughput with a tape of every episode", ratio=ratio, target=0.95,
        op=">=", ratio_of="PPO steps/s with RecordTape on every episode / without recording",
        baseline=f"no recording: {sizes['steps'] / common.median(times['none']):.0f} steps/s",
        measured=f"tapes: {sizes['steps'] / common.median(times['tapes']):.0f} steps/s",
        raw={**sizes, "learn_s": times},
        notes=[f"PPO MlpPolicy on {common.ENV_ID}, {sizes['episode']}-step episodes, one env"])


def bench_training_background_video(ctx: common.Context) -> dict[str, Any]:
    """PPO throughput with background videos of every 10th episode, and with Gymnasium's
    RecordVideo drawing the same episodes inline, each against no recording."""
    sizes = _sizes(ctx)
    times = _interleaved(ctx, ("none", "background", "recordvideo"), "video")
    none = common.median(times["none"])
    ratio = none / common.median(times["background"])
    inline = none / common.median(times["recordvideo"])
    how = ("gymnasium RecordVideo" if importlib.util.find_spec("moviepy") is not None
           else "inline env.render() of the same episodes (moviepy missing for RecordVideo)")
    return common.result(
        title="training throughput with background videos (every 10th episode)",
        ratio=ratio, target=0.95, op=">=", gating=False,
        ratio_of="PPO steps/s with RecordTape + background videos / without recording",
        baseline=f"no recording: {sizes['steps'] / none:.0f} steps/s",
        measured=f"background videos: {sizes['steps'] / common.median(times['background']):.0f} "
                 f"steps/s; {how}: "
                 f"{sizes['steps'] / common.median(times['recordvideo']):.0f} steps/s",
        raw={**sizes, "learn_s": times, "inline_ratio": inline, "inline_how": how},
        notes=[f"inline ({how}) ratio in the same run: {inline:.3f}",
               "render processes run at nice +10 beside training; on few cores they still "
               "share the CPU"])


def bench_record_tape_step_cost(ctx: common.Context) -> dict[str, Any]:
    """Microseconds a step that RecordTape adds when it is not recording."""
    import gymnasium as gym
    import numpy as np

    from rolltape.training.record_tape import RecordTape

    sizes = _sizes(ctx)
    n = sizes["bare_steps"]
    bare = gym.make(common.ENV_ID, max_episode_steps=10**9)
    wrapped = RecordTape(gym.make(common.ENV_ID, max_episode_steps=10**9), ctx.dir("step-cost"),
                         episode_trigger=lambda e: False, render=False)
    space = bare.action_space
    assert isinstance(space, gym.spaces.Box)  # HalfCheetah's
    action = np.zeros(space.shape, dtype=space.dtype)

    def loop(env: Any) -> float:
        env.reset(seed=common.SEED)
        step = env.step
        started = time.perf_counter()
        for _ in range(n):
            step(action)
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"bare": [], "wrapped": []}
    for _, (name, env) in common.interleaved(3, (("bare", bare), ("wrapped", wrapped))):
        times[name].append(loop(env))
    bare.close()
    wrapped.close()
    extra_us = (common.median(times["wrapped"]) - common.median(times["bare"])) / n * 1e6
    ratio = common.median(times["wrapped"]) / common.median(times["bare"])
    return common.result(
        title="RecordTape's cost per step when not recording", ratio=ratio, value=extra_us,
        unit="us", target=2.0, op="<=", ratio_of="wrapped step time / bare step time",
        baseline=f"bare env.step {common.median(times['bare']) / n * 1e6:.1f} us",
        measured=f"RecordTape env.step {common.median(times['wrapped']) / n * 1e6:.1f} us",
        raw={"steps": n, "seconds": times, "extra_us_per_step": extra_us},
        notes=[f"{extra_us:+.2f} us a step over the bare env (target <= 2 us)"])
