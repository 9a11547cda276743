"""Pass 1 on MuJoCo Warp (issue 41, ``rolltape eval ENV --simulator mjwarp``): every episode
of a job is a world of one :class:`rolltape.envs.mjwarp.MJWarpEnv`, all stepped at once, the
policy acting on all of their observations in one call, and each world written as an
ordinary tape whose ``meta["backend"]`` says MJWarp made it.

May import: numpy, envs, pass 1, policies, tape, errors. Never: an executor, the render
side, outputs.

Example (not run: it compiles Warp kernels):
    >>> env = MJWarpEnv("HalfCheetah-v5", num_worlds=64)
    >>> steps = play(env, act, seeds=range(64), max_steps=1000)   # act: (64, 17) -> (64, 6)
    >>> tapes = world_tapes(env, steps, max_steps=1000)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from rolltape.envs.digests import obs_digests
from rolltape.envs.ids import env_spec, package_version
from rolltape.envs.mjwarp import MJWarpEnv, time_limit
from rolltape.pass1.batched import batch_actor
from rolltape.pass1.facts import env_facts
from rolltape.pass1.rollout import PolicyJob, episode_row
from rolltape.tape import MJWARP, Tape

#: a job's message every this many env steps: progress, and proof of life for
#: ``--episode-timeout`` (every world's episode ends together at the time limit)
HEARTBEAT = 25


@dataclass
class Steps:
    """What :func:`play` recorded: per step for every world (the first axis is time)."""

    seeds: tuple[int, ...]  # (N,) each world's reset seed
    actions: np.ndarray  # (T, N, nu)
    rewards: np.ndarray  # (T, N) float64
    terminated: np.ndarray  # (T, N) bool
    qpos: np.ndarray  # (T + 1, N, nq): the state at reset, then after each step
    qvel: np.ndarray  # (T + 1, N, nv)
    obs_digest: np.ndarray  # (T + 1, N) uint64: each observation's digest, as a tape keeps
    lengths: np.ndarray  # (N,) steps each world played (it stops at its termination)

    def returns(self) -> np.ndarray:
        """(N,) each world's return: its rewards up to and including its last step."""
        played = np.arange(len(self.rewards))[:, None] < self.lengths[None, :]
        return np.where(played, self.rewards, 0.0).sum(axis=0)


def play(env: MJWarpEnv, act: Callable[[np.ndarray], np.ndarray], seeds: Iterable[int],
         max_steps: int, stepped: Callable[[int], None] | None = None) -> Steps:
    """Every world from ``reset(seeds)`` for up to ``max_steps`` steps (the time limit), each
    stopping at its termination; ``act`` maps (N, obs_dim) observations to (N, nu) actions.
    Finished worlds go on stepping with the rest (one batch), their steps not counted.
    ``stepped(t)`` hears every :data:`HEARTBEAT` steps."""
    seeds = tuple(int(s) for s in seeds)
    obs = env.reset(seeds)
    n = env.num_worlds
    start = env.current
    # every step's row written in place (a list of rows, then a stack, held both at once)
    qpos = np.empty((max_steps + 1, *start.qpos.shape))
    qvel = np.empty((max_steps + 1, *start.qvel.shape))
    digests = np.empty((max_steps + 1, n), dtype=np.uint64)
    rewards = np.empty((max_steps, n))
    terminated = np.empty((max_steps, n), dtype=bool)
    actions: np.ndarray | None = None  # its dtype and shape: the policy's first answer
    qpos[0], qvel[0], digests[0] = start.qpos, start.qvel, obs_digests(obs)
    lengths = np.full(n, max_steps)
    done = np.zeros(n, dtype=bool)
    steps = 0
    for t in range(max_steps):
        action = np.asarray(act(obs))
        if actions is None:
            actions = np.empty((max_steps, *action.shape), dtype=action.dtype)
        obs, reward, ended = env.step(action)
        now = env.current
        actions[t], rewards[t], terminated[t] = action, reward, ended
        qpos[t + 1], qvel[t + 1], digests[t + 1] = now.qpos, now.qvel, obs_digests(obs)
        newly = ended & ~done
        lengths[newly] = t + 1
        done |= ended
        steps = t + 1
        if stepped is not None and steps % HEARTBEAT == 0:
            stepped(steps)
        if done.all():
            break
    assert actions is not None  # max_steps >= 1: a time limit is at least one step
    return Steps(seeds, actions[:steps], rewards[:steps], terminated[:steps],
                 qpos[:steps + 1], qvel[:steps + 1], digests[:steps + 1], lengths)


