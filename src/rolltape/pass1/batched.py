"""Opt-in batched inference for pass 1: one policy process, N env processes, one forward
pass per step for all of them (``--batched-inference``).

Per-row inference (:mod:`rolltape.rollout`) stays the default because a batched matrix
product may round differently from a one-row one: a tape recorded here can differ in the
last bits of its actions from the same episode played alone, and from a run with another
number of envs. Everything else holds. Each episode is reset with its own seed. Its tape
holds exactly the actions that were stepped, so pass 2 replays and verifies it as usual.

The envs run in Gymnasium's ``AsyncVectorEnv`` with autoreset disabled, or on vector
sessions of a ``rolltape serve --num-envs N`` server (:mod:`rolltape.pass1.vectors`); a
sub-env that finishes is reset with the next episode's seed, one that raises fails its own
episode only. Policy-side wrappers run where each sub-env's episode is played. Only SB3 policies have a batched forward
pass, here or on a ``serve-policy`` server that says it batches; other policies (the random baseline, callables, tapes) act row by row, one instance
per sub-env, and their tapes are identical to per-row ones.

May import: pass 1, envs, policies, errors. Never: an executor, the render side, outputs.

Example (not run: it spawns processes):
    >>> for kind, payload in run_pass1([jobs], batch_envs=4):   # see rollout.run_pass1
    ...     print(kind)
"""

from __future__ import annotations

import copy
import time
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from rolltape.envs.build import make_env
from rolltape.envs.state import AleLog, mujoco_data, split_physics
from rolltape.errors import UsageError
from rolltape.pass1.facts import env_facts
from rolltape.pass1.fields import kept_obs, reset_forms, success_flag, tape_fields
from rolltape.pass1.rollout import EpisodeJob, PolicyJob, refuse_if_it_cannot_draw, save_episode
from rolltape.pass1.vectors import open_vector
from rolltape.pass1.wrappers import WrappedEnv
from rolltape.policies import Policy, SB3Policy, ServedPolicy, load_policy


@dataclass
class _Playing:
    """One episode in progress on one sub-env."""

    job: EpisodeJob
    first_obs: Any = None
    states: list[Any] = field(default_factory=list)  # MuJoCo state rows (None otherwise)
    ale: AleLog = field(default_factory=lambda: AleLog(None))  # Atari: emulator states
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    once: bool | None = None  # the success key was true at some step (None: never reported)
    forms: dict[str, dict[str, str]] | None = None  # the reset observation's, for `diff`


def run_batched_job(jobs: list[PolicyJob], num_envs: int, send: Callable[[Any], None]) -> None:
    """Play every episode of ``jobs`` on ``num_envs`` sub-envs (a served env: on
    ``num_envs`` vector sessions of its server); ``send`` reports as
    :func:`rollout.run_policy_job` does."""
    for job in jobs:
        _run_one(job, num_envs, send)


