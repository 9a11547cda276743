"""Meta-World tasks as LeRobot's Meta-World wrapper plays them, for the ``metaworld_*`` suites.

The suites' env is ``rolltape.suites.metaworld:MetaWorld-v3`` with ``task=NAME`` (a
Meta-World v3 task, e.g. ``reach-v3``). It runs only in the benchmark's own venv
(``rolltape suites install metaworld``: Meta-World runs on MuJoCo 3.3, which rolltape's own
environment cannot hold); importing this module imports neither metaworld nor mujoco, so the
orchestrator can name the env and register its id without them.

The rules follow LeRobot's ``lerobot.envs.metaworld.MetaworldEnv`` (read, not copied):

- the task variation: ``MT1(task, seed=42)`` and its first train task, with the random
  vector unfrozen and seeded, so ``reset(seed=s)`` decides the object and goal positions;
- an episode ends (``terminated``) when Meta-World reports ``success`` (or ends it itself),
  and is truncated by Meta-World at 500 steps (``max_path_length``), LeRobot's rollout cap;
- ``info["is_success"]`` is Meta-World's ``success`` as a bool.

Observations: ``obs_type="state"`` (default) is Meta-World's 39-number observation, which
its scripted experts read (LeRobot has no state mode); ``"pixels_agent_pos"`` is LeRobot's
``{"pixels": corner2 image (flipped as LeRobot flips it), "agent_pos": obs[:4]}``.

May import: gymnasium, numpy; metaworld and mujoco only inside the env (benchmark venv).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "MetaWorld-v3"
MODULE_ENV = f"rolltape.suites.metaworld:{ENV_ID}"
MAX_PATH_LENGTH = 500  # Meta-World's own truncation, and LeRobot's rollout cap
TASK_SEED = 42  # LeRobot's MT1 seed: which task variation family each task plays
CAMERA = "corner2"



class MetaWorldEnv(gym.Env):
    """One Meta-World task, its variation fixed by LeRobot's rule, success as LeRobot reads it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 80}

    def __init__(self, task: str, obs_type: str = "state", render_mode: str | None = "rgb_array",
                 width: int = 480, height: int = 480) -> None:
        if obs_type not in ("state", "pixels_agent_pos"):
            raise ValueError(f"obs_type must be 'state' or 'pixels_agent_pos', got {obs_type!r}.")
        self.task, self.obs_type, self.render_mode = task, obs_type, render_mode
        # The spaces are rolltape's, the same on both sides: the orchestrator builds a shell
        # of this env (no metaworld there) for the spaces a served session is checked against.
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        if obs_type == "state":
            self.observation_space = spaces.Box(-np.inf, np.inf, (39,), np.float64)
        else:
            self.observation_space = spaces.Dict({
                "pixels": spaces.Box(0, 255, (height, width, 3), np.uint8),
                "agent_pos": spaces.Box(-1000.0, 1000.0, (4,), np.float64)})
        self._env: Any = None
        try:
            import metaworld  # type: ignore[import-not-found]  # only the benchmark venv's
        except ImportError:
            return  # a shell: its spaces only; reset and step refuse
        if task not in metaworld.ALL_V3_ENVIRONMENTS:
            raise ValueError(f"'{task}' is not a Meta-World v3 task.")
        mt1 = metaworld.MT1(task, seed=TASK_SEED)
        env = mt1.train_classes[task](render_mode="rgb_array", camera_name=CAMERA,
                                      width=width, height=height)
        env.set_task(mt1.train_tasks[0])
        env.model.cam_pos[2] = [0.75, 0.075, 0.7]  # LeRobot's corner2 placement
        env.reset()
        env._freeze_rand_vec = False  # each reset draws new positions...
        env.seeded_rand_vec = True  # ...from the seed reset() was given
        self._env = env

    def _sim(self) -> Any:
        if self._env is None:
            raise RuntimeError("A Meta-World env steps only in its own venv (`rolltape suites "
                               "install metaworld`); rolltape serves it from there.")
        return self._env

    @property
    def model(self) -> Any:  # the MuJoCo model and data, for rolltape's physics rows
        return None if self._env is None else self._env.model

    @property
    def data(self) -> Any:
        return None if self._env is None else self._env.data

    def _obs(self, raw: np.ndarray) -> Any:
        if self.obs_type == "state":
            return np.asarray(raw, dtype=np.float64)
        return {"pixels": self.render().copy(), "agent_pos": np.asarray(raw[:4], np.float64)}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        sim = self._sim()
        if seed is not None:
            sim.seed(seed)
        raw, _ = sim.reset(seed=seed)
        return self._obs(raw), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raw, reward, done, truncated, info = self._sim().step(np.asarray(action, np.float32))
        success = bool(info.get("success", 0))
        info = {**info, "task": self.task, "is_success": success}
        return self._obs(raw), float(reward), bool(done or success), bool(truncated), info

    def render(self) -> np.ndarray:
        return np.flip(self._sim().render(), (0, 1))  # corner2 draws upside down and mirrored

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:MetaWorldEnv", max_episode_steps=MAX_PATH_LENGTH)
