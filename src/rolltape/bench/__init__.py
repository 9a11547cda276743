"""``rolltape bench``: rolltape's speed and memory targets, each measured as a ratio against a
baseline that runs in the same invocation, on the same machine, right beside it.

Timed unit tests are flaky because machines differ; a ratio against a baseline measured a
moment earlier (or interleaved with it: A B B A ...) is not. Every benchmark returns a dict
with the raw timings, the judged ``value`` (a ratio; a difference for memory; seconds for
the one absolute budget, ``report_build``), the ``target`` and whether it was met;
:func:`run` writes them all to ``bench.json`` and draws ``bench.png``.

Benchmarks (:data:`BENCHMARKS`):

- ``pass1_overhead``: :func:`rolltape.rollout.record_episode` vs a bare act/step loop on the
  same env and policy (target: record / bare <= 1.05).
- ``pass1_video_requested``: pass-1 time of :func:`rolltape.evaluate` with ``video=0`` vs
  ``video=1`` (target: speed ratio >= 0.97); for contrast, rendering inline every step.
- ``pass1_workers``: pass-1 time with ``workers=1`` vs ``workers=2`` (target: speed-up
  >= 1.7); the tapes of both must be bitwise identical (checked, an error otherwise).
- ``ray_vs_local``: a fresh process running :func:`rolltape.evaluate` with
  ``executor="ray"`` vs ``"local"``, Ray's start and shutdown included (target: <= 1.15;
  informational in ``--quick``).
- ``pass2_throughput``: frames/s of :func:`rolltape.render` vs a bare render+encode loop in a
  subprocess with the same ``MUJOCO_GL`` (target: >= 0.9).
- ``render_quality``: frames/s of :func:`rolltape.render` at each ``quality`` preset and of
  the bare loop (target: fast >= 6x full).
- ``pass2_workers``: two tapes rendered on 1 vs 2 render workers (target: >= 1.7).
- ``pass2_segments``: one episode rendered whole vs split across 2 workers and joined
  (target: >= 1.6; the joined video must have steps + 1 frames).
- ``render_rss``: peak RSS of the render worker for a short vs a long episode
  (target: difference <= 50 MB).
- ``gif_vs_mp4``: writing the same real frames as gif vs mp4 (target: <= 2.0).
- ``report_build``: :func:`rolltape.report.build_report` on a 100-episode run with 3 videos
  (target: <= 10 s, an absolute budget, not a ratio).
- ``pass1_vs_sb3_evaluate_policy``: pass 1 vs SB3's ``evaluate_policy`` (informational in ``--quick``).
- ``end_to_end``: :func:`rolltape.evaluate` with its defaults vs "the seed-000 way"
  (informational).

The policy is an untrained SB3 PPO ``MlpPolicy`` (64x64) with fresh VecNormalize statistics,
made in a temporary folder: its inference cost is the same as a trained one's.

Example:
    >>> report = run(quick=True, out="bench-out")          # or: rolltape bench --quick
    >>> report["benchmarks"]["pass1_overhead"]["ratio"]
    1.02...
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rolltape.errors import UsageError

ENV_ID = "HalfCheetah-v5"
SEED = 1000
BENCH_SCHEMA_VERSION = 1
POLICY_NOTE = ("policy: SB3 PPO MlpPolicy (64x64), UNTRAINED, with fresh VecNormalize "
               "statistics; its inference cost is identical to a trained one's")


@dataclass(frozen=True)
class Config:
    """Sizes of one bench run: :data:`FULL` for real numbers, :data:`QUICK` for tests."""

    quick: bool
    width: int  # frames of pass 2 and of every render baseline
    height: int
    overhead_episodes: int  # pass1_overhead: repetitions of each of A (bare) and B (record)
    overhead_steps: int
    video_episodes: int  # pass1_video_requested: episodes per evaluate()
    video_steps: int
    video_reps: int  # interleaved repetitions of video=0 / video=1
    video_size: tuple[int, int]  # pass 2 of the video=1 run (pass-1 time cannot depend on it)
    inline_steps: int  # the inline-render contrast
    throughput_steps: int
    throughput_reps: int  # interleaved repetitions of rolltape / bare
    rss_short: int  # steps of the short / long tape
    rss_long: int
    sb3_episodes: int
    sb3_steps: int
    sb3_reps: int
    e2e_episodes: int
    e2e_steps: int
    quality_steps: int  # render_quality: tape steps (frames = steps + 1) drawn per preset
    quality_reps: int  # interleaved repetitions of bare, full, balanced, fast
    workers_episodes: int  # pass1_workers: episodes per evaluate() (PPO checkpoint)
    workers_steps: int
    workers_reps: int  # interleaved repetitions of workers=1 / workers=2
    p2_workers_steps: int  # pass2_workers: steps of each of the 2 tapes
    p2_workers_reps: int  # interleaved repetitions of K=1 / K=2
    segments_steps: int  # pass2_segments: steps of the one episode
    segments_reps: int  # interleaved repetitions of unsplit / split
    ray_episodes: int  # ray_vs_local: random-policy episodes, 2 workers
    ray_steps: int
    gif_frames: int  # gif_vs_mp4: real frames, held in memory
    gif_reps: int  # interleaved repetitions of mp4 / gif
    report_episodes: int  # report_build: episodes (and baseline episodes) of 50 steps


FULL = Config(quick=False, width=640, height=480, overhead_episodes=7, overhead_steps=1000,
              video_episodes=5, video_steps=1000, video_reps=3, video_size=(64, 48),
              inline_steps=1000, throughput_steps=1000, throughput_reps=2, rss_short=1000, rss_long=5000,
              sb3_episodes=30, sb3_steps=1000, sb3_reps=2, e2e_episodes=30, e2e_steps=1000,
              quality_steps=199, quality_reps=2, workers_episodes=120, workers_steps=1000,
              workers_reps=2, p2_workers_steps=300, p2_workers_reps=2, segments_steps=1000,
              segments_reps=2, ray_episodes=1500, ray_steps=1000, gif_frames=100, gif_reps=3,
              report_episodes=100)
# Quick: seconds, for tests. MuJoCo on llvmpipe pays ~40 ms a frame whatever the size (the
# 4096x4096 shadow map), so frames are few; 160x120 trims the rest.
QUICK = Config(quick=True, width=160, height=120, overhead_episodes=2, overhead_steps=200,
               video_episodes=1, video_steps=20, video_reps=1, video_size=(64, 48),
               inline_steps=20, throughput_steps=30, throughput_reps=1, rss_short=30, rss_long=80,
               sb3_episodes=2, sb3_steps=50, sb3_reps=1, e2e_episodes=3, e2e_steps=20,
               quality_steps=19, quality_reps=1, workers_episodes=4, workers_steps=100,
               workers_reps=1, p2_workers_steps=40, p2_workers_reps=1, segments_steps=100,
               segments_reps=1, ray_episodes=4, ray_steps=100, gif_frames=20, gif_reps=2,
               report_episodes=20)


# --------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------

class Context:
    """What the benchmarks of one run share: the config, a scratch folder, the checkpoint."""

    def __init__(self, config: Config, work: Path, log: Callable[[str], None],
                 backend: str = "egl") -> None:
        self.config = config
        self.work = work
        self.log = log
        self.backend = backend
        self._checkpoint: tuple[Path, Path] | None = None
        self.tapes: dict[tuple[int, int], list[Path]] = {}  # (steps, n) -> random tapes
        self._n = 0

    def dir(self, name: str) -> Path:
        """A new, empty folder under the scratch folder."""
        self._n += 1
        path = self.work / f"{self._n:02d}-{name}"
        path.mkdir(parents=True)
        return path

    def checkpoint(self) -> tuple[Path, Path]:
        """(model.zip, vecnormalize.pkl) of an untrained PPO MlpPolicy, made once per run."""
        if self._checkpoint is None:
            self.log("making an untrained PPO MlpPolicy checkpoint + VecNormalize stats")
            self._checkpoint = make_checkpoint(self.dir("checkpoint"))
        return self._checkpoint


def make_checkpoint(folder: Path) -> tuple[Path, Path]:
    """Save an untrained PPO (default 64x64 MlpPolicy) and fresh VecNormalize statistics."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rolltape.envs import env_spec, make_env

    torch.set_num_threads(1)
    venv = VecNormalize(DummyVecEnv([lambda: make_env(env_spec(ENV_ID))]), norm_obs=True,
                        norm_reward=True)
    model = PPO("MlpPolicy", venv, seed=0, device="cpu")
    model.save(folder / "model.zip")
    venv.save(str(folder / "vecnormalize.pkl"))
    venv.close()
    return folder / "model.zip", folder / "vecnormalize.pkl"


