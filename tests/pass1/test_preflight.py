"""Before pass 1: an env its kwargs cannot build, a checkpoint whose actions do not fit the
env, and a user's factory that cannot draw are each one sentence with exit 2 and no run
folder (issue 34, items 13 and 14), never a pass 1 that fails with an empty resumable run."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import run_cli


def refused(res, run: Path) -> str:
    """The one line a refusal prints (and that it left nothing behind)."""
    assert res.returncode == 2, res.stderr
    # (ALE's emulator prints its banner from C when a game is built: not rolltape's.)
    lines = [x for x in res.stderr.strip().splitlines()
             if not x.startswith(("A.L.E:", "[Powered by Stella]"))]
    assert "Traceback" not in res.stderr and len(lines) == 1, res.stderr
    assert not run.exists()
    return lines[0]


@pytest.mark.parametrize("kwarg, words", [
    ("frameskip=0", ["{'frameskip': 0}", "frameskip must be positive", "--env-kwargs"]),
    ("mode=999", ["{'mode': 999}", "Invalid game mode", "--env-kwargs"]),
])
def test_atari_kwargs_are_tried_before_pass_1(kwarg: str, words: list[str], tmp_path) -> None:
    res = run_cli("eval", "ALE/Pong-v5", "--env-kwargs", kwarg, "-n", "2", "-o",
                  str(tmp_path / "r"), "-q")
    text = refused(res, tmp_path / "r")
    assert all(w in text for w in words), text


def test_breakout_checkpoint_is_refused_on_pong(tmp_path) -> None:
    """Discrete(4) and Discrete(6) have the same shape: their sizes must be compared."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    venv = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=1, seed=0), 4)
    model = tmp_path / "breakout.zip"
    PPO("CnnPolicy", venv, n_steps=64, seed=0).save(model)  # untrained: its spaces matter
    venv.close()
    res = run_cli("eval", "PongNoFrameskip-v4", "--policy", f"sb3:{model}", "--wrapper",
                  "atari", "--frame-stack", "4", "-n", "1", "-o", str(tmp_path / "r"), "-q")
    text = refused(res, tmp_path / "r")
    assert "Discrete(4)" in text and "Discrete(6)" in text and "PongNoFrameskip-v4" in text


FACTORIES = """\
import gymnasium as gym


def plain():
    return gym.make("CartPole-v1")
"""


def test_factory_without_render_mode_is_refused_before_pass_1(tmp_path) -> None:
    (tmp_path / "myenvs.py").write_text(FACTORIES)
    res = run_cli("eval", "myenvs.py:plain", "-n", "3", "--video", "1", "-o", "r", "-q",
                  cwd=tmp_path)
    text = refused(res, tmp_path / "r")
    assert "render_mode" in text and "--env-kwargs" not in text  # none were given
    # Without a video it needs no render_mode (a factory that takes it draws: the README's).
    assert run_cli("eval", "myenvs.py:plain", "-n", "1", "-o", "a", "-q",
                   cwd=tmp_path).returncode == 0


MARKED = """\
import gymnasium as gym


class Marked(gym.Wrapper):
    def reset(self, **kwargs):
        with open("played.txt", "a") as f:  # an episode began
            f.write("x")
        return self.env.reset(**kwargs)


def make(render_mode=None):
    return Marked(gym.make("CartPole-v1", render_mode=render_mode))
"""


def test_a_suite_task_its_env_cannot_build_is_refused_before_any_task_plays(tmp_path) -> None:
    """The bad task comes last: every task's env is built once before pass 1, so the first
    task (whose env marks each episode it begins) plays none."""
    (tmp_path / "marked.py").write_text(MARKED)
    (tmp_path / "bench.yaml").write_text(
        "bench:\n  tasks:\n    fine: {env: 'marked.py:make'}\n"
        "    bad: {env: ALE/Pong-v5, kwargs: {frameskip: 0}}\n")
    res = run_cli("eval", "--suite", "bench.yaml", "-n", "2", "-o", "r", "-q", cwd=tmp_path)
    text = refused(res, tmp_path / "r")
    assert "ALE/Pong-v5" in text and "frameskip" in text, text
    assert not (tmp_path / "played.txt").exists()


PADDED = """\
import gymnasium as gym
import numpy as np


class Padded(gym.ObservationWrapper):
    \"\"\"Declares the env's observation space but returns one number more.\"\"\"

    def observation(self, observation):
        return np.append(observation, 0.0).astype(np.float32)
"""


def test_a_wrapper_chain_the_network_cannot_take_is_refused_before_pass_1(tmp_path) -> None:
    """Its declared space fits the checkpoint; what it returns does not."""
    from stable_baselines3 import PPO

    PPO("MlpPolicy", "CartPole-v1", seed=0).save(tmp_path / "cp.zip")
    (tmp_path / "badwrap.py").write_text(PADDED)
    res = run_cli("eval", "CartPole-v1", "--policy", "sb3:cp.zip", "--wrapper",
                  "badwrap:Padded", "-n", "3", "-o", "r", "-q", cwd=tmp_path)
    text = refused(res, tmp_path / "r")
    assert "cannot act on what its wrappers (badwrap:Padded)" in text and "1x5" in text
