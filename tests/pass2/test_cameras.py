"""Cameras, layouts and overlays, drawn by real render workers."""

from __future__ import annotations

import numpy as np
import pytest

from rolltape import RenderRequest, UsageError, render
from rolltape.pass2.cameras import Compositor, compose, rgb_only, separate_path
from rolltape.pass2.encode import count_frames, read_frames


@pytest.fixture(scope="module")
def tape_path(random_run):
    return random_run.path / random_run.results.to_json()["episodes_rows"][0]["tape"]


def one(tape_path, out, **kw):
    kw = {"width": 64, "height": 48, **kw}
    [result] = render([RenderRequest(str(tape_path), (str(out),), **kw)])
    return result


@pytest.mark.parametrize("layout, shape", [("horizontal", (48, 192, 3)), ("vertical", (144, 64, 3)),
                                           ("grid", (96, 128, 3))])
def test_layouts_have_the_right_frame_size(tape_path, tmp_path, layout, shape):
    result = one(tape_path, tmp_path / "v/", cameras=("default", "track:torso", "free"),
                 layout=layout)
    frames = list(read_frames(tmp_path / "v"))
    assert len(frames) == result.frames and frames[0].shape == shape
    if layout == "grid":  # three tiles in a 2x2 grid: the fourth is black
        assert frames[0][48:, 64:].max() == 0


def test_separate_writes_one_file_per_camera(tape_path, tmp_path):
    result = one(tape_path, tmp_path / "ep.gif", cameras=("default", "track:torso"),
                 layout="separate")
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metadata.json"))
    assert names == ["ep-default.gif", "ep-track-torso.gif"]
    assert all(count_frames(p) == result.frames for p in result.outputs)


