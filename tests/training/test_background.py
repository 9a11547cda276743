"""Videos of training tapes drawn off the loop (rolltape.training.background): the renderer
alone draws a recording of two tapes as one verified video and refuses bad options; through
RecordTape, a crashing render worker fails its video only, a full queue drops videos and
keeps the tapes, no half-written video stays however the script ends, and a full disk is
one warning.

Real parts throughout: MuJoCo envs, render processes, a real full tmpfs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from tests.conftest import drive

from conftest import fill
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.pass1.rollout import record_episode
from rolltape.pass2.encode import count_frames
from rolltape.policies import load_policy
from rolltape.tape import Tape
from rolltape.training.background import (
    BackgroundRenderer,
    RecordingWarning,
    VideoDone,
    VideoJob,
    output_paths,
    remove_stale_partials,
)
from rolltape.training.record_tape import RecordTape

ENV = "InvertedPendulum-v5"  # MuJoCo, tiny, random actions end episodes within ~5-20 steps
SMALL = {"width": 64, "height": 48}


def _tapes(folder: Path, seeds: tuple[int, ...]) -> tuple[str, ...]:
    spec = env_spec("HalfCheetah-v5", max_episode_steps=8)
    env = make_env(spec)
    policy = load_policy("random", env)
    paths = []
    for seed in seeds:
        fields = record_episode(env, policy, seed=seed)
        tape = Tape(env=spec, policy=policy.description, meta={}, **fields)
        paths.append(str(tape.save(folder / f"t{seed}.npz")))
    env.close()
    return tuple(paths)


def test_a_recording_of_two_tapes_is_one_verified_video(tmp_path: Path) -> None:
    done: list[VideoDone] = []
    renderer = BackgroundRenderer(on_done=done.append, **SMALL)
    job = VideoJob("rec", _tapes(tmp_path, (1, 2)), output_paths(tmp_path, "rec", ["mp4"]))
    assert renderer.submit(job)
    assert renderer.close(timeout=120) == []
    [video] = done
    assert video.error is None and video.verified is True
    assert video.outputs == (str(tmp_path / "rec.mp4"),)
    assert video.frames == 2 * (8 + 1) == count_frames(tmp_path / "rec.mp4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.mp4", "rec.mp4.metadata.json",
                                                          "t1.npz", "t2.npz"]


def test_a_renderer_that_never_got_a_video_starts_nothing_and_closes_at_once() -> None:
    renderer = BackgroundRenderer()
    assert renderer.pending() == [] and renderer.close() == []
    with pytest.raises(RuntimeError, match="submit after close"):
        renderer.submit(VideoJob("x", ("x.npz",), ("x.mp4",)))


def test_bad_renderer_options_are_refused_in_one_sentence() -> None:
    with pytest.raises(UsageError, match="on_full"):
        BackgroundRenderer(on_full="wait")
    with pytest.raises(UsageError, match="render_workers and queue_size must be at least 1, "
                                         "got 1 and 0"):
        BackgroundRenderer(queue_size=0)


def test_output_paths_name_one_video_per_format(tmp_path: Path) -> None:
    assert output_paths(tmp_path, "ep-3", ["mp4", "webm"]) == (str(tmp_path / "ep-3.mp4"),
                                                               str(tmp_path / "ep-3.webm"))
    with pytest.raises(UsageError, match="Unknown video format 'gif'; use one of mp4, webm"):
        output_paths(tmp_path, "ep-3", ["gif"])  # a GIF does not join packet by packet


def test_only_partials_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = [f"a.partial-{dead}-0.mp4", f"b.partial-{dead}", f"c.partial-{dead}-1"]
    keep = [f"d.partial-{os.getpid()}-0.mp4", "e.mp4", f"f-{dead}.mp4"]
    for name in stale[:2] + keep:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / stale[2]).mkdir()  # a folder of PNG frames being written
    (tmp_path / stale[2] / "000000.png").write_bytes(b"x")
    assert remove_stale_partials(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
    assert remove_stale_partials(tmp_path / "missing") == 0


def test_a_crashing_render_worker_does_not_stop_training(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLTAPE_FAULT", "crash:egl")  # the render worker segfaults
    done = []
    env = RecordTape(gym.make(ENV, max_episode_steps=20), tmp_path, backends=("egl",),
                     episode_trigger=lambda e: e < 2, on_video=done.append, **SMALL)
    with pytest.warns(RecordingWarning, match="could not be rendered"):
        lengths = drive(env, 150)
        env.close()
    assert len(lengths) > 5  # training went on to its end
    assert [d.error is not None for d in done] and all(d.error for d in done)
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["rl-video-episode-0.npz",
                                                              "rl-video-episode-1.npz"]
    assert list(tmp_path.glob("*.mp4")) == []


def test_the_queue_drops_videos_when_full_and_close_leaves_the_tapes(tmp_path: Path) -> None:
    env = RecordTape(gym.make(ENV, max_episode_steps=20), tmp_path, queue_size=1,
                     episode_trigger=lambda e: True, close_timeout=0, **SMALL)
    with pytest.warns(RecordingWarning, match="Dropped the video"):
        drive(env, 60)
    with pytest.warns(RecordingWarning) as said:  # maybe one more drop, then what is left
        env.close()
    assert any("not rendered within close_timeout" in str(w.message) for w in said)
    assert env.renderer.dropped and len(env.tapes) > 4


_SCRIPT = """
import gymnasium as gym, signal, sys
from rolltape.training.record_tape import RecordTape
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal
env = RecordTape(gym.make("HalfCheetah-v5", max_episode_steps=1000), sys.argv[1],
                 episode_trigger=lambda e: True)
