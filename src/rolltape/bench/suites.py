"""Benchmark suites: a 4-task suite on 2 workers vs 1 (``suite_workers``; tasks dealt to
the same workers, so none idles, and the tapes bitwise identical) and the cost of the
suite's aggregation and ``eval_info.json`` against its pass 1 (``suite_aggregation``).

The suite is the built-in ``mazes`` (PointMaze, Gymnasium-Robotics: the ``suites`` extra),
4 tasks x 25 episodes of 1000 steps, random policy (``--quick``: 2 episodes of 30 steps).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import rolltape.bench.common as common

SUITE = "mazes"


def _sizes(ctx: common.Context) -> tuple[int, int, int]:
    """(episodes per task, steps per episode, interleaved repetitions)."""
    return (2, 30, 1) if ctx.config.quick else (25, 1000, 2)


def _suite_run(ctx: common.Context, name: str, workers: int) -> Any:
    from rolltape.evaluation import evaluate

    episodes, steps, _ = _sizes(ctx)
    return evaluate(suite=SUITE, episodes=episodes, seed=common.SEED, max_episode_steps=steps,
                    workers=workers, out=ctx.dir(name), overwrite=True, report=False)


def bench_suite_workers(ctx: common.Context) -> dict[str, Any]:
    """Pass-1 time of the 4-task suite with workers=1 vs workers=2 (target: >= 1.7)."""
    episodes, steps, reps = _sizes(ctx)
    pass1: dict[int, list[float]] = {1: [], 2: []}
    tapes: dict[int, list[Path]] = {}
    for _, workers in common.interleaved(reps, (1, 2)):
        run = _suite_run(ctx, f"suite-workers{workers}", workers)
        pass1[workers].append(run.metadata["timings"]["pass1_s"])
        tapes.setdefault(workers, [run.tape_path(e) for e in run.results.episodes])
    problems = common.compare_tapes(tapes[1], tapes[2])
    if problems:  # a correctness failure, not a slow run
        raise AssertionError(f"suite tapes of workers=1 and workers=2 differ: {problems[:5]}")
    one, two = common.median(pass1[1]), common.median(pass1[2])
    return common.result(
        title="a 4-task suite on 2 workers", ratio=one / two, target=1.7, op=">=",
        ratio_of="median pass1_s of the suite with workers=1 / with workers=2 (a speed-up)",
        baseline=f"workers=1: pass 1 {one:.2f} s", measured=f"workers=2: pass 1 {two:.2f} s",
        raw={"suite": SUITE, "tasks": 4, "episodes_per_task": episodes, "steps": steps,
             "reps": reps, "pass1_s_workers1": pass1[1], "pass1_s_workers2": pass1[2],
             "tapes_compared": len(tapes[1]), "tapes_identical": True},
        notes=[f"built-in suite '{SUITE}' (4 PointMaze tasks) x {episodes} episodes x {steps} "
               "steps, random policy; every task's episodes dealt to the same workers in one "
               "sequence", f"all {len(tapes[1])} tapes bitwise identical for 1 and 2 workers"])


def bench_suite_aggregation(ctx: common.Context) -> dict[str, Any]:
    """Aggregation per task/suite/overall plus writing eval_info.json and results.json, vs
    the suite's pass 1 (target: <= 1%)."""
    from rolltape.files import write_json
    from rolltape.suites.results import eval_info, suite_summary

    run = _suite_run(ctx, "suite-aggregation", 2)
    results = run.results
    assert results.suite is not None  # a suite run
    tasks = [(t["suite"], t["task"]) for t in results.suite["per_task"]]
    keys = {(t["suite"], t["task"]): t["success_key"] for t in results.suite["per_task"]}
    times = []
    for _ in range(5):
        started = time.perf_counter()
        summary = suite_summary(results.episodes, results.baseline, tasks, keys)
        info = eval_info(summary, results.episodes, results.videos, 1.0)
        write_json(run.path / "eval_info.json", info)
        replace(run, results=replace(results, suite=summary)).write()
        times.append(time.perf_counter() - started)
    spent, pass1 = common.median(times), run.metadata["timings"]["pass1_s"]
    return common.result(
        title="suite aggregation and eval_info.json", ratio=spent / pass1, target=0.01,
        op="<=", ratio_of="median seconds to aggregate and write eval_info.json + "
                          "results.json / the suite's pass1_s",
        baseline=f"pass 1 of the suite (2 workers): {pass1:.2f} s",
        measured=f"aggregation + writing: {spent * 1000:.1f} ms",
        raw={"aggregate_s": times, "pass1_s": pass1, "episodes": len(results.episodes)},
        notes=["the stratified bootstrap of the unweighted mean of task rates (2000 "
               "resamples per suite and overall) and the per-task return bootstrap are "
               "included"])
