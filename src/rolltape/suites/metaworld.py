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
its scripted experts read (LeRobot has no state mode). ``"pixels_agent_pos"`` (the
``metaworld_*_pixels`` suites; LeRobot's default) is what LeRobot's wrapper gives
(``{"pixels": corner2 image, "agent_pos": obs[:4]}``) under the names its
``preprocess_observation`` maps them to, so a served LeRobot policy reads them as they are:

- ``observation.image``: the ``corner2`` camera (placed as LeRobot places it, flipped on both
  axes as LeRobot flips it), H x W x 3 uint8 at ``width`` x ``height`` (LeRobot's 480 x 480:
  it never sets Meta-World's size, whose default that is);
- ``observation.state``: the hand's position and gripper, ``obs[:4]`` (LeRobot's ``agent_pos``);
- ``task``: the task's text as ``lerobot-eval`` adds it (``env.call("task_description")``);
- ``observation.environment_state``: Meta-World's 39 numbers, which LeRobot's wrapper does not
  give (its policies never read it): rolltape's own, so Meta-World's scripted expert, which
  acts on the state, can play the pixel suites too.

Only that camera is drawn, once a step (pass 1 draws nothing else); the tape keeps a digest
of each key per step (:func:`rolltape.pass1.fields.kept_obs`), images included.

May import: gymnasium, numpy, suites.shell; metaworld and mujoco only inside the env
(benchmark venv).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rolltape.suites.shell import VenvEnv

ENV_ID = "MetaWorld-v3"
MODULE_ENV = f"rolltape.suites.metaworld:{ENV_ID}"
MAX_PATH_LENGTH = 500  # Meta-World's own truncation, and LeRobot's rollout cap
TASK_SEED = 42  # LeRobot's MT1 seed: which task variation family each task plays
CAMERA = "corner2"
IMAGE_KEY = "observation.image"  # LeRobot's key of a single (non-dict) "pixels" image
STATE_KEY = "observation.state"  # LeRobot's agent_pos
ENV_STATE_KEY = "observation.environment_state"  # Meta-World's 39 numbers (rolltape's extra)
TASK_KEY = "task"
STATE_SIZE = 39
_TASK_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,-"
TASK_DESCRIPTIONS = {  # LeRobot's metaworld_config.json, the text its eval gives as 'task'
    "assembly-v3": "Pick up a nut and place it onto a peg",
    "basketball-v3": "Dunk the basketball into the basket",
    "bin-picking-v3": "Grasp the puck from one bin and place it into another bin",
    "box-close-v3": "Grasp the cover and close the box with it",
    "button-press-topdown-v3": "Press a button from the top",
    "button-press-topdown-wall-v3": "Bypass a wall and press a button from the top",
    "button-press-v3": "Press a button",
    "button-press-wall-v3": "Bypass a wall and press a button",
    "coffee-button-v3": "Push a button on the coffee machine",
    "coffee-pull-v3": "Pull a mug from a coffee machine",
    "coffee-push-v3": "Push a mug under a coffee machine",
    "dial-turn-v3": "Rotate a dial 180 degrees",
    "disassemble-v3": "Pick a nut out of a peg",
    "door-close-v3": "Close a door with a revolving joint",
    "door-lock-v3": "Lock the door by rotating the lock clockwise",
    "door-open-v3": "Open a door with a revolving joint",
    "door-unlock-v3": "Unlock the door by rotating the lock counter-clockwise",
    "hand-insert-v3": "Insert the gripper into a hole",
    "drawer-close-v3": "Push and close a drawer",
    "drawer-open-v3": "Open a drawer",
    "faucet-open-v3": "Rotate the faucet counter-clockwise",
    "faucet-close-v3": "Rotate the faucet clockwise",
    "hammer-v3": "Hammer a screw on the wall",
    "handle-press-side-v3": "Press a handle down sideways",
    "handle-press-v3": "Press a handle down",
    "handle-pull-side-v3": "Pull a handle up sideways",
    "handle-pull-v3": "Pull a handle up",
    "lever-pull-v3": "Pull a lever down 90 degrees",
    "peg-insert-side-v3": "Insert a peg sideways",
    "pick-place-wall-v3": "Pick a puck, bypass a wall and place the puck",
    "pick-out-of-hole-v3": "Pick up a puck from a hole",
    "reach-v3": "Reach a goal position",
    "push-back-v3": "Push the puck to a goal",
    "push-v3": "Push the puck to a goal",
    "pick-place-v3": "Pick and place a puck to a goal",
    "plate-slide-v3": "Slide a plate into a cabinet",
    "plate-slide-side-v3": "Slide a plate into a cabinet sideways",
    "plate-slide-back-v3": "Get a plate from the cabinet",
    "plate-slide-back-side-v3": "Get a plate from the cabinet sideways",
    "peg-unplug-side-v3": "Unplug a peg sideways",
    "soccer-v3": "Kick a soccer into the goal",
    "stick-push-v3": "Grasp a stick and push a box using the stick",
    "stick-pull-v3": "Grasp a stick and pull a box with the stick",
    "push-wall-v3": "Bypass a wall and push a puck to a goal",
    "reach-wall-v3": "Bypass a wall and reach a goal",
    "shelf-place-v3": "Pick and place a puck onto a shelf",
    "sweep-into-v3": "Sweep a puck into a hole",
    "sweep-v3": "Sweep a puck off the table",
    "window-open-v3": "Push and open a window",
    "window-close-v3": "Push and close a window",
}


class MetaWorldEnv(VenvEnv):
    """One Meta-World task, its variation fixed by LeRobot's rule, success as LeRobot reads it."""

    what, benchmark = "A Meta-World env", "metaworld"

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
            self.observation_space = spaces.Box(-np.inf, np.inf, (STATE_SIZE,), np.float64)
        else:
            self.observation_space = spaces.Dict({
                IMAGE_KEY: spaces.Box(0, 255, (height, width, 3), np.uint8),
                STATE_KEY: spaces.Box(-1000.0, 1000.0, (4,), np.float64),
                ENV_STATE_KEY: spaces.Box(-np.inf, np.inf, (STATE_SIZE,), np.float64),
                TASK_KEY: spaces.Text(max_length=64, charset=_TASK_CHARS)})
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

    @property
    def model(self) -> Any:  # the MuJoCo model and data, for rolltape's physics rows
        return None if self._env is None else self._env.model

    @property
    def data(self) -> Any:
        return None if self._env is None else self._env.data

    def _obs(self, raw: np.ndarray) -> Any:
        if self.obs_type == "state":
            return np.asarray(raw, dtype=np.float64)
        raw = np.asarray(raw, dtype=np.float64)
        return {IMAGE_KEY: self.render().copy(), STATE_KEY: raw[:4].copy(),
                ENV_STATE_KEY: raw, TASK_KEY: TASK_DESCRIPTIONS[self.task]}

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


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:MetaWorldEnv", max_episode_steps=MAX_PATH_LENGTH)
