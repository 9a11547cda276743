"""The batched MuJoCo Warp env (issue 41) against Gymnasium's own HalfCheetah-v5 and Ant-v5,
on the CPU (Warp's "cpu" device; no GPU anywhere).

- the formulas: rewards, terminations and observations computed from Gymnasium's own MjData
  quantities equal Gymnasium's, bit for bit, on 1,000 states per env;
- the physics: MJWarp stepped from the same 1,000 states stays within a measured float32
  tolerance of Gymnasium (HalfCheetah), and with the same terminations (Ant, whose contact
  forces and RK4 steps differ more: the numbers are in the assertions' messages);
- the reset distribution: world i's state is Gymnasium's ``reset(seed=seed + i)``;
- a world's steps do not depend on how many worlds step beside it (what lets pass 2
  re-simulate one tape of a batch alone);
- an env it does not model is refused in one sentence.

Warp's kernels are compiled once per test session into a fresh folder (tests/conftest.py's
``warp_kernels``: ~30 s cold for both envs on two cores), so nothing is left in ~/.cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

from rolltape.envs.mjwarp import MJWarpEnv, Physics, observe, score, terms_of
from rolltape.errors import UsageError

ENVS = ("HalfCheetah-v5", "Ant-v5")
STATES = 1000


pytestmark = pytest.mark.usefixtures("warp_kernels")


@dataclass
class Visited:
    """States an env really visits, and what Gymnasium's step did from each."""

    qpos: np.ndarray
    qvel: np.ndarray
    actions: np.ndarray
    before: Physics  # after Gymnasium's set_state (a fresh reset's warm start)
    after: Physics  # after Gymnasium's step
    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray


