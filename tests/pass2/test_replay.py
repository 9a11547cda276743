"""The verified replay core (rolltape.pass2.replay), through real render workers: resim
earns exactly what pass 1 earned or names the first divergent step and field, restore and
auto draw the recorded states, tolerances relax parity, a tape on another env is refused,
a worker keeps one env and GL context per env, and full quality is exactly env.render().
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tests.conftest import altered

from rolltape import RenderRequest, Tape, UsageError, render
from rolltape.pass2.encode import count_frames, read_frames


@pytest.fixture(scope="module")
def tape_path(random_run):
    return random_run.path / random_run.results.to_json()["episodes_rows"][1]["tape"]


def test_verify_only_draws_nothing_and_needs_no_gl(tape_path):
    [result] = render([RenderRequest(str(tape_path))], backends="glfw")  # glfw cannot work here
    assert result.verified is True and result.frames == 0 and result.backend is None


def test_divergence_is_caught_at_the_altered_step(tape_path, tmp_path):
    bad = altered(tape_path, tmp_path, step=17)
    [result] = render([RenderRequest(bad, (str(tmp_path / "d.mp4"),), width=64, height=64)])
    assert result.verified is False
    assert result.divergence.step == 17 and result.divergence.field == "reward"
    assert result.divergence.diff > 0
    assert (tmp_path / "d.mp4").exists()  # warn: the video is kept and marked


def test_auto_mode_draws_recorded_states_after_a_divergence(tape_path, tmp_path):
    bad = altered(tape_path, tmp_path, step=5)
    [result] = render([RenderRequest(bad, (str(tmp_path / "a.mp4"),), mode="auto",
                                     width=64, height=64)])
    assert result.mode == "restore" and result.verified is False
    assert result.frames == Tape.load(bad).length + 1 == count_frames(tmp_path / "a.mp4")


def test_restore_draws_the_recorded_states(tape_path, tmp_path):
    reqs = [RenderRequest(str(tape_path), (str(tmp_path / f"{m}"),), mode=m, width=64, height=48)
            for m in ("resim", "restore")]
    resim, restore = render(reqs)
    assert restore.mode == "restore" and restore.verified is None
    frames_a = list(read_frames(tmp_path / "resim"))
    frames_b = list(read_frames(tmp_path / "restore"))
    assert len(frames_a) == len(frames_b) == resim.frames
    assert np.array_equal(frames_a[0], frames_b[0])
    # After a step Gymnasium draws kinematics computed at the start of the last physics
    # substep, while restore draws the recorded state itself: close, not identical.
    diffs = [np.abs(a.astype(int) - b).mean() for a, b in zip(frames_a, frames_b)]
    assert max(diffs) < 8.0
    # and a wrong state would be far off: the first frame against the last
    assert np.abs(frames_b[0].astype(int) - frames_b[-1]).mean() > max(diffs)


def test_tolerance_relaxes_reward_parity(tape_path, tmp_path):
    tape = Tape.load(tape_path)
    nudged = dataclasses.replace(tape, rewards=tape.rewards + 1e-9).save(tmp_path / "n.npz")
    [exact, relaxed] = render([RenderRequest(str(nudged)),
                               RenderRequest(str(nudged), atol=1e-6)])
    assert exact.verified is False and exact.divergence.step == 0
    assert relaxed.verified is True


def test_tape_on_another_env_is_refused(tape_path, tmp_path):
    with pytest.raises(UsageError, match="recorded on HalfCheetah-v5 and does not fit"):
        render([RenderRequest(str(tape_path), (str(tmp_path / "h.mp4"),), env_id="Hopper-v5")])
    assert not (tmp_path / "h.mp4").exists()


def test_restore_needs_state(tmp_path):
    tape = Tape(env={"id": "CartPole-v1", "kwargs": {}, "max_episode_steps": None},
                seed=0, actions=np.array([0, 1]), rewards=np.array([1.0, 1.0]),
                terminated=np.zeros(2, bool), truncated=np.zeros(2, bool))
    path = tape.save(tmp_path / "c.npz")
    with pytest.raises(UsageError, match="no MuJoCo or ALE state"):
        render([RenderRequest(str(path), (str(tmp_path / "c.mp4"),), mode="restore")])


def test_one_worker_switching_between_envs_draws_each_with_its_own_context(tape_path,
                                                                           tmp_path):
    """A worker keeps one env and GL context per env: HalfCheetah, then Hopper, then
    HalfCheetah again must draw the second HalfCheetah tape as a worker of its own would."""
    from rolltape import evaluate

    hopper = evaluate("Hopper-v5", "random", episodes=1, seed=1, max_episode_steps=20,
                      out=tmp_path / "hopper", report=False)
    hopper_tape = str(hopper.path / hopper.results.to_json()["episodes_rows"][0]["tape"])
    size = dict(width=64, height=48)
    mixed = render([RenderRequest(str(tape_path), (str(tmp_path / "a/"),), **size),
                    RenderRequest(hopper_tape, (str(tmp_path / "b/"),), **size),
                    RenderRequest(str(tape_path), (str(tmp_path / "c/"),), **size)], workers=1)
    alone, = render([RenderRequest(str(tape_path), (str(tmp_path / "alone/"),), **size)])
    assert all(r.verified for r in mixed + [alone])
    frames = {k: list(read_frames(tmp_path / k)) for k in ("a", "c", "alone")}
    for k in ("a", "c"):
        assert all(np.array_equal(x, y) for x, y in zip(frames[k], frames["alone"])), k


def test_quality_presets_change_the_picture(tape_path, tmp_path):
    reqs = [RenderRequest(str(tape_path), (str(tmp_path / q / ""),), quality=q, width=96,
                          height=72, frames=(0, 3)) for q in ("full", "balanced", "fast")]
    full, balanced, fast = render(reqs)
    frames = {q: next(read_frames(tmp_path / q)) for q in ("full", "balanced", "fast")}
    assert not np.array_equal(frames["full"], frames["fast"])
    assert not np.array_equal(frames["balanced"], frames["fast"])
    # the robot is still there: fast differs from full only in shading, not in layout
    assert np.abs(frames["full"].astype(int) - frames["fast"]).mean() < 40
    with pytest.raises(UsageError, match="Unknown quality"):
        render([dataclasses.replace(reqs[0], quality="ultra")])


def test_full_quality_is_exactly_gymnasium_env_render(random_run, tape_path, tmp_path):
    import subprocess
    import sys

    # Another tape first: the worker reuses its env and GL context for the second one.
    other = random_run.path / random_run.results.to_json()["episodes_rows"][0]["tape"]
    render([RenderRequest(str(other), (str(tmp_path / "o/"),), width=64, height=48),
            RenderRequest(str(tape_path), (str(tmp_path / "r/"),), width=64, height=48)],
           backends="osmesa")
    code = f"""
