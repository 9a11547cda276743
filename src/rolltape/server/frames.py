"""One frame of a MuJoCo physics state, drawn the same way on the server and by parity's
local side, so the two frames are byte-equal on the same GL backend.

May import: envs, errors. Never: policies, pass 1, pass 2, executors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rolltape.envs.build import make_env
from rolltape.envs.state import continue_from
from rolltape.errors import UsageError

MAX_SIDE = 4096


def check_size(width: Any, height: Any, camera: Any) -> None:
    """Refuse a frame size or camera a message got wrong (or a user)."""
    for name, side in (("width", width), ("height", height)):
        if type(side) is not int or not 1 <= side <= MAX_SIDE:
            raise UsageError(f"the frame {name} must be a whole number of pixels from 1 to "
                             f"{MAX_SIDE}, got {side!r}")
    if camera is not None and (not isinstance(camera, str) or not 0 < len(camera) <= 200):
        raise UsageError("the camera must be a model camera name or nil")


class FrameDrawer:
    """Draws physics states of one env spec; keeps one render env per (size, camera)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._envs: dict[tuple[int, int, str | None], Any] = {}

    def draw(self, physics: np.ndarray, width: Any, height: Any,
             camera: Any = None) -> np.ndarray:
        """The RGB frame (height x width x 3, uint8) of a recorded physics row (the size and
        camera are checked here: they may come off the wire)."""
        import mujoco

        check_size(width, height, camera)
        key = (width, height, camera)
        env = self._envs.get(key)
        if env is None:
            spec = self.spec
            if camera not in (None, "default"):
                spec = {**spec, "kwargs": {**(spec.get("kwargs") or {}), "camera_name": camera}}
            env = make_env(spec, render_mode="rgb_array", width=width, height=height)
            if camera not in (None, "default"):
                _check_camera(env, camera)
            env.reset(seed=0)
            self._envs[key] = env
        continue_from(env, physics)
        base = env.unwrapped
        mujoco.mj_forward(base.model, base.data)
        return np.ascontiguousarray(env.render())

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


def _check_camera(env: Any, camera: str) -> None:
    """Refuse a camera the model does not have: Gymnasium's renderer would draw its free
    camera instead, so a typo in ``parity --camera`` compared another view than asked."""
    import mujoco

    model = env.unwrapped.model
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) == -1:
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i)
                 for i in range(model.ncam)]
        env.close()
        raise UsageError(f"the model has no camera {camera[:60]!r}; its cameras: "
                         f"{', '.join(filter(None, names)) or 'none (use default)'}")