_CHILD = """
import json, sys
from rolltape import bench
result = getattr(bench, sys.argv[1])(**json.loads(sys.argv[2]))
with open(sys.argv[3], "w") as f:
    json.dump(result, f)
"""


def run_child(fn: str, kwargs: dict[str, Any], cwd: Path, gl: str | None = None,
              timeout: float = 3600.0) -> tuple[dict[str, Any], float]:
    """Run ``bench.<fn>(**kwargs)`` in a fresh interpreter (with ``gl`` as MUJOCO_GL, or none)
    and return its JSON result and the process's wall time, start-up and imports included."""
    from rolltape.pass2.backends import gl_environment

    env = dict(os.environ)
    for var in ("MUJOCO_GL", "PYOPENGL_PLATFORM"):
        env.pop(var, None)
    if gl is not None:
        env.update(gl_environment(gl))
    result_file = cwd / f"{fn}.result.json"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, fn, json.dumps(kwargs),
                           str(result_file)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    wall = time.perf_counter() - started
    if proc.returncode != 0 or not result_file.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"bench child {fn} exited with status {proc.returncode}:\n{tail}")
    return json.loads(result_file.read_text()), wall


def _vmhwm_kb(pid: int) -> int | None:
    """Peak resident set size (VmHWM, kB) of a live process, from /proc; None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def track_workers(poll_s: float = 0.05) -> Iterator[list[dict[str, Any]]]:
    """Record every worker rolltape spawns (pass 1 and render), its peak RSS and CPU time.

    Wraps ``spawn_worker``/``stop_worker`` where rolltape's modules look them up, reads each
    worker's VmHWM and CPU time every ``poll_s`` and once more just before it is stopped
    (when it has finished all its work).
    """
    import importlib

    from rolltape.executors import launch as executors

    # Wherever rolltape looks them up by name (by module name: the package's own
    # ``evaluate``/``render`` attributes are the functions).
    modules = [importlib.import_module(f"rolltape.{name}")
               for name in ("executors.local", "evaluate")]
    workers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def read(entry: dict[str, Any]) -> None:
        kb = _vmhwm_kb(entry["pid"])
        if kb is not None:
            entry["peak_rss_kb"] = max(entry["peak_rss_kb"] or 0, kb)
        cpu = _cpu_s(entry["pid"])
        if cpu is not None:
            entry["cpu_s"] = max(entry["cpu_s"] or 0.0, cpu)

    def spawn(target: Callable[..., None], *args: Any, env: Any = None, **options: Any) -> Any:
        worker = executors.spawn_worker(target, *args, env=env, **options)
        with lock:
            workers.append({"pid": worker.proc.pid, "target": target.__name__,
                            "env": {k: v for k, v in (env or {}).items()},
                            "peak_rss_kb": None, "cpu_s": None, "alive": True})
        return worker

    def last_read(stopping: list[Any]) -> None:
        with lock:
            for entry in workers:
                if entry["alive"] and any(entry["pid"] == w.proc.pid for w in stopping):
                    read(entry)
                    entry["alive"] = False

    def stop(worker: Any, grace: float = 2.0) -> None:
        last_read([worker])
        executors.stop_worker(worker, grace)

    def stop_all(stopping: Any, grace: float = 2.0) -> None:
        stopping = [w for w in stopping if w is not None]
        last_read(stopping)
        executors.stop_workers(stopping, grace)

    done = threading.Event()

    def poll() -> None:
        while not done.wait(poll_s):
            with lock:
                for entry in workers:
                    if entry["alive"]:
                        read(entry)

    patched = [(mod, name, getattr(mod, name)) for mod in modules
               for name in ("spawn_worker", "stop_worker", "stop_workers") if hasattr(mod, name)]
    replacements = {"spawn_worker": spawn, "stop_worker": stop, "stop_workers": stop_all}
    for mod, name, _ in patched:
        setattr(mod, name, replacements[name])
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield workers
    finally:
        done.set()
        poller.join()
        for mod, name, original in patched:
            setattr(mod, name, original)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _result(*, title: str, ratio: float, target: float, op: str, gating: bool = True,
            value: float | None = None, unit: str = "x", ratio_of: str, baseline: str,
            measured: str, raw: dict[str, Any], notes: Sequence[str] = ()) -> dict[str, Any]:
    """The dict every benchmark returns; ``value`` (the ratio unless given) is judged."""
    judged = ratio if value is None else value
    passed = judged <= target if op == "<=" else judged >= target
    return {"title": title, "ratio": float(ratio), "ratio_of": ratio_of, "value": float(judged),
            "unit": unit, "target": float(target), "op": op, "passed": bool(passed),
            "gating": gating, "baseline": baseline, "measured": measured, "raw": raw,
            "notes": list(notes)}


# --------------------------------------------------------------------------------------
# 1. pass1_overhead
# --------------------------------------------------------------------------------------

def bench_pass1_overhead(ctx: Context) -> dict[str, Any]:
    """record_episode vs a bare policy.act + env.step loop, same env, policy and seeds."""
    from rolltape.envs import env_spec, make_env
    from rolltape.policies import load_policy
    from rolltape.pass1.rollout import record_episode

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    env = make_env(env_spec(ENV_ID, max_episode_steps=cfg.overhead_steps))
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
        bare(SEED - 1)  # warm-up: torch's first calls, allocator, caches
        record(SEED - 1)
        times: dict[str, list[float]] = {"bare": [], "record": []}
        cpu: dict[str, list[float]] = {"bare": [], "record": []}
        steps = 0
        for rep in range(cfg.overhead_episodes):
            order = [("bare", bare), ("record", record)]
            for name, fn in order if rep % 2 == 0 else order[::-1]:  # A B B A ...
                started, cpu_started = time.perf_counter(), time.process_time()
                n = fn(SEED + rep)
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
            steps += n
    finally:
        env.close()
    ratio = _median(times["record"]) / _median(times["bare"])
    pairwise = [r / b for r, b in zip(times["record"], times["bare"])]
    per_step_us = (_median(times["record"]) - _median(times["bare"])) / cfg.overhead_steps * 1e6
    cpu_ratio = _median(cpu["record"]) / _median(cpu["bare"])
    return _result(
        title="pass-1 recording overhead", ratio=ratio, target=1.05, op="<=",
        ratio_of="median record_episode time / median bare-loop time",
        baseline=f"bare act+step {_median(times['bare']):.3f} s/episode",
        measured=f"record_episode {_median(times['record']):.3f} s/episode",
        raw={"episodes_each": cfg.overhead_episodes, "steps_per_episode": cfg.overhead_steps,
             "steps_each": steps, "bare_s": times["bare"], "record_s": times["record"],
             "pairwise_ratios": pairwise, "median_pairwise_ratio": _median(pairwise),
             "overhead_us_per_step": per_step_us, "bare_cpu_s": cpu["bare"],
             "record_cpu_s": cpu["record"], "cpu_time_ratio": cpu_ratio},
        notes=[f"recording costs {per_step_us:+.1f} us a step (observation digest, copies of "
               f"the action, qpos, qvel and physics state) on top of {_median(times['bare']) / cfg.overhead_steps * 1e6:.0f} us "
               "for policy.act + env.step",
               f"CPU-time ratio (process_time, insensitive to other load on the machine): "
               f"{cpu_ratio:.3f}", POLICY_NOTE])


# --------------------------------------------------------------------------------------
# 2. pass1_video_requested
# --------------------------------------------------------------------------------------

def bench_pass1_video_requested(ctx: Context) -> dict[str, Any]:
    """Pass-1 time with video=0 vs video=1; contrast: rendering inline while evaluating."""
    from rolltape.evaluate import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    vw, vh = cfg.video_size
    pass1: dict[int, list[float]] = {0: [], 1: []}
    pass1_cpu: dict[int, list[float]] = {0: [], 1: []}
    pass2: list[float] = []
    for rep in range(cfg.video_reps):
        for video in ((0, 1) if rep % 2 == 0 else (1, 0)):
            with track_workers() as workers:
                run = evaluate(ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                               episodes=cfg.video_episodes, seed=SEED,
                               max_episode_steps=cfg.video_steps, video=video, width=vw,
                               height=vh, out=ctx.dir(f"video{video}"), overwrite=True)
            pass1[video].append(run.metadata["timings"]["pass1_s"])
            pass1_cpu[video].append(sum(w["cpu_s"] or 0.0 for w in workers
                                        if w["target"] == "policy_worker"))
            if video:
                pass2.append(run.metadata["timings"]["pass2_s"])
    ratio = _median(pass1[0]) / _median(pass1[1])  # speed(video=1) / speed(video=0)
    cpu_ratio = _median(pass1_cpu[0]) / _median(pass1_cpu[1])

    inline, _ = run_child("inline_render_child", {
        "checkpoint": str(ckpt), "vecnormalize": str(vecnorm), "steps": cfg.inline_steps,
        "width": cfg.width, "height": cfg.height, "seed": SEED}, ctx.dir("inline"),
        gl=ctx.backend)
    slowdown = inline["inline_s"] / inline["bare_s"]
    return _result(
        title="pass 1 with a video requested", ratio=ratio, target=0.97, op=">=",
        ratio_of="pass-1 speed with video=1 / with video=0 (median pass1_s of video=0 / video=1)",
        baseline=f"video=0: pass 1 {_median(pass1[0]):.2f} s",
        measured=f"video=1: pass 1 {_median(pass1[1]):.2f} s",
        raw={"episodes": cfg.video_episodes, "steps": cfg.video_steps, "reps": cfg.video_reps,
             "pass1_s_video0": pass1[0], "pass1_s_video1": pass1[1], "pass2_s_video1": pass2,
             "pass1_worker_cpu_s_video0": pass1_cpu[0], "pass1_worker_cpu_s_video1": pass1_cpu[1],
             "cpu_ratio": cpu_ratio,
             "pass2_size": [vw, vh], "inline": inline, "inline_slowdown": slowdown},
        notes=[f"pass-1 time includes starting the worker (interpreter, torch import, policy "
               f"load); pass 2 of the video=1 runs drew {vw}x{vh} frames after pass 1 ended",
               f"pass-1 worker CPU time (less disturbed by other load): video=0 "
               f"{_median(pass1_cpu[0]):.2f} s, video=1 {_median(pass1_cpu[1]):.2f} s, ratio "
               f"{cpu_ratio:.3f}",
               f"contrast: {inline['label']} at {cfg.width}x{cfg.height} for "
               f"{inline['steps']} steps is {slowdown:.1f}x slower than the bare loop "
               f"({inline['inline_s']:.2f} s vs {inline['bare_s']:.2f} s, backend "
               f"{ctx.backend}, {inline['frames']} frames kept in memory, peak RSS "
               f"{inline['peak_rss_mb']:.0f} MB)", POLICY_NOTE])


def inline_render_child(checkpoint: str, vecnormalize: str, steps: int, width: int,
                        height: int, seed: int) -> dict[str, Any]:
    """(In a child with MUJOCO_GL set.) The bare loop, then the same loop drawing every step
    and keeping the frames, as Gymnasium's RecordVideo does (RecordVideo itself when moviepy
    is installed; it also encodes at the episode's end)."""
    import resource

    import gymnasium as gym

    from rolltape.policies import load_policy

    plain = gym.make(ENV_ID, max_episode_steps=steps)
    drawn = gym.make(ENV_ID, max_episode_steps=steps, render_mode="rgb_array", width=width,
                     height=height)
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
# 3. pass2_throughput
# --------------------------------------------------------------------------------------

