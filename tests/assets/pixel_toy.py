"""``PixelToy-v0``: a tiny env whose observation holds an image drawn "with the GL backend"
(no MuJoCo): a camera image ``pixels/top`` (8 x 8 x 3 uint8) whose pixels carry a tint
made from ``MUJOCO_GL`` in the process that steps it, as two rasterizers may differ in a
few pixels, beside ``agent_pos`` (float64), which does not depend on the backend. 6 steps.
Importing this module registers it."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces

STEPS = 6


class PixelToy(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        image = spaces.Box(0, 255, shape=(8, 8, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict({
            "pixels": spaces.Dict({"top": image}),
            "agent_pos": spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float64)})
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._t = 0
        self._pos = np.zeros(2)

    def _obs(self) -> dict:
        tint = len(os.environ.get("MUJOCO_GL", ""))  # the "rasterizer": egl 3, osmesa 6
        top = np.full((8, 8, 3), 10 * self._t + tint, np.uint8)
        return {"pixels": {"top": top}, "agent_pos": self._pos.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._pos = self.np_random.uniform(-1, 1, size=2)
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        self._pos = self._pos + np.asarray(action, dtype=np.float64).reshape(2)
        return self._obs(), -float(np.abs(self._pos).sum()), False, self._t >= STEPS, {}

    def render(self):
        return self._obs()["pixels"]["top"]


if "PixelToy-v0" not in gym.registry:
    gym.register("PixelToy-v0", entry_point=f"{__name__}:PixelToy")
