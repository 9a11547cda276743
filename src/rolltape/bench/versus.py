"""rolltape against the ways it replaces: SB3's ``evaluate_policy``
(``pass1_vs_sb3_evaluate_policy``), "the seed-000 way" of evaluating, then re-running
the policy to film episode 0 (``end_to_end``, :func:`seed000_way`), and seed 000's own
script on its own small workload (``small_job``, :mod:`rolltape.bench.seed000`).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module
(bench.seed000 is run as a script, found by name, never imported).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import rolltape.bench.common as common
from rolltape.interpreter import python_command

#: Seed 000's env: its default 100-step episodes make a small job.
SMALL_ENV_ID = "Pusher-v5"


def bench_pass1_vs_sb3_evaluate_policy(ctx: common.Context) -> dict[str, Any]:
    """rolltape pass 1 vs SB3's evaluate_policy on the same checkpoint and episodes."""
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    times: dict[str, list[float]] = {"rolltape": [], "sb3": []}
    evaluate_walls: list[float] = []
    loops: dict[str, list[float]] = {"rolltape": [], "sb3": []}
    rolltape_returns: list[float | None] = []
    sb3: dict[str, Any] = {}
    for _, who in common.interleaved(cfg.sb3_reps, ("rolltape", "sb3")):
        if who == "rolltape":
            started = time.perf_counter()
            run = evaluate(common.ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                           episodes=cfg.sb3_episodes, seed=common.SEED,
                           max_episode_steps=cfg.sb3_steps, out=ctx.dir("rolltape"),
                           overwrite=True)
            evaluate_walls.append(time.perf_counter() - started)
            times["rolltape"].append(common.run_seconds(run, "pass1_s"))
            loops["rolltape"].append(sum(e.wall_s for e in run.results.episodes))
            rolltape_returns = [e.ret for e in run.results.episodes]
        else:
            sb3, wall = common.run_child(sb3_evaluate_child, {
                "checkpoint": str(ckpt), "vecnormalize": str(vecnorm),
                "episodes": cfg.sb3_episodes, "steps": cfg.sb3_steps, "seed": common.SEED},
                ctx.dir("sb3"))
            times["sb3"].append(wall)
            loops["sb3"].append(sb3["evaluate_s"])
    ratio = common.median(times["sb3"]) / common.median(times["rolltape"])
    first_r, first_s = rolltape_returns[0], sb3["returns"][0]
    same = first_r == first_s
    close = first_r is not None and math.isclose(first_r, first_s, rel_tol=0, abs_tol=1e-5)
    why = ("identical" if same else
           "equal to 1e-5: SB3's Monitor rounds each episode return to 6 decimals and sums "
           "in another order (rolltape uses math.fsum)" if close else
           "they differ beyond rounding: check the seeding of the first episode")
    return common.result(
        title="pass 1 vs SB3 evaluate_policy", ratio=ratio, target=1.5, op=">=",
        gating=not cfg.quick,
        ratio_of="SB3 evaluate_policy wall time / rolltape pass-1 time (a speed-up; each "
                 "from a cold process: interpreter, torch, checkpoint, episodes)",
        baseline=f"SB3 evaluate_policy {common.median(times['sb3']):.2f} s",
        measured=f"rolltape pass 1 {common.median(times['rolltape']):.2f} s",
        raw={"episodes": cfg.sb3_episodes, "steps": cfg.sb3_steps, "reps": cfg.sb3_reps,
             "rolltape_pass1_s": times["rolltape"], "rolltape_evaluate_wall_s": evaluate_walls,
             "sb3_wall_s": times["sb3"],
             "rolltape_episode_loops_s": loops["rolltape"], "sb3_evaluate_policy_s": loops["sb3"],
             "loop_speedup": common.median(loops["sb3"]) / common.median(loops["rolltape"]),
             "sb3_import_s": sb3["import_s"], "sb3_load_s": sb3["load_s"],
             "first_episode_seed": common.SEED, "first_return_rolltape": first_r,
             "first_return_sb3": first_s, "first_return_abs_diff": abs(first_r - first_s),
             "returns_rolltape": rolltape_returns, "returns_sb3": sb3["returns"],
             "lengths_sb3": sb3["lengths"]},
        notes=[f"first episode (seed {common.SEED}): rolltape {first_r:.6f}, SB3 {first_s:.6f} "
               f"({why}); SB3 seeds only its first episode (VecEnv.seed applies to the next "
               "reset; later episodes continue the env's RNG), rolltape seeds episode i with "
               "seed + i, so only episode 0 is comparable",
               "SB3 path: DummyVecEnv(Monitor(env)) + VecNormalize.load (training=False, "
               "norm_reward=False), torch left at its default thread count as a user would; "
               "rolltape's worker sets torch to 1 thread",
               f"judged: pass 1 (spawning the policy process, importing torch, loading, "
               f"the episodes); the whole evaluate() call, which also writes results.json, "
               f"the report and the notebook, took {common.median(evaluate_walls):.2f} s "
               f"({common.median(times['sb3']) / common.median(evaluate_walls):.2f}x)",
               f"episode loops only (no start-up): SB3 {common.median(loops['sb3']):.2f} s, "
               f"rolltape {common.median(loops['rolltape']):.2f} s "
               f"(speed-up {common.median(loops['sb3']) / common.median(loops['rolltape']):.2f}x)",
               common.POLICY_NOTE])


