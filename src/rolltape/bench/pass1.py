"""Pass 1 alone: what recording costs a policy loop (``pass1_overhead``), what asking for a
video costs pass 1 (``pass1_video_requested``, against rendering inline every step), and
pass 1 on MuJoCo Warp against the CPU workers (``mjwarp_pass1``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import rolltape.bench.common as common


def bench_pass1_overhead(ctx: common.Context) -> dict[str, Any]:
    """record_episode vs a bare policy.act + env.step loop, same env, policy and seeds."""
    from rolltape.envs.build import make_env
    from rolltape.envs.ids import env_spec
    from rolltape.pass1.rollout import record_episode
    from rolltape.policies import load_policy

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    env = make_env(env_spec(common.ENV_ID, max_episode_steps=cfg.overhead_steps))
    policy = load_policy(f"sb3:{ckpt}", env, vecnormalize=vecnorm)

    def bare(seed: int) -> int:
        obs, info = env.reset(seed=seed)
        policy.reset(seed)
        steps, done = 0, False
        while not done:
            obs, reward, term, trunc, info = env.step(policy.act(obs))
            steps += 1
            done = term or trunc
        return steps

    def record(seed: int) -> int:
        return len(record_episode(env, policy, seed)["rewards"])

    try:
        bare(common.SEED - 1)  # warm-up: torch's first calls, allocator, caches
        record(common.SEED - 1)
        times: dict[str, list[float]] = {"bare": [], "record": []}
        cpu: dict[str, list[float]] = {"bare": [], "record": []}
        steps = 0  # of the recorded episodes (the bare loop plays the same ones)
        for rep, (name, fn) in common.interleaved(cfg.overhead_episodes,
                                                  [("bare", bare), ("record", record)]):
            started, cpu_started = time.perf_counter(), time.process_time()
            n = fn(common.SEED + rep)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
            if name == "record":
                steps += n
    finally:
        env.close()
    ratio = common.median(times["record"]) / common.median(times["bare"])
    pairwise = [r / b for r, b in zip(times["record"], times["bare"])]
    bare_s = common.median(times["bare"])
    per_step_us = (common.median(times["record"]) - bare_s) / cfg.overhead_steps * 1e6
    cpu_ratio = common.median(cpu["record"]) / common.median(cpu["bare"])
    return common.result(
        title="pass-1 recording overhead", ratio=ratio, target=1.05, op="<=",
        ratio_of="median record_episode time / median bare-loop time",
        baseline=f"bare act+step {common.median(times['bare']):.3f} s/episode",
        measured=f"record_episode {common.median(times['record']):.3f} s/episode",
        raw={"episodes_each": cfg.overhead_episodes, "steps_per_episode": cfg.overhead_steps,
             "steps_each": steps, "bare_s": times["bare"], "record_s": times["record"],
             "pairwise_ratios": pairwise, "median_pairwise_ratio": common.median(pairwise),
             "overhead_us_per_step": per_step_us, "bare_cpu_s": cpu["bare"],
             "record_cpu_s": cpu["record"], "cpu_time_ratio": cpu_ratio},
        notes=[f"recording costs {per_step_us:+.1f} us a step (observation digest, copies of "
               f"the action, qpos, qvel and physics state) on top of "
               f"{bare_s / cfg.overhead_steps * 1e6:.0f} us for policy.act + env.step",
               f"CPU-time ratio (process_time, insensitive to other load on the machine): "
               f"{cpu_ratio:.3f}", common.POLICY_NOTE])


# --------------------------------------------------------------------------------------
# 2. pass1_video_requested
# --------------------------------------------------------------------------------------

def bench_pass1_video_requested(ctx: common.Context) -> dict[str, Any]:
    """Pass-1 time with video=0 vs video=1; contrast: rendering inline while evaluating."""
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    vw, vh = cfg.video_size
    pass1: dict[int, list[float]] = {0: [], 1: []}
    pass1_cpu: dict[int, list[float]] = {0: [], 1: []}
    pass2: list[float] = []
    for _, video in common.interleaved(cfg.video_reps, (0, 1)):
        with common.track_workers() as workers:
            run = evaluate(common.ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                           episodes=cfg.video_episodes, seed=common.SEED,
                           max_episode_steps=cfg.video_steps, video=video, width=vw,
                           height=vh, out=ctx.dir(f"video{video}"), overwrite=True)
        pass1[video].append(common.run_seconds(run, "pass1_s"))
        pass1_cpu[video].append(sum(w["cpu_s"] or 0.0 for w in workers
                                    if w["target"] == "policy_worker"))
        if video:
            pass2.append(common.run_seconds(run, "pass2_s"))
    ratio = common.median(pass1[0]) / common.median(pass1[1])  # speed(video=1) / speed(video=0)
    cpu_ratio = common.median(pass1_cpu[0]) / common.median(pass1_cpu[1])

    inline, _ = common.run_child(inline_render_child, {
        "checkpoint": str(ckpt), "vecnormalize": str(vecnorm), "steps": cfg.inline_steps,
        "width": cfg.width, "height": cfg.height, "seed": common.SEED}, ctx.dir("inline"),
        gl=ctx.backend)
    slowdown = inline["inline_s"] / inline["bare_s"]
    return common.result(
        title="pass 1 with a video requested", ratio=ratio, target=0.97, op=">=",
        ratio_of="pass-1 speed with video=1 / with video=0 (median pass1_s of video=0 / video=1)",
        baseline=f"video=0: pass 1 {common.median(pass1[0]):.2f} s",
        measured=f"video=1: pass 1 {common.median(pass1[1]):.2f} s",
        raw={"episodes": cfg.video_episodes, "steps": cfg.video_steps, "reps": cfg.video_reps,
             "pass1_s_video0": pass1[0], "pass1_s_video1": pass1[1], "pass2_s_video1": pass2,
             "pass1_worker_cpu_s_video0": pass1_cpu[0], "pass1_worker_cpu_s_video1": pass1_cpu[1],
             "cpu_ratio": cpu_ratio,
             "pass2_size": [vw, vh], "inline": inline, "inline_slowdown": slowdown},
        notes=[f"pass-1 time includes starting the worker (interpreter, torch import, policy "
               f"load); pass 2 of the video=1 runs drew {vw}x{vh} frames after pass 1 ended",
               f"pass-1 worker CPU time (less disturbed by other load): video=0 "
               f"{common.median(pass1_cpu[0]):.2f} s, video=1 "
               f"{common.median(pass1_cpu[1]):.2f} s, ratio "
               f"{cpu_ratio:.3f}",
               f"contrast: {inline['label']} at {cfg.width}x{cfg.height} for "
               f"{inline['steps']} steps is {slowdown:.1f}x slower than the bare loop "
               f"({inline['inline_s']:.2f} s vs {inline['bare_s']:.2f} s, backend "
               f"{ctx.backend}, {inline['frames']} frames kept in memory, peak RSS "
               f"{inline['peak_rss_mb']:.0f} MB)", common.POLICY_NOTE])


def inline_render_child(checkpoint: str, vecnormalize: str, steps: int, width: int,
                        height: int, seed: int) -> dict[str, Any]:
    """(In a child with MUJOCO_GL set.) The bare loop, then the same loop drawing every step
    and keeping the frames, as Gymnasium's RecordVideo does (RecordVideo itself when moviepy
    is installed; it also encodes at the episode's end)."""
    import resource

    import gymnasium as gym

    from rolltape.policies import load_policy

    plain = gym.make(common.ENV_ID, max_episode_steps=steps)
    drawn = gym.make(common.ENV_ID, max_episode_steps=steps, render_mode="rgb_array",
                     width=width, height=height)
    policy = load_policy(f"sb3:{checkpoint}", plain, vecnormalize=vecnormalize)
    policy.act(plain.reset(seed=seed)[0])  # warm-up: torch's first call
    drawn.reset(seed=seed)
    drawn.render()  # the GL context is made once, before the clock starts

    def loop(env: Any, draw: Callable[[], None] | None) -> tuple[float, int]:
        started = time.perf_counter()
        obs, _ = env.reset(seed=seed)
        if draw:
            draw()
        n, done = 0, False
        while not done:
            obs, _, term, trunc, _ = env.step(policy.act(obs))
            if draw:
                draw()
            n, done = n + 1, term or trunc
        return time.perf_counter() - started, n

    bare_s, n = loop(plain, None)
    frames: list[Any] = []
    moviepy = importlib.util.find_spec("moviepy") is not None
    if moviepy:
        from gymnasium.wrappers import RecordVideo

        folder = tempfile.mkdtemp(prefix="recordvideo-")
        recorder = RecordVideo(drawn, str(Path(folder) / "videos"), episode_trigger=lambda i: True)
        started = time.perf_counter()
        inline_s, _ = loop(recorder, None)
        recorder.close()  # RecordVideo encodes the kept frames here (or at the episode's end)
        inline_s = time.perf_counter() - started
        label, kept = "gymnasium RecordVideo (moviepy)", n + 1
        shutil.rmtree(folder, ignore_errors=True)
    else:
        inline_s, _ = loop(drawn, lambda: frames.append(drawn.render()))
        label, kept = ("inline render like RecordVideo (moviepy is not installed: env.render() "
                       "every step, frames kept in a list, not encoded)"), len(frames)
    plain.close()
    drawn.close()
    return {"bare_s": bare_s, "inline_s": inline_s, "steps": n, "frames": kept,
            "label": label, "moviepy": moviepy,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# --------------------------------------------------------------------------------------
# 3. mjwarp_pass1
# --------------------------------------------------------------------------------------

#: (episodes, steps) of mjwarp_pass1: a GPU gets issue 41's 4,096 episodes; Warp's CPU device
#: steps worlds one after another, so there the row is small and informational
MJWARP_WORK = {"gpu": (4096, 1000), "cpu": (64, 200), "quick": (8, 30)}
FLIP_TAPES = 256  # at most this many of the MJWarp tapes are replayed on CPU MuJoCo


def bench_mjwarp_pass1(ctx: common.Context) -> dict[str, Any]:
    """Episodes/s of pass 1 on MuJoCo Warp (``--simulator mjwarp``: every episode a world of
    one batch) vs rolltape's CPU workers (one per core), same PPO policy, seeds and steps;
    then the flip report of the MJWarp tapes against CPU MuJoCo. Gating only on a GPU."""
    import os

    from rolltape.compare.flips import FlipOptions, flip_report
    from rolltape.envs.mjwarp import warp_device
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    device = warp_device("cuda:0")
    on_gpu = device != "cpu"
    episodes, steps = MJWARP_WORK["quick" if cfg.quick else "gpu" if on_gpu else "cpu"]
    ckpt, vecnorm = ctx.checkpoint()
    workers = min(os.cpu_count() or 1, episodes)

    def run(name: str, count: int, **how: Any) -> Any:
        return evaluate(common.ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm, episodes=count,
                        seed=common.SEED, max_episode_steps=steps, out=ctx.dir(name),
                        overwrite=True, report=False, **how)

    started = time.perf_counter()  # Warp compiles (or loads) its kernels: once, untimed
    run("mjwarp-warm", 1, simulator="mjwarp")
    warm_s = time.perf_counter() - started
    seconds: dict[str, list[float]] = {"cpu": [], "mjwarp": []}
    runs: dict[str, Any] = {}
    setups: dict[str, dict[str, Any]] = {"cpu": {"workers": workers},
                                         "mjwarp": {"simulator": "mjwarp"}}
    for _, name in common.interleaved(1, list(setups)):
        runs[name] = run(f"mjwarp-pass1-{name}", episodes, **setups[name])
        seconds[name].append(common.run_seconds(runs[name], "pass1_s"))
    cpu_s, warp_s = common.median(seconds["cpu"]), common.median(seconds["mjwarp"])
    warp_run = runs["mjwarp"]
    tapes = [warp_run.tape_path(e) for e in warp_run.results.episodes][:FLIP_TAPES]
    report = flip_report(tapes, FlipOptions(flips=True))
    returns = {name: common.median([e.ret or 0.0 for e in r.results.episodes])
               for name, r in runs.items()}
    return common.result(
        title="pass 1 on MuJoCo Warp", ratio=cpu_s / warp_s, target=20.0, op=">=",
        gating=on_gpu and not cfg.quick,
        ratio_of=f"pass1_s of {workers} CPU worker(s) / pass1_s of one MJWarp batch (a "
                 "speed-up; same policy, seeds and steps)",
        baseline=f"{workers} CPU workers: {episodes / cpu_s:.1f} episodes/s",
        measured=f"MuJoCo Warp on {device}: {episodes / warp_s:.1f} episodes/s",
        raw={"episodes": episodes, "steps": steps, "device": device, "workers": workers,
             "warm_s": warm_s, "pass1_s_cpu": seconds["cpu"],
             "pass1_s_mjwarp": seconds["mjwarp"], "median_return": returns,
             "flip_tapes": len(report.rows), "flipped": report.flipped,
             "largest_divergence": max((r.max_divergence for r in report.rows), default=0.0)},
        notes=[f"{episodes} episodes x {steps} steps of {common.ENV_ID}, report=False; Warp's "
               f"first call (kernels compiled or loaded, untimed): {warm_s:.1f} s",
               f"flips: {report.summary()}",
               "MJWarp's physics is float32: its median return "
               f"{returns['mjwarp']:.2f} vs {returns['cpu']:.2f} on CPU MuJoCo"
               + ("" if on_gpu else "; on the CPU this row is informational (issue 41's "
                  "target, >= 20x, is for a GPU)"),
               common.POLICY_NOTE])