def visited(env_id: str) -> Visited:
    """1,000 states from Gymnasium episodes under uniform random actions (seeded), each then
    set on a freshly reset env and stepped once. Ant: every 10th state is lifted to a torso
    height of 1.2 (above healthy_z_range), so terminations are among them."""
    env = gym.make(env_id)
    base = env.unwrapped
    rng = np.random.default_rng(41)
    states = []
    for episode in range(STATES // 40):
        env.reset(seed=episode)
        for _ in range(40):
            action = rng.uniform(-1, 1, base.model.nu).astype(np.float32)
            states.append((base.data.qpos.copy(), base.data.qvel.copy(), action))
            env.step(action)
    rows = []
    for i, (qpos, qvel, action) in enumerate(states):
        if env_id == "Ant-v5" and i % 10 == 0:
            qpos[2] = 1.2
        env.reset(seed=0)
        base.set_state(qpos, qvel)
        before = Physics.of(base.data)
        obs, reward, terminated, _, _ = env.step(action)
        rows.append((qpos, qvel, action, before, Physics.of(base.data), obs, reward, terminated))
    env.close()
    columns = list(zip(*rows))
    return Visited(np.stack(columns[0]), np.stack(columns[1]), np.stack(columns[2]),
                   Physics.stack(list(columns[3])), Physics.stack(list(columns[4])),
                   np.stack(columns[5]), np.array(columns[6]), np.array(columns[7]))


@pytest.fixture(scope="module", params=ENVS)
def states(request: pytest.FixtureRequest) -> tuple[str, Visited]:
    return request.param, visited(request.param)


def test_formulas_equal_gymnasium_bit_for_bit(states: tuple[str, Visited]) -> None:
    env_id, seen = states
    terms = terms_of(gym.make(env_id))
    rewards, terminated = score(terms, seen.before, seen.after, seen.actions)
    assert np.array_equal(rewards, seen.rewards)
    assert np.array_equal(terminated, seen.terminated)
    assert np.array_equal(observe(terms, seen.after), seen.obs)
    if env_id == "Ant-v5":  # both outcomes are among the states
        assert 0 < seen.terminated.sum() < STATES


def test_mjwarp_steps_close_to_gymnasium_from_the_same_states(
        states: tuple[str, Visited]) -> None:
    env_id, seen = states
    env = MJWarpEnv(env_id, STATES, device="cpu")
    env.set_state(seen.qpos, seen.qvel)
    obs, rewards, terminated = env.step(seen.actions)
    env.close()
    assert np.array_equal(terminated, seen.terminated)
    positions = env.model.nq - env.terms.skipped_qpos  # obs: qpos[skipped:], qvel, (forces)
    velocities = positions + env.model.nv
    position_error = np.abs(obs[:, :positions] - seen.obs[:, :positions]).max()
    velocity_error = np.abs(obs[:, positions:velocities] - seen.obs[:, positions:velocities]).max()
    reward_errors = np.abs(rewards - seen.rewards)
    message = (f"{env_id}: positions off by {position_error:.3g}, velocities by "
               f"{velocity_error:.3g}, rewards by {reward_errors.max():.3g} (median "
               f"{np.median(reward_errors):.3g})")
    # bounds about 4x what was measured on these 1,000 states (deterministic: same states,
    # same kernels); measured HalfCheetah 1.6e-5, 2.5e-3, 5.0e-6, median 2.3e-7 (float32
    # physics); Ant 0.023, 1.97, 0.30, median 4.5e-7: its contacts and RK4 substeps round
    # otherwise on MJWarp
    bounds = {"HalfCheetah-v5": (7e-5, 1e-2, 2e-5, 1e-6), "Ant-v5": (0.1, 8.0, 1.2, 2e-6)}
    most = bounds[env_id]
    assert position_error < most[0] and velocity_error < most[1], message
    assert reward_errors.max() < most[2] and np.median(reward_errors) < most[3], message


@pytest.mark.parametrize("env_id", ENVS)
def test_reset_draws_gymnasium_reset_distribution(env_id: str) -> None:
    env = MJWarpEnv(env_id, 8, device="cpu")
    obs = env.reset(seeds=range(100, 108))
    reference = gym.make(env_id)  # a separate env: its own reset, seed by seed
    for i in range(8):
        expected_obs, _ = reference.reset(seed=100 + i)
        data = reference.unwrapped.data
        # MJWarp holds the state Gymnasium drew, in float32
        assert np.array_equal(env.current.qpos[i], data.qpos.astype(np.float32))
        assert np.array_equal(env.current.qvel[i], data.qvel.astype(np.float32))
        np.testing.assert_allclose(obs[i], expected_obs, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(env.current.qpos[0], env.current.qpos[1])  # seeds differ
    env.close()
    reference.close()


def test_a_world_steps_the_same_whatever_the_number_beside_it() -> None:
    """World 5 of 8 and the same world alone, from the same reset and the same actions:
    equal states, bit for bit (Warp's CPU device; pass 2 re-simulates a tape alone)."""
    batch, alone = MJWarpEnv("Ant-v5", 8, device="cpu"), MJWarpEnv("Ant-v5", 1, device="cpu")
    batch.reset(seeds=range(8))
    alone.reset(seeds=[5])
    actions = np.random.default_rng(3).uniform(-1, 1, (30, 8, batch.action_dim))
    for step in actions.astype(np.float32):
        batch.step(step)
        alone.step(step[5:6])
        assert np.array_equal(batch.current.qpos[5], alone.current.qpos[0])
        assert np.array_equal(batch.current.qvel[5], alone.current.qvel[0])
    assert not np.array_equal(batch.current.qpos[4], batch.current.qpos[5])
    batch.close()
    alone.close()


def test_an_env_it_does_not_support_is_refused_in_one_sentence() -> None:
    with pytest.raises(UsageError, match="supports HalfCheetah-v5, Ant-v5, not 'Hopper-v5'"):
        MJWarpEnv("Hopper-v5", 4)


def test_reset_needs_a_seed_per_world() -> None:
    env = MJWarpEnv("HalfCheetah-v5", 2, device="cpu")
    with pytest.raises(UsageError, match=r"one seed per world \(2\), not 3"):
        env.reset(seeds=[0, 1, 2])
    env.close()
