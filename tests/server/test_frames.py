"""One frame of a MuJoCo physics state (rolltape.server.frames): sizes and cameras off the
wire are checked, and a state drawn twice, by two drawers, is the same picture. The drawing
runs in a fresh interpreter, where MUJOCO_GL is read before MuJoCo is imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.interpreter import run_once
from rolltape.server.frames import MAX_SIDE, FrameDrawer, check_size

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("width", "height", "words"), [
    (0, 10, "the frame width must be a whole number of pixels from 1 to 4096, got 0"),
    (10, MAX_SIDE + 1, "the frame height must be a whole number of pixels from 1 to 4096"),
    (10.0, 10, "width must be a whole number of pixels from 1 to 4096, got 10.0"),
    (True, 10, "got True"),
])
def test_a_bad_frame_size_is_refused_naming_the_side(width: Any, height: Any, words: str):
    with pytest.raises(UsageError, match=words):
        check_size(width, height, None)


@pytest.mark.parametrize("camera", [3, "", "c" * 201])
def test_a_camera_that_is_not_a_short_name_is_refused(camera: Any):
    with pytest.raises(UsageError, match="the camera must be a model camera name or nil"):
        check_size(8, 8, camera)


def test_good_sizes_and_cameras_pass():
    check_size(1, MAX_SIDE, None)
    check_size(64, 48, "track")


def _draw_in_a_fresh_process() -> dict[str, Any]:
    """(In a child with MUJOCO_GL set.) Frames of two physics rows by two drawers."""
    import mujoco

    from rolltape.envs.build import make_env
    from rolltape.envs.state import physics_spec

    spec = env_spec("InvertedPendulum-v5", max_episode_steps=10)
    env = make_env(spec)
    env.reset(seed=0)
    base = env.unwrapped

    def row() -> np.ndarray:
        out = np.empty(mujoco.mj_stateSize(base.model, physics_spec()))
        mujoco.mj_getState(base.model, base.data, out, physics_spec())
        return out

    state = row()
    for _ in range(5):
        env.step(np.array([3.0], dtype=np.float32))
    moved = row()
    env.close()
    a, b = FrameDrawer(spec), FrameDrawer(spec)
    try:
        frame = a.draw(state, 40, 32)
        again = b.draw(state, 40, 32)
        other = a.draw(moved, 40, 32)
        try:
            a.draw(state, 40, 32, camera="nosuchcamera")
            refused = ""
        except UsageError as exc:
            refused = str(exc)
    finally:
        a.close()
        b.close()
    return {"shape": frame.shape, "dtype": str(frame.dtype),
            "same": bool(np.array_equal(frame, again)),
            "moved": bool(not np.array_equal(frame, other)), "refused": refused}


@pytest.fixture(scope="module")
def drawn() -> dict[str, Any]:
    paths = f"{HERE}:{HERE.parents[1] / 'src'}"
    return run_once(_draw_in_a_fresh_process, timeout=120,
                    env={"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", "PYTHONPATH": paths})


def test_a_frame_is_rgb_of_the_size_asked(drawn: dict[str, Any]):
    assert tuple(drawn["shape"]) == (32, 40, 3) and drawn["dtype"] == "uint8"


def test_the_same_state_drawn_by_two_drawers_is_the_same_picture(drawn: dict[str, Any]):
    assert drawn["same"] and drawn["moved"]


def test_a_camera_the_model_lacks_is_refused_with_the_cameras_it_has(drawn: dict[str, Any]):
    assert drawn["refused"].startswith("the model has no camera 'nosuchcamera'; its cameras: ")
