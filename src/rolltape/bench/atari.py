"""Atari (ale-py): pass 1 of a PPO CnnPolicy behind SB3's Atari wrappers and a frame stack
of 4 against the loop rl-zoo3's ``enjoy.py --no-render`` runs (``atari_pass1``), and pass 2
(ALE's screen to mp4) against a bare ``env.render()`` + encode loop (``atari_pass2``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rolltape.bench.common as common

ATARI_ID = "BreakoutNoFrameskip-v4"
WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"


def atari_sizes(ctx: common.Context) -> tuple[int, int, int]:
    """(episodes, base steps per episode at most, repetitions) for this run's size."""
    return (2, 300, 1) if ctx.config.quick else (8, 4000, 2)


@contextmanager
def _building_on_one_thread() -> Iterator[None]:
    """One torch (and MKL) thread while SB3 builds a policy, which ``load`` does too: its
    orthogonal init runs MKL's threaded QR, which spun for 20 minutes in two bench
    processes at once on 2 cores (caught under gdb in ``mkl_lapack_sgeqrf``). The loop
    after it runs on torch's default threads, as enjoy.py's does."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _atari_checkpoint(ctx: common.Context) -> Path:
    """An untrained PPO CnnPolicy for SB3's Atari pipeline (inference costs the same as a
    trained one's), made once per run."""
    shared = ctx.results.setdefault("atari", {})
    if "checkpoint" not in shared:
        import ale_py
        import gymnasium as gym
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        venv = VecFrameStack(make_atari_env(ATARI_ID, n_envs=1, seed=0), 4)
        path = ctx.dir("atari-checkpoint") / "ppo_cnn.zip"
        with _building_on_one_thread():
            PPO("CnnPolicy", venv, seed=0, device="cpu").save(path)
        venv.close()
        shared["checkpoint"] = path
    return Path(shared["checkpoint"])


def bench_atari_pass1(ctx: common.Context) -> dict[str, Any]:
    """rolltape pass 1 (--wrapper atari --frame-stack 4, sampled actions as rl-zoo3 samples
    Atari's) vs enjoy.py's loop on the same episodes, each from a cold process."""
    import os

    from rolltape.evaluation import evaluate

    episodes, steps, reps = atari_sizes(ctx)
    ckpt = _atari_checkpoint(ctx)
    workers = max(1, min(2, os.cpu_count() or 1))
    times: dict[str, list[float]] = {"rolltape": [], "enjoy": []}
    ours: list[tuple[float | None, int]] = []
    theirs: dict[str, Any] = {}
    for _, who in common.interleaved(reps, ("rolltape", "enjoy")):
        if who == "rolltape":
            run = evaluate(ATARI_ID, f"sb3:{ckpt}", wrappers=("atari",), frame_stack=4,
                           deterministic=False, episodes=episodes, seed=common.SEED,
                           max_episode_steps=steps, workers=workers,
                           out=ctx.dir("atari-rolltape"), overwrite=True, report=False)
            times[who].append(common.run_seconds(run, "pass1_s"))
            ours = [(e.ret, e.length) for e in run.results.episodes]
            ctx.results.setdefault("atari", {})["tape"] = \
                Path(run.path) / run.results.episodes[0].tape
        else:
            theirs, wall = common.run_child(enjoy_loop_child, {
                "checkpoint": str(ckpt), "episodes": episodes, "steps": steps,
                "seed": common.SEED}, ctx.dir("atari-enjoy"))
            times[who].append(wall)
    same = ours == [tuple(x) for x in theirs["episodes"]]
    ratio = common.median(times["enjoy"]) / common.median(times["rolltape"])
    return common.result(
        title="Atari pass 1 vs rl-zoo3 enjoy loop", ratio=ratio, target=1.5, op=">=",
        gating=not ctx.config.quick,
        ratio_of="enjoy-style loop wall time / rolltape pass-1 time (a speed-up; each from a "
                 "cold process: interpreter, torch, checkpoint, episodes)",
        baseline=f"enjoy loop {common.median(times['enjoy']):.2f} s",
        measured=f"rolltape pass 1 {common.median(times['rolltape']):.2f} s ({workers} workers)",
        raw={"env": ATARI_ID, "episodes": episodes, "max_episode_steps": steps, "reps": reps,
             "workers": workers, "rolltape_pass1_s": times["rolltape"],
             "enjoy_wall_s": times["enjoy"], "enjoy_loop_s": theirs.get("loop_s"),
             "episodes_rolltape": ours, "episodes_enjoy": theirs.get("episodes"),
             "same_episodes": same, "enjoy_env": theirs.get("built_by")},
        notes=["enjoy path: rl-zoo3's create_test_env (AtariWrapper, frame_stack 4), a fresh "
               "one per episode seeded with seed + i, torch seeded likewise, model.predict "
               "with sampled actions, torch at its default thread count",
               "episodes equal to rolltape's, return and length: "
               + ("yes" if same else "NO (check the seeding)"),
               "rolltape plays episodes on separate workers; the enjoy loop plays them in "
               "one process, as enjoy.py does"])


