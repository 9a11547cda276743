"""Pass 1: run a policy with rendering off and record each episode as a tape.

:func:`record_episode` is the whole algorithm: reset with the episode's seed, then
act/step until the env says done, keeping what the env returned untouched (rewards stay
float64; actions stay the exact array passed to ``env.step``). :func:`policy_worker` runs
it for a list of episodes in a spawned process whose environment has no GL variables.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .envs import (PhysicsLog, json_safe, make_env, mujoco_warnings, obs_digest,
                   obs_digests)
from .errors import RunFailed, UsageError
from .executors import describe_exit, spawn_worker, stop_workers
from .policies import Policy, load_policy
from .tape import Tape, finite_or_none

EPISODE_TIMEOUT = 600.0  # seconds a pass-1 worker may go without finishing an episode


@dataclass(frozen=True)
class EpisodeJob:
    """One episode of pass 1: which role, which index, which seed, where its tape goes."""

    role: str  # "policy" or "baseline"
    index: int
    seed: int
    tape_path: str


@dataclass(frozen=True)
class Episodes(Sequence):  # type: ignore[type-arg]
    """Episodes of one role, made on demand from their indices (a ``range`` unless some are
    done), so that even ``--episodes 10**12`` costs nothing before the first one plays.
    Slicing gives Episodes again: ``episodes[w::W]`` is worker w's share.

    >>> eps = Episodes("policy", range(10), seed=1000, tapes="runs/x/tapes")
    >>> eps[3].seed, len(eps[1::4])
    (1003, 3)
    """

    role: str
    indices: Sequence[int]
    seed: int  # episode i is reset with seed + i
    tapes: str  # the folder of the tapes

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return replace(self, indices=self.indices[k])
        i = self.indices[k]
        return EpisodeJob(self.role, i, self.seed + i, str(Path(self.tapes) / tape_name(self.role, i)))


@dataclass(frozen=True)
class PolicyJob:
    """Everything a pass-1 worker needs; plain data so it crosses a process boundary."""

    env: dict[str, Any]
    policy: str
    episodes: Sequence[EpisodeJob]
    vecnormalize: str | None = None
    algo: str | None = None
    deterministic: bool = True
    reset_options: dict[str, Any] | None = None
    needs_rgb_array: bool = False  # a video was asked for: refuse an env that cannot draw
    extra_meta: dict[str, Any] = field(default_factory=dict)


def record_episode(env: Any, policy: Policy, seed: int | None,
                   options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Play one episode and return the fields of its tape (all but env/policy/meta)."""
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(seed)
    physics = PhysicsLog.for_env(env)
    if physics is not None:
        physics.record()
    first = kept_obs(obs)
    steps = []  # one tuple per step: fewer appends keep the loop as lean as a bare one
    done = False
    while not done:
        action = policy.act(obs)
        obs, reward, term, trunc, info = env.step(action)
        steps.append((np.array(action, copy=True), reward, term, trunc, kept_obs(obs)))
        if physics is not None:
            physics.record()
        done = term or trunc
    return tape_fields(seed, options, first, steps,
                       physics.arrays() if physics is not None else (None, None, None),
                       info.get("is_success"), info.get("metrics"), start)


def tape_fields(seed: int | None, options: dict[str, Any] | None, first_obs: Any,
                steps: list[tuple[Any, ...]], physics: tuple[Any, Any, Any],
                success: Any, metrics: Any, started: float) -> dict[str, Any]:
    """The fields of a tape from what one episode produced: ``steps`` holds one (action,
    reward, terminated, truncated, kept observation) tuple per step, ``physics`` is
    (state, qpos, qvel) with one row per frame (Nones for non-MuJoCo envs), ``success`` and
    ``metrics`` come from the last step's info, ``started`` is when the episode began."""
    actions, rewards, terminated, truncated, observations = zip(*steps)
    digests = digest_all([first_obs, *observations])
    wall = time.perf_counter() - started
    state, qpos, qvel = physics
    return {
        "seed": seed,
        "options": options,
        "actions": np.stack(actions),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "terminated": np.asarray(terminated, dtype=bool),
        "truncated": np.asarray(truncated, dtype=bool),
        "obs_digest": digests,
        "qpos": qpos,
        "qvel": qvel,
        "physics": state,
        "success": success_flag(success),
        "metrics": json_safe(metrics) if isinstance(metrics, dict) else None,
        "wall_s": wall,
    }