def _random_tapes(ctx: Context, steps: int, n: int = 1) -> list[Path]:
    """``n`` random-policy HalfCheetah tapes of ``steps`` steps (seeds SEED, SEED + 1, ...;
    pass 2 does not care who acted), recorded by pass 1 once per run, size and count."""
    from rolltape.evaluate import evaluate

    if (steps, n) not in ctx.tapes:
        run = evaluate(ENV_ID, "random", episodes=n, seed=SEED, max_episode_steps=steps,
                       out=ctx.dir(f"tape{steps}x{n}"), overwrite=True, report=False)
        ctx.tapes[(steps, n)] = [run.path / row["tape"] for row in run.results["episodes_rows"]]
    return ctx.tapes[(steps, n)]


def _record_random_tape(ctx: Context, steps: int) -> Path:
    """One random-policy tape of ``steps`` steps (see :func:`_random_tapes`)."""
    return _random_tapes(ctx, steps, 1)[0]


def _backends(ctx: Context) -> tuple[str, ...]:
    """The bench's GL backend, then osmesa as rolltape's own fallback."""
    return (ctx.backend, "osmesa") if ctx.backend != "osmesa" else ("osmesa",)


def bench_pass2_throughput(ctx: Context) -> dict[str, Any]:
    """rolltape.render frames/s vs a bare render+encode loop in a subprocess (A B B A ...)."""
    from rolltape.pass2.replay import RenderRequest
    from rolltape.rendering import render

    cfg = ctx.config
    tape = _record_random_tape(ctx, cfg.throughput_steps)
    backend = ctx.backend
    runs: dict[str, list[dict[str, float]]] = {"rolltape": [], "bare": []}
    frames = 0
    for rep in range(cfg.throughput_reps):
        for who in (("rolltape", "bare") if rep % 2 == 0 else ("bare", "rolltape")):
            folder = ctx.dir(f"throughput-{who}")
            if who == "rolltape":
                started = time.perf_counter()
                with track_workers() as workers:
                    result = render([RenderRequest(
                        str(tape), (str(folder / "rolltape.mp4"),), width=cfg.width,
                        height=cfg.height, overwrite=True)],
                        backends=(backend, "osmesa") if backend != "osmesa" else ("osmesa",))[0]
                wall = time.perf_counter() - started
                assert result is not None and result.verified
                backend, frames = result.backend or backend, result.frames
                cpu = sum(w["cpu_s"] or 0.0 for w in workers if w["target"] == "render_worker")
                runs[who].append({"wall_s": wall, "loop_s": result.seconds, "cpu_s": cpu,
                                  "frames": result.frames})
            else:
                bare, wall = run_child("bare_render_child", {
                    "tape": str(tape), "width": cfg.width, "height": cfg.height,
                    "out": str(folder / "bare.mp4")}, folder, gl=backend)
                runs[who].append({"wall_s": wall, **bare})

    def rate(who: str, key: str) -> float:
        return _median([r["frames"] / r[key] for r in runs[who]])

    fps, bare_fps = rate("rolltape", "wall_s"), rate("bare", "wall_s")
    inner, bare_inner = rate("rolltape", "loop_s"), rate("bare", "loop_s")
    per_cpu, bare_per_cpu = rate("rolltape", "cpu_s"), rate("bare", "cpu_s")
    return _result(
        title="pass-2 throughput", ratio=fps / bare_fps, target=0.9, op=">=",
        ratio_of="median rolltape.render frames/s / median bare-loop frames/s (wall time of "
                 "each call, process start included on both sides)",
        baseline=f"bare loop {bare_fps:.1f} frames/s",
        measured=f"rolltape.render {fps:.1f} frames/s",
        raw={"frames": frames, "size": [cfg.width, cfg.height], "backend": backend,
             "reps": cfg.throughput_reps, "rolltape": runs["rolltape"], "bare": runs["bare"],
             "fps": fps, "bare_fps": bare_fps, "fps_in_worker": inner,
             "bare_fps_in_loop": bare_inner, "ratio_in_worker": inner / bare_inner,
             "frames_per_cpu_s": per_cpu, "bare_frames_per_cpu_s": bare_per_cpu,
             "cpu_ratio": per_cpu / bare_per_cpu},
        notes=[f"both draw {cfg.width}x{cfg.height} with MUJOCO_GL={backend} and write mp4 via "
               "rolltape.pass2.encode.open_writer; rolltape also verifies every step",
               f"in-process only (no start-up): rolltape {inner:.1f} vs bare {bare_inner:.1f} "
               f"frames/s, ratio {inner / bare_inner:.3f}; frames per CPU-second (all threads, "
               f"start-up included, less disturbed by other load): ratio "
               f"{per_cpu / bare_per_cpu:.3f}"])


