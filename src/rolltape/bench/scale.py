"""More workers and other executors: pass 1 on 2 workers (``pass1_workers``, its tapes
bitwise identical to 1 worker's), Ray against the local executor (``ray_vs_local``), pass 2
on 2 render workers (``pass2_workers``) and one video split across them (``pass2_segments``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import rolltape.bench.common as common


def bench_pass1_workers(ctx: common.Context) -> dict[str, Any]:
    """Pass-1 time with workers=1 vs workers=2 (PPO checkpoint); the tapes must be identical.
    Also measured: the opt-in batched inference on 2 env processes, and whether batching
    changed any action's bits."""
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    setups: dict[str, dict[str, Any]] = {"1": {"workers": 1}, "2": {"workers": 2},
              "batched2": {"workers": 2, "batched_inference": True}}
    pass1: dict[str, list[float]] = {k: [] for k in setups}
    walls: dict[str, list[float]] = {k: [] for k in setups}
    loops: dict[str, list[float]] = {k: [] for k in setups}
    cpu: dict[str, list[float]] = {k: [] for k in setups}
    tapes: dict[str, list[Path]] = {}
    for _, name in common.interleaved(cfg.workers_reps, list(setups)):
        started = time.perf_counter()
        with common.track_workers() as spawned:
            run = evaluate(common.ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                           episodes=cfg.workers_episodes, seed=common.SEED,
                           max_episode_steps=cfg.workers_steps, out=ctx.dir(f"workers{name}"),
                           overwrite=True, report=False, **setups[name])
        walls[name].append(time.perf_counter() - started)
        pass1[name].append(common.run_seconds(run, "pass1_s"))
        rows = run.results.episodes
        loops[name].append(sum(e.wall_s for e in rows))
        cpu[name].append(sum(w["cpu_s"] or 0.0 for w in spawned
                             if w["target"] == "policy_worker"))
        tapes.setdefault(name, [run.tape_path(e) for e in rows])
    problems = common.compare_tapes(tapes["1"], tapes["2"])
    identical = not problems
    if not identical:  # a correctness failure, not a slow run: make it an error
        raise AssertionError(f"tapes of workers=1 and workers=2 differ: {problems[:5]} "
                             f"(pass1_s workers=1 {pass1['1']}, workers=2 {pass1['2']})")
    one, two, batched = (common.median(pass1[k]) for k in setups)
    start_up = one - common.median(loops["1"])
    same_actions, action_diff = _action_bits(tapes["1"], tapes["batched2"])
    return common.result(
        title="pass 1 on 2 workers", ratio=one / two, target=1.7, op=">=",
        ratio_of="median pass1_s with workers=1 / with workers=2 (a speed-up; worker start "
                 "included)",
        baseline=f"workers=1: pass 1 {one:.2f} s",
        measured=f"workers=2: pass 1 {two:.2f} s; batched on 2 envs {batched:.2f} s",
        raw={"episodes": cfg.workers_episodes, "steps": cfg.workers_steps,
             "reps": cfg.workers_reps, "pass1_s_workers1": pass1["1"],
             "pass1_s_workers2": pass1["2"], "pass1_s_batched2": pass1["batched2"],
             "wall_s_workers1": walls["1"], "wall_s_workers2": walls["2"],
             "episode_loops_s_workers1": loops["1"], "episode_loops_s_workers2": loops["2"],
             "worker_cpu_s_workers1": cpu["1"], "worker_cpu_s_workers2": cpu["2"],
             "worker_cpu_s_batched2": cpu["batched2"],
             "startup_s_workers1": start_up, "tapes_compared": len(tapes["1"]),
             "tapes_identical": identical, "batched2_speedup": one / batched,
             "batched2_tapes_with_identical_actions": same_actions,
             "batched2_max_abs_action_diff": action_diff},
        notes=[f"{cfg.workers_episodes} episodes x {cfg.workers_steps} steps, report=False; "
               f"all {len(tapes['1'])} tapes bitwise identical between workers=1 and workers=2 "
               "(every array; the header's wall_s differs by nature)",
               f"workers=1 spends ~{start_up:.1f} s of its {one:.1f} s outside episodes "
               "(spawning the worker, importing torch, loading the policy); two workers pay "
               "that at once, on 2 cores, so the speed-up grows with the episode count",
               f"opt-in --batched-inference on 2 env processes: {one / batched:.2f}x workers=1; "
               f"{same_actions}/{len(tapes['1'])} tapes kept every action bit (largest "
               f"difference {action_diff:.2g}), which is why it is not the default",
               common.POLICY_NOTE])


