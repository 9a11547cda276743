"""What every benchmark shares: the sizes of a run (:class:`Config`, :data:`FULL`,
:data:`QUICK`), the :class:`Context` of one run, child processes (:func:`run_child`),
worker tracking (:func:`track_workers`), the random tapes and timed renders several
benchmarks draw, the A B B A order of their repetitions (:func:`interleaved`) and the
result dict every benchmark returns (:func:`result`).

May import: rolltape, inside functions. Never: another bench module (they import this).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from rolltape.interpreter import GL_VARIABLES, ChildFailed, changes_to, run_once

if TYPE_CHECKING:
    from rolltape.record import Run

T = TypeVar("T")

ENV_ID = "HalfCheetah-v5"
SEED = 1000
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


class Context:
    """What the benchmarks of one run share: the config, a scratch folder, the checkpoint."""

    def __init__(self, config: Config, work: Path, log: Callable[[str], None],
                 backend: str = "egl") -> None:
        self.config = config
        self.work = work
        self.log = log
        self.backend = backend
        self._checkpoints: dict[str, tuple[Path, Path]] = {}  # env id -> checkpoint
        self.tapes: dict[tuple[int, int], list[Path]] = {}  # (steps, n) -> random tapes
        self.results: dict[Any, dict[str, Any]] = {}  # a workload two benchmarks share
        self._n = 0

    def dir(self, name: str) -> Path:
        """A new, empty folder under the scratch folder."""
        self._n += 1
        path = self.work / f"{self._n:02d}-{name}"
        path.mkdir(parents=True)
        return path

    def checkpoint(self, env_id: str = ENV_ID) -> tuple[Path, Path]:
        """(model.zip, vecnormalize.pkl) of an untrained PPO MlpPolicy for ``env_id``, made
        once per run."""
        if env_id not in self._checkpoints:
            self.log(f"making an untrained PPO MlpPolicy checkpoint + VecNormalize stats "
                     f"for {env_id}")
            self._checkpoints[env_id] = make_checkpoint(self.dir("checkpoint"), env_id)
        return self._checkpoints[env_id]

    def random_tapes(self, steps: int, n: int = 1) -> list[Path]:
        """``n`` random-policy HalfCheetah tapes of ``steps`` steps (seeds SEED, SEED + 1, ...;
        pass 2 does not care who acted), recorded by pass 1 once per run, size and count."""
        from rolltape.evaluation import evaluate

        if (steps, n) not in self.tapes:
            run = evaluate(ENV_ID, "random", episodes=n, seed=SEED, max_episode_steps=steps,
                           out=self.dir(f"tape{steps}x{n}"), overwrite=True, report=False)
            self.tapes[(steps, n)] = [run.tape_path(e) for e in run.results.episodes]
        return self.tapes[(steps, n)]

    def random_tape(self, steps: int) -> Path:
        """One random-policy tape of ``steps`` steps (see :meth:`random_tapes`)."""
        return self.random_tapes(steps, 1)[0]

    def backends(self) -> tuple[str, ...]:
        """The bench's GL backend, then osmesa as rolltape's own fallback."""
        return (self.backend, "osmesa") if self.backend != "osmesa" else ("osmesa",)


def make_checkpoint(folder: Path, env_id: str = ENV_ID) -> tuple[Path, Path]:
    """Save an untrained PPO (default 64x64 MlpPolicy) and fresh VecNormalize statistics."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rolltape.envs.build import make_env
    from rolltape.envs.ids import env_spec

    torch.set_num_threads(1)
    venv = VecNormalize(DummyVecEnv([lambda: make_env(env_spec(env_id))]), norm_obs=True,
                        norm_reward=True)
    model = PPO("MlpPolicy", venv, seed=0, device="cpu")
    model.save(folder / "model.zip")
    venv.save(str(folder / "vecnormalize.pkl"))
    venv.close()
    return folder / "model.zip", folder / "vecnormalize.pkl"


