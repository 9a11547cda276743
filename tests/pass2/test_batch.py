"""Batch re-rendering on MuJoCo Warp (issue 41, part 2), on Warp's CPU device.

- 16 tapes (8 HalfCheetah, 4 of them shorter, + 8 Ant, random actions, a few steps) drawn
  at 64x64 from the model camera "track": depth and segmentation agree with MuJoCo's OpenGL
  renderer (``mujoco.Renderer``, same camera, states and size, in a child with MUJOCO_GL
  set) at >= 99% of pixels: segmentation the same geom id, depth within 1% relative (both
  miss counts as agreeing). Measured here: segmentation 99.99% (HalfCheetah) and 99.8%
  (Ant), depth 99.99% and 99.9%; what differs are silhouette pixels and curved geoms,
  which OpenGL draws as polygons where the ray tracer hits the exact surface (Ant's depth:
  98% of hit pixels within 0.1%, 99.9% within 0.5%).
- tapes of different lengths: each gets its own frames, the shorter ones held at their
  last state; a tape drawn in a batch is drawn exactly as alone, and as in rounds of fewer
  worlds;
- ``rolltape render --renderer mjwarp`` (a real subprocess): PNG frames, depth and segmentation
  arrays, sidecars and the printed line say a ray tracer drew them;
- what --renderer mjwarp cannot do is refused in one sentence, before anything is written.

Warp's kernels are compiled once per test session into a fresh folder (tests/conftest.py's
``warp_kernels``, passed to subprocesses as WARP_CACHE_PATH): ~10 s on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from rolltape.errors import UsageError
from rolltape.pass2.backends import DEFAULT_ORDER, gl_environment
from rolltape.pass2.batch import RAY_TRACED, BatchRequest, render_batch
from rolltape.tape import Tape

SIZE = 64
AGREE = 0.99  # the share of pixels that must agree
DEPTH_RTOL = 0.01  # depth agrees within this relative difference


pytestmark = pytest.mark.usefixtures("warp_kernels")


def _tapes(root: Path, env_id: str, episodes: int, steps: int, seed: int) -> list[str]:
    """Random-action tapes with their states, recorded here (pass 2 does not care who
    acted): seeds seed, seed + 1, ..."""
    import gymnasium as gym

    from rolltape.envs.ids import env_spec

    env = gym.make(env_id)
    paths = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
        data = env.unwrapped.data
        qpos, qvel, actions, rewards = [data.qpos.copy()], [data.qvel.copy()], [], []
        for _ in range(steps):
            actions.append(env.action_space.sample())
            rewards.append(float(env.step(actions[-1])[1]))
            qpos.append(data.qpos.copy())
            qvel.append(data.qvel.copy())
        flags = np.zeros(steps, dtype=bool)
        tape = Tape(env=env_spec(env_id, {}, steps), seed=seed + i, actions=np.array(actions),
                    rewards=np.array(rewards), terminated=flags, truncated=flags.copy(),
                    qpos=np.array(qpos), qvel=np.array(qvel))
        paths.append(str(tape.save(root / f"{env_id}-{steps}-{i}.npz")))
    env.close()
    return paths


@pytest.fixture(scope="module")
def tapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """HalfCheetah: 4 tapes of 9 steps and 4 of 5; Ant: 8 of 6 (16 in all; Ant's random
    episodes do not end that soon)."""
    root = tmp_path_factory.mktemp("tapes")
    return {"HalfCheetah-v5": _tapes(root, "HalfCheetah-v5", 4, 9, 0)
            + _tapes(root, "HalfCheetah-v5", 4, 5, 100),
            "Ant-v5": _tapes(root, "Ant-v5", 8, 6, 0)}


@pytest.fixture(scope="module")
def drawn(tapes: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, tuple[object, list[str]]]:
    """Each env's tapes drawn in one batch: (result, output stems)."""
    out = tmp_path_factory.mktemp("batch")
    done = {}
    for env_id, paths in tapes.items():
        stems = [str(out / f"{env_id}-{i}") for i in range(len(paths))]
        result = render_batch(BatchRequest(
            tapes=tuple(paths), outputs=tuple((f"{s}.mp4", f"{s}/") for s in stems),
            width=SIZE, height=SIZE, camera="track", depth=True, segmentation=True))
        done[env_id] = (result, stems)
    return done