print("recording", flush=True)
for episode in range(int(sys.argv[2])):
    env.reset(seed=episode)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
"""  # no env.close(): as many training scripts end


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name)


@pytest.mark.parametrize("end", ["script ends without close", "Ctrl-C"])
def test_no_half_written_video_stays_however_the_script_ends(tmp_path: Path, end: str) -> None:
    """Render workers are stopped politely at exit (they remove what they were writing):
    before, the spawner thread ended at interpreter shutdown and PDEATHSIG killed them
    mid-write, leaving NAME.partial-PID-0.mp4 in the user's folder."""
    import signal
    import time

    folder = tmp_path / "videos"
    episodes = "3" if end == "script ends without close" else "100000"
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(folder), episodes],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "recording"
        if end == "Ctrl-C":
            deadline = time.monotonic() + 60
            # A video is being written (a tape's own temporary is a .partial too: a Ctrl-C
            # then, before the first tape exists, would leave nothing to keep).
            while not [p for p in _partials(folder) if p.endswith(".mp4")]:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(folder.glob("*.npz")), stderr  # the tapes were kept
    assert _partials(folder) == []


@pytest.mark.filterwarnings("ignore:.*Overwriting existing videos")  # the folder is reused on purpose
def test_a_stale_half_written_video_is_removed_and_live_ones_kept(tmp_path: Path) -> None:
    folder = tmp_path / "videos"
    folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (folder / f"rl-video-episode-0.partial-{dead}-0.mp4").write_bytes(b"half")
    live = folder / f"rl-video-episode-1.partial-{os.getpid()}-0.mp4"
    live.write_bytes(b"being written")
    RecordTape(gym.make("CartPole-v1"), str(folder), render=False).close()
    assert _partials(folder) == [live.name]


def test_a_full_disk_fails_videos_with_one_warning_and_a_count(small_disk: Path) -> None:
    folder = small_disk / "videos"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = RecordTape(gym.make("CartPole-v1"), str(folder), episode_trigger=lambda e: True,
                         close_timeout=120, on_full="block")
        fill(small_disk, 30_000)  # room for the tapes, not for their videos
        for episode in range(6):
            env.reset(seed=episode)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                done = terminated or truncated
        env.close()
    said = [str(w.message) for w in caught if issubclass(w.category, RecordingWarning)]
    # One sentence for the full disk (issue 34), not one per episode; the rest counted.
    assert len(said) == 1 and "could not be rendered (" in said[0], said
    assert "No space left" in said[0] and "rolltape render" in said[0], said
    assert env.renderer.failed + env.write_failures >= 2


def test_a_killed_render_worker_leaves_no_half_written_video(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A render worker SIGKILLed while writing (the OOM killer, a user's kill): its video
    fails (or is drawn again) and its half-written file is removed, training goes on."""
    import signal
    import time

    from conftest import marked

    mark = f"killed-worker-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("ROLLTAPE_TEST_RUN", mark)  # the render workers inherit it
    folder = tmp_path / "videos"
    env = RecordTape(gym.make("HalfCheetah-v5", max_episode_steps=400), str(folder),
                     episode_trigger=lambda e: e == 0, close_timeout=120, **SMALL)
    env.reset(seed=0)
    for _ in range(400):
        env.step(env.action_space.sample())
    env.reset(seed=1)  # episode 0's video is queued
    deadline = time.monotonic() + 60
    while not _partials(folder):
        assert time.monotonic() < deadline, "no video was being written"
        time.sleep(0.02)
    for pid, argv in marked(mark).items():
        if any("render_worker" in a for a in argv):
            os.kill(pid, signal.SIGKILL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingWarning)
        env.close()
    assert _partials(folder) == [] and (folder / "rl-video-episode-0.npz").is_file()
