"""Pass 2: real render workers under Mesa (EGL, OSMesa), exact parity, fallbacks, divergence."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rolltape import RenderRequest, Tape, UsageError, render
from rolltape.pass2.encode import count_frames, read_frames


@pytest.fixture(scope="module")
def tape_path(random_run):
    return random_run.path / random_run.results.to_json()["episodes_rows"][1]["tape"]


@pytest.fixture(scope="module")
def long_tape(tmp_path_factory):
    """A 120-step random episode: long enough to split into segments of MIN_SEGMENT frames."""
    from rolltape import evaluate

    run = evaluate("HalfCheetah-v5", "random", episodes=1, seed=3, max_episode_steps=120,
                   out=tmp_path_factory.mktemp("long") / "run", report=False)
    return run.path / run.results.to_json()["episodes_rows"][0]["tape"]


@pytest.mark.parametrize("backend", ["egl", "osmesa"])
def test_replay_earns_exactly_what_pass_one_earned(tape_path, tmp_path, backend):
    tape = Tape.load(tape_path)
    out = tmp_path / f"{backend}.mp4"
    [result] = render([RenderRequest(str(tape_path), (str(out),), width=96, height=64)],
                      backends=backend)
    assert result.backend == backend and result.verified is True and result.divergence is None
    assert result.replay_return == tape.total_return
    assert result.frames == tape.length + 1 == count_frames(out)
    assert not result.torch_loaded  # the render worker never imports a policy framework


def test_run_video_matches_its_tape(random_run):
    [video] = random_run.results.to_json()["videos"]
    tape = Tape.load(random_run.path / video["tape"])
    assert video["verified"] is True and video["frames"] == tape.length + 1
    assert count_frames(random_run.path / video["path"]) == tape.length + 1


def test_verify_only_draws_nothing_and_needs_no_gl(tape_path):
    [result] = render([RenderRequest(str(tape_path))], backends="glfw")  # glfw cannot work here
    assert result.verified is True and result.frames == 0 and result.backend is None


def test_unusable_first_backend_falls_back(tape_path, tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    [result] = render([RenderRequest(str(tape_path), (str(tmp_path / "a.gif"),),
                                     width=64, height=64)], backends="glfw,osmesa")
    assert result.backend == "osmesa" and result.verified
    assert [b for b, _ in result.failures] == ["glfw"]
    assert count_frames(tmp_path / "a.gif") == result.frames


@pytest.mark.parametrize("fault, reason", [("crash", "SIGSEGV"), ("hang", "hung")])
def test_crashing_or_hanging_backend_fails_only_its_tape(tape_path, tmp_path, monkeypatch,
                                                         fault, reason):
    # A real driver segfault or hang cannot be caused on demand: ROLLTAPE_FAULT injects one.
    monkeypatch.setenv("ROLLTAPE_FAULT", f"{fault}:egl")
    reqs = [RenderRequest(str(tape_path), (str(tmp_path / f"{k}.mp4"),), width=64, height=64)
            for k in range(2)]
    results = render(reqs, backends="egl,osmesa", timeout=8)
    assert [r.backend for r in results] == ["osmesa", "osmesa"]
    assert reason in results[0].failures[0][1]
    assert all(r.verified for r in results)


def test_every_backend_failing_names_each_reason(tape_path, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLTAPE_FAULT", "crash:osmesa")
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(UsageError) as info:
        render([RenderRequest(str(tape_path), (str(tmp_path / "x.mp4"),))],
               backends="glfw,osmesa")
    message = str(info.value)
    assert "glfw:" in message and "osmesa:" in message and "rolltape doctor" in message
    assert not (tmp_path / "x.mp4").exists() and list(tmp_path.iterdir()) == []


def altered(tape_path, tmp_path, step: int) -> str:
    tape = Tape.load(tape_path)
    actions = tape.actions.copy()
    actions[step] = -actions[step]
    return str(dataclasses.replace(tape, actions=actions).save(tmp_path / "altered.npz"))


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


def test_segments_joined_match_the_unsplit_render_frame_for_frame(long_tape, tmp_path):
    tape = Tape.load(long_tape)
    assert tape.physics is not None  # pass 1 records the full integration state
    whole, = render([RenderRequest(str(long_tape), (str(tmp_path / "whole/"),), width=80,
                                   height=60)], workers=1)
    # MIN_SEGMENT (50) frames per segment at least, however many workers there are
    split, = render([RenderRequest(str(long_tape), (str(tmp_path / "split/"),), width=80,
                                   height=60)], workers=8)
    assert split.segments == (tape.length + 1) // 50 == 2
    assert split.frames == whole.frames == tape.length + 1
    assert split.verified is True and split.replay_return == tape.total_return
    a, b = list(read_frames(tmp_path / "whole")), list(read_frames(tmp_path / "split"))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metadata.json"))
    assert left == ["split", "whole"]  # no segment folder left behind


def test_segment_videos_are_joined_by_copying_packets(long_tape, tmp_path):
    """mp4/webm segments are joined without re-encoding (each part keeps its opening
    keyframe), so they are as close to the drawn frames as an unsplit video; gif is drawn
    from the segments' lossless frames, so it equals the unsplit one byte for byte."""
    import av

    tape = Tape.load(long_tape)
    outs = {k: (*(str(tmp_path / f"{k}.{f}") for f in ("mp4", "webm", "gif")),
                str(tmp_path / k) + "/") for k in ("whole", "split")}
    whole, = render([RenderRequest(str(long_tape), outs["whole"], width=80, height=60)])
    split, = render([RenderRequest(str(long_tape), outs["split"], width=80, height=60)],
                    workers=2)
    assert split.segments == 2 and split.frames == whole.frames == tape.length + 1
    drawn = list(read_frames(tmp_path / "whole"))
    assert all(np.array_equal(x, y) for x, y in zip(drawn, read_frames(tmp_path / "split")))
    for fmt in ("mp4", "webm"):
        error = {}
        for k in ("whole", "split"):
            frames = list(read_frames(tmp_path / f"{k}.{fmt}"))
            assert len(frames) == tape.length + 1, (fmt, k)
            error[k] = max(np.abs(x.astype(int) - y).mean() for x, y in zip(frames, drawn))
        assert error["split"] <= 1.2 * error["whole"], (fmt, error)
        with av.open(str(tmp_path / f"split.{fmt}")) as video:
            keys = [p.is_keyframe for p in video.demux(video=0) if p.dts is not None]
        assert keys[0] and sum(keys) == 2, fmt  # one opening keyframe per segment
    assert (tmp_path / "split.gif").read_bytes() == (tmp_path / "whole.gif").read_bytes()
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metadata.json"))
    assert left == sorted(Path(p.rstrip("/")).name for o in outs.values() for p in o)


