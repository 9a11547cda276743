"""Tiny registered envs for the tests (no MuJoCo): importing this module registers them.

* ``SuccessToy-v0``: 5 steps; the last step's info has ``is_success`` (True for even reset
  seeds) and ``metrics`` (including a NaN, which must reach results.json as null).
* ``NoRender-v0``: an env that declares no render modes, so it cannot make a video.
* ``FaultToy-v0``: SuccessToy that misbehaves on purpose, for the fault tests: kwargs
  ``fault`` (what goes wrong) and ``at_seed`` (the reset seed it goes wrong on; None: every
  episode). Faults: nan_reward, inf_reward, none_reward, overflow (finite rewards whose sum
  overflows), nan_success, raise_step, raise_reset, hang, crash (the process dies), slow
  (0.05 s a step, so that a test can interrupt a run in the middle).
"""

from __future__ import annotations

import os
import signal
import time

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


class FaultToy(SuccessToy):
    def __init__(self, render_mode: str | None = None, fault: str = "none",
                 at_seed: int | None = None) -> None:
        super().__init__(render_mode)
        self.fault, self.at_seed = fault, at_seed

    def _now(self) -> bool:
        return self.at_seed is None or self._seed == self.at_seed

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        if self.fault == "raise_reset" and self._now():
            raise RuntimeError(f"reset failed on purpose for seed {seed}")
        return obs, info

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        if not self._now():
            return obs, reward, term, trunc, info
        if self.fault == "slow":
            time.sleep(0.05)
        elif self._t == 3:
            if self.fault == "raise_step":
                raise ValueError(f"step 3 failed on purpose\nfor seed {self._seed}")
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "crash":
                os.kill(os.getpid(), signal.SIGKILL)
            reward = {"nan_reward": float("nan"), "inf_reward": float("inf"),
                      "none_reward": None, "overflow": 1.5e308}.get(self.fault, reward)
        if self.fault == "overflow":
            reward = 1.5e308
        if self.fault == "nan_success" and term:
            info["is_success"] = float("nan")
        return obs, reward, term, trunc, info


# SuccessToy by name ("module:Class", which Gymnasium can write into a spec's JSON, as a
# Minari dataset needs); the others by the class itself, as many users register theirs.
for _id, _entry in (("SuccessToy-v0", f"{__name__}:SuccessToy"), ("NoRender-v0", NoRender),
                    ("FaultToy-v0", FaultToy)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry)