def success_flag(value: Any) -> bool | None:
    """``info["is_success"]`` as a flag: None when the env does not say, and NaN (an
    undefined outcome) is not a success."""
    if value is None:
        return None
    try:
        if math.isnan(float(value)):
            return False
    except (TypeError, ValueError):
        pass
    return bool(value)


def kept_obs(obs: Any) -> Any:
    """A copy of an array observation (an env may reuse its buffer), else its digest now."""
    return obs.copy() if isinstance(obs, np.ndarray) else obs_digest(obs)


def digest_all(observations: list[Any]) -> np.ndarray:
    """Digests of every observation; array observations in one vectorised pass."""
    first = observations[0]
    if isinstance(first, np.ndarray) and all(
            isinstance(o, np.ndarray) and o.shape == first.shape and o.dtype == first.dtype
            for o in observations):
        return obs_digests(np.stack(observations))
    return np.asarray([o if isinstance(o, int) else obs_digest(o) for o in observations],
                      dtype=np.uint64)


def episode_row(tape: Tape, job: EpisodeJob) -> dict[str, Any]:
    """The per-episode line of results.json / episodes.jsonl. A return that is not a finite
    number is None, with ``flags`` saying why (JSON has no NaN)."""
    return {
        "role": job.role,
        "index": job.index,
        "seed": job.seed,
        "return": finite_or_none(tape.total_return),
        "flags": episode_flags(tape),
        "length": tape.length,
        "success": tape.success,
        "terminated": bool(tape.terminated[-1]),
        "truncated": bool(tape.truncated[-1]),
        "metrics": tape.metrics,
        "wall_s": tape.wall_s,
        "tape": job.tape_path,
    }


def episode_flags(tape: Tape) -> list[str]:
    """What was wrong with an episode's numbers: non-finite rewards, a return that is not a
    finite number (also when finite rewards overflow their sum), non-finite actions."""
    flags = []
    if not np.isfinite(tape.rewards).all():
        flags.append("nonfinite_reward")
    if not math.isfinite(tape.total_return):
        flags.append("nonfinite_return")
    actions = tape.actions
    if actions.dtype.kind in "fc" and not np.isfinite(actions).all():
        flags.append("nonfinite_action")
    return flags


def refuse_if_it_cannot_draw(job: PolicyJob, env: Any) -> None:
    """A video was asked for: refuse, before any episode, an env that cannot draw frames."""
    if job.needs_rgb_array and "rgb_array" not in env.metadata.get("render_modes", []):
        raise UsageError(f"Env '{job.env['id']}' cannot render 'rgb_array' frames, so it "
                         "cannot make a video; drop --video or choose an env that can.")


def save_episode(job: PolicyJob, ep: EpisodeJob, policy: dict[str, Any],
                 fields: dict[str, Any], send: Any) -> None:
    """Save one episode's tape and report its row."""
    tape = Tape(env=job.env, policy=policy,
                meta={"role": ep.role, "index": ep.index, **job.extra_meta}, **fields)
    tape.save(ep.tape_path)
    send(("episode", episode_row(tape, ep)))


def run_policy_job(job: PolicyJob, send: Any) -> None:
    """Run every episode of ``job``; ``send(message)`` reports each finished episode."""
    env = make_env(job.env)
    try:
        refuse_if_it_cannot_draw(job, env)
        policy = load_policy(job.policy, env, vecnormalize=job.vecnormalize, algo=job.algo,
                             deterministic=job.deterministic)
        send(("policy", {"role": job.episodes[0].role if job.episodes else None,
                         **policy.description}))
        for ep in job.episodes:
            try:
                fields = record_episode(env, policy, ep.seed, job.reset_options)
            except (UsageError, OSError, MemoryError):
                raise  # bad input or a broken machine: not this episode's fault
            except Exception as exc:  # the env (or policy) failed this episode alone
                send(("episode_failed", {"role": ep.role, "index": ep.index, "seed": ep.seed,
                                         "error": last_line(exc)}))
                env.close()
                env = make_env(job.env)  # the failed env may be half-way through a step
                continue
            save_episode(job, ep, policy.description, fields, send)
    finally:
        env.close()