def _action_bits(reference: list[Path], other: list[Path]) -> tuple[int, float]:
    """How many tapes have bitwise the same actions, and the largest action difference
    (compared over the common prefix where episodes differ in length)."""
    import numpy as np

    from rolltape.tape import Tape

    same, worst = 0, 0.0
    for a_path, b_path in zip(reference, other):
        a, b = Tape.load(a_path).actions, Tape.load(b_path).actions
        same += a.shape == b.shape and bool(np.array_equal(a, b))
        n = min(len(a), len(b))
        worst = max(worst, float(np.abs(a[:n].astype(np.float64) - b[:n]).max()))
    return same, worst



def pass1_executor_child(executor: str, episodes: int, steps: int, seed: int, workers: int,
                         out: str) -> dict[str, Any]:
    """(In a fresh child.) rolltape.evaluate with the random policy and ``executor``; with
    Ray, ray.init (inside evaluate) and ray.shutdown are part of this process's time."""
    started = time.perf_counter()
    from rolltape.evaluation import evaluate

    imported = time.perf_counter()
    run = evaluate(common.ENV_ID, "random", episodes=episodes, seed=seed, max_episode_steps=steps,
                   workers=workers, executor=executor, out=out, overwrite=True, report=False)
    evaluated = time.perf_counter()
    if executor == "ray":
        import ray

        ray.shutdown()
    rows = run.results.episodes
    return {"import_s": imported - started, "evaluate_s": evaluated - imported,
            "pass1_s": common.run_seconds(run, "pass1_s"),
            "shutdown_s": time.perf_counter() - evaluated,
            "returns": [e.ret for e in rows], "lengths": [e.length for e in rows]}


def bench_ray_vs_local(ctx: common.Context) -> dict[str, Any]:
    """The same pass-1 workload with the local executor vs Ray, each from a fresh process."""
    cfg = ctx.config
    runs: dict[str, dict[str, Any]] = {}
    for executor in ("local", "ray"):
        folder = ctx.dir(f"executor-{executor}")
        result, wall = common.run_child(pass1_executor_child, {
            "executor": executor, "episodes": cfg.ray_episodes, "steps": cfg.ray_steps,
            "seed": common.SEED, "workers": 2, "out": str(folder / "run")}, folder)
        shutil.rmtree(folder / "run", ignore_errors=True)  # ~0.4 MB a 1000-step tape
        runs[executor] = {"wall_s": wall, **result}
    local, ray = runs["local"], runs["ray"]
    same = local["returns"] == ray["returns"] and local["lengths"] == ray["lengths"]
    for r in runs.values():
        del r["returns"], r["lengths"]
    gating = not cfg.quick
    return common.result(
        title="Ray executor vs local", ratio=ray["wall_s"] / local["wall_s"], target=1.15,
        op="<=", gating=gating,
        ratio_of="wall time of a fresh process running rolltape.evaluate(executor='ray') / "
                 "the same with executor='local' (Ray start and shutdown included)",
        baseline=f"local {local['wall_s']:.1f} s",
        measured=f"ray {ray['wall_s']:.1f} s",
        raw={"episodes": cfg.ray_episodes, "steps": cfg.ray_steps, "workers": 2,
             "local": local, "ray": ray, "same_returns_and_lengths": same},
        notes=[f"{cfg.ray_episodes} random-policy episodes x {cfg.ray_steps} steps, "
               f"workers=2, report=False; pass1_s (Ray already up) local "
               f"{local['pass1_s']:.1f} s, ray {ray['pass1_s']:.1f} s; Ray's start-up and "
               f"shutdown: {ray['evaluate_s'] - ray['pass1_s'] + ray['shutdown_s']:.1f} s",
               f"episode returns and lengths {'identical' if same else 'DIFFER'} between "
               "the executors"]
        + ([] if gating else ["informational in --quick: Ray's start-up (seconds) dominates "
                              "a tiny run"]))



