"""MuJoCo Warp pass 1's batched env (issue 41) against Gymnasium's own HalfCheetah-v5 and
Ant-v5, on the CPU (Warp's "cpu" device; no GPU anywhere).

- the formulas: rewards, terminations and observations computed from Gymnasium's own MjData
  quantities equal Gymnasium's, bit for bit, on 200 states per env;
- the physics: MJWarp stepped from the same 200 states stays within a measured float32
  tolerance of Gymnasium (HalfCheetah), and with the same terminations (Ant, whose contact
  forces and RK4 steps differ more: the numbers are in the assertions' messages);
- the reset distribution: world i's state is Gymnasium's ``reset(seed=seed + i)``;
- 64 worlds under a fixed linear policy: per-world returns and lengths equal those of a plain
  MJWarp stepping loop whose rewards come from Gymnasium's own reward code; each world is an
  ordinary tape (HalfCheetah's replay on CPU MuJoCo with Gymnasium stays close to it).

Warp compiles its kernels into a fresh folder per run (cold, ~30 s for both envs on two
cores, paid once by the module's first MJWarp test), so nothing is left in the user's cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape.pass1.mjwarp import (
    MJWarpEnv,
    Physics,
    observe,
    play,
    score,
    terms_of,
    world_tapes,
)
from rolltape.tape import Tape

ENVS = ("HalfCheetah-v5", "Ant-v5")
STATES = 200


@pytest.fixture(scope="module", autouse=True)
def warp_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Warp's kernel cache in a fresh folder: every run compiles cold (a bounded, measured
    cost) and writes nothing into ~/.cache."""
    import warp as wp

    folder = tmp_path_factory.mktemp("warp-kernels")
    wp.config.kernel_cache_dir = str(folder)
    wp.config.quiet = True
    wp.init()
    return folder


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
    """200 states from Gymnasium episodes under uniform random actions (seeded), each then
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
    # bounds about 4x what was measured on these states (deterministic: same states, same
    # kernels); measured HalfCheetah 4.1e-6, 4.5e-4, 4.5e-6 (float32 physics); Ant 0.013,
    # 0.82, 0.085, median 3.7e-7: its contacts and RK4 substeps round otherwise on MJWarp
    bounds = {"HalfCheetah-v5": (2e-5, 2e-3, 2e-5, 1e-6), "Ant-v5": (0.05, 3.0, 0.35, 1e-5)}
    most = bounds[env_id]
    assert position_error < most[0] and velocity_error < most[1], message
    assert reward_errors.max() < most[2] and np.median(reward_errors) < most[3], message


@pytest.mark.parametrize("env_id", ENVS)
def test_reset_draws_gymnasium_reset_distribution(env_id: str) -> None:
    env = MJWarpEnv(env_id, 8, device="cpu")
    obs = env.reset(seed=100)
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


def linear_policy(obs_dim: int, action_dim: int) -> Callable[[np.ndarray], np.ndarray]:
    """A fixed linear policy, applied row by row (a batched matrix product could round
    differently from one row's, and both loops below must see the same actions)."""
    weights = np.random.default_rng(7).normal(0.0, 0.1, (action_dim, obs_dim))
    return lambda obs: np.stack([np.clip(weights @ row, -1, 1) for row in obs]).astype(np.float32)


def plain_loop(env_id: str, act: Callable[[np.ndarray], np.ndarray], seed: int, worlds: int,
               steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-world (returns, lengths) from mujoco_warp's own API, with each world's reward,
    observation and termination computed by Gymnasium's env code on an MjData holding that
    world's MJWarp state."""
    import mujoco_warp as mjwarp
    import warp as wp

    env = gym.make(env_id)
    base = env.unwrapped
    starts = []
    for i in range(worlds):
        env.reset(seed=seed + i)
        starts.append((base.data.qpos.copy(), base.data.qvel.copy()))
    with wp.ScopedDevice("cpu"):
        model = mjwarp.put_model(base.model)
        data = mjwarp.make_data(base.model, nworld=worlds)
        data.qpos.assign(np.stack([q for q, _ in starts]).astype(np.float32))
        data.qvel.assign(np.stack([v for _, v in starts]).astype(np.float32))
        mjwarp.forward(model, data)

    def world_obs(w: int, arrays: dict[str, np.ndarray]) -> np.ndarray:
        for name, values in arrays.items():
            getattr(base.data, name)[:] = values[w]
        return base._get_obs()

    fields = ("qpos", "qvel", "xpos", "cfrc_ext")
    now = {name: getattr(data, name).numpy().astype(np.float64) for name in fields}
    now["cfrc_ext"][:] = 0.0  # as after Gymnasium's reset (mj_resetData zeroes it)
    obs = np.stack([world_obs(w, now) for w in range(worlds)])
    returns, lengths = np.zeros(worlds), np.full(worlds, steps)
    done = np.zeros(worlds, dtype=bool)
    for t in range(steps):
        actions = act(obs)
        with wp.ScopedDevice("cpu"):
            data.ctrl.assign(actions)
            for _ in range(base.frame_skip):
                mjwarp.step(model, data)
            mjwarp.rne_postconstraint(model, data)
        then, now = now, {name: getattr(data, name).numpy().astype(np.float64) for name in fields}
        rows = []
        for w in range(worlds):
            rows.append(world_obs(w, now))
            if env_id == "HalfCheetah-v5":
                velocity = (now["qpos"][w, 0] - then["qpos"][w, 0]) / base.dt
            else:
                velocity = ((now["xpos"][w, base._main_body, :2]
                             - then["xpos"][w, base._main_body, :2]) / base.dt)[0]
            reward, _ = base._get_rew(velocity, actions[w])
            ended = env_id == "Ant-v5" and not base.is_healthy and base._terminate_when_unhealthy
            if not done[w]:
                returns[w] += reward
                if ended:
                    done[w], lengths[w] = True, t + 1
        obs = np.stack(rows)
    env.close()
    return returns, lengths


@pytest.mark.parametrize("env_id", ENVS)
def test_64_worlds_return_what_a_plain_mjwarp_loop_returns_as_tapes(
        env_id: str, tmp_path: Path) -> None:
    env = MJWarpEnv(env_id, 64, device="cpu")
    obs_dim = env.reset(seed=0).shape[1]
    act = linear_policy(obs_dim, env.action_dim)
    steps = play(env, act, seed=500, max_steps=20)
    tapes = world_tapes(env, steps, seed=500, max_steps=20)
    env.close()
    returns, lengths = plain_loop(env_id, act, seed=500, worlds=64, steps=20)
    assert np.array_equal(steps.lengths, lengths)
    assert np.array_equal(steps.returns(), returns)
    if env_id == "Ant-v5":  # the policy makes some Ants jump out of the healthy range
        assert 0 < (lengths < 20).sum() < 64
    # each world an ordinary tape: its seed, its steps up to its end, its states and flags
    for world in (0, 63, int(np.argmin(lengths))):
        tape = Tape.load(tapes[world].save(tmp_path / f"world-{world}.npz"))
        length = int(lengths[world])
        assert tape.seed == 500 + world and tape.length == length
        assert tape.meta["backend"] == "mjwarp" and tape.env["max_episode_steps"] == 20
        assert np.array_equal(tape.actions, steps.actions[:length, world])
        assert np.array_equal(tape.rewards, steps.rewards[:length, world])
        assert np.array_equal(tape.qpos, steps.qpos[:length + 1, world])
        assert tape.terminated[-1] == (length < 20) and tape.truncated[-1] == (length == 20)
        assert not tape.terminated[:-1].any() and not tape.truncated[:-1].any()
    if env_id == "HalfCheetah-v5":
        # replayed on CPU MuJoCo through Gymnasium: the first step from each world's reset
        # state within float32 (as test_mjwarp_steps_close...), and no outcome flips
        reference = gym.make(env_id, max_episode_steps=20)
        for tape in tapes:
            reference.reset(seed=tape.seed)
            rewards = [reference.step(a)[1] for a in tape.actions]
            assert abs(rewards[0] - tape.rewards[0]) < 2e-5
            assert np.isfinite(rewards).all() and len(rewards) == tape.length
        reference.close()


def test_an_env_it_does_not_support_is_refused_in_one_sentence() -> None:
    from rolltape.errors import UsageError

    with pytest.raises(UsageError, match="supports HalfCheetah-v5, Ant-v5, not 'Hopper-v5'"):
        MJWarpEnv("Hopper-v5", 4)
