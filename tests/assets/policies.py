"""Policies of every shape ``MODULE:ATTR`` / ``FILE.py:ATTR`` accepts, for HalfCheetah-v5.

Each one is a deterministic function of the observation, so a test can recompute the action
that pass 1 must have sent: ``expected_action(obs, kind, deterministic)``.
"""

from __future__ import annotations

import os

import numpy as np

GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM")


def expected_action(obs, kind: str, deterministic: bool = True) -> np.ndarray:
    base = np.tanh(np.asarray(obs, dtype=np.float64)[:6]).astype(np.float32)
    if kind == "predict":
        return -base if deterministic else -0.5 * base
    return base


def function(obs):
    """(a) a plain function obs -> action."""
    return expected_action(obs, "function")


class Predictor:
    """(b) an SB3-style object: predict(obs, deterministic=...) -> (action, state)."""

    def predict(self, obs, state=None, episode_start=None, deterministic: bool = False):
        return expected_action(obs, "predict", deterministic), state


predictor = Predictor()


def make_function():
    """(c) a zero-argument factory returning a function."""
    return function


def make_predictor(scale: float = 1.0):
    """(c) a factory (all parameters defaulted) returning an SB3-style object."""
    return Predictor()


not_a_policy = 42


def gl_guard(obs):
    """Refuses to act if a GL variable reached the pass-1 process."""
    leaked = {k: os.environ[k] for k in GL_VARIABLES if k in os.environ}
    if leaked:
        raise RuntimeError(f"GL variables reached the policy process: {leaked}")
    return np.zeros(6, dtype=np.float32)


def cartpole_balance(obs):
    """CartPole-v1: push toward the side the pole falls to (about 200-500 return; random
    plays about 22), for an --until comparison that is decided early."""
    return int(3.0 * obs[2] + obs[3] > 0)


def cartpole_left(obs):
    """CartPole-v1: always push left. Its mirror ``cartpole_right`` does as well on
    average: a pair that --until decided never tells apart."""
    return 0


def cartpole_right(obs):
    return 1
