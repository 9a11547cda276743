"""Tiny registered envs for the tests (no MuJoCo): importing this module registers them.

* ``SuccessToy-v0``: 5 steps; the last step's info has ``is_success`` (True for even reset
  seeds) and ``metrics`` (including a NaN, which must reach results.json as null).
* ``NoRender-v0``: an env that declares no render modes, so it cannot make a video.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

STEPS = 5


class SuccessToy(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._seed: int | None = None
        self._t = 0
        self._x = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed = seed
        self._t = 0
        self._x = float(self.np_random.uniform(-1, 1))
        return np.array([self._x, 0.0]), {}

    def step(self, action):
        self._t += 1
        self._x += float(np.asarray(action).reshape(-1)[0])
        reward = 0.1 * self._t - abs(self._x)
        done = self._t >= STEPS
        info = {}
        if done:
            info["is_success"] = np.bool_(self._seed is not None and self._seed % 2 == 0)
            info["metrics"] = {"final_x": np.float32(self._x), "seed": np.int64(self._seed or 0),
                               "undefined": float("nan")}
        return np.array([self._x, float(self._t)]), reward, done, False, info

    def render(self):
        frame = np.zeros((16, 16, 3), np.uint8)
        frame[:, : 1 + self._t] = 255
        return frame


class NoRender(SuccessToy):
    metadata = {"render_modes": [], "render_fps": 10}

    def render(self):
        raise NotImplementedError


for _id, _cls in (("SuccessToy-v0", SuccessToy), ("NoRender-v0", NoRender)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls)