def test_segments_of_an_altered_tape_report_the_first_divergence(long_tape, tmp_path):
    bad = altered(long_tape, tmp_path, step=80)  # in the second segment
    [result] = render([RenderRequest(bad, (str(tmp_path / "s/"),), width=64, height=48)],
                      workers=4)
    assert result.segments == 2
    assert result.verified is False and result.divergence.step == 80


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


def test_atari_screens_are_verified_in_batches_and_drawn_without_gl(tmp_path):
    """An Atari tape draws ALE's screen (no GL backend, none started) and every screen is
    checked against pass 1's digest, a batch at a time: a wrong digest past the first
    batch is named at its own step, and the frames written are the screens."""
    from rolltape import evaluate
    from rolltape.pass2.replay import _PendingDigests

    run = evaluate("BreakoutNoFrameskip-v4", "random", episodes=1, seed=7,
                   max_episode_steps=_PendingDigests.BATCH + 60, out=tmp_path / "run",
                   report=False)
    path = run.tape_path(run.results.episodes[0])
    tape = Tape.load(path)
    assert tape.length > _PendingDigests.BATCH + 10, tape.length
    [good] = render([RenderRequest(str(path), (str(tmp_path / "good.mp4"),))])
    assert good.verified and good.backend is None and good.frames == tape.length + 1
    step = _PendingDigests.BATCH + 5
    digests = tape.obs_digest.copy()
    digests[step + 1] ^= 1
    bad = tmp_path / "bad.npz"
    dataclasses.replace(tape, obs_digest=digests).save(bad)
    [result] = render([RenderRequest(str(bad), ())])
    assert not result.verified
    assert result.divergence.step == step and result.divergence.field == "observation"
