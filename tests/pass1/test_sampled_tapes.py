"""Sampled (``--stochastic``) SB3 policies give the same tape for a seed whatever else the
worker played before it: an episode played alone, and the same episode inside runs of 1 and
2 spawned workers, hold the same actions. DQN explores with numpy's global generator and
the model's action space (epsilon-greedy), SAC and PPO sample from torch's; each is seeded
per episode from the episode's seed (``SB3Policy.reset``)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape import Tape, evaluate
from rolltape.pass1.rollout import record_episode
from rolltape.policies import load_policy

EPISODES = 4
SEED = 451
STEPS = 25  # Pendulum's episodes are cut here; CartPole's end sooner with these policies
CASES = [("DQN", "CartPole-v1"), ("SAC", "Pendulum-v1"), ("PPO", "Pendulum-v1")]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Untrained models saved by SB3 itself (a sampled policy need not be a good one). The
    DQN explores half the time (a saved exploration rate), so its numpy draws matter."""
    import stable_baselines3 as sb3

    folder = tmp_path_factory.mktemp("sampled")
    out = {}
    for algo, env_id in CASES:
        env = gym.make(env_id)
        model = getattr(sb3, algo)("MlpPolicy", env, seed=0, device="cpu",
                                   policy_kwargs=dict(net_arch=[16, 16]))
        if algo == "DQN":
            model.exploration_rate = 0.5
        out[algo] = folder / f"{algo.lower()}.zip"
        model.save(out[algo])
        env.close()
    return out


def played_alone(checkpoint: Path, env_id: str, seed: int) -> np.ndarray:
    """The actions of one episode played by a fresh policy, in this process, alone."""
    env = gym.make(env_id, max_episode_steps=STEPS)
    try:
        policy = load_policy(f"sb3:{checkpoint}", env, deterministic=False)
        return np.asarray(record_episode(env, policy, seed, None, None)["actions"])
    finally:
        env.close()


@pytest.mark.parametrize("algo,env_id", CASES, ids=[a for a, _ in CASES])
def test_a_sampled_episode_is_the_same_alone_and_in_runs_of_one_and_two_workers(
        checkpoints, tmp_path, algo, env_id):
    runs = {w: evaluate(env_id, f"sb3:{checkpoints[algo]}", deterministic=False,
                        episodes=EPISODES, seed=SEED, max_episode_steps=STEPS, workers=w,
                        report=False, out=tmp_path / f"w{w}") for w in (1, 2)}
    actions = {w: [Tape.load(run.path / "tapes" / f"policy-{i:04d}.npz").actions
                   for i in range(EPISODES)] for w, run in runs.items()}
    # The last episode of the one-worker run follows 3 others in that worker; alone, it is
    # the first (and with 2 workers, the second) its policy plays.
    alone = played_alone(checkpoints[algo], env_id, SEED + EPISODES - 1)
    assert np.array_equal(alone, actions[1][-1]) and np.array_equal(alone, actions[2][-1])
    for i in range(EPISODES):
        assert np.array_equal(actions[1][i], actions[2][i]), f"episode {i}"
    # Sampled for real: the episodes differ from one another.
    assert not all(np.array_equal(actions[1][0][:5], a[:5]) for a in actions[1][1:])
