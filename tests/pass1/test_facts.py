"""What a pass-1 worker reads off its env for the protocol card, on real envs: MuJoCo's
control rate (timestep x frame skip), the time limit, spaces with ranges, the wrappers
``make`` put around it and what a policy-side wrapper changes."""

from __future__ import annotations

import gymnasium as gym

from rolltape.pass1.facts import env_facts


def test_a_mujoco_env_s_control_rate_horizon_and_spaces():
    env = gym.make("Hopper-v5", frame_skip=8, max_episode_steps=40)
    try:
        facts = env_facts(env)
    finally:
        env.close()
    assert facts["control"] == {"dt": 0.016, "frame_skip": 8, "timestep": 0.002,
                                "rate_hz": 62.5}
    assert facts["horizon"] == 40
    assert facts["observation"]["obs"] == {"type": "Box", "shape": [11], "dtype": "float64",
                                           "low": "-inf", "high": "inf"}
    assert facts["action"]["action"]["low"] == -1.0
    assert facts["env_wrappers"][0] == {"name": "TimeLimit",
                                        "kwargs": {"max_episode_steps": 40}}
    assert "policy_observation" not in facts


def test_what_the_policy_sees_through_a_wrapper():
    env = gym.make("CartPole-v1")
    seen = gym.wrappers.TransformObservation(
        env, lambda o: o[:2], gym.spaces.Box(-5.0, 5.0, (2,), "float32"))
    try:
        facts = env_facts(env, seen=seen)
    finally:
        seen.close()
    assert facts["control"]["frame_skip"] is None and facts["horizon"] == 500
    assert facts["observation"]["obs"]["shape"] == [4]
    assert facts["policy_observation"]["obs"] == {"type": "Box", "shape": [2],
                                                  "dtype": "float32", "low": -5.0, "high": 5.0}
    assert facts["policy_action"]["action"] == {"type": "Discrete", "shape": [],
                                                "dtype": "int64", "n": 2}