def bench_pass2_workers(ctx: common.Context) -> dict[str, Any]:
    """Render 2 tapes on K=1 vs K=2 render workers (no splitting)."""
    from rolltape.pass2.request import RenderRequest

    cfg = ctx.config
    tapes = ctx.random_tapes(cfg.p2_workers_steps, 2)
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for _, k in common.interleaved(cfg.p2_workers_reps, (1, 2)):
        folder = ctx.dir(f"k{k}")
        results, wall, cpu = common.timed_render([RenderRequest(
            str(t), (str(folder / f"{i}.mp4"),), width=cfg.width, height=cfg.height,
            overwrite=True) for i, t in enumerate(tapes)], ctx.backends(), workers=k,
            split=False)
        runs[k].append({"wall_s": wall, "cpu_s": cpu,
                        "worker_s": [r.seconds for r in results],
                        "frames": sum(r.frames for r in results)})
    one, two = (common.median([r["wall_s"] for r in runs[k]]) for k in (1, 2))
    cpu1, cpu2 = (common.median([r["cpu_s"] for r in runs[k]]) for k in (1, 2))
    return common.result(
        title="pass 2 on 2 render workers", ratio=one / two, target=1.7, op=">=",
        ratio_of="median wall time of render(2 tapes, workers=1) / render(2 tapes, workers=2), "
                 "split=False (a speed-up)",
        baseline=f"K=1 {one:.1f} s", measured=f"K=2 {two:.1f} s",
        raw={"tapes": 2, "steps_each": cfg.p2_workers_steps, "size": [cfg.width, cfg.height],
             "quality": "full", "reps": cfg.p2_workers_reps, "k1": runs[1], "k2": runs[2],
             "cpu_s_k1": cpu1, "cpu_s_k2": cpu2,
             "cpu_per_wall_k1": cpu1 / one, "cpu_per_wall_k2": cpu2 / two},
        notes=[f"2 tapes x {cfg.p2_workers_steps + 1} frames at {cfg.width}x{cfg.height}, "
               f"quality full, mp4; render workers' CPU time (all threads): K=1 {cpu1:.1f} s "
               f"in {one:.1f} s wall ({cpu1 / one:.2f} cores busy), K=2 {cpu2:.1f} s in "
               f"{two:.1f} s ({cpu2 / two:.2f} cores): llvmpipe rasterizes on several threads, "
               "so one worker already uses part of the second core"])


def bench_pass2_segments(ctx: common.Context) -> dict[str, Any]:
    """One long episode rendered whole on one worker vs split across 2 workers and joined."""
    from rolltape.pass2.encode import count_frames
    from rolltape.pass2.request import RenderRequest

    cfg = ctx.config
    tape = ctx.random_tape(cfg.segments_steps)
    runs: dict[str, list[dict[str, Any]]] = {"unsplit": [], "split": []}
    outputs: dict[str, Path] = {}
    for _, who in common.interleaved(cfg.segments_reps, ("unsplit", "split")):
        out = ctx.dir(f"segments-{who}") / f"{who}.mp4"
        (result,), wall, cpu = common.timed_render([RenderRequest(
            str(tape), (str(out),), width=cfg.width, height=cfg.height, overwrite=True)],
            ctx.backends(), workers=1 if who == "unsplit" else 2)
        runs[who].append({"wall_s": wall, "cpu_s": cpu, "worker_s": result.seconds,
                          "frames": result.frames, "segments": result.segments})
        outputs.setdefault(who, out)
    expected = cfg.segments_steps + 1
    counted = count_frames(outputs["split"])  # decoded from the joined file itself
    frames_ok = counted == expected and all(r["frames"] == expected
                                            for rs in runs.values() for r in rs)
    one = common.median([r["wall_s"] for r in runs["unsplit"]])
    two = common.median([r["wall_s"] for r in runs["split"]])
    segments = runs["split"][0]["segments"]
    return common.result(
        title="one video split across 2 workers", ratio=one / two, target=1.6, op=">=",
        ratio_of="median wall time of render(workers=1) / render(workers=2) of one episode "
                 "(split into segments, mp4 parts joined by copying packets; a speed-up)",
        baseline=f"unsplit {one:.1f} s", measured=f"{segments} segments {two:.1f} s",
        raw={"steps": cfg.segments_steps, "size": [cfg.width, cfg.height],
             "reps": cfg.segments_reps, "unsplit": runs["unsplit"], "split": runs["split"],
             "segments": segments, "expected_frames": expected,
             "joined_frames_counted": counted, "joined_has_steps_plus_1_frames": frames_ok},
        notes=[f"{cfg.segments_steps}-step episode at {cfg.width}x{cfg.height}, quality full; "
               f"the joined video has {counted} frames (decoded; steps + 1 = {expected}: "
               f"{'yes' if frames_ok else 'NO'})", "each segment encodes its own mp4 part; "
               "the parts are joined without re-encoding (tests check that the frames are as "
               "close to the drawn ones as an unsplit video's)"])