def sb3_evaluate_child(checkpoint: str, vecnormalize: str, episodes: int, steps: int,
                       seed: int) -> dict[str, Any]:
    """(In a fresh child.) SB3's evaluate_policy as its docs show, first episode seeded."""
    started = time.perf_counter()
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    imported = time.perf_counter()
    venv = VecNormalize.load(vecnormalize, DummyVecEnv(
        [lambda: Monitor(gym.make(common.ENV_ID, max_episode_steps=steps))]))
    venv.training, venv.norm_reward = False, False
    model = PPO.load(checkpoint, device="cpu")
    venv.seed(seed)  # used by the next reset only: evaluate_policy's first episode
    loaded = time.perf_counter()
    returns, lengths = evaluate_policy(model, venv, n_eval_episodes=episodes,
                                       deterministic=True, return_episode_rewards=True)
    assert isinstance(returns, list) and isinstance(lengths, list)  # per episode, as asked
    finished = time.perf_counter()
    venv.close()
    return {"import_s": imported - started, "load_s": loaded - imported,
            "evaluate_s": finished - loaded, "returns": [float(r) for r in returns],
            "lengths": [int(n) for n in lengths]}



def seed000_way(checkpoint: Path, vecnormalize: Path, episodes: int, steps: int, seed: int,
                width: int, height: int, video: Path, work: Path, gl: str) -> dict[str, Any]:
    """How it was done before rolltape ("the seed-000 way"): one process evaluates with SB3
    and runs the random baseline; a second process re-generates episode 0's actions with the
    policy, renders every frame into a list and encodes them all at the end."""
    started = time.perf_counter()
    args = {"checkpoint": str(checkpoint), "vecnormalize": str(vecnormalize), "steps": steps,
            "seed": seed}
    evaluation, eval_wall = common.run_child(seed000_evaluate_child,
                                             {**args, "episodes": episodes}, work)
    video_run, video_wall = common.run_child(seed000_video_child, {
        **args, "width": width, "height": height, "out": str(video)}, work, gl=gl)
    return {"wall_s": time.perf_counter() - started, "evaluate_wall_s": eval_wall,
            "video_wall_s": video_wall, **evaluation, **video_run}