import os, sys
os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = "osmesa"
import gymnasium as gym, numpy as np
from rolltape import Tape
tape = Tape.load({str(tape_path)!r})
env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=64, height=48,
               max_episode_steps=tape.env["max_episode_steps"])
env.reset(seed=tape.seed)
frames = [env.render()]
for a in tape.actions:
    env.step(a)
    frames.append(env.render())
np.save({str(tmp_path / "gym.npy")!r}, np.stack(frames))
"""
    subprocess.run([sys.executable, "-c", code], check=True)
    expected = np.load(tmp_path / "gym.npy")
    got = np.stack(list(read_frames(tmp_path / "r")))
    assert got.shape == expected.shape and np.array_equal(got, expected)


@pytest.mark.parametrize(("env_id", "threaded"), [("HalfCheetah-v5", True),
                                                  ("CartPole-v1", True),
                                                  ("ALE/Pong-v5", False),
                                                  ("BreakoutNoFrameskip-v4", False)])
def test_encoding_runs_beside_drawing_except_beside_ale(tmp_path, env_id, threaded):
    """GL and pygame let go of the GIL while they draw, ALE's emulator does not: an encoding
    thread beside it would only wait for the GIL."""
    from rolltape.pass2.encode import BackgroundWriter, open_writer
    from rolltape.pass2.replay import encoding_beside

    writer = encoding_beside(open_writer(tmp_path / "v.mp4", fps=30), env_id)
    writer.write(np.zeros((48, 64, 3), np.uint8))
    writer.close()
    assert isinstance(writer, BackgroundWriter) is threaded
    assert count_frames(tmp_path / "v.mp4") == 1


def test_atari_screens_are_verified_in_batches_and_drawn_without_gl(tmp_path):
    """An Atari tape draws ALE's screen (no GL backend, none started) and every screen is
    checked against pass 1's digest, a batch at a time: a wrong digest past the first
    batch is named at its own step, and the frames written are the screens."""
    from rolltape import evaluate
    from rolltape.envs.digests import DIGEST_BATCH

    run = evaluate("BreakoutNoFrameskip-v4", "random", episodes=1, seed=7,
                   max_episode_steps=DIGEST_BATCH + 60, out=tmp_path / "run",
                   report=False)
    path = run.tape_path(run.results.episodes[0])
    tape = Tape.load(path)
    assert tape.length > DIGEST_BATCH + 10, tape.length
    [good] = render([RenderRequest(str(path), (str(tmp_path / "good.mp4"),))])
    assert good.verified and good.backend is None and good.frames == tape.length + 1
    # A worker that holds a GL backend (one started warm for a run's videos) drew it
    # with none too, and says so.
    from rolltape.pass2.replay import Replayer

    drawn = Replayer("egl", lambda n: None).run(
        RenderRequest(str(path), (str(tmp_path / "warm.mp4"),)))
    assert drawn.verified and drawn.backend is None
    step = DIGEST_BATCH + 5
    digests = tape.obs_digest.copy()
    digests[step + 1] ^= 1
    bad = tmp_path / "bad.npz"
    dataclasses.replace(tape, obs_digest=digests).save(bad)
    [result] = render([RenderRequest(str(bad), ())])
    assert not result.verified
    assert result.divergence.step == step and result.divergence.field == "observation"


def test_a_frame_size_no_backend_can_draw_is_refused_on_construction() -> None:
    from rolltape.pass2.replay import RenderOptions

    for width, words in ((100000, "larger than a frame can be"), (0, "must be at least 1")):
        with pytest.raises(UsageError, match=words):
            RenderOptions(width=width)
    assert RenderOptions(width=8192, height=64).width == 8192