def bare_render_child(tape: str, width: int, height: int, out: str) -> dict[str, Any]:
    """(In a child with MUJOCO_GL set.) gym.make + reset(seed) + step(actions) + render +
    streaming mp4, nothing else."""
    import resource

    import gymnasium as gym

    from rolltape.pass2.encode import open_writer
    from rolltape.tape import Tape

    recorded = Tape.load(tape)  # only its seed and actions are used
    actions, seed = recorded.actions, recorded.seed
    started = time.perf_counter()
    env = gym.make(ENV_ID, render_mode="rgb_array", width=width, height=height,
                   max_episode_steps=len(actions))
    env.reset(seed=seed)
    with open_writer(out, fps=env.metadata["render_fps"], overwrite=True) as writer:
        writer.write(env.render())
        for action in actions:
            env.step(action)
            writer.write(env.render())
    env.close()
    loop_s = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"loop_s": loop_s, "frames": writer.frames_written,
            "cpu_s": usage.ru_utime + usage.ru_stime}


# --------------------------------------------------------------------------------------
# 4. render_rss
# --------------------------------------------------------------------------------------

def bench_render_rss(ctx: Context) -> dict[str, Any]:
    """Peak RSS of the render worker for a short and a long episode: memory must stay flat."""
    from rolltape.pass2.replay import RenderRequest
    from rolltape.rendering import render

    cfg = ctx.config
    peaks: dict[str, float] = {}
    raw: dict[str, Any] = {"size": [cfg.width, cfg.height]}
    for name, steps in (("short", cfg.rss_short), ("long", cfg.rss_long)):
        tape = _record_random_tape(ctx, steps)
        out = ctx.dir(f"rss-{name}") / f"{name}.mp4"
        started = time.perf_counter()
        with track_workers() as workers:
            result = render([RenderRequest(str(tape), (str(out),), width=cfg.width,
                                           height=cfg.height, overwrite=True)],
                            backends=_backends(ctx))[0]
        assert result is not None
        drew = [w for w in workers if w["target"] == "render_worker"]
        if not drew or drew[-1]["peak_rss_kb"] is None:
            raise RuntimeError("could not read the render worker's VmHWM from /proc")
        peaks[name] = drew[-1]["peak_rss_kb"] / 1024
        raw[name] = {"steps": steps, "frames": result.frames, "backend": result.backend,
                     "peak_rss_mb": peaks[name], "seconds": time.perf_counter() - started,
                     "workers": len(drew)}
    diff = peaks["long"] - peaks["short"]
    return _result(
        title="render worker memory", ratio=peaks["long"] / peaks["short"], value=diff,
        unit="MB", target=50.0, op="<=",
        ratio_of="peak RSS of the long render / the short render (judged: the difference, MB)",
        baseline=f"{cfg.rss_short + 1} frames: {peaks['short']:.0f} MB",
        measured=f"{cfg.rss_long + 1} frames: {peaks['long']:.0f} MB",
        raw=raw,
        notes=[f"peak RSS (VmHWM of the render worker, read from /proc by the parent) at "
               f"{cfg.width}x{cfg.height}: {peaks['short']:.0f} MB for {cfg.rss_short + 1} "
               f"frames, {peaks['long']:.0f} MB for {cfg.rss_long + 1}; a raw frame is "
               f"{cfg.width * cfg.height * 3 / 1e6:.2f} MB, so keeping frames would add "
               f"{(cfg.rss_long - cfg.rss_short) * cfg.width * cfg.height * 3 / 2**20:.0f} MB"])


# --------------------------------------------------------------------------------------
# 5. pass1_vs_sb3_evaluate_policy
# --------------------------------------------------------------------------------------

def bench_pass1_vs_sb3_evaluate_policy(ctx: Context) -> dict[str, Any]:
    """rolltape pass 1 vs SB3's evaluate_policy on the same checkpoint and episodes."""
    from rolltape.evaluate import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    times: dict[str, list[float]] = {"rolltape": [], "sb3": []}
    evaluate_walls: list[float] = []
    loops: dict[str, list[float]] = {"rolltape": [], "sb3": []}
    rolltape_returns: list[float] = []
    sb3: dict[str, Any] = {}
    for rep in range(cfg.sb3_reps):
        for who in (("rolltape", "sb3") if rep % 2 == 0 else ("sb3", "rolltape")):
            if who == "rolltape":
                started = time.perf_counter()
                run = evaluate(ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                               episodes=cfg.sb3_episodes, seed=SEED,
                               max_episode_steps=cfg.sb3_steps, out=ctx.dir("rolltape"),
                               overwrite=True)
                evaluate_walls.append(time.perf_counter() - started)
                times["rolltape"].append(run.metadata["timings"]["pass1_s"])
                loops["rolltape"].append(sum(r["wall_s"] for r in run.results["episodes_rows"]))
                rolltape_returns = [r["return"] for r in run.results["episodes_rows"]]
            else:
                sb3, wall = run_child("sb3_evaluate_child", {
                    "checkpoint": str(ckpt), "vecnormalize": str(vecnorm),
                    "episodes": cfg.sb3_episodes, "steps": cfg.sb3_steps, "seed": SEED},
                    ctx.dir("sb3"))
                times["sb3"].append(wall)
                loops["sb3"].append(sb3["evaluate_s"])
    ratio = _median(times["sb3"]) / _median(times["rolltape"])
    first_r, first_s = rolltape_returns[0], sb3["returns"][0]
    same = first_r == first_s
    close = math.isclose(first_r, first_s, rel_tol=0, abs_tol=1e-5)
    why = ("identical" if same else
           "equal to 1e-5: SB3's Monitor rounds each episode return to 6 decimals and sums "
           "in another order (rolltape uses math.fsum)" if close else
           "they differ beyond rounding: check the seeding of the first episode")
    return _result(
        title="pass 1 vs SB3 evaluate_policy", ratio=ratio, target=1.5, op=">=",
        gating=not cfg.quick,
        ratio_of="SB3 evaluate_policy wall time / rolltape pass-1 time (a speed-up; each "
                 "from a cold process: interpreter, torch, checkpoint, episodes)",
        baseline=f"SB3 evaluate_policy {_median(times['sb3']):.2f} s",
        measured=f"rolltape pass 1 {_median(times['rolltape']):.2f} s",
        raw={"episodes": cfg.sb3_episodes, "steps": cfg.sb3_steps, "reps": cfg.sb3_reps,
             "rolltape_pass1_s": times["rolltape"], "rolltape_evaluate_wall_s": evaluate_walls,
             "sb3_wall_s": times["sb3"],
             "rolltape_episode_loops_s": loops["rolltape"], "sb3_evaluate_policy_s": loops["sb3"],
             "loop_speedup": _median(loops["sb3"]) / _median(loops["rolltape"]),
             "sb3_import_s": sb3["import_s"], "sb3_load_s": sb3["load_s"],
             "first_episode_seed": SEED, "first_return_rolltape": first_r,
             "first_return_sb3": first_s, "first_return_abs_diff": abs(first_r - first_s),
             "returns_rolltape": rolltape_returns, "returns_sb3": sb3["returns"],
             "lengths_sb3": sb3["lengths"]},
        notes=[f"first episode (seed {SEED}): rolltape {first_r:.6f}, SB3 {first_s:.6f} "
               f"({why}); SB3 seeds only its first episode (VecEnv.seed applies to the next "
               "reset; later episodes continue the env's RNG), rolltape seeds episode i with "
               "seed + i, so only episode 0 is comparable",
               "SB3 path: DummyVecEnv(Monitor(env)) + VecNormalize.load (training=False, "
               "norm_reward=False), torch left at its default thread count as a user would; "
               "rolltape's worker sets torch to 1 thread",
               f"judged: pass 1 (spawning the policy process, importing torch, loading, "
               f"the episodes); the whole evaluate() call, which also writes results.json, "
               f"the report and the notebook, took {_median(evaluate_walls):.2f} s "
               f"({_median(times['sb3']) / _median(evaluate_walls):.2f}x)",
               f"episode loops only (no start-up): SB3 {_median(loops['sb3']):.2f} s, "
               f"rolltape {_median(loops['rolltape']):.2f} s "
               f"(speed-up {_median(loops['sb3']) / _median(loops['rolltape']):.2f}x)",
               POLICY_NOTE])


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
    venv = DummyVecEnv([lambda: Monitor(gym.make(ENV_ID, max_episode_steps=steps))])
    venv = VecNormalize.load(vecnormalize, venv)
    venv.training, venv.norm_reward = False, False
    model = PPO.load(checkpoint, device="cpu")
    venv.seed(seed)  # used by the next reset only: evaluate_policy's first episode
    loaded = time.perf_counter()
    returns, lengths = evaluate_policy(model, venv, n_eval_episodes=episodes,
                                       deterministic=True, return_episode_rewards=True)
    finished = time.perf_counter()
    venv.close()
    return {"import_s": imported - started, "load_s": loaded - imported,
            "evaluate_s": finished - loaded, "returns": [float(r) for r in returns],
            "lengths": [int(n) for n in lengths]}


