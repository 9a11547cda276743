"""Recording during training (issue 12): RecordTape keeps RecordVideo's triggers, counters
and names and records tapes that replay exactly after unseeded autoresets. Its videos drawn
off the loop are tested in test_background.py, TapeCallback in test_training_sb3.py.

Real parts throughout: MuJoCo envs, render processes. The one fake is a full disk
(Tape.save raising ENOSPC), which a test cannot cause otherwise.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from tests.conftest import drive

from rolltape import RenderRequest, Tape, render
from rolltape.errors import UsageError
from rolltape.training.background import RecordingWarning
from rolltape.training.record_tape import RecordTape, capped_cubic_video_schedule, record_sub_envs

ENV = "InvertedPendulum-v5"  # MuJoCo, tiny, random actions end episodes within ~5-20 steps
SMALL = {"width": 64, "height": 48}


def recordings(env: RecordTape) -> dict[str, list[Tape]]:
    """Recording name -> its tapes in order (several when it ran across resets)."""
    out: dict[str, list[Tape]] = {}
    for path in env.tapes:
        tape = Tape.load(path)
        out.setdefault(tape.meta["recording"], []).append(tape)
    return out


def frames(tapes: list[Tape]) -> int:
    return sum(t.length + 1 for t in tapes)


def tape_only(folder: Path, **kw: object) -> RecordTape:
    return RecordTape(gym.make(ENV, max_episode_steps=20), folder, render=False, **kw)


# -- RecordVideo's semantics -------------------------------------------------------------

def test_default_trigger_is_the_capped_cubic_schedule_of_whole_episodes(tmp_path: Path) -> None:
    env = tape_only(tmp_path)
    assert (env.episode_id, env.step_id) == (-1, -1)  # counters start at -1, as RecordVideo's
    lengths = drive(env, 199)
    env.close()
    got = recordings(env)
    expected = [f"rl-video-episode-{i}" for i in range(env.episode_id + 1)
                if capped_cubic_video_schedule(i)]
    assert sorted(got) == sorted(expected) and "rl-video-episode-8" in got
    assert [i for i in range(2001) if capped_cubic_video_schedule(i)] == [
        *(k ** 3 for k in range(10)), 1000, 2000]
    for name, tapes in got.items():
        episode = int(name.rsplit("-", 1)[1])
        assert len(tapes) == 1 and tapes[0].start_step == 0
        if episode < len(lengths):  # whole episodes: frames = length + 1
            assert tapes[0].length == lengths[episode]
            assert frames(tapes) == lengths[episode] + 1


def test_episode_trigger_and_name_prefix(tmp_path: Path) -> None:
    env = tape_only(tmp_path, episode_trigger=lambda e: e % 3 == 0, name_prefix="training")
    lengths = drive(env, 120)
    env.close()
    got = recordings(env)
    assert sorted(got) == sorted(f"training-episode-{i}" for i in range(env.episode_id + 1)
                                 if i % 3 == 0)
    assert all(got[f"training-episode-{i}"][0].length == lengths[i]
               for i in range(0, len(lengths), 3))
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == sorted(f"{n}.npz" for n in got)


def test_step_trigger_records_to_the_episode_end(tmp_path: Path) -> None:
    """RecordVideo's own expectation: step_trigger x % 100 == 0 over 199 steps gives two
    videos; each starts after its trigger step and stops at the next reset."""
    env = tape_only(tmp_path, step_trigger=lambda x: x % 100 == 0)
    drive(env, 199)
    env.close()
    got = recordings(env)
    assert sorted(got) == ["rl-video-step-0", "rl-video-step-100"]
    first = got["rl-video-step-0"]
    assert len(first) == 1 and first[0].start_step == 1  # the state after step 0
    assert first[0].terminated[-1] or first[0].truncated[-1]


@pytest.mark.parametrize("video_length", [1, 12])
def test_video_length_counts_frames_and_runs_across_resets(tmp_path: Path,
                                                           video_length: int) -> None:
    env = tape_only(tmp_path, step_trigger=lambda x: x == 0, video_length=video_length)
    env.action_space.seed(1)
    env.reset(seed=1)
    seen = 0  # frames RecordVideo would have captured: one per step and one per reset
    while seen < video_length:  # the frame after step 0, then video_length - 1 more
        assert seen == 0 or env.recording
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        seen += 1
        if (term or trunc) and seen < video_length:
            env.reset()
            seen += 1
    assert env.recording
    env.step(env.action_space.sample())  # one more frame: video_length + 1 > video_length
    assert not env.recording
    env.close()
    [tapes] = recordings(env).values()
    assert frames(tapes) == video_length + 1
    if video_length == 12:  # random actions end an InvertedPendulum episode within 12
        assert len(tapes) > 1 and tapes[1].start_step == 0 and tapes[1].reset_rng is not None
        assert Path(env.tapes[1]).name == "rl-video-step-0-part1.npz"


def test_tape_path_in_info_at_episode_end_under_and_over_episode_statistics(
        tmp_path: Path) -> None:
    inner = gym.wrappers.RecordEpisodeStatistics(
        tape_only(tmp_path / "a", episode_trigger=lambda e: e == 1))
    outer = RecordTape(gym.wrappers.RecordEpisodeStatistics(gym.make(ENV, max_episode_steps=20)),
                       tmp_path / "b", episode_trigger=lambda e: e == 1, render=False)
    for env in (inner, outer):
        env.reset(seed=0)
        ends = []
        while len(ends) < 3:
            _, _, term, trunc, info = env.step(env.action_space.sample())
            if term or trunc:
                ends.append(info)
                env.reset()
        env.close()
        assert [("tape" in i) for i in ends] == [False, True, False]
        assert all("episode" in i for i in ends)  # RecordEpisodeStatistics still reports
        tape = Tape.load(ends[1]["tape"])
        assert tape.total_return == pytest.approx(float(ends[1]["episode"]["r"]))
        assert tape.length == int(ends[1]["episode"]["l"])


# -- replaying unseeded training episodes ---------------------------------------------------

@pytest.mark.parametrize("vectorization,mode,env_id", [
    ("sync", "NextStep", "Hopper-v5"), ("sync", "SameStep", "Hopper-v5"),
    ("async", "NextStep", "Hopper-v5"),
    ("sync", "NextStep", "CartPole-v1")])  # no physics state: the generator state alone
def test_tapes_after_unseeded_autoreset_replay_exactly(tmp_path: Path, vectorization: str,
                                                       mode: str, env_id: str) -> None:
    envs = record_sub_envs([lambda: gym.make(env_id, max_episode_steps=25)] * 2,
                           tmp_path, envs_to_record=(1,), vectorization=vectorization,
                           autoreset_mode=gym.vector.AutoresetMode(mode),
                           episode_trigger=lambda e: e in (1, 2), render=False)
    envs.reset(seed=7)  # seeded once, as SB3 does; later resets are autoresets
    envs.action_space.seed(7)
    seen = []
    for _ in range(200):
        _, _, _, _, infos = envs.step(envs.action_space.sample())
        ended = infos.get("final_info", infos)  # SAME_STEP: the reset's info is on top
        if "tape" in ended:
            seen += [t for t, m in zip(ended["tape"], ended["_tape"]) if m]
        if len(seen) == 2:
            break
    envs.close()
    assert [Path(p).name for p in seen] == ["rl-video-env1-episode-1.npz",
                                            "rl-video-env1-episode-2.npz"]
    tapes = [Tape.load(p) for p in seen]
    assert all(t.seed is None and t.reset_rng is not None for t in tapes)
    results = render([RenderRequest(p) for p in seen])  # verify only: nothing drawn
    for tape, result in zip(tapes, results):
        assert result.verified, result.divergence
        assert result.replay_return == tape.total_return


def test_a_tape_begun_mid_episode_replays_and_renders(tmp_path: Path) -> None:
    """A step trigger mid-episode: the tape starts from the physics state after that step;
    the background render verifies it and draws video_length + 1 frames across resets."""
    done = []
    env = RecordTape(gym.make(ENV, max_episode_steps=20), tmp_path,
                     step_trigger=lambda x: x == 3, video_length=15, on_video=done.append,
                     close_timeout=120, **SMALL)
    drive(env, 40, seed=2)
    env.close()
    [video] = done
    assert video.error is None and video.verified, (video.error, video.divergence)
    assert video.frames == 16 and len(video.job.tapes) > 1
    assert Tape.load(video.job.tapes[0]).start_step == 4
    from rolltape.pass2.encode import read_frames

    assert sum(1 for _ in read_frames(video.outputs[0])) == 16
    assert [p.name for p in tmp_path.glob(".*")] == []  # part videos joined and removed


@pytest.mark.parametrize("env_id", ["CartPole-v1", ENV])
def test_an_env_that_does_not_replay_exactly_is_said_once(tmp_path: Path, env_id: str) -> None:
    """Training changed the env after gym.make (as domain randomisation does), which no tape
    records: every replay diverges. Said once, naming the env and the step; the MuJoCo
    videos are drawn from the recorded states, the others show the replay."""
    env = gym.make(env_id, max_episode_steps=20)
    if env_id == ENV:
        env.unwrapped.model.opt.gravity[2] = -30.0
    else:
        env.unwrapped.force_mag = 30.0
    done: list = []
    env = RecordTape(env, tmp_path, episode_trigger=lambda e: e < 3, on_video=done.append,
                     close_timeout=120, **(SMALL if env_id == ENV else {}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drive(env, 80)
        env.close()
    said = [str(w.message) for w in caught if issubclass(w.category, RecordingWarning)]
    assert len(done) == 3 and all(d.divergence and d.error is None for d in done)
    [one] = said
    assert one.startswith(f"{env_id} does not replay deterministically") and "at step " in one
    modes = {r.mode for d in done for r in d.results}
    assert modes == ({"restore"} if env_id == ENV else {"resim"})
    for d in done:
        assert d.frames == Tape.load(d.job.tapes[0]).length + 1 and Path(d.outputs[0]).is_file()



# -- bad input --------------------------------------------------------------------------------

def test_bad_input_is_refused_in_one_sentence(tmp_path: Path) -> None:
    make = lambda: gym.make(ENV, max_episode_steps=20)  # noqa: E731
    with pytest.raises(UsageError, match="episode_trigger must be a function"):
        RecordTape(make(), tmp_path, episode_trigger=5)
    with pytest.raises(UsageError, match="video_length must be 0"):
        RecordTape(make(), tmp_path, video_length=-1)
    with pytest.raises(UsageError, match="video format"):
        RecordTape(make(), tmp_path, formats=("avi",))

    class TupleActions(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))

    with pytest.raises(UsageError, match="cannot record an env whose action space is Tuple"):
        RecordTape(TupleActions(), tmp_path)
    (tmp_path / "old.mp4").write_bytes(b"")
    with pytest.warns(UserWarning, match="Overwriting existing videos"):
        RecordTape(make(), tmp_path, render=False)
    with pytest.raises(UsageError, match="already holds videos"):
        RecordTape(make(), tmp_path, overwrite=False)


@pytest.mark.parametrize("options,said", [
    ({"formats": ()}, "formats must be a sequence of video formats"),
    ({"formats": "mp4"}, "formats must be a sequence of video formats"),
    ({"close_timeout": -1}, "close_timeout must be a number of seconds, 0 or more"),
    ({"close_timeout": float("nan")}, "close_timeout must be a number of seconds, 0 or more"),
    ({"width": 0}, "width must be a positive number of pixels"),
    ({"height": 2.5}, "height must be a positive number of pixels"),
    ({"fps": 0}, "fps must be a positive number of frames per second"),
    ({"backends": "nope"}, "backends must name GL backends from egl, osmesa"),
    ({"name_prefix": "../escaped"}, "name_prefix must be a file name without path separators"),
    ({"name_prefix": ""}, "name_prefix must be a file name without path separators"),
])
def test_bad_options_are_refused_at_construction(tmp_path: Path, options: dict[str, object],
                                                 said: str) -> None:
    with pytest.raises(UsageError, match=said) as refused:
        RecordTape(gym.make(ENV), tmp_path / "videos", **options)
    assert str(refused.value).count(". ") == 0 and str(refused.value).startswith("RecordTape's")
    assert not (tmp_path / "videos").exists()  # refused before anything was made


def test_a_video_folder_that_is_a_file_and_a_bad_autoreset_mode_are_refused(
        tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="width and height cannot size CartPole-v1, which "
                                         "draws its frames at its own size; drop them"):
        RecordTape(gym.make("CartPole-v1"), tmp_path, width=64)
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="video_folder .* is a file; give a folder"):
        RecordTape(gym.make(ENV), tmp_path / "file")
    with pytest.raises(UsageError, match="Unknown autoreset_mode 'sometimes'; use one of "
                                         "NextStep, SameStep, Disabled"):
        record_sub_envs([lambda: gym.make(ENV)], tmp_path, autoreset_mode="sometimes")
    envs = record_sub_envs([lambda: gym.make(ENV)], tmp_path / "ok", autoreset_mode="SameStep",
                           render=False)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    envs.close()


def test_a_full_disk_loses_the_tape_not_the_training(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: Tape, path: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Tape, "save", full)
    env = tape_only(tmp_path, episode_trigger=lambda e: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lengths = drive(env, 100)
        env.close()
    said = [w for w in caught if issubclass(w.category, RecordingWarning)]
    assert len(said) == 1 and "No space left" in str(said[0].message)  # reported once
    assert env.write_failures >= len(lengths) > 3 and env.tapes == []
    assert list(tmp_path.iterdir()) == []  # nothing half-written



def test_bad_reset_rng_in_a_tape_is_refused(tmp_path: Path) -> None:
    tape = Tape(env={"id": ENV}, seed=None, actions=np.zeros((1, 1)), rewards=np.zeros(1),
                terminated=np.ones(1, bool), truncated=np.zeros(1, bool),
                reset_rng={"bit_generator": "PCG64", "state": {"state": 1, "inc": 3}})
    path = tape.save(tmp_path / "t.npz")
    assert Tape.load(path).reset_rng == tape.reset_rng
    with pytest.raises(UsageError, match="reset_rng must be a numpy bit-generator state"):
        Tape(env={"id": ENV}, seed=None, actions=np.zeros((1, 1)), rewards=np.zeros(1),
             terminated=np.ones(1, bool), truncated=np.zeros(1, bool),
             reset_rng={"bit_generator": "os.system", "state": "rm"})


def test_a_tape_window_is_saved_and_a_bad_one_refused(tmp_path: Path) -> None:
    fields = dict(env={"id": "CartPole-v1"}, seed=0, actions=np.zeros(4, np.int64),
                  rewards=np.ones(4), terminated=np.zeros(4, bool), truncated=np.zeros(4, bool))
    tape = Tape(**fields, window=(2, 4))
    loaded = Tape.load(tape.save(tmp_path / "w.npz"))
    assert loaded.window == (2, 4) and loaded.frame_range == (2, 5)
    assert Tape(**fields).frame_range == (0, 5)
    for bad in ((3, 2), (0, 5), (-1, 1)):
        with pytest.raises(UsageError, match="window must be two frame indices"):
            Tape(**fields, window=bad)


def test_import_rolltape_stays_light() -> None:
    code = ("import sys, rolltape; rolltape.RecordTape; "
            "print('torch' in sys.modules, 'stable_baselines3' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]
