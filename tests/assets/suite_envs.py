"""A tiny env with a known success pattern, for the suite tests (no MuJoCo).

``SuccessPattern(report=..., at=..., key=..., steps=...)``: ``steps`` steps (terminated at
the last); an episode reset with a seed divisible by 3 succeeds. ``report`` says how the
env tells it in ``info[key]``:

* ``end``: False before step ``at``, the outcome from step ``at`` on (so also at the end);
* ``mid``: the outcome at step ``at`` only, False at every other step (success at some
  step, never at the end);
* ``once``: the outcome at step ``at``, the key absent at every other step (unknown at the
  end);
* ``never``: the key never appears.

Rewards: -1 each step, except ``seed % 4`` at step 2, so the episode's max reward is
``seed % 4`` and its return ``seed % 4 - (steps - 1)``. The last step's info has
``metrics = {"score": seed % 5, "ok": True}``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class SuccessPattern(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, report: str = "end", at: int = 3, key: str = "is_success",
                 steps: int = 6, render_mode: str | None = None) -> None:
        self.report, self.at, self.key, self.steps = report, at, key, steps
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 100.0, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self._seed = 0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed, self._t = seed or 0, 0
        return np.array([float(self._seed % 7), 0.0]), {}

    def step(self, action):
        self._t += 1
        won = self._seed % 3 == 0
        reward = float(self._seed % 4) if self._t == 2 else -1.0
        info: dict = {}
        if self.report == "end":
            info[self.key] = won if self._t >= self.at else False
        elif self.report == "mid":
            info[self.key] = won if self._t == self.at else False
        elif self.report == "once" and self._t == self.at:
            info[self.key] = won
        done = self._t >= self.steps
        if done:
            info["metrics"] = {"score": self._seed % 5, "ok": True}
        return np.array([float(self._seed % 7), float(self._t + int(action))]), reward, \
            done, False, info

    def render(self):
        frame = np.zeros((16, 16, 3), np.uint8)
        frame[:, : 1 + self._t] = 255
        return frame


class Lever(gym.Env):
    """An env whose return depends on the policy, for comparisons of suite runs.

    Each step the observation is ``[target, t]`` with ``target = (seed + t) % 2``; pulling
    the target lever earns ``scale``, the other lever nothing, so tasks with another
    ``scale`` have other reward scales (what normalized scores are for). ``steps`` steps,
    terminated at the last; ``info["is_success"]`` at the end: more than half the pulls hit.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, scale: float = 1.0, steps: int = 8, render_mode: str | None = None) -> None:
        self.scale, self.steps, self.render_mode = scale, steps, render_mode
        self.observation_space = spaces.Box(0.0, 1000.0, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self._seed = self._t = self._hits = 0

    def _obs(self) -> np.ndarray:
        return np.array([float((self._seed + self._t) % 2), float(self._t)])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed, self._t, self._hits = seed or 0, 0, 0
        return self._obs(), {}

    def step(self, action):
        hit = int(action) == (self._seed + self._t) % 2
        self._hits += hit
        self._t += 1
        done = self._t >= self.steps
        info = {"is_success": self._hits * 2 > self.steps} if done else {}
        return self._obs(), self.scale * hit, done, False, info

    def render(self):
        frame = np.zeros((16, 16, 3), np.uint8)
        frame[:, : 1 + self._t] = 255
        return frame


def pull_target(obs) -> int:
    """Lever's best policy: always the target lever."""
    return int(obs[0])


def pull_mostly(obs) -> int:
    """Lever: the target lever except every third step (a policy between random and best)."""
    target = int(obs[0])
    return 1 - target if int(obs[1]) % 3 == 2 else target


class ComesAndGoes(gym.Env):
    """An env that keeps running after success, whose success comes and goes: ``steps``
    steps (terminated at the last); ``info[key]`` is True only at step ``at`` for a seed
    with ``seed % 3 == 0``, from step ``at`` on for ``seed % 3 == 1``, and never for the
    rest. So on seeds 0..11, 4 episodes succeed on their terminal step (LeRobot's rule) and
    8 at some step. Rewards are ``scale`` times (seed % 5) at step 2, else 0."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, steps: int = 10, at: int = 5, key: str = "is_success",
                 scale: float = 1.0, render_mode: str | None = None) -> None:
        self.steps, self.at, self.key, self.scale = steps, at, key, scale
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 100.0, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self._seed = self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed, self._t = seed or 0, 0
        return np.array([float(self._seed % 7), 0.0]), {}

    def step(self, action):
        self._t += 1
        kind = self._seed % 3
        won = (kind == 0 and self._t == self.at) or (kind == 1 and self._t >= self.at)
        reward = self.scale * float(self._seed % 5) if self._t == 2 else 0.0
        done = self._t >= self.steps
        return np.array([float(self._seed % 7), float(self._t + int(action))]), reward, \
            done, False, {self.key: won}

    def render(self):
        frame = np.zeros((16, 16, 3), np.uint8)
        frame[:, : 1 + self._t] = 255
        return frame