# --------------------------------------------------------------------------------------
# 6. end_to_end
# --------------------------------------------------------------------------------------

def seed000_way(checkpoint: Path, vecnormalize: Path, episodes: int, steps: int, seed: int,
                width: int, height: int, video: Path, work: Path, gl: str) -> dict[str, Any]:
    """How it was done before rolltape ("the seed-000 way"): one process evaluates with SB3
    and runs the random baseline; a second process re-generates episode 0's actions with the
    policy, renders every frame into a list and encodes them all at the end."""
    started = time.perf_counter()
    args = {"checkpoint": str(checkpoint), "vecnormalize": str(vecnormalize), "steps": steps,
            "seed": seed}
    evaluation, eval_wall = run_child("seed000_evaluate_child", {**args, "episodes": episodes},
                                      work)
    video_run, video_wall = run_child("seed000_video_child", {
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
        [lambda: Monitor(gym.make(ENV_ID, max_episode_steps=steps))]))
    venv.training, venv.norm_reward = False, False
    venv.seed(seed)
    model = PPO.load(checkpoint, device="cpu")
    returns, _ = evaluate_policy(model, venv, n_eval_episodes=episodes, deterministic=True,
                                 return_episode_rewards=True)
    env, baseline = gym.make(ENV_ID, max_episode_steps=steps), []
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
        ENV_ID, max_episode_steps=steps, render_mode="rgb_array", width=width, height=height)]))
    venv.training, venv.norm_reward = False, False
    model = PPO.load(checkpoint, device="cpu")
    venv.seed(seed)
    obs = venv.reset()
    frames = [venv.render()]
    for _ in range(steps):
        action, _ = model.predict(obs, deterministic=True)
        obs, _, dones, _ = venv.step(action)
        if dones[0]:
            break  # the VecEnv has already reset: its next frame is a new episode
        frames.append(venv.render())
    with open_writer(out, fps=venv.envs[0].metadata["render_fps"], overwrite=True) as writer:
        for frame in frames:
            writer.write(frame)
    venv.close()
    return {"frames": len(frames),
            "video_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_end_to_end(ctx: Context) -> dict[str, Any]:
    """evaluate() with a baseline and one verified video vs the seed-000 way.

    rolltape runs with its defaults for everything not named here: 1 pass-1 worker,
    quality full, render_workers 0 (one per core, so the one video is split across them),
    the report and notebook written."""
    from rolltape.evaluate import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()

    def rolltape(render_early: bool) -> tuple[Any, float, list[dict[str, Any]]]:
        started = time.perf_counter()
        with track_workers() as workers:
            run = evaluate(ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                           episodes=cfg.e2e_episodes, seed=SEED, baseline="random",
                           max_episode_steps=cfg.e2e_steps, video=1, width=cfg.width,
                           height=cfg.height, out=ctx.dir(f"rolltape-early{render_early}"),
                           overwrite=True, render_early=render_early)
        return run, time.perf_counter() - started, workers

    run, wall, workers = rolltape(render_early=False)
    early, early_wall, _ = rolltape(render_early=True)
    same = [r["return"] for r in run.results["episodes_rows"]] == \
        [r["return"] for r in early.results["episodes_rows"]]
    render_workers = run.metadata["config"]["render_workers"]
    folder = ctx.dir("seed000")
    old = seed000_way(ckpt, vecnorm, cfg.e2e_episodes, cfg.e2e_steps, SEED, cfg.width,
                      cfg.height, folder / "episode0.mp4", folder, ctx.backend)
    video = run.results["videos"][0]
    render_peak = max((w["peak_rss_kb"] or 0 for w in workers
                       if w["target"] == "render_worker"), default=0) / 1024
    return _result(
        title="end to end", ratio=wall / old["wall_s"], target=0.5, op="<=", gating=False,
        ratio_of="rolltape evaluate() wall time / seed-000 way wall time",
        baseline=f"seed-000 way {old['wall_s']:.1f} s",
        measured=f"rolltape.evaluate {wall:.1f} s",
        raw={"episodes": cfg.e2e_episodes, "steps": cfg.e2e_steps,
             "size": [cfg.width, cfg.height], "rolltape_wall_s": wall,
             "rolltape_timings": run.metadata["timings"], "rolltape_video": {
                 k: video.get(k) for k in ("frames", "backend", "verified", "seconds",
                                           "segments")},
             "rolltape_render_workers": render_workers, "cpu_count": os.cpu_count(),
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
               f"memory while drawing: rolltape's render worker peaked at {render_peak:.0f} MB, "
               f"the seed-000 video process (all frames in a list) at "
               f"{old['video_peak_rss_mb']:.0f} MB",
               f"with --render-early (opt-in: pass 2 on episode 0's tape beside pass 1): "
               f"{early_wall:.1f} s, ratio {early_wall / old['wall_s']:.3f}; pass 2 began "
               f"{early.metadata['timings']['pass2_started_after_s']:.1f} s in, pass 1 took "
               f"{early.metadata['timings']['pass1_s']:.1f} s (without: "
               f"{run.metadata['timings']['pass1_s']:.1f} s); returns "
               f"{'identical' if same else 'DIFFERENT'}", POLICY_NOTE])


# --------------------------------------------------------------------------------------
# 7. render_quality
# --------------------------------------------------------------------------------------

PRESETS = ("full", "balanced", "fast")


def _timed_render(requests: Sequence[Any], backends: tuple[str, ...], workers: int,
                  split: bool = True) -> tuple[list[Any], float, float]:
    """``rolltape.render`` with wall time around the call and the render workers' CPU time
    (all their threads, llvmpipe's included)."""
    from rolltape.rendering import render

    started = time.perf_counter()
    with track_workers() as spawned:
        results = render(list(requests), backends=backends, workers=workers, split=split)
    wall = time.perf_counter() - started
    cpu = sum(w["cpu_s"] or 0.0 for w in spawned if w["target"] == "render_worker")
    if any(r is None or r.verified is False for r in results):
        raise RuntimeError("a bench render failed or diverged from pass 1")
    return results, wall, cpu


def bench_render_quality(ctx: Context) -> dict[str, Any]:
    """frames/s of rolltape.render at each --quality preset vs a bare env.render() loop."""
    from rolltape.pass2.replay import QUALITY, RenderRequest

    cfg = ctx.config
    tape = _record_random_tape(ctx, cfg.quality_steps)
    backend = ctx.backend
    order = ["bare", *PRESETS]
    runs: dict[str, list[dict[str, float]]] = {who: [] for who in order}
    for rep in range(cfg.quality_reps):
        for who in (order if rep % 2 == 0 else order[::-1]):  # A B C D D C B A ...
            folder = ctx.dir(f"quality-{who}")
            if who == "bare":
                bare, wall = run_child("bare_render_child", {
                    "tape": str(tape), "width": cfg.width, "height": cfg.height,
                    "out": str(folder / "bare.mp4")}, folder, gl=backend)
                runs[who].append({"wall_s": wall, "loop_s": bare["loop_s"],
                                  "cpu_s": bare["cpu_s"], "frames": bare["frames"]})
                continue
            (result,), wall, cpu = _timed_render([RenderRequest(
                str(tape), (str(folder / f"{who}.mp4"),), width=cfg.width, height=cfg.height,
                quality=who, overwrite=True)], _backends(ctx), workers=1, split=False)
            backend = result.backend or backend
            runs[who].append({"wall_s": wall, "loop_s": result.seconds, "cpu_s": cpu,
                              "frames": result.frames})

    def fps(who: str, key: str = "wall_s") -> float:
        return _median([r["frames"] / r[key] for r in runs[who]])

    bare_fps = fps("bare")
    per_preset = {q: {"fps": fps(q), "fps_in_worker": fps(q, "loop_s"),
                      "frames_per_cpu_s": fps(q, "cpu_s"), "ratio_to_bare_full": fps(q) / bare_fps,
                      "settings": QUALITY[q]} for q in PRESETS}
    ratio = per_preset["fast"]["fps"] / per_preset["full"]["fps"]
    inner = per_preset["fast"]["fps_in_worker"] / per_preset["full"]["fps_in_worker"]
    # Judged inside the worker: the ~0.4 s process start is the same for every preset and
    # would only dilute what the presets change (the wall-time ratio is kept in raw).
    return _result(
        title="render quality presets", ratio=inner, target=6.0, op=">=",
        ratio_of="median frames/s inside the render worker at quality=fast / at quality=full "
                 "(GL context, drawing, verifying, mp4; not the process start)",
        baseline=f"bare env.render() {bare_fps:.1f} frames/s (full)",
        measured=" / ".join(f"{q} {per_preset[q]['fps']:.1f}" for q in PRESETS) + " frames/s",
        raw={"frames": runs["full"][0]["frames"], "size": [cfg.width, cfg.height],
             "backend": backend, "reps": cfg.quality_reps, "bare_fps": bare_fps,
             "bare_fps_in_loop": fps("bare", "loop_s"), "presets": per_preset,
             "fast_over_full_in_worker": inner, "fast_over_full_wall": ratio, "runs": runs},
        notes=[f"{runs['full'][0]['frames']} frames at {cfg.width}x{cfg.height}, "
               f"MUJOCO_GL={backend}, one render worker, split=False; mp4 encoding on both "
               "sides (the bare loop is bare_render_child: gym.make(render_mode='rgb_array') + "
               "step the tape's actions + env.render() + open_writer, in a subprocess)",
               "frames/s vs bare full: " + ", ".join(
                   f"{q} {per_preset[q]['ratio_to_bare_full']:.2f}x" for q in PRESETS),
               f"in the worker only (no process start): full "
               f"{per_preset['full']['fps_in_worker']:.1f}, balanced "
               f"{per_preset['balanced']['fps_in_worker']:.1f}, fast "
               f"{per_preset['fast']['fps_in_worker']:.1f} frames/s; fast / full {inner:.2f}x"])


# --------------------------------------------------------------------------------------
# 8. pass1_workers
# --------------------------------------------------------------------------------------

def _tape_arrays(path: Path) -> dict[str, Any]:
    """Every array of a tape file except its JSON header (whose wall_s always differs)."""
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files if name != "header"}