def child_env(gl: str | None = None) -> dict[str, str]:
    """The environment of a bench child: this process's, without a GL backend unless ``gl``
    names one, and with PYTHONPATH made absolute: a child runs in a scratch folder and must
    import the same rolltape as this process (``PYTHONPATH=src`` included)."""
    env = {k: v for k, v in os.environ.items() if k not in GL_VARIABLES}
    if gl is not None:
        from rolltape.pass2.backends import gl_environment

        env.update(gl_environment(gl))
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(entry)
                                            for entry in env["PYTHONPATH"].split(os.pathsep))
    return env


def run_child(fn: Callable[..., dict[str, Any]], kwargs: dict[str, Any], cwd: Path,
              gl: str | None = None, timeout: float = 3600.0) -> tuple[dict[str, Any], float]:
    """Run ``fn(**kwargs)`` (a module-level function of a bench module) in a fresh
    interpreter in ``cwd`` (with ``gl`` as MUJOCO_GL, or none) and return its result and the
    process's wall time, start-up and imports included."""
    started = time.perf_counter()
    try:
        result = run_once(partial(fn, **kwargs), env=changes_to(child_env(gl)), timeout=timeout, cwd=cwd,
                          capture=True)
    except ChildFailed as failed:
        tail = "\n".join(failed.output.strip().splitlines()[-15:])
        raise RuntimeError(f"bench child {fn.__name__} failed: {failed}\n{tail}") from None
    return result, time.perf_counter() - started


def peak_rss_kb(pid: int) -> int | None:
    """Peak resident set size (VmHWM, kB) of a live process, from /proc; None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
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
               for name in ("executors.local", "evaluation")]
    workers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def read(entry: dict[str, Any]) -> None:
        kb = peak_rss_kb(entry["pid"])
        if kb is not None:
            entry["peak_rss_kb"] = max(entry["peak_rss_kb"] or 0, kb)
        cpu = cpu_seconds(entry["pid"])
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


def run_seconds(run: Run, phase: str) -> float:
    """The seconds a fresh run's ``phase`` took (``pass1_s``, ``pass2_s``: its metadata)."""
    assert run.metadata is not None  # evaluate() writes it; only a loaded run may lack it
    return float(run.metadata["timings"][phase])


def median(values: Sequence[float]) -> float:
    """The median as a plain float (JSON-ready)."""
    return float(statistics.median(values))


def median_rate(runs: Sequence[dict[str, Any]], seconds: str = "wall_s") -> float:
    """Median frames per second over ``runs`` (dicts with ``frames`` and the ``seconds`` key
    named: ``wall_s``, ``loop_s``, ``cpu_s`` ...)."""
    return median([r["frames"] / r[seconds] for r in runs])


def interleaved(reps: int, arms: Sequence[T]) -> Iterator[tuple[int, T]]:
    """(repetition, arm) for ``reps`` repetitions of every arm, A B B A ...: every other
    repetition runs the arms in reverse, so a drift in the machine's load (another process,
    a warming cache) falls on every arm alike instead of on whichever runs second."""
    for rep in range(reps):
        for arm in arms if rep % 2 == 0 else arms[::-1]:
            yield rep, arm


def result(*, title: str, ratio: float, target: float, op: str, gating: bool = True,
           value: float | None = None, unit: str = "x", ratio_of: str, baseline: str,
           measured: str, raw: dict[str, Any], notes: Sequence[str] = ()) -> dict[str, Any]:
    """The dict every benchmark returns; ``value`` (the ratio unless given) is judged."""
    judged = ratio if value is None else value
    passed = judged <= target if op == "<=" else judged >= target
    return {"title": title, "ratio": float(ratio), "ratio_of": ratio_of, "value": float(judged),
            "unit": unit, "target": float(target), "op": op, "passed": bool(passed),
            "gating": gating, "baseline": baseline, "measured": measured, "raw": raw,
            "notes": list(notes)}


def timed_render(requests: Sequence[Any], backends: tuple[str, ...], workers: int,
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