def world_tapes(env: MJWarpEnv, steps: Steps, max_steps: int,
                spec: dict[str, Any] | None = None, policy: dict[str, Any] | None = None,
                wall_s: float = 0.0) -> list[Tape]:
    """One ordinary tape per world of what :func:`play` recorded (:func:`world_tape`)."""
    spec = tape_spec(env, max_steps, spec)
    return [world_tape(env, steps, world, max_steps, spec, policy, wall_s)
            for world in range(env.num_worlds)]


def tape_spec(env: MJWarpEnv, max_steps: int, spec: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The env a world's tape names: ``spec`` (the env as the run names it; default: the
    env's id and kwargs) with MJWarp's and Warp's versions added."""
    spec = dict(spec or env_spec(env.env_id, env.kwargs, max_episode_steps=max_steps))
    spec["versions"] = {**spec.get("versions", {}),
                        "mujoco_warp": package_version("mujoco-warp"),
                        "warp": package_version("warp-lang")}
    return spec


def world_tape(env: MJWarpEnv, steps: Steps, world: int, max_steps: int,
               spec: dict[str, Any], policy: dict[str, Any] | None = None,
               wall_s: float = 0.0, meta: dict[str, Any] | None = None) -> Tape:
    """World ``world``'s tape of what :func:`play` recorded: its seed, its actions, rewards
    and flags up to its last step (truncated there when it reached ``max_steps`` alive, as
    Gymnasium's TimeLimit), its qpos/qvel per frame and observation digests, the env
    ``spec`` (:func:`tape_spec`). ``meta["backend"]`` says MJWarp made it (beside
    ``meta``): replayed on CPU MuJoCo it is close, not equal. ``wall_s``: the batch's
    seconds, each world's share of them."""
    length = int(steps.lengths[world])
    terminated = steps.terminated[:length, world].copy()
    truncated = np.zeros(length, dtype=bool)
    truncated[-1] = length == max_steps and not terminated[-1]
    return Tape(
        env=spec, seed=steps.seeds[world], actions=steps.actions[:length, world].copy(),
        rewards=steps.rewards[:length, world].copy(), terminated=terminated,
        truncated=truncated, obs_digest=steps.obs_digest[:length + 1, world].copy(),
        qpos=steps.qpos[:length + 1, world].copy(), qvel=steps.qvel[:length + 1, world].copy(),
        policy=dict(policy or {}), wall_s=wall_s / env.num_worlds,
        meta={**(meta or {}), "backend": MJWARP, "world": world, "device": env.device})


def run_mjwarp_job(job: PolicyJob, send: Callable[[Any], None]) -> None:
    """Play every episode of ``job`` at once, one MJWarp world each (Warp's default device:
    a GPU when there is one), and report as :func:`rollout.run_policy_job` does: the policy
    and env facts first, then a row per episode (all at the end: every world plays in the
    same batch), and ("stepped", HEARTBEAT) as the steps go."""
    episodes = list(job.episodes)
    if not episodes:
        return
    env = MJWarpEnv.of(job.env, len(episodes))
    try:
        # the policy's forward pass on a GPU when torch has one, as the worlds' physics
        act_batch, description = batch_actor(job, env.host, env.num_worlds,
                                             needs="--simulator mjwarp", device="auto")
        description = {**description, "inference": f"batched ({env.num_worlds} MJWarp worlds)"}
        role = episodes[0].role
        send(("policy", {"role": role, **description}))
        send(("env_facts", {"role": role, **job.extra_meta, **env_facts(env.host)}))
        playing = [SimpleNamespace(job=ep) for ep in episodes]
        active = np.ones(env.num_worlds, dtype=bool)

        def act(obs: np.ndarray) -> np.ndarray:
            return act_batch(obs, list(obs), active, playing)

        max_steps = time_limit(job.env)
        start = time.perf_counter()
        steps = play(env, act, [ep.seed for ep in episodes], max_steps,
                     stepped=lambda t: send(("stepped", HEARTBEAT)))
        wall_s, spec = time.perf_counter() - start, tape_spec(env, max_steps, job.env)
        for world, ep in enumerate(episodes):  # one world's tape at a time: saved, dropped
            tape = world_tape(env, steps, world, max_steps, spec, description, wall_s,
                              job.episode_meta(ep))
            tape.save(ep.tape_path)
            send(("episode", episode_row(tape, ep)))
    finally:
        env.close()