def seed000_evaluate_child(checkpoint: str, vecnormalize: str, steps: int, seed: int,
                           episodes: int) -> dict[str, Any]:
    """Seed-000 process 1: SB3 evaluate_policy, then a random baseline on seeds seed + i."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = VecNormalize.load(vecnormalize, DummyVecEnv(
        [lambda: Monitor(gym.make(common.ENV_ID, max_episode_steps=steps))]))
    venv.training, venv.norm_reward = False, False
    venv.seed(seed)
    model = PPO.load(checkpoint, device="cpu")
    returns, _ = evaluate_policy(model, venv, n_eval_episodes=episodes, deterministic=True,
                                 return_episode_rewards=True)
    assert isinstance(returns, list)  # per episode, as asked
    env, baseline = gym.make(common.ENV_ID, max_episode_steps=steps), []
    for i in range(episodes):
        env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
        total, done = 0.0, False
        while not done:
            _, reward, term, trunc, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), term or trunc
        baseline.append(total)
    return {"policy_returns": [float(r) for r in returns], "baseline_returns": baseline}


def seed000_video_child(checkpoint: str, vecnormalize: str, steps: int, seed: int, width: int,
                        height: int, out: str) -> dict[str, Any]:
    """Seed-000 process 2: replay episode 0 by re-running the policy, keep every frame, then
    encode the list."""
    import resource

    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rolltape.pass2.encode import open_writer

    venv = VecNormalize.load(vecnormalize, DummyVecEnv([lambda: gym.make(
        common.ENV_ID, max_episode_steps=steps, render_mode="rgb_array", width=width,
        height=height)]))
    venv.training, venv.norm_reward = False, False
    model = PPO.load(checkpoint, device="cpu")
    venv.seed(seed)
    obs: Any = venv.reset()
    frames = [venv.render()]
    for _ in range(steps):
        action, _ = model.predict(obs, deterministic=True)
        obs, _, dones, _ = venv.step(action)
        if dones[0]:
            break  # the VecEnv has already reset: its next frame is a new episode
        frames.append(venv.render())
    with open_writer(out, fps=venv.envs[0].metadata["render_fps"], overwrite=True) as writer:
        for frame in frames:
            assert frame is not None  # render_mode="rgb_array" draws every time
            writer.write(frame)
    venv.close()
    return {"frames": len(frames),
            "video_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_end_to_end(ctx: common.Context) -> dict[str, Any]:
    """evaluate() with a baseline and one verified video vs the seed-000 way.

    rolltape runs with its defaults for everything not named here: 1 pass-1 worker,
    quality full, render_workers 0 (one per core, so the one video is split across them),
    the report and notebook written."""
    return _versus_seed000(ctx, ctx.config.e2e_steps, "end to end")


def bench_small_job(ctx: common.Context) -> dict[str, Any]:
    """Seed 000's own workload, end to end from a cold interpreter each: ``rolltape eval``
    (Pusher-v5 PPO + VecNormalize, 30 episodes + a 30-episode random baseline of 100 steps,
    one verified 640x480 video) vs seed 000's own script doing the same
    (:mod:`rolltape.bench.seed000`), interleaved (A B B A ...), medians compared."""
    import importlib.util
    import sys

    # seed 000's script runs as a file in a fresh interpreter: found, not imported here
    found = importlib.util.find_spec("rolltape.bench.seed000")
    assert found is not None and found.origin is not None  # a module of this package
    script = found.origin
    cfg = ctx.config
    episodes, steps = (cfg.e2e_episodes, cfg.e2e_steps) if cfg.quick else (30, None)
    reps = 1 if cfg.quick else 3
    ckpt, vecnorm = ctx.checkpoint(SMALL_ENV_ID)
    backends = ctx.backends()
    limit = [] if steps is None else ["--max-episode-steps", str(steps)]
    walls: dict[str, list[float]] = {"rolltape": [], "seed000": []}
    runs: list[dict[str, Any]] = []
    old: dict[str, Any] = {}
    for _, who in common.interleaved(reps, ("rolltape", "seed000")):
        folder = ctx.dir(f"small-{who}")
        started = time.perf_counter()
        if who == "rolltape":  # the command a user types, in a fresh interpreter
            proc = subprocess.run(python_command(
                "import sys\nfrom rolltape.cli import main\nsys.argv[0] = 'rolltape'\n"
                "sys.exit(main())", "eval", SMALL_ENV_ID, "--policy", f"sb3:{ckpt}",
                "--vecnormalize", str(vecnorm), "--episodes", str(episodes),
                "--baseline", "random", "--seed", str(common.SEED), "--video", "1",
                "--width", str(cfg.width), "--height", str(cfg.height),
                "--backends", ",".join(backends), *limit, "--out", str(folder / "run"),
                "-q", guard=False), cwd=folder, env=common.child_env(), capture_output=True,
                text=True, timeout=1800)
            walls[who].append(time.perf_counter() - started)
            if proc.returncode != 0:
                raise RuntimeError(f"rolltape eval exited with status {proc.returncode}:"
                                   f"\n{proc.stderr[-3000:]}")
            runs.append(json.loads((folder / "run" / "metadata.json").read_text()))
            runs[-1]["results"] = json.loads((folder / "run" / "results.json").read_text())
        else:  # seed 000's script: its function called from a fresh interpreter
            request = {"env_id": SMALL_ENV_ID, "model": str(ckpt),
                       "vecnormalize": str(vecnorm), "video": str(folder / "replay.mp4"),
                       "episodes": episodes, "random_episodes": episodes,
                       "eval_seed": common.SEED, "random_seed": common.SEED,
                       "replay_seed": common.SEED,
                       "width": cfg.width, "height": cfg.height, "backends": backends,
                       "max_episode_steps": steps, "result": str(folder / "result.json")}
            proc = subprocess.run([sys.executable, script, json.dumps(request)],
                                  cwd=folder, env=common.child_env(), capture_output=True,
                                  text=True, timeout=1800)
            walls[who].append(time.perf_counter() - started)
            if proc.returncode != 0:
                raise RuntimeError(f"seed 000's script exited with status "
                                   f"{proc.returncode}:\n{proc.stderr[-3000:]}")
            old = json.loads((folder / "result.json").read_text())
    ratio = common.median(walls["rolltape"]) / common.median(walls["seed000"])
    last = runs[-1]
    video = last["results"]["videos"][0]
    return common.result(
        title="small job (seed 000's workload)", ratio=ratio, target=0.8, op="<=",
        gating=False,
        ratio_of="wall time of `rolltape eval` / seed 000's script, each a fresh interpreter "
                 "(median of interleaved runs)",
        baseline=f"seed 000's script {common.median(walls['seed000']):.2f} s",
        measured=f"rolltape eval {common.median(walls['rolltape']):.2f} s",
        raw={"env": SMALL_ENV_ID, "episodes": episodes, "steps": steps or 100, "reps": reps,
             "size": [cfg.width, cfg.height], "wall_s": walls,
             "rolltape_timings": [r["timings"] for r in runs],
             "rolltape_video": {k: video.get(k) for k in ("frames", "verified", "segments")},
             "rolltape_render_workers": last["config"]["render_workers"],
             "seed000": old, "cpu_count": os.cpu_count()},
        notes=[f"{episodes} episodes + {episodes}-episode random baseline of "
               f"{steps or 100} steps + one {cfg.width}x{cfg.height} verified video, "
               f"{reps} interleaved repetition(s); rolltape also writes tapes, statistics, "
               "report.html and report.ipynb",
               f"seed 000's script (two fresh interpreters, one after the other): evaluation "
               f"{old['timings']['evaluate_s']:.2f} s, render + encode "
               f"{old['timings']['render_s']:.2f} s in its last run",
               f"rolltape's last run: pass 1 {last['timings']['pass1_s']:.2f} s, pass 2 "
               f"{last['timings'].get('pass2_s', float('nan')):.2f} s; video "
               f"{video.get('frames')} frames, verified {video.get('verified')}",
               common.POLICY_NOTE])


def _versus_seed000(ctx: common.Context, steps: int, title: str) -> dict[str, Any]:
    """The comparison for ``steps``, run once per bench run."""
    if ("seed000", steps) not in ctx.results:
        ctx.results[("seed000", steps)] = _measure_versus_seed000(ctx, steps)
    return {**ctx.results[("seed000", steps)], "title": title}


def _measure_versus_seed000(ctx: common.Context, steps: int) -> dict[str, Any]:
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()

    def rolltape(render_early: bool, video: int = 1) -> tuple[Any, float, list[dict[str, Any]]]:
        started = time.perf_counter()
        with common.track_workers() as workers:
            run = evaluate(common.ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                           episodes=cfg.e2e_episodes, seed=common.SEED, baseline="random",
                           max_episode_steps=steps, video=video, width=cfg.width,
                           height=cfg.height, out=ctx.dir(f"rolltape-early{render_early}"),
                           overwrite=True, render_early=render_early)
        return run, time.perf_counter() - started, workers

    # Pass 1 alone first: render workers started beside it (warm) must not slow it.
    no_video, _, _ = rolltape(render_early=False, video=0)
    run, wall, workers = rolltape(render_early=False)
    early, early_wall, _ = rolltape(render_early=True)
    pass1_kept = no_video.metadata["timings"]["pass1_s"] / common.run_seconds(run, "pass1_s")
    same = [e.ret for e in run.results.episodes] == [e.ret for e in early.results.episodes]
    render_workers = run.metadata["config"]["render_workers"]
    folder = ctx.dir("seed000")
    old = seed000_way(ckpt, vecnorm, cfg.e2e_episodes, steps, common.SEED, cfg.width,
                      cfg.height, folder / "episode0.mp4", folder, ctx.backend)
    video = run.results.videos[0]
    render_peak = max((w["peak_rss_kb"] or 0 for w in workers
                       if w["target"] == "render_worker"), default=0) / 1024
    return common.result(
        title="", ratio=wall / old["wall_s"], target=0.8, op="<=", gating=False,
        ratio_of="rolltape evaluate() wall time / seed-000 way wall time",
        baseline=f"seed-000 way {old['wall_s']:.1f} s",
        measured=f"rolltape.evaluate {wall:.1f} s",
        raw={"episodes": cfg.e2e_episodes, "steps": steps,
             "size": [cfg.width, cfg.height], "rolltape_wall_s": wall,
             "rolltape_timings": run.metadata["timings"], "rolltape_video": {
                 k: video.get(k) for k in ("frames", "backend", "verified", "seconds",
                                           "segments")},
             "rolltape_render_workers": render_workers, "cpu_count": os.cpu_count(),
             "pass1_no_video_s": no_video.metadata["timings"]["pass1_s"],
             "pass1_kept_ratio": pass1_kept,
             "rolltape_render_peak_rss_mb": render_peak, "seed000": old,
             "render_early_wall_s": early_wall, "render_early_ratio": early_wall / old["wall_s"],
             "render_early_timings": early.metadata["timings"],
             "render_early_same_returns": same},
        notes=[f"{cfg.e2e_episodes} episodes + {cfg.e2e_episodes}-episode random baseline + one "
               f"{cfg.width}x{cfg.height} video of episode 0; rolltape also writes tapes, "
               "statistics, report.html and report.ipynb and verifies the replay; the "
               "seed-000 way verifies nothing",
               f"rolltape's defaults: render_workers={render_workers} (0: one per core, "
               f"{os.cpu_count()} here), so the video was drawn in "
               f"{video.get('segments')} segment(s); pass 1 on 1 worker, quality full",
               f"pass 1 with render workers starting beside it took "
               f"{run.metadata['timings']['pass1_s']:.2f} s, without a video "
               f"{no_video.metadata['timings']['pass1_s']:.2f} s (kept {pass1_kept:.3f}x; "
               "target >= 0.97)",
               f"memory while drawing: rolltape's render worker peaked at {render_peak:.0f} MB, "
               f"the seed-000 video process (all frames in a list) at "
               f"{old['video_peak_rss_mb']:.0f} MB",
               f"with --render-early (opt-in: pass 2 on episode 0's tape beside pass 1): "
               f"{early_wall:.1f} s, ratio {early_wall / old['wall_s']:.3f}; pass 2 began "
               f"{early.metadata['timings']['pass2_started_after_s']:.1f} s in, pass 1 took "
               f"{early.metadata['timings']['pass1_s']:.1f} s (without: "
               f"{run.metadata['timings']['pass1_s']:.1f} s); returns "
               f"{'identical' if same else 'DIFFERENT'}", common.POLICY_NOTE])

