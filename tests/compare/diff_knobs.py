"""What tests/compare/test_diff.py turns one knob with: a deterministic policy of Hopper's
observation (act), a dot-on-a-picture env with a dict observation and is_success (Dot-v0)
and its policy that reads the picture (look), and policy-side wrappers (an observation
reversal, a vertical image flip, an action gain on one or every dimension). The pass-1
workers import it by name (PYTHONPATH), as a user's own module."""
import gymnasium as gym
import numpy as np

_W = np.random.default_rng(0).normal(size=(3, 11)) * 0.3


def act(obs):
    return np.tanh(_W @ np.asarray(obs, dtype=np.float64)).astype(np.float32)


class ReverseObs(gym.ObservationWrapper):
    def observation(self, obs):
        return obs[::-1].copy()


class ActionGain(gym.ActionWrapper):
    def __init__(self, env, gain=1.0, dim=None):
        super().__init__(env)
        self.gain, self.dim = gain, dim

    def action(self, action):
        a = np.array(action, copy=True)
        if self.dim is None:
            a = a * self.gain
        else:
            a[self.dim] = a[self.dim] * self.gain
        return a


class Dot(gym.Env):
    """A dot on an 8x8 picture, moved by 2-D actions; success: the dot is on the centre."""

    metadata = {"render_modes": []}

    def __init__(self, speed=0.25, upside_down=False):
        self.speed, self.upside_down = speed, upside_down
        self.observation_space = gym.spaces.Dict({
            "pixels": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "state": gym.spaces.Box(-1.0, 1.0, (2,), np.float64)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self):
        pixels = np.zeros((8, 8, 3), np.uint8)
        r, c = np.clip(((self.pos + 1) * 4).astype(int), 0, 7)
        pixels[r, c] = (255, 128, 0)
        if self.upside_down:  # a camera mounted the other way up
            pixels = pixels[::-1].copy()
        return {"pixels": pixels, "state": self.pos.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2)
        return self._obs(), {}

    def step(self, action):
        self.pos = np.clip(self.pos + self.speed * np.asarray(action, np.float64), -1, 1)
        near = bool(np.abs(self.pos).max() < 0.2)
        return self._obs(), float(near), False, False, {"is_success": near}


gym.register("Dot-v0", entry_point=Dot, max_episode_steps=12)


def look(obs):
    """Move the dot toward the picture's centre, as seen in the pixels."""
    r, c = np.argwhere(obs["pixels"][..., 0] > 0)[0]
    return np.sign(np.array([3.5 - r, 3.5 - c], np.float32))


class FlipPixels(gym.ObservationWrapper):
    def observation(self, obs):
        return {**obs, "pixels": obs["pixels"][::-1].copy()}
