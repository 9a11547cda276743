"""The state a tape records and a replay puts back (rolltape.envs.state): the reset RNG, the
TimeLimit's count and MuJoCo's physics rows put an env back exactly; a bad RNG state is
refused in one sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.envs.state import (
    PhysicsLog,
    continue_from,
    rng_state,
    set_elapsed_steps,
    set_rng_state,
    split_physics,
)
from rolltape.errors import UsageError


def test_a_recorded_rng_state_makes_an_unseeded_reset_draw_the_same() -> None:
    env = make_env(env_spec("CartPole-v1"))
    env.reset(seed=11)
    state = rng_state(env)
    first = env.reset()[0]
    set_rng_state(env, json.loads(json.dumps(state)))  # as a tape stores it
    assert np.array_equal(env.reset()[0], first)
    with pytest.raises(UsageError, match="names the bit generator 'Evil'"):
        set_rng_state(env, {**state, "bit_generator": "Evil"})
    with pytest.raises(UsageError, match="is not a valid PCG64 state"):
        set_rng_state(env, {"bit_generator": "PCG64", "state": "garbage"})
    env.close()


def test_elapsed_steps_truncate_a_replay_where_the_episode_did() -> None:
    env = make_env(env_spec("CartPole-v1", max_episode_steps=10))
    env.reset(seed=0)
    set_elapsed_steps(env, 9)
    *_, truncated, _ = env.step(0)
    assert truncated
    env.close()


def test_physics_rows_continue_a_mujoco_episode_bit_for_bit() -> None:
    env = make_env(env_spec("HalfCheetah-v5", max_episode_steps=20))
    env.reset(seed=1)
    log = PhysicsLog(env, expected_frames=2)  # grows past its first buffer
    actions = np.random.default_rng(2).uniform(-1, 1, size=(6, 6))
    log.record()
    observations = []
    for action in actions:
        observations.append(env.step(action)[0])
        log.record()
    physics, qpos, qvel = log.arrays()
    assert log.frames == len(physics) == 7
    assert np.array_equal(qpos[-1], env.unwrapped.data.qpos)
    assert np.array_equal(qvel[-1], env.unwrapped.data.qvel)
    continue_from(env, physics[3])  # back to frame 3, then the same actions again
    again = [env.step(action)[0] for action in actions[3:]]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(again, observations[3:]))
    env.close()


def test_split_physics_reads_qpos_and_qvel_after_the_time() -> None:
    rows = np.arange(2 * 7, dtype=float).reshape(2, 7)  # time, 2 qpos, 3 qvel, 1 more
    physics, qpos, qvel = split_physics(rows, 2, 3)
    assert physics is rows and qpos.tolist() == [[1, 2], [8, 9]]
    assert qvel.tolist() == [[3, 4, 5], [10, 11, 12]]