def compare_tapes(a: Sequence[Path], b: Sequence[Path]) -> list[str]:
    """Where two lists of tapes differ, array by array and bit for bit; [] when identical."""
    problems = []
    if len(a) != len(b):
        problems.append(f"{len(a)} tapes vs {len(b)}")
    for x, y in zip(a, b):
        ax, ay = _tape_arrays(x), _tape_arrays(y)
        if set(ax) != set(ay):
            problems.append(f"{x.name}: arrays {sorted(ax)} vs {sorted(ay)}")
        for name in sorted(set(ax) & set(ay)):
            u, v = ax[name], ay[name]
            if u.dtype != v.dtype or u.shape != v.shape or u.tobytes() != v.tobytes():
                problems.append(f"{x.name}: {name} differs")
    return problems


def bench_pass1_workers(ctx: Context) -> dict[str, Any]:
    """Pass-1 time with workers=1 vs workers=2 (PPO checkpoint); the tapes must be identical.
    Also measured: the opt-in batched inference on 2 env processes, and whether batching
    changed any action's bits."""
    from rolltape.evaluate import evaluate

    cfg = ctx.config
    ckpt, vecnorm = ctx.checkpoint()
    setups = {"1": {"workers": 1}, "2": {"workers": 2},
              "batched2": {"workers": 2, "batched_inference": True}}
    pass1: dict[str, list[float]] = {k: [] for k in setups}
    walls: dict[str, list[float]] = {k: [] for k in setups}
    loops: dict[str, list[float]] = {k: [] for k in setups}
    cpu: dict[str, list[float]] = {k: [] for k in setups}
    tapes: dict[str, list[Path]] = {}
    for rep in range(cfg.workers_reps):
        for name in (list(setups) if rep % 2 == 0 else list(setups)[::-1]):
            started = time.perf_counter()
            with track_workers() as spawned:
                run = evaluate(ENV_ID, f"sb3:{ckpt}", vecnormalize=vecnorm,
                               episodes=cfg.workers_episodes, seed=SEED,
                               max_episode_steps=cfg.workers_steps, out=ctx.dir(f"workers{name}"),
                               overwrite=True, report=False, **setups[name])
            walls[name].append(time.perf_counter() - started)
            pass1[name].append(run.metadata["timings"]["pass1_s"])
            rows = run.results["episodes_rows"]
            loops[name].append(sum(r["wall_s"] for r in rows))
            cpu[name].append(sum(w["cpu_s"] or 0.0 for w in spawned
                                 if w["target"] == "policy_worker"))
            tapes.setdefault(name, [run.path / r["tape"] for r in rows])
    problems = compare_tapes(tapes["1"], tapes["2"])
    identical = not problems
    if not identical:  # a correctness failure, not a slow run: make it an error
        raise AssertionError(f"tapes of workers=1 and workers=2 differ: {problems[:5]} "
                             f"(pass1_s workers=1 {pass1['1']}, workers=2 {pass1['2']})")
    one, two, batched = (_median(pass1[k]) for k in setups)
    start_up = one - _median(loops["1"])
    same_actions, action_diff = _action_bits(tapes["1"], tapes["batched2"])
    return _result(
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
               POLICY_NOTE])


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


# --------------------------------------------------------------------------------------
# 9. ray_vs_local
# --------------------------------------------------------------------------------------

def pass1_executor_child(executor: str, episodes: int, steps: int, seed: int, workers: int,
                         out: str) -> dict[str, Any]:
    """(In a fresh child.) rolltape.evaluate with the random policy and ``executor``; with
    Ray, ray.init (inside evaluate) and ray.shutdown are part of this process's time."""
    started = time.perf_counter()
    from rolltape.evaluate import evaluate

    imported = time.perf_counter()
    run = evaluate(ENV_ID, "random", episodes=episodes, seed=seed, max_episode_steps=steps,
                   workers=workers, executor=executor, out=out, overwrite=True, report=False)
    evaluated = time.perf_counter()
    if executor == "ray":
        import ray

        ray.shutdown()
    rows = run.results["episodes_rows"]
    return {"import_s": imported - started, "evaluate_s": evaluated - imported,
            "pass1_s": run.metadata["timings"]["pass1_s"],
            "shutdown_s": time.perf_counter() - evaluated,
            "returns": [r["return"] for r in rows], "lengths": [r["length"] for r in rows]}


