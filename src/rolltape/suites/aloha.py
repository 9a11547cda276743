"""ALOHA tasks as LeRobot's aloha env plays them, for the ``aloha`` suite, with pixel
observations drawn for the policy's cameras only.

The suite's env is ``rolltape.suites.aloha:Aloha-v0`` with ``task=insertion`` or
``task=transfer_cube`` (gym-aloha's ``AlohaInsertion-v0`` / ``AlohaTransferCube-v0``). It runs
only in the benchmark's own venv (``rolltape suites install aloha``: gym-aloha pins dm-control
and its MuJoCo 3, which rolltape's environment cannot hold); importing this module imports
neither gym_aloha nor mujoco, so the orchestrator can name the env and build a shell of it for
its spaces.

The rules are gym-aloha's own, run by its own code (``gym_aloha.env.AlohaEnv``'s ``reset`` and
``step``, as LeRobot's ``AlohaEnv`` config makes it): the seed draws the box (or peg and
socket) pose; ``info["is_success"]`` and ``terminated`` are ``reward == 4`` (the task's
maximum); nothing truncates but the time limit, LeRobot's ``episode_length`` of 400 steps;
``lerobot-eval`` counts an episode a success when ``is_success`` was set at some step, and
the episode ends at that step, so the success at the end and once are the same.

Pixels done right: gym-aloha's task draws three 480x640 cameras every step (``top``, ``angle``
and ``front_close``) and LeRobot's policies read one (``top``); drawing is nearly all of a
step's time (~0.3 s a camera with software GL, the physics ~2 ms). Here the task draws none,
and the env draws the cameras the policy reads (``cameras``, default ``("top",)``) at the
policy's resolution (``width`` x ``height``, default LeRobot's 640 x 480). Rewards and success
never read pixels, so they are gym-aloha's exactly.

Observations are given under LeRobot's policy key names, so a served LeRobot or openpi
policy reads them as they are: ``observation.images.<camera>`` (H x W x 3 uint8) and
``observation.state`` (the 14 joint positions, gym-aloha's ``agent_pos``), and ``task``,
the text ``lerobot-eval`` adds to the observation (for gym-aloha its ``task``: the task's
name). The tape keeps a digest of each key per step (:func:`rolltape.pass1.fields.kept_obs`).

May import: gymnasium, numpy, suites.shell; gym_aloha and dm_control only inside the env
(benchmark venv).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rolltape.suites.shell import VenvEnv

ENV_ID = "Aloha-v0"
MODULE_ENV = f"rolltape.suites.aloha:{ENV_ID}"
EPISODE_LENGTH = 400  # LeRobot's AlohaEnv config: episode_length, its gym time limit
TASKS = {"insertion": "AlohaInsertion-v0", "transfer_cube": "AlohaTransferCube-v0"}
STATE_KEY = "observation.state"
TASK_KEY = "task"
_TASK_CHARS = "abcdefghijklmnopqrstuvwxyz_"
JOINTS = 14  # two arms of 6 joints and a gripper each


def image_key(camera: str) -> str:
    """LeRobot's policy key of a camera's image.

    >>> image_key("top")
    'observation.images.top'
    """
    return f"observation.images.{camera}"


class AlohaEnv(VenvEnv):
    """One gym-aloha task, stepped by gym-aloha's own code, drawing only the given cameras."""

    what, benchmark = "An ALOHA env", "aloha"

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, task: str, cameras: tuple[str, ...] | list[str] = ("top",),
                 width: int = 640, height: int = 480,
                 render_mode: str | None = "rgb_array") -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}.")
        self.task, self.cameras = task, tuple(cameras)
        self.width, self.height, self.render_mode = int(width), int(height), render_mode
        # The spaces are rolltape's, the same on both sides: the orchestrator builds a shell
        # of this env (no gym_aloha there) for the spaces a served session is checked against.
        self.action_space = spaces.Box(-1.0, 1.0, (JOINTS,), np.float32)
        self.observation_space = spaces.Dict({
            **{image_key(c): spaces.Box(0, 255, (self.height, self.width, 3), np.uint8)
               for c in self.cameras},
            STATE_KEY: spaces.Box(-1000.0, 1000.0, (JOINTS,), np.float64),
            TASK_KEY: spaces.Text(max_length=32, charset=_TASK_CHARS)})
        self._env: Any = None
        try:
            from gym_aloha.env import AlohaEnv as GymAloha  # type: ignore[import-not-found]
        except ImportError:
            return  # a shell: its spaces only; reset and step refuse
        inner = GymAloha(task=task, obs_type="pixels_agent_pos", render_mode="rgb_array")
        aloha_task = inner._env.task
        # gym-aloha reads only qpos and the top image of what its task observes; the image
        # is a 1-pixel stand-in (its task would draw three 480x640 cameras a step), and the
        # policy's cameras are drawn below, once each.
        blank = np.zeros((1, 1, 3), np.uint8)
        aloha_task.get_observation = lambda physics: {
            "qpos": aloha_task.get_qpos(physics), "images": {"top": blank}}
        self._env = inner

    @property
    def physics(self) -> Any:  # dm_control's Physics, which draws the cameras
        return self._sim()._env.physics

    @property
    def model(self) -> Any:  # the MuJoCo model and data, for rolltape's physics rows
        return None if self._env is None else self._env._env.physics.model.ptr

    @property
    def data(self) -> Any:
        return None if self._env is None else self._env._env.physics.data.ptr

    def after_set_state(self) -> None:
        """After :func:`rolltape.envs.state.continue_from` set a recorded state: dm_control's step
        runs ``mj_step2`` first, on the ``mj_step1`` results of the state it is in (its last
        step ends with ``mj_step1``), so they are computed again from the state set. Without
        it, a replay continued from step t (a pass-2 segment, a branch) parts from pass 1
        at its first step."""
        import mujoco

        mujoco.mj_step1(self.model, self.data)

    def _obs(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        physics = self.physics
        obs = {image_key(c): physics.render(height=self.height, width=self.width, camera_id=c)
               for c in self.cameras}
        obs[STATE_KEY] = np.asarray(raw["agent_pos"], np.float64)
        obs[TASK_KEY] = self.task  # lerobot-eval's observation["task"]: env.call("task")
        return obs

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        raw, info = self._sim().reset(seed=seed)
        return self._obs(raw), dict(info)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raw, reward, terminated, truncated, info = self._sim().step(
            np.asarray(action, np.float32))
        return (self._obs(raw), float(reward), bool(terminated), bool(truncated),
                {**info, "is_success": bool(info["is_success"])})

    def render(self) -> np.ndarray:
        return np.asarray(self._sim().render())  # gym-aloha's top camera, 640 x 480


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:AlohaEnv", max_episode_steps=EPISODE_LENGTH)