def test_default_camera_is_the_env_render_and_a_named_one_differs(tape_path, tmp_path):
    one(tape_path, tmp_path / "a/")
    one(tape_path, tmp_path / "b/", cameras=("default",))
    one(tape_path, tmp_path / "c/", cameras=("track",))  # HalfCheetah's own tracking camera
    a, b, c = (next(read_frames(tmp_path / n)) for n in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_overlay_marks_the_top_left_corner_only(tape_path, tmp_path):
    one(tape_path, tmp_path / "plain/", width=160, height=120)
    one(tape_path, tmp_path / "over/", overlay=True, width=160, height=120)
    plain, over = list(read_frames(tmp_path / "plain")), list(read_frames(tmp_path / "over"))
    diff = np.abs(plain[5].astype(int) - over[5]).sum(axis=2)
    rows, cols = np.nonzero(diff)
    assert rows.max() < 30 and len(rows) > 50  # text band at the top, the rest untouched


def test_unknown_camera_lists_the_model_cameras(tape_path, tmp_path):
    with pytest.raises(UsageError, match="no camera 'nope'; its cameras are: track"):
        one(tape_path, tmp_path / "x.mp4", cameras=("nope",))
    with pytest.raises(UsageError, match="no body 'tail'"):
        one(tape_path, tmp_path / "x.mp4", cameras=("track:tail",))
    assert list(tmp_path.iterdir()) == []


def test_bad_layouts_are_refused(tape_path, tmp_path):
    with pytest.raises(UsageError, match="Unknown layout"):
        one(tape_path, tmp_path / "x.mp4", layout="diagonal")
    with pytest.raises(UsageError, match="other than 'single'"):
        one(tape_path, tmp_path / "x.mp4", cameras=("default", "free"))


def test_a_stream_that_ends_holds_its_last_frame():
    a, b = np.full((2, 2, 3), 10, np.uint8), np.full((2, 2, 3), 20, np.uint8)
    comp = Compositor("horizontal")
    comp([a, b])
    held = comp([a, None])
    assert np.array_equal(held, compose([a, b], "horizontal"))


def test_separate_paths():
    assert separate_path("v/ep.mp4", "track:torso") == "v/ep-track-torso.mp4"
    assert separate_path("v/frames/", "free") == "v/frames-free/"


_RGB_ONLY_CHECK = """
import sys
import gymnasium as gym, numpy as np
from rolltape.pass2.cameras import rgb_only
from rolltape.pass2.replay import _prepare_view
quality, camera_id = sys.argv[1], None if sys.argv[2] == "none" else int(sys.argv[2])
env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=96, height=72)
env.reset(seed=4)
_prepare_view(env, quality)
env.unwrapped.mujoco_renderer.camera_id = camera_id
draw = rgb_only(env)
same = [np.array_equal(draw(), env.render()) for a in np.random.default_rng(0).uniform(-1, 1, (3, 6))
        if env.step(a)]
print("equal" if draw is not None and all(same) else f"differ {same}", flush=True)
env.close()
"""


@pytest.mark.parametrize("backend", ["egl", "osmesa"])
@pytest.mark.parametrize("quality, camera_id", [("full", "none"), ("fast", "-1")])
def test_rgb_only_draws_env_render_pixels(backend, quality, camera_id):
    """The faster readback (RGBA, no depth) gives exactly env.render()'s pixels, with and
    without multisampling, from the default and the free camera, on both Mesa backends.
    (In a child process: the GL backend must be chosen before MuJoCo is imported.)"""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    done = subprocess.run([sys.executable, "-c", _RGB_ONLY_CHECK, quality, camera_id],
                          capture_output=True, text=True, env=env, timeout=120)
    # (OSMesa's PyOpenGL may print noise while the interpreter shuts down: first line only.)
    assert done.stdout.splitlines()[:1] == ["equal"], done.stderr[-2000:]


def test_rgb_only_is_for_mujoco_envs_only():
    import gymnasium as gym

    env = gym.make("CartPole-v1", render_mode="rgb_array")
    assert rgb_only(env) is None
    env.close()


def _orange(frame: np.ndarray) -> int:
    """Pixels of Hopper's brown-orange body (the floor is black and pale green, the sky grey)."""
    r, g, b = (frame[..., k].astype(int) for k in range(3))
    return int(((r > g + 30) & (g > b + 15)).sum())


def test_cli_suggests_tracking_when_the_default_camera_loses_the_robot(tmp_path):
    """Gymnasium's default view of Hopper is a fixed camera: a tape whose torso travels 4 m
    leaves the picture, and the CLI says so and names the body to track."""
    import dataclasses
    import re

    from conftest import SHORT, run_cli
    from rolltape import Tape, evaluate

    run = evaluate("Hopper-v5", "random", episodes=1, max_episode_steps=SHORT, report=False,
                   out=tmp_path / "run")
    still = run.path / "tapes" / "policy-0000.npz"
    tape = Tape.load(still)
    qpos = tape.qpos.copy()
    qpos[:, 0] += np.linspace(0, 4, len(qpos))  # rootx: the torso walks off to one side
    moved = dataclasses.replace(tape, qpos=qpos).save(tmp_path / "moved.npz")
    proc = run_cli("render", str(still), str(moved), "--mode", "restore", "--format", "png",
                   "--width", "96", "--height", "96", "--out", str(tmp_path / "v"), "-q")
    assert proc.returncode == 0, proc.stderr
    hints = [line for line in proc.stderr.splitlines() if line.startswith("hint:")]
    assert len(hints) == 1 and hints[0].startswith("hint: moved.npz: the 'default' camera "
                                                   "does not follow the robot: torso leaves")
    assert hints[0].endswith("add --camera track:torso to follow it.")
    # The frame it names is where the body really goes out of the picture.
    lost = int(re.search(r"at frame (\d+) of", hints[0]).group(1))
    frames = list(read_frames(tmp_path / "v" / "moved"))
    assert 0 < lost < len(frames) - 1
    assert _orange(frames[0]) > 20 and _orange(frames[lost - 1]) > 0
    assert _orange(frames[-1]) == 0
    # Restore re-simulates nothing: the return shown is the tape's own.
    assert f"recorded return {tape.total_return}" in proc.stdout
    assert "camera default" in proc.stdout