def bench_ray_vs_local(ctx: Context) -> dict[str, Any]:
    """The same pass-1 workload with the local executor vs Ray, each from a fresh process."""
    cfg = ctx.config
    runs: dict[str, dict[str, Any]] = {}
    for executor in ("local", "ray"):
        folder = ctx.dir(f"executor-{executor}")
        result, wall = run_child("pass1_executor_child", {
            "executor": executor, "episodes": cfg.ray_episodes, "steps": cfg.ray_steps,
            "seed": SEED, "workers": 2, "out": str(folder / "run")}, folder)
        shutil.rmtree(folder / "run", ignore_errors=True)  # ~0.4 MB a 1000-step tape
        runs[executor] = {"wall_s": wall, **result}
    local, ray = runs["local"], runs["ray"]
    same = local["returns"] == ray["returns"] and local["lengths"] == ray["lengths"]
    for r in runs.values():
        del r["returns"], r["lengths"]
    gating = not cfg.quick
    return _result(
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


# --------------------------------------------------------------------------------------
# 10. pass2_workers, pass2_segments
# --------------------------------------------------------------------------------------

def bench_pass2_workers(ctx: Context) -> dict[str, Any]:
    """Render 2 tapes on K=1 vs K=2 render workers (no splitting)."""
    from rolltape.pass2.replay import RenderRequest

    cfg = ctx.config
    tapes = _random_tapes(ctx, cfg.p2_workers_steps, 2)
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for rep in range(cfg.p2_workers_reps):
        for k in ((1, 2) if rep % 2 == 0 else (2, 1)):
            folder = ctx.dir(f"k{k}")
            results, wall, cpu = _timed_render([RenderRequest(
                str(t), (str(folder / f"{i}.mp4"),), width=cfg.width, height=cfg.height,
                overwrite=True) for i, t in enumerate(tapes)], _backends(ctx), workers=k,
                split=False)
            runs[k].append({"wall_s": wall, "cpu_s": cpu,
                            "worker_s": [r.seconds for r in results],
                            "frames": sum(r.frames for r in results)})
    one, two = _median([r["wall_s"] for r in runs[1]]), _median([r["wall_s"] for r in runs[2]])
    cpu1, cpu2 = _median([r["cpu_s"] for r in runs[1]]), _median([r["cpu_s"] for r in runs[2]])
    return _result(
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


def bench_pass2_segments(ctx: Context) -> dict[str, Any]:
    """One long episode rendered whole on one worker vs split across 2 workers and joined."""
    from rolltape.pass2.encode import count_frames
    from rolltape.pass2.replay import RenderRequest

    cfg = ctx.config
    tape = _record_random_tape(ctx, cfg.segments_steps)
    runs: dict[str, list[dict[str, Any]]] = {"unsplit": [], "split": []}
    outputs: dict[str, Path] = {}
    for rep in range(cfg.segments_reps):
        for who in (("unsplit", "split") if rep % 2 == 0 else ("split", "unsplit")):
            out = ctx.dir(f"segments-{who}") / f"{who}.mp4"
            (result,), wall, cpu = _timed_render([RenderRequest(
                str(tape), (str(out),), width=cfg.width, height=cfg.height, overwrite=True)],
                _backends(ctx), workers=1 if who == "unsplit" else 2)
            runs[who].append({"wall_s": wall, "cpu_s": cpu, "worker_s": result.seconds,
                              "frames": result.frames, "segments": result.segments})
            outputs.setdefault(who, out)
    expected = cfg.segments_steps + 1
    counted = count_frames(outputs["split"])  # decoded from the joined file itself
    frames_ok = counted == expected and all(r["frames"] == expected
                                            for rs in runs.values() for r in rs)
    one = _median([r["wall_s"] for r in runs["unsplit"]])
    two = _median([r["wall_s"] for r in runs["split"]])
    segments = runs["split"][0]["segments"]
    return _result(
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


# --------------------------------------------------------------------------------------
# 11. gif_vs_mp4
# --------------------------------------------------------------------------------------

def bench_gif_vs_mp4(ctx: Context) -> dict[str, Any]:
    """Encode the same real frames as mp4 and as gif with rolltape.encode.open_writer."""
    from rolltape.pass2.encode import open_writer, read_frames
    from rolltape.pass2.replay import RenderRequest

    cfg = ctx.config
    tape = _record_random_tape(ctx, cfg.gif_frames - 1)
    folder = ctx.dir("gif-frames")
    (result,), _, _ = _timed_render([RenderRequest(
        str(tape), (str(folder / "frames") + "/",), width=cfg.width, height=cfg.height,
        overwrite=True)], _backends(ctx), workers=1, split=False)
    frames = list(read_frames(folder / "frames"))  # lossless PNGs, held in memory
    fps = result.fps
    times: dict[str, list[float]] = {"mp4": [], "gif": []}
    sizes: dict[str, int] = {}
    out = ctx.dir("gif-vs-mp4")
    for rep in range(cfg.gif_reps):
        for fmt in (("mp4", "gif") if rep % 2 == 0 else ("gif", "mp4")):
            path = out / f"episode.{fmt}"
            started = time.perf_counter()
            with open_writer(path, fps=fps, overwrite=True) as writer:
                for frame in frames:
                    writer.write(frame)
            times[fmt].append(time.perf_counter() - started)
            sizes[fmt] = path.stat().st_size
    mp4, gif = _median(times["mp4"]), _median(times["gif"])
    return _result(
        title="gif vs mp4 encoding", ratio=gif / mp4, target=2.0, op="<=",
        ratio_of="median time to write the frames as gif / as mp4 (open_writer to close)",
        baseline=f"mp4 {mp4 * 1e3 / len(frames):.1f} ms/frame",
        measured=f"gif {gif * 1e3 / len(frames):.1f} ms/frame",
        raw={"frames": len(frames), "size": [cfg.width, cfg.height], "fps": fps,
             "reps": cfg.gif_reps, "mp4_s": times["mp4"], "gif_s": times["gif"],
             "bytes": sizes},
        notes=[f"{len(frames)} frames drawn once by rolltape.render (quality full, PNG "
               f"frames) at {cfg.width}x{cfg.height} and held in memory; files: mp4 "
               f"{sizes['mp4'] / 1e3:.0f} kB, gif {sizes['gif'] / 1e3:.0f} kB"])


# --------------------------------------------------------------------------------------
# 12. report_build
# --------------------------------------------------------------------------------------

REPORT_BUDGET_S = 10.0

# Its own script rather than run_child: the clock starts before ``import rolltape``, as for
# ``rolltape report RUN``.
_REPORT_CHILD = """
import json, sys, time
started = time.perf_counter()
from rolltape.outputs.report import build_report
imported = time.perf_counter()
path = build_report(sys.argv[1])
first = time.perf_counter()
build_report(sys.argv[1])
second = time.perf_counter()
from pathlib import Path
print(json.dumps({"import_s": imported - started, "first_s": first - imported,
                  "second_s": second - first, "html_bytes": Path(path).stat().st_size}))
"""


def _time_report_build(run_dir: Path, cwd: Path) -> dict[str, Any]:
    """Import rolltape.report and build the report twice in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _REPORT_CHILD, str(run_dir)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"the report_build child exited with status {proc.returncode}:\n"
                           f"{tail}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_wall_s": wall}


def bench_report_build(ctx: Context) -> dict[str, Any]:
    """build_report on a run of many episodes with 3 videos; an absolute budget."""
    from rolltape.evaluate import evaluate

    cfg = ctx.config
    run = evaluate(ENV_ID, "random", episodes=cfg.report_episodes, max_episode_steps=50,
                   baseline="random", video=3, workers=2, report=False, quality="fast",
                   width=160, height=120, seed=SEED, out=ctx.dir("report-run"), overwrite=True)
    child = _time_report_build(run.path, ctx.dir("report-build"))
    cold = child["import_s"] + child["first_s"]
    return _result(
        title="report build", ratio=cold / REPORT_BUDGET_S, value=cold, unit="s",
        target=REPORT_BUDGET_S, op="<=",
        ratio_of="seconds of `import rolltape.report` + the first build_report in a fresh "
                 "interpreter / the 10 s budget (judged: the seconds; an ABSOLUTE budget, not a "
                 "ratio against a baseline)",
        baseline=f"budget {REPORT_BUDGET_S:.0f} s (absolute)",
        measured=f"build_report {cold:.2f} s",
        raw={"episodes": cfg.report_episodes, "steps": 50, "videos": len(run.results["videos"]),
             "size": [160, 120], **child},
        notes=[f"the run: {cfg.report_episodes} random-policy episodes x 50 steps + "
               f"{cfg.report_episodes} baseline episodes + 3 videos (160x120, quality fast); "
               f"timed in a fresh process: import rolltape.report {child['import_s']:.2f} s, "
               f"first build {child['first_s']:.2f} s, second {child['second_s']:.2f} s; "
               f"the whole process (interpreter start, two builds) {child['process_wall_s']:.2f} s",
               "an absolute budget (<= 10 s), not a ratio: it holds on any machine that is "
               "not far slower than this one"])


# --------------------------------------------------------------------------------------
# Running, reporting
# --------------------------------------------------------------------------------------

BENCHMARKS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "pass1_overhead": bench_pass1_overhead,
    "pass1_video_requested": bench_pass1_video_requested,
    "pass1_workers": bench_pass1_workers,
    "ray_vs_local": bench_ray_vs_local,
    "pass2_throughput": bench_pass2_throughput,
    "render_quality": bench_render_quality,
    "pass2_workers": bench_pass2_workers,
    "pass2_segments": bench_pass2_segments,
    "render_rss": bench_render_rss,
    "gif_vs_mp4": bench_gif_vs_mp4,
    "report_build": bench_report_build,
    "pass1_vs_sb3_evaluate_policy": bench_pass1_vs_sb3_evaluate_policy,
    "end_to_end": bench_end_to_end,
}


def select(only: str | Sequence[str] | None) -> list[str]:
    """The benchmark names ``--only`` asks for (all when None), in their standard order."""
    if only is None:
        return list(BENCHMARKS)
    words = only.split(",") if isinstance(only, str) else list(only)
    wanted = [w.strip() for w in words if w.strip()]
    unknown = [w for w in wanted if w not in BENCHMARKS]
    if unknown or not wanted:
        raise UsageError(f"--only {','.join(unknown) or repr(only)} is not a benchmark; choose "
                         f"from {', '.join(BENCHMARKS)}.")
    return [name for name in BENCHMARKS if name in wanted]


def _machine() -> dict[str, Any]:
    from rolltape.envs import package_version

    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "versions": {p: package_version(p) for p in (
                "gymnasium", "mujoco", "torch", "stable_baselines3", "av", "numpy")}}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(only: str | Sequence[str] | None = None, *, quick: bool = False,
        out: str | Path = "bench-out", config: Config | None = None,
        log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmarks, write ``OUT/bench.json`` and ``OUT/bench.png``, return the report.

    A benchmark that raises is kept as ``{"error": ...}`` (with ``ratio`` None) and the others
    still run. Targets are reported, never enforced: the caller decides what a miss means.
    """
    names = select(only)
    config = config or (QUICK if quick else FULL)
    log = log or (lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "schema_version": BENCH_SCHEMA_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": list(sys.argv), "quick": config.quick, "config": asdict(config),
        "env_id": ENV_ID, "seed": SEED, "policy": POLICY_NOTE, "machine": _machine(),
        "loadavg_start": _loadavg(), "benchmarks": {}}
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="rolltape-bench-"))
    try:
        ctx = Context(config, work, log)
        for name in names:
            log(f"{name} ...")
            t0 = time.perf_counter()
            try:
                result = BENCHMARKS[name](ctx)
            except Exception as exc:  # keep going: one broken benchmark must not hide the rest
                result = {"title": name, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(), "ratio": None, "value": None,
                          "target": None, "passed": False, "gating": True, "notes": []}
            result["name"] = name
            result["seconds"] = time.perf_counter() - t0
            report["benchmarks"][name] = result
            log(f"{name}: {_verdict(result)} in {result['seconds']:.1f} s")
            write_json(out / "bench.json", report)  # partial results survive an interruption
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = time.perf_counter() - started
    report["loadavg_end"] = _loadavg()
    report["chart"] = draw_chart(report, out / "bench.png")
    write_json(out / "bench.json", report)
    return report


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Like artifacts.write_json, but anything JSON cannot hold is written as its str()."""
    from rolltape.outputs.artifacts import write_text

    write_text(path, json.dumps(data, indent=2, allow_nan=False, default=str) + "\n")


def _verdict(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "ERROR"
    if r["passed"]:
        return "PASS"
    return "FAIL" if r["gating"] else "below target (informational)"


def _fmt(r: dict[str, Any], key: str) -> str:
    value = r.get(key)
    if value is None:
        return "-"
    unit = r.get("unit") if key in ("value", "target") else "x"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.3f}"


def format_table(report: dict[str, Any]) -> Any:
    """The report as a rich Table."""
    from rich.table import Table

    quick = " (--quick: tiny sizes, numbers are not meaningful)" if report["quick"] else ""
    table = Table(title=f"rolltape bench{quick}")
    for col, justify in (("benchmark", "left"), ("baseline", "left"), ("measured", "left"),
                         ("value", "right"), ("target", "right"), ("result", "left")):
        table.add_column(col, justify=justify)
    for name, r in report["benchmarks"].items():
        target = "-" if r.get("target") is None else f"{r['op']} {_fmt(r, 'target')}"
        table.add_row(name, r.get("baseline", "-"), r.get("measured", r.get("error", "-")),
                      _fmt(r, "value"), target, _verdict(r))
    return table


def print_report(report: dict[str, Any], out: Path) -> None:
    """Print the table, each benchmark's notes and where the files went."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = 120
    console.print(format_table(report))
    for name, r in report["benchmarks"].items():
        if r.get("error"):
            console.print(f"[red]{name}: {r['error']}[/red]", highlight=False)
        for note in dict.fromkeys(r.get("notes", [])):
            if note != POLICY_NOTE:
                console.print(f"{name}: {note}", highlight=False, markup=False)
    console.print(POLICY_NOTE, highlight=False)
    console.print(f"load average {report['loadavg_start']} -> {report['loadavg_end']} on "
                  f"{report['machine']['cpu_count']} CPUs; {report['seconds']:.0f} s in all",
                  highlight=False)
    chart = report.get("chart") or {}
    png = f", {out / 'bench.png'}" if chart.get("path") else f" (no chart: {chart.get('error')})"
    console.print(f"wrote {out / 'bench.json'}{png}", highlight=False)


def _headroom(r: dict[str, Any]) -> float:
    """How far a result is from its target, as a factor where 1 is exactly on target and
    more is better: value / target for ">=", target / value for "<=" (clipped to 1e-2..1e2,
    so a zero or negative difference still gets a bar)."""
    value, target = float(r["value"]), float(r["target"])
    if r["op"] == ">=":
        score = value / target if target > 0 else math.inf
    else:
        score = target / value if value > 0 else math.inf
    return min(max(score, 1e-2), 1e2)


def draw_chart(report: dict[str, Any], path: Path) -> dict[str, Any]:
    """One row per benchmark on one axis: its distance from its target as a factor (1 on the
    dashed line is exactly on target, right of it is met), labelled with the judged value."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)
    except ImportError:
        return {"path": None, "error": "matplotlib is not installed (pip install matplotlib)"}
    rows = [(n, r) for n, r in report["benchmarks"].items() if not r.get("error")]
    if not rows:
        return {"path": None, "error": "no benchmark finished"}
    rows = rows[::-1]  # the first benchmark at the top
    scores = [_headroom(r) for _, r in rows]
    height = 0.4 * len(rows) + 1.3
    fig, ax = plt.subplots(figsize=(11, height))
    # Names on the left, the bars in the middle, each row's value and verdict in a column
    # of its own on the right (so no label crosses the target line or a long bar).
    fig.subplots_adjust(left=0.2, right=0.63, top=1 - 0.55 / height, bottom=0.7 / height)
    colours = ["#2e7d32" if r["passed"] else "#c62828" if r["gating"] else "#9e9e9e"
               for _, r in rows]
    ax.barh(range(len(rows)), scores, color=colours, height=0.6)
    ax.set_xscale("log")
    ax.set_xlim(min(scores + [1.0]) / 1.6, max(scores + [1.0]) * 1.6)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([n for n, _ in rows], fontsize=9)
    for y, (name, r) in enumerate(rows):
        unit = {"MB": " MB", "s": " s"}.get(r["unit"], "x")
        value = _fmt(r, "value").replace(" MB", "").replace(" s", "")
        ax.text(1.02, y, f"{value}{unit}  (target {r['op']} {r['target']:g}{unit})  "
                f"{_verdict(r)}", va="center", fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_xlabel("distance from target: value / target for >=, target / value for <= "
                  "(log; dashed = on target)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("rolltape bench" + (" --quick (tiny sizes, not meaningful)"
                                     if report["quick"] else "")
                 + ":  green met, red missed, grey informational", fontsize=10, loc="left")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"path": path.name, "error": None}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rolltape.bench`` / ``benchmarks/run.py``: the same as ``rolltape bench``."""
    parser = argparse.ArgumentParser(prog="rolltape bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-out", help="folder for bench.json and bench.png")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for tests")
    parser.add_argument("--only", default=None, help="NAME[,NAME]: " + ", ".join(BENCHMARKS))
    parser.add_argument("--rss-frames", default=None, metavar="SHORT,LONG",
                        help="steps of the short and long render_rss tapes (default 1000,5000)")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    if args.rss_frames:
        short, _, long = args.rss_frames.partition(",")
        config = replace(config, rss_short=int(short), rss_long=int(long))
    try:
        return run_and_print(args.only, quick=args.quick, out=args.out, config=config)
    except UsageError as exc:
        print(f"rolltape bench: {exc}", file=sys.stderr)
        return 2



def run_and_print(only: str | None = None, *, quick: bool = False, out: str | Path = "bench-out",
                  config: Config | None = None) -> int:
    """Run, print the table; exit status 1 when a benchmark could not run, else 0."""
    report = run(only, quick=quick, out=out, config=config)
    print_report(report, Path(out))
    return 1 if any(r.get("error") for r in report["benchmarks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