def _run_one(job: PolicyJob, num_envs: int, send: Callable[[Any], None]) -> None:
    from gymnasium.vector.utils import iterate

    local = {k: v for k, v in job.env.items() if k != "served"}
    probe = make_env(local)  # for the spaces and checks; never stepped
    wrapped = None
    try:
        refuse_if_it_cannot_draw(job, probe)
        data = mujoco_data(probe)
        nq, nv = (probe.unwrapped.model.nq, probe.unwrapped.model.nv) if data is not None \
            else (0, 0)
        wrapped = WrappedEnv.build(probe, job.wrappers) if job.wrappers else None
        envs = open_vector(job.env, num_envs, tuple(job.wrappers), job.success_key)
        try:
            act_batch, description = batch_actor(job, wrapped.env if wrapped else probe,
                                                  envs.num_envs)
            # The protocol card's facts (the probe is built here even for a served env).
            facts = env_facts(probe, wrapped.env if wrapped else None)
        except BaseException:
            envs.close()
            raise
    finally:
        (wrapped or probe).close()
    if wrapped is not None:  # stored in every tape and the run's metadata
        description["wrappers"] = wrapped.names
    num_envs = envs.num_envs
    role = job.episodes[0].role if job.episodes else None
    send(("policy", {"role": role, **description}))
    send(("env_facts", {"role": role, **job.extra_meta, **facts}))
    try:
        space = envs.single_observation_space
        waiting = deque(job.episodes)
        playing: list[_Playing | None] = [None] * num_envs

        def fail(s: int, error: str) -> None:
            """Sub-env ``s`` raised: its episode fails alone (as a per-row worker's does)."""
            episode = playing[s]
            if episode is not None:
                ep = episode.job
                send(("episode_failed", {**job.extra_meta, "role": ep.role, "index": ep.index,
                                         "seed": ep.seed, "error": error}))
            playing[s] = None

        def reset(slots: np.ndarray) -> Any:
            """Start the next episode on each slot in ``slots`` (an idle slot just resets);
            a slot whose reset raised fails that episode and takes the next one."""
            while True:
                seeds: list[int | None] = [None] * num_envs
                for s in np.flatnonzero(slots):
                    episode = waiting.popleft() if waiting else None
                    playing[s] = None if episode is None else _Playing(episode)
                    seeds[s] = None if episode is None else episode.seed
                obs, facts = envs.reset(seeds, slots)
                rows = list(iterate(space, obs))
                again = np.zeros(num_envs, dtype=bool)
                for s in np.flatnonzero(slots):
                    if facts[s].error is not None:
                        # An idle slot whose reset raised stays idle (its steps' errors are
                        # dropped): retried, it could raise for ever.
                        again[s] = playing[s] is not None
                        fail(int(s), facts[s].error)
                    elif (fresh := playing[s]) is not None:
                        fresh.first_obs = kept_obs(rows[s])
                        fresh.forms = reset_forms(rows[s]) or None
                        fresh.states.append(facts[s].state)
                        if facts[s].ale is not None:
                            fresh.ale.add(facts[s].ale)
                if not again.any():
                    return obs, rows
                slots = again

        obs, rows = reset(np.ones(num_envs, dtype=bool))
        while any(p is not None for p in playing):
            active = np.array([p is not None for p in playing])
            actions = act_batch(obs, rows, active, playing)
            obs, rewards, terminated, truncated, facts = envs.step(actions)
            rows = list(iterate(space, obs))
            done = terminated | truncated
            for s, episode in enumerate(playing):
                fact = facts[s]
                if fact.error is not None:
                    fail(s, fact.error)
                    done[s] = True
                    continue
                if episode is None:
                    continue
                if fact.fields is not None:  # played through wrappers: the base env's tape
                    save_episode(job, episode.job, description, fact.fields, send)
                    continue
                if wrapped is not None:
                    continue  # the base env's steps are kept where the wrappers run
                episode.steps.append((np.array(actions[s], copy=True), rewards[s],
                                      bool(terminated[s]), bool(truncated[s]),
                                      kept_obs(rows[s])))
                episode.states.append(fact.state)
                if fact.ale is not None:
                    episode.ale.add(fact.ale)
                if fact.success is not None:  # success at some step, as record_episode keeps it
                    episode.once = bool(episode.once or success_flag(fact.success))
                if done[s]:
                    physics = ((None, None, None) if fact.state is None else
                               split_physics(np.stack(episode.states), nq, nv))
                    fields = tape_fields(
                        episode.job.seed, None, episode.first_obs, episode.steps,
                        physics, fact.success, fact.metrics, episode.started)
                    fields["success_once"] = episode.once
                    fields["obs_reset"] = episode.forms
                    if fact.ale is not None:  # an Atari game: its states, as a per-row tape's
                        fields["ale_state"], fields["ale_state_offsets"] = episode.ale.arrays()
                    save_episode(job, episode.job, description, fields, send)
            if done.any():
                obs, rows = reset(done)
    finally:
        envs.close()


def batch_actor(job: PolicyJob, env: Any, num_envs: int, needs: str = "--batched-inference",
                device: str = "cpu") -> tuple[Callable[..., np.ndarray], dict[str, Any]]:
    """``act(obs, rows, active, playing) -> actions`` for all sub-envs, and the description
    stored in each tape. SB3 policies run one forward pass (on torch's ``device``: "auto",
    a GPU when there is one); others act row by row with one instance per sub-env (so
    per-episode state such as a random seed stays per episode). ``needs``: the option that
    asked for a batch, named when a policy cannot act in one."""
    def load() -> Policy:
        # Each instance gets its own copy of the spaces: a random policy seeds its action
        # space per episode, and sub-envs must not reseed each other's.
        view = SimpleNamespace(action_space=copy.deepcopy(env.action_space),
                               observation_space=env.observation_space, spec=env.spec,
                               metadata=env.metadata, unwrapped=env.unwrapped)
        return load_policy(job.policy, view, vecnormalize=job.vecnormalize, algo=job.algo,
                           deterministic=job.deterministic, device=device)

    first = load()
    if isinstance(first, SB3Policy):
        if not first.deterministic:
            raise UsageError(f"{needs} needs deterministic actions: sampled actions for a "
                             "batch draw from one generator, so an episode could not be "
                             f"played again alone; drop --stochastic or {needs}.")
        description = {**first.description, "inference": f"batched ({num_envs} envs)",
                       "device": str(first.model.device)}

        def act_sb3(obs: Any, rows: list[Any], active: np.ndarray, playing: list[Any]
                    ) -> np.ndarray:
            return first.predict_action(obs)

        return act_sb3, description

    if isinstance(first, ServedPolicy) and first.batches:
        # the server's one forward pass for every sub-env (serve-policy's SB3 policy)
        description = {**first.description, "inference": f"batched ({num_envs} envs, served)"}

        def act_served(obs: Any, rows: list[Any], active: np.ndarray, playing: list[Any]
                       ) -> np.ndarray:
            return first.act_batch(obs)

        return act_served, description

    policies = [first] + [load() for _ in range(num_envs - 1)]
    started: list[Any] = [None] * num_envs
    idle_space = copy.deepcopy(env.action_space)

    def act_rows(obs: Any, rows: list[Any], active: np.ndarray, playing: list[Any]
                 ) -> np.ndarray:
        actions = []
        for s, (policy, row) in enumerate(zip(policies, rows)):
            if not active[s]:  # a finished sub-env still steps; its results are dropped
                actions.append(idle_space.sample())
                continue
            if started[s] is not playing[s]:
                policy.reset(playing[s].job.seed)
                started[s] = playing[s]
            actions.append(policy.act(row))
        return np.stack([np.asarray(a) for a in actions])

    return act_rows, dict(first.description)
