"""A MuJoCo env whose success becomes impossible after a known irreversible event, and
policies for the branch tests (``rolltape branch``).

``Ledge-v0``: a block slides on a table along x (damped). An action of at most 0.98 does
nothing; above 0.98 (1% of a uniform random policy's actions) it kicks the block one way
with a force that always carries it past the ledge at x = 1, from where nothing brings it
back. Success (``info["is_success"]``, judged at the episode's end) is the block still on
the table after 30 steps. So an episode whose first kick is at step k is decided there:
from the state at t <= k the random policy succeeds with probability 0.99^(30 - t) >= 0.74,
from t >= k + 1 never.
"""

from __future__ import annotations

import os
import tempfile

import gymnasium as gym
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

KICK = 60.0  # newtons for one step: the block travels ~2.7 before the damping stops it
LEDGE = 1.0
XML = """
<mujoco model="ledge">
  <option timestep="0.02"/>
  <worldbody>
    <light pos="0 0 3"/>
    <geom name="table" type="box" size="1 0.5 0.05" pos="0 0 -0.05" rgba=".6 .5 .4 1"/>
    <body name="block" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0" damping="2"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" ctrllimited="true" ctrlrange="-100 100"/></actuator>
</mujoco>
"""


def _model_file() -> str:
    path = os.path.join(tempfile.gettempdir(), "rolltape-test-ledge.xml")
    if not os.path.exists(path):
        with open(path + f".{os.getpid()}", "w") as f:
            f.write(XML)
        os.replace(path + f".{os.getpid()}", path)
    return path


class Ledge(MujocoEnv):
    metadata = {"render_modes": ["human", "rgb_array", "depth_array", "rgbd_tuple"],
                "render_fps": 10}

    def __init__(self, **kwargs):
        space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        MujocoEnv.__init__(self, _model_file(), 5, observation_space=space, **kwargs)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action):
        kick = KICK if float(action[0]) > 0.98 else 0.0
        self.do_simulation(np.array([kick]), self.frame_skip)
        x = float(self.data.qpos[0])
        on = x < LEDGE
        return self._get_obs(), float(on), False, False, {"is_success": on}

    def reset_model(self):
        self.set_state(self.init_qpos, self.init_qvel)
        return self._get_obs()

    def _get_obs(self):
        return np.concatenate([self.data.qpos, self.data.qvel]).astype(np.float64)


gym.register(id="Ledge-v0", entry_point=Ledge, max_episode_steps=30)


def pusher(obs):
    """A deterministic Pusher-v5 policy (a function of the observation)."""
    return np.tanh(np.asarray(obs, dtype=np.float64)[:7] * 0.5).astype(np.float32)


class NoisyLedge(Ledge):
    """Ledge with a push drawn from the env's generator at every step: its state is more
    than MuJoCo's (the generator's position), so a branch cannot restore it faithfully."""

    def step(self, action):
        self.data.qvel[0] += self.np_random.normal(0.0, 0.01)
        return super().step(action)


gym.register(id="NoisyLedge-v0", entry_point=NoisyLedge, max_episode_steps=30)


def pong(obs):
    """A deterministic ALE/Pong-v5 policy of the raw screen (no wrappers)."""
    return int(np.asarray(obs)[34:194:4, ::4, 0].astype(np.int64).sum()) % 6


def maze(obs):
    """A deterministic PointMaze policy (the ``mazes`` suite): towards the goal, damped."""
    to_goal = np.asarray(obs["desired_goal"], np.float64) - obs["achieved_goal"]
    velocity = np.asarray(obs["observation"], np.float64)[2:4]
    return np.clip(2.0 * to_goal - 0.5 * velocity, -1.0, 1.0).astype(np.float32)


def adroit_door(obs):
    """A deterministic AdroitHandDoor policy (the ``adroit`` suite's door: 39 observations,
    28 actuators): a fixed function of the observation."""
    return np.tanh(np.asarray(obs, dtype=np.float64)[:28] * 0.3).astype(np.float32)


class CountingLedge(Ledge):
    """Ledge whose observation ends with the steps taken since the reset, a count the
    env keeps outside MuJoCo's state: restored at step t > 1, its first observation
    differs from pass 1's while its physics, reward and flags agree."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)

    def reset_model(self):
        self.count = 0
        return super().reset_model()

    def step(self, action):
        self.count += 1
        return super().step(action)

    def _get_obs(self):
        return np.append(super()._get_obs(), float(getattr(self, "count", 0)))


gym.register(id="CountingLedge-v0", entry_point=CountingLedge, max_episode_steps=30)
