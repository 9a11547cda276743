"""The vector envs batched pass 1 steps (rolltape.pass1.vectors), here the local one: two
real sub-env processes give, row for row, what one local env gives for the same seed and
actions, keep the rows a reset did not touch, and report each sub-env's MuJoCo state and
success key beside the observations. Served vectors are tested against a real server in
tests/server/test_served_vector.py."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.envs.state import mujoco_data, physics_spec
from rolltape.pass1.vectors import Facts, LocalVector, open_vector

ENV = "InvertedPendulum-v5"


@pytest.fixture(scope="module")
def vector() -> Iterator[Any]:
    vec = open_vector(env_spec(ENV, max_episode_steps=50), 2, (), "reward_survive")
    yield vec
    vec.close()


def _state(env: Any) -> np.ndarray:
    import mujoco

    out = np.empty(mujoco.mj_stateSize(env.unwrapped.model, physics_spec()))
    mujoco.mj_getState(env.unwrapped.model, mujoco_data(env), out, physics_spec())
    return out


def _local(seed: int) -> tuple[Any, np.ndarray]:
    env = make_env(env_spec(ENV, max_episode_steps=50))
    obs, _ = env.reset(seed=seed)
    return env, obs


def test_a_local_spec_opens_sub_env_processes(vector: Any):
    assert isinstance(vector, LocalVector) and vector.num_envs == 2
    assert vector.single_observation_space.shape == (4,)


def test_each_row_resets_and_steps_as_a_local_env_with_its_seed(vector: Any):
    obs, facts = vector.reset([11, 12], np.array([True, True]))
    envs = []
    try:
        for s, seed in enumerate((11, 12)):
            env, first = _local(seed)
            envs.append(env)
            assert obs[s].tobytes() == first.tobytes()
            assert isinstance(facts[s], Facts) and facts[s].success is None
            assert facts[s].state.tobytes() == _state(env).tobytes()
        actions = np.array([[0.5], [-0.25]], dtype=np.float32)
        obs, rewards, terminated, truncated, facts = vector.step(actions)
        for s, env in enumerate(envs):
            o, r, term, trunc, _ = env.step(actions[s])
            assert obs[s].tobytes() == o.tobytes() and rewards[s] == r
            assert (terminated[s], truncated[s]) == (term, trunc)
            assert facts[s].state.tobytes() == _state(env).tobytes()
            assert facts[s].success == 1 and facts[s].error is None  # info["reward_survive"]
    finally:
        for env in envs:
            env.close()


def test_a_reset_of_some_rows_keeps_the_others(vector: Any):
    first, _ = vector.reset([1, 2], np.array([True, True]))
    obs, facts = vector.reset([None, 3], np.array([False, True]))
    assert obs[0].tobytes() == first[0].tobytes()
    assert facts[0] is None and isinstance(facts[1], Facts)
    env, reset_obs = _local(3)
    try:
        assert obs[1].tobytes() == reset_obs.tobytes()
        assert facts[1].state.tobytes() == _state(env).tobytes()
    finally:
        env.close()