def enjoy_loop_child(checkpoint: str, episodes: int, steps: int, seed: int) -> dict[str, Any]:
    """(In a fresh interpreter.) rl-zoo3's enjoy.py --no-render loop on the same episodes."""
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    gym.register_envs(ale_py)
    started = time.perf_counter()
    with _building_on_one_thread():
        model = PPO.load(checkpoint, device="cpu")
    hyperparams = {"env_wrapper": [WRAPPER], "frame_stack": 4, "normalize": False}
    try:
        from rl_zoo3 import create_test_env

        def make(s: int) -> Any:
            # enjoy.py passes the experiment's folder: create_test_env stacks frames only
            # when it has one (nothing is read from it without normalize).
            return create_test_env(ATARI_ID, n_envs=1, stats_path=str(Path(checkpoint).parent),
                                   seed=s,
                                   should_render=False, hyperparams=dict(hyperparams),
                                   env_kwargs={"max_episode_steps": steps})
        built_by = "rl_zoo3.create_test_env"
    except ImportError:  # the same pipeline by hand (rl-zoo3 not installed)
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        def make(s: int) -> Any:
            venv = VecFrameStack(make_atari_env(ATARI_ID, n_envs=1, seed=s,
                                                env_kwargs={"max_episode_steps": steps}), 4)
            return venv
        built_by = "make_atari_env + VecFrameStack"
    out = []
    for i in range(episodes):
        env = make(seed + i)
        env.seed(seed + i)
        torch.manual_seed(seed + i)
        obs = env.reset()
        while True:
            action, _ = model.predict(obs, deterministic=False)
            obs, _, done, infos = env.step(action)
            if done[0] and "episode" in infos[0]:
                out.append([float(infos[0]["episode"]["r"]), int(infos[0]["episode"]["l"])])
                break
        env.close()
    return {"episodes": out, "loop_s": time.perf_counter() - started, "built_by": built_by}


def bench_atari_pass2(ctx: common.Context) -> dict[str, Any]:
    """rolltape.render of an Atari tape (ALE's screen, verified) with a worker per core, as
    ``eval``'s pass 2 draws it (the episode split into segments that continue from recorded
    emulator states), vs a bare render+encode loop in a cold process (A B B A ...)."""
    from rolltape.executors.launch import per_core
    from rolltape.pass2.request import RenderRequest
    from rolltape.rendering import render

    shared = ctx.results.setdefault("atari", {})  # the tape bench_atari_pass1 recorded
    if "tape" not in shared:
        bench_atari_pass1(ctx)
    tape = shared["tape"]
    _, _, reps = atari_sizes(ctx)
    workers = per_core(0)  # eval's --render-workers 0
    runs: dict[str, list[dict[str, float]]] = {"rolltape": [], "bare": []}
    for _, who in common.interleaved(reps, ("rolltape", "bare")):
        folder = ctx.dir(f"atari-render-{who}")
        if who == "rolltape":
            started = time.perf_counter()
            result = render([RenderRequest(str(tape), (str(folder / "rolltape.mp4"),),
                                           overwrite=True)], workers=workers)[0]
            wall = time.perf_counter() - started
            assert result is not None and result.verified
            runs[who].append({"wall_s": wall, "loop_s": result.seconds,
                              "frames": result.frames, "segments": result.segments})
        else:
            bare, wall = common.run_child(bare_atari_render_child, {
                "tape": str(tape), "out": str(folder / "bare.mp4")}, folder)
            runs[who].append({"wall_s": wall, **bare})

    fps, bare_fps = common.median_rate(runs["rolltape"]), common.median_rate(runs["bare"])
    return common.result(
        title="Atari pass 2 vs bare render loop", ratio=fps / bare_fps, target=1.0, op=">=",
        ratio_of="rolltape.render frames/s / bare env.render()+encode frames/s (wall time, "
                 "process start included on both sides)",
        baseline=f"bare loop {bare_fps:.1f} frames/s",
        measured=f"rolltape {fps:.1f} frames/s ({workers} workers)",
        raw={"env": ATARI_ID, "reps": reps, "workers": workers, "rolltape": runs["rolltape"],
             "bare": runs["bare"], "fps": fps, "bare_fps": bare_fps,
             "fps_in_loop": common.median_rate(runs["rolltape"], "loop_s"),
             "bare_fps_in_loop": common.median_rate(runs["bare"], "loop_s")},
        notes=["both draw ALE's 210x160 screen (no GL) and write mp4 via "
               "rolltape.pass2.encode.open_writer; rolltape also verifies every step",
               "rolltape draws as eval's pass 2 does, a worker per core, so one long episode "
               "is split into segments joined by copying packets; the bare loop is one "
               "process"])


def bare_atari_render_child(tape: str, out: str) -> dict[str, Any]:
    """(In a fresh interpreter.) gym.make + reset(seed) + step(actions) + render + mp4."""
    import ale_py
    import gymnasium as gym

    from rolltape.pass2.encode import open_writer
    from rolltape.tape import Tape

    gym.register_envs(ale_py)
    recorded = Tape.load(tape)
    started = time.perf_counter()
    env = gym.make(ATARI_ID, render_mode="rgb_array", max_episode_steps=len(recorded.actions))
    env.reset(seed=recorded.seed)
    with open_writer(out, fps=env.metadata["render_fps"], overwrite=True) as writer:
        writer.write(env.render())  # type: ignore[arg-type]  # rgb_array: one frame
        for action in recorded.actions:
            env.step(action)
            writer.write(env.render())  # type: ignore[arg-type]
    env.close()
    return {"loop_s": time.perf_counter() - started, "frames": writer.frames_written}