def last_line(exc: BaseException) -> str:
    """'ValueError: boom': the exception's type and the last line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def policy_worker(jobs: list[PolicyJob], batch_envs: int, conn: Any) -> None:
    """Entry point of a spawned pass-1 process: run the jobs in order, report over ``conn``.
    With ``batch_envs`` N > 0 they run batched on N env processes (:mod:`rolltape.batched`)."""
    # Pass 1 never renders: a GL backend in the environment could only add risk.
    for var in ("MUJOCO_GL", "PYOPENGL_PLATFORM"):
        os.environ.pop(var, None)
    try:
        if batch_envs:
            from .batched import run_batched_job

            run_batched_job(jobs, batch_envs, conn.send)
        else:
            for job in jobs:
                run_policy_job(job, conn.send)
        conn.send(("done", mujoco_warnings()))
    except UsageError as exc:
        conn.send(("usage_error", str(exc)))
    except OSError as exc:  # a full disk, most likely: say where
        where = f" while writing '{exc.filename}'" if exc.filename else ""
        conn.send(("error", (f"{exc.strerror or last_line(exc)}{where}", traceback.format_exc())))
    except BaseException as exc:  # report, then let the parent decide
        conn.send(("error", (last_line(exc), traceback.format_exc())))
    finally:
        conn.close()


def split_jobs(jobs: list[PolicyJob], workers: int) -> list[list[PolicyJob]]:
    """Deal episodes to ``workers`` workers in turn (episode i to worker i mod W), so each
    gets a similar mix of long and short episodes. Every episode is reset with its own seed
    and acted on alone, so its tape is the same whichever worker plays it."""
    chunks: list[list[PolicyJob]] = [[] for _ in range(workers)]
    for job in jobs:
        for w in range(workers):
            mine = job.episodes[w::workers]
            if mine:
                chunks[w].append(replace(job, episodes=mine))
    return [c for c in chunks if c]


def run_pass1(chunks: list[list[PolicyJob]], executor: str = "local", batch_envs: int = 0,
              timeout: float = EPISODE_TIMEOUT) -> Iterator[tuple[str, Any]]:
    """Run each chunk in its own worker; yield ("policy"|"episode"|"episode_failed"|"done",
    payload) messages as they arrive. Bad input inside a worker is raised here as
    :class:`UsageError`; a worker that crashes, or finishes no episode for ``timeout``
    seconds, as :class:`RunFailed` naming the episode it was playing.

    With ``batch_envs`` N > 0 each chunk's worker instead plays its episodes on N env
    processes with one batched forward pass per step (:mod:`rolltape.batched`, opt-in)."""
    if executor == "ray":
        from .ray_executor import run_pass1_on_ray

        yield from run_pass1_on_ray(chunks)
        return
    no_gl = {"MUJOCO_GL": None, "PYOPENGL_PLATFORM": None}  # pass 1 never renders
    workers = [spawn_worker(policy_worker, chunk, batch_envs, env=no_gl) for chunk in chunks]
    running = {w.conn: w for w in workers}
    chunk_of = {w.conn: chunk for w, chunk in zip(workers, chunks)}
    finished = {w.conn: 0 for w in workers}  # episodes each worker has reported
    heard = {w.conn: time.monotonic() for w in workers}
    try:
        while running:
            for conn in wait(list(running), timeout=min(timeout, 5.0)):
                worker = running[conn]
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    worker.proc.wait(5)
                    raise RunFailed(f"A pass-1 worker {describe_exit(worker.proc.returncode)} "
                                    f"while playing {_playing(chunk_of[conn], finished[conn])}."
                                    ) from None
                heard[conn] = time.monotonic()
                if kind == "usage_error":
                    raise UsageError(payload)
                if kind == "error":
                    raise RunFailed(f"Pass 1 failed: {payload[0]}.", payload[1])
                if kind in ("episode", "episode_failed"):
                    finished[conn] += 1
                if kind == "done":
                    del running[conn]
                yield kind, payload
            for conn, at in heard.items():
                if conn in running and time.monotonic() - at > timeout:
                    raise RunFailed(f"A pass-1 worker finished no episode for {timeout:.0f} s "
                                    f"(--episode-timeout) while playing "
                                    f"{_playing(chunk_of[conn], finished[conn])}; it was stopped.")
    finally:
        stop_workers(workers)


def _playing(chunk: list[PolicyJob], finished: int) -> str:
    """'episode 7 (seed 1007)': what a worker that has reported ``finished`` is playing."""
    ep = next(islice(chain.from_iterable(job.episodes for job in chunk), finished, None), None)
    return "its first episode" if ep is None else f"{ep.role} episode {ep.index} (seed {ep.seed})"


def tape_name(role: str, index: int) -> str:
    """File name of an episode's tape inside ``tapes/``."""
    return f"{role}-{index:04d}.npz"


def tapes_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "tapes"