# MuJoCo's OpenGL renderer, in a child that sets MUJOCO_GL before importing mujoco.
OPENGL = """
import json, sys
import mujoco, numpy as np
from rolltape.envs.build import make_env
from rolltape.tape import Tape

paths, size, out = json.loads(sys.argv[1])
tapes = [Tape.load(p) for p in paths]
model = make_env(tapes[0].env).unwrapped.model
data = mujoco.MjData(model)
rgb, depth, seg = [], [], []
with mujoco.Renderer(model, size, size) as renderer:
    for tape in tapes:
        for qpos, qvel in zip(tape.qpos, tape.qvel):
            data.qpos[:], data.qvel[:] = qpos, qvel
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera="track")
            rgb.append(renderer.render().copy())
            renderer.enable_depth_rendering()
            renderer.update_scene(data, camera="track")
            depth.append(renderer.render().copy())
            renderer.disable_depth_rendering()
            renderer.enable_segmentation_rendering()
            renderer.update_scene(data, camera="track")
            seg.append(renderer.render().copy())
            renderer.disable_segmentation_rendering()
np.savez(out, rgb=np.array(rgb), depth=np.array(depth), seg=np.array(seg))
"""


def opengl(paths: list[str], out: Path) -> dict[str, np.ndarray]:
    """Every frame of ``paths`` drawn by mujoco.Renderer, on the first GL backend that works."""
    why = []
    for backend in DEFAULT_ORDER:
        proc = subprocess.run([sys.executable, "-c", OPENGL, json.dumps([paths, SIZE, str(out)])],
                              env={**os.environ, **gl_environment(backend)},
                              capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            with np.load(out) as found:
                return dict(found)
        why.append(f"{backend}: {proc.stderr.strip().splitlines()[-1:]}")
    pytest.fail(f"no GL backend could draw the reference: {why}")


def agreement(stems: list[str], ref: dict[str, np.ndarray]) -> tuple[float, float]:
    """(share of pixels with the same geom, share with the same depth within DEPTH_RTOL:
    both hit and close, or both miss), over every frame of every tape."""
    seg = np.concatenate([np.load(f"{s}.seg.npy") for s in stems])
    depth = np.concatenate([np.load(f"{s}.depth.npy") for s in stems])
    assert seg.shape == ref["seg"].shape and depth.shape == ref["depth"].shape
    same_geom = float(np.mean(seg[..., 0] == ref["seg"][..., 0]))
    gl_hit, warp_hit = ref["seg"][..., 0] >= 0, depth > 0
    close = np.abs(depth - ref["depth"]) <= DEPTH_RTOL * ref["depth"]
    same_depth = float(np.mean(np.where(gl_hit & warp_hit, close, gl_hit == warp_hit)))
    return same_geom, same_depth


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Ant-v5"])
def test_depth_and_segmentation_agree_with_opengl(env_id, tapes, drawn, tmp_path):
    result, stems = drawn[env_id]
    ref = opengl(tapes[env_id], tmp_path / "opengl.npz")
    same_geom, same_depth = agreement(stems, ref)
    print(f"{env_id}: same geom at {same_geom:.4%}, depth within {DEPTH_RTOL:.0%} at "
          f"{same_depth:.4%} of pixels")
    assert same_geom >= AGREE and same_depth >= AGREE
    seg = np.load(f"{stems[0]}.seg.npy")
    assert set(np.unique(seg[..., 1])) == {-1, 5}  # background and mjOBJ_GEOM, as OpenGL's
    assert (np.load(f"{stems[0]}.seg.npy")[..., 0] >= 0).mean() > 0.3  # the floor and body
    # The pictures: the robot and the floor, where OpenGL has them (colours differ: no
    # shadows, reflections or multisampling, another lighting model).
    frame = np.asarray(__import__("PIL.Image").Image.open(f"{stems[0]}/frame_000000.png"))
    assert frame.shape == (SIZE, SIZE, 3)
    robot = ref["seg"][0, ..., 0] > 0  # geom 0 is the floor
    assert robot.any() and frame[robot].std() > 0


def test_each_tape_gets_its_own_frames_and_a_batch_draws_as_alone(tapes, drawn, tmp_path):
    result, stems = drawn["HalfCheetah-v5"]
    lengths = [Tape.load(p).length + 1 for p in tapes["HalfCheetah-v5"]]
    assert lengths == [10] * 4 + [6] * 4
    assert [r.frames for r in result.results] == lengths
    for stem, frames in zip(stems, lengths):
        assert np.load(f"{stem}.depth.npy").shape == (frames, SIZE, SIZE)
        assert np.load(f"{stem}.seg.npy").shape == (frames, SIZE, SIZE, 2)
        assert len(list(Path(stem).glob("frame_*.png"))) == frames
    assert all(r.mode == "restore" and r.backend == "mujoco_warp" and r.verified is None
               and r.warnings == (RAY_TRACED,) for r in result.results)
    # the last tape (short) drawn alone: the same arrays as in the batch of 8
    alone = str(tmp_path / "alone")
    render_batch(BatchRequest(tapes=(tapes["HalfCheetah-v5"][-1],), outputs=((f"{alone}.gif",),),
                              width=SIZE, height=SIZE, depth=True, segmentation=True))
    np.testing.assert_array_equal(np.load(f"{alone}.seg.npy"), np.load(f"{stems[-1]}.seg.npy"))
    np.testing.assert_array_equal(np.load(f"{alone}.depth.npy"),
                                  np.load(f"{stems[-1]}.depth.npy"))


def test_rounds_of_fewer_worlds_draw_the_same(tapes, drawn, tmp_path):
    """3 tapes on 2 worlds: two rounds, the second with an idle world."""
    _, stems = drawn["HalfCheetah-v5"]
    picked = [3, 4, 7]  # a long tape, then two short ones
    outs = [str(tmp_path / f"{i}") for i in picked]
    done = render_batch(BatchRequest(
        tapes=tuple(tapes["HalfCheetah-v5"][i] for i in picked),
        outputs=tuple((f"{o}.mp4",) for o in outs), width=SIZE, height=SIZE, depth=True,
        worlds=2))
    assert [r.frames for r in done.results] == [10, 6, 6]
    for i, out in zip(picked, outs):
        np.testing.assert_array_equal(np.load(f"{out}.depth.npy"),
                                      np.load(f"{stems[i]}.depth.npy"))


def test_cli_renderer_mjwarp_writes_frames_arrays_and_says_what_drew_them(tapes, tmp_path):
    paths = tapes["Ant-v5"][:2]
    proc = run_cli("render", *paths, "--renderer", "mjwarp", "--width", "32", "--height", "24",
                   "--format", "png", "--out", f"{tmp_path / 'frames'}/", "--depth",
                   "--segmentation", "--overlay", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ray tracer: not env.render()'s" in proc.stdout
    assert "backend mujoco_warp, camera track" in proc.stdout
    for path in paths:
        stem = tmp_path / "frames" / Path(path).stem
        frames = Tape.load(path).length + 1
        assert len(list(stem.glob("frame_*.png"))) == frames
        assert np.load(f"{stem}.depth.npy").shape == (frames, 24, 32)
        assert np.load(f"{stem}.seg.npy").dtype == np.int32
        sidecar = json.loads(Path(f"{stem}.metadata.json").read_text())
        assert sidecar["result"]["backend"] == "mujoco_warp"
        assert sidecar["result"]["warnings"] == [RAY_TRACED]
        assert sidecar["result"]["mode"] == "restore"


@pytest.mark.parametrize("flags, words", [
    (["--quality", "fast"], "--quality fast is a preset of the OpenGL renderer"),
    (["--depth"], None),  # without --renderer mjwarp
    (["--camera", "track", "--camera", "free"], "--renderer mjwarp draws one model camera, not 2"),
    (["--renderer", "vulkan"], "Unknown renderer 'vulkan' (--renderer); use one of opengl, mjwarp"),
    (["--layout", "horizontal"], "--layout horizontal has nothing to lay out"),
    (["--width", "0"], "--width 0 must be at least 1"),
])
def test_cli_refusals_in_one_sentence(flags, words, tapes, tmp_path):
    batch = [] if flags[0] in ("--depth", "--renderer") else ["--renderer", "mjwarp"]
    proc = run_cli("render", tapes["Ant-v5"][0], *batch, *flags, "--out",
                   str(tmp_path / "x.mp4"), cwd=tmp_path)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert words or "--depth is drawn only with --renderer mjwarp" in line
    assert words is None or words in line
    assert list(tmp_path.iterdir()) == []


def test_api_refusals_before_anything_is_written(tapes, tmp_path):
    cheetah, ant = tapes["HalfCheetah-v5"][0], tapes["Ant-v5"][0]
    out = tmp_path / "out"

    def refused(paths: tuple[str, ...], **options) -> str:
        with pytest.raises(UsageError) as info:
            render_batch(BatchRequest(tapes=paths, outputs=tuple((f"{out}/{i}.mp4",)
                                                                 for i in range(len(paths))),
                                      depth=True, **options))
        assert not out.exists()  # nothing half-written
        return str(info.value)

    stateless = tmp_path / "stateless.npz"
    replace(Tape.load(cheetah), qpos=None, qvel=None, physics=None).save(stateless)
    assert "holds no MuJoCo state" in refused((cheetah, str(stateless)))
    assert "draws the tapes of one env at a time" in refused((cheetah, ant))
    assert "is not one of Ant-v5's model cameras (track)" in refused((ant,), camera="side")
    with pytest.raises(UsageError, match="--height 0 must be at least 1"):
        BatchRequest(tapes=(ant,), outputs=(("a.mp4",),), height=0)
    out.mkdir()
    (out / "0.depth.npy").write_bytes(b"mine")
    with pytest.raises(UsageError, match="already exists"):
        render_batch(BatchRequest(tapes=(ant,), outputs=((f"{out}/0.mp4",),), depth=True))
    assert sorted(p.name for p in out.iterdir()) == ["0.depth.npy"]  # left as it was
