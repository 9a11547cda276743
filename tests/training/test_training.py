"""Recording during training (issue 12): RecordTape keeps RecordVideo's triggers, counters
and names, records tapes that replay exactly after unseeded autoresets, renders off the
loop (a crashing render worker does not stop training), and TapeCallback records and
evaluates a real SB3 PPO run on DummyVecEnv and SubprocVecEnv.

Real parts throughout: MuJoCo envs, render processes, SB3 training. The one fake is a full
disk (Tape.save raising ENOSPC), which a test cannot cause otherwise.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rolltape
from conftest import fill
from rolltape import RenderRequest, Tape, render
from rolltape.errors import UsageError
from rolltape.training.background import RecordingWarning
from rolltape.training.record import RecordTape, capped_cubic_video_schedule, record_sub_envs

ENV = "InvertedPendulum-v5"  # MuJoCo, tiny, random actions end episodes within ~5-20 steps
SMALL = {"width": 64, "height": 48}


def drive(env: gym.Env, steps: int, seed: int = 0) -> list[int]:
    """Random actions for ``steps`` steps, resetting (unseeded after the first) at each
    episode end, as a training loop does; returns the length of each finished episode."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    lengths, n = [], 0
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        n += 1
        if term or trunc:
            lengths.append(n)
            n = 0
            env.reset()
    return lengths


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


def test_the_queue_drops_videos_when_full_and_close_leaves_the_tapes(tmp_path: Path) -> None:
    env = RecordTape(gym.make(ENV, max_episode_steps=20), tmp_path, queue_size=1,
                     episode_trigger=lambda e: True, close_timeout=0, **SMALL)
    with pytest.warns(RecordingWarning, match="Dropped the video"):
        drive(env, 60)
    with pytest.warns(RecordingWarning) as said:  # maybe one more drop, then what is left
        env.close()
    assert any("not rendered within close_timeout" in str(w.message) for w in said)
    assert env.renderer.dropped and len(env.tapes) > 4


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


@pytest.mark.parametrize("first", ["from", "attribute"])
def test_the_callback_imports_as_sb3_s_own_do(first: str) -> None:
    """``from rolltape.sb3 import TapeCallback`` and ``rolltape.sb3.TapeCallback``, in
    either order, are the one class."""
    import_from = "from rolltape.sb3 import TapeCallback, make_recorded_vec_env"
    steps = [import_from, "import rolltape; A = rolltape.sb3.TapeCallback"]
    code = "; ".join(steps if first == "from" else steps[::-1]) + (
        "; import rolltape.training.sb3 as t; "
        "print(A is TapeCallback is t.TapeCallback, callable(make_recorded_vec_env))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True"]


# -- SB3 ----------------------------------------------------------------------------------------

def _train(out: Path, vec: str) -> tuple[object, Path]:
    """192 steps of PPO on 2 Hopper sub-envs. DummyVecEnv: the callback adds the recorder
    (videos in the background) and evaluates once; SubprocVecEnv: the recipe's recorders
    in the sub-env processes, tapes only (their replays are verified by the test)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    torch.set_num_threads(1)
    if vec == "dummy":
        venv = make_vec_env("Hopper-v5", n_envs=2, seed=3,
                            env_kwargs={"max_episode_steps": 30})
        callback = rolltape.sb3.TapeCallback(
            record_every=4, eval_every=150, eval_episodes=2, eval_seed=100, out=out,
            record_options={**SMALL, "close_timeout": 120}, video_timeout=120)
    else:
        venv = rolltape.sb3.make_recorded_vec_env(
            "Hopper-v5", 2, seed=3, env_kwargs={"max_episode_steps": 30},
            vec_env_cls=SubprocVecEnv, out=out, record_every=2, render=False)
        callback = rolltape.sb3.TapeCallback(record_every=2, out=out)
    venv = VecNormalize(venv)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0,
                device="cpu", policy_kwargs={"net_arch": [8]})
    model.set_logger(configure(str(out / "log"), ["csv", "tensorboard"]))
    model.learn(192, callback=callback)
    venv.close()  # waits for the sub-envs' videos
    return callback, out


@pytest.fixture(scope="module")
def dummy_run(tmp_path_factory: pytest.TempPathFactory):
    return _train(tmp_path_factory.mktemp("dummy"), "dummy")


@pytest.fixture(scope="module")
def subproc_run(tmp_path_factory: pytest.TempPathFactory):
    return _train(tmp_path_factory.mktemp("subproc"), "subproc")


@pytest.mark.parametrize("run", ["dummy_run", "subproc_run"])
def test_each_recorded_training_episode_replays_to_monitors_return(
        run: str, request: pytest.FixtureRequest) -> None:
    callback, out = request.getfixturevalue(run)
    assert len(callback.recorded) >= 2
    tapes = [Tape.load(row["tape"]) for row in callback.recorded]
    results = render([RenderRequest(row["tape"]) for row in callback.recorded])
    for row, tape, result in zip(callback.recorded, tapes, results):
        assert tape.length == row["monitor_length"]
        assert tape.total_return == pytest.approx(row["monitor_return"], abs=1e-5)  # Monitor rounds
        assert result.verified, result.divergence
        assert result.replay_return == tape.total_return  # exactly the tape's rewards
    assert any(t.seed is None and t.reset_rng is not None for t in tapes)  # autoreset
    if run == "dummy_run":  # its videos were drawn in the background, verified, off the loop
        for row, tape in zip(callback.recorded, tapes):
            assert row["video"] == str(Path(row["tape"]).with_suffix(".mp4"))
            record = json.loads(Path(f"{row['video']}.metadata.json").read_text())["result"]
            assert record["verified"] and record["frames"] == tape.length + 1
            assert record["replay_return"] == tape.total_return and record["niceness"] >= 10


def test_the_callback_evaluates_as_rolltape_runs(dummy_run) -> None:
    callback, out = dummy_run
    with np.load(out / "evaluations.npz") as npz:
        assert npz["timesteps"].tolist() == [e["step"] for e in callback.evaluations]
        assert npz["results"].shape == npz["ep_lengths"].shape == (len(callback.evaluations), 2)
    first = callback.evaluations[0]
    assert (Path(first["run"]) / "tapes" / "policy-0001.npz").is_file()
    assert Tape.load(Path(first["run"]) / "tapes" / "policy-0000.npz").seed == 100
    assert npz_mean(out) == pytest.approx(first["mean_reward"])
    progress = (out / "log" / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/mean_reward", "eval/mean_ep_length"} <= set(progress)
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.html").read_text()
    assert "timeline.png" in report and Path(callback.recorded[0]["video"]).name in report


def test_the_training_page_shows_every_episode_and_plays_the_recorded_ones(dummy_run) -> None:
    """Every training episode's return (Monitor) and the evaluations are drawn, each
    recorded episode's marker links to its verified video, played inline, and each
    evaluation links its run."""
    import re

    callback, out = dummy_run
    page = (out / "report.html").read_text()
    assert page.count("<script") == 0 and "style.css" not in page  # self-contained
    drawn = dict(re.findall(r'data-key="(\w+)" data-xs=\'([^\']*)\'', page))
    assert json.loads(drawn["episodes"]) == [float(s) for s, _, _ in callback.episodes]
    assert len(callback.episodes) == len(json.loads((out / "training.json").read_text())
                                         ["episodes"]) > len(callback.recorded)
    assert json.loads(drawn["evaluations"]) == [float(e["step"]) for e in callback.evaluations]
    for k, row in enumerate(callback.recorded):
        assert f'<a href="#video-{k}">' in page and f'id="video-{k}"' in page
        assert f'src="{Path(row["video"]).relative_to(out)}"' in page
    assert page.count("verified: the replay earned exactly what training earned") == \
        len(callback.recorded)
    for e in callback.evaluations:
        assert f'href="evals/{Path(e["run"]).name}/results.json"' in page


def test_a_rendered_training_video_reaches_tensorboard(dummy_run) -> None:
    """The video finishes in the background, often after SB3's last logger dump: the
    callback dumps it at the end of training, as an animated image of the recorded size."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    callback, out = dummy_run
    events = EventAccumulator(str(out / "log"), size_guidance={"images": 0})
    events.Reload()
    assert "train/video" in events.Tags()["images"]
    [*_, last] = events.Images("train/video")
    assert (last.width, last.height) == (SMALL["width"], SMALL["height"])
    assert last.encoded_image_string[:6] in (b"GIF87a", b"GIF89a")  # torch writes a GIF


def npz_mean(out: Path) -> float:
    with np.load(out / "evaluations.npz") as npz:
        return float(npz["results"][0].mean())


# -- the callback never stops training ------------------------------------------------------

def _ppo(venv: object, steps: int, callback: object) -> object:
    """A tiny real PPO run of ``steps`` steps (64 a rollout) with ``callback``."""
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0,
                device="cpu", policy_kwargs={"net_arch": [8]})
    model.learn(steps, callback=callback)
    return model


def _said(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RecordingWarning)]


def test_an_eval_env_registered_only_in_the_script_is_said_at_the_start(tmp_path: Path) -> None:
    """A worker process does not run the training script: the env it registered cannot be
    made there. Said once, before the first rollout, with the fix; training goes on."""
    from stable_baselines3.common.env_util import make_vec_env

    gym.register("OnlyInThisScript-v0", max_episode_steps=20,
                 entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("OnlyInThisScript-v0", n_envs=1, seed=0), 192, callback)
    [said] = _said(caught)
    assert "'OnlyInThisScript-v0' cannot be made in the evaluation's worker" in said
    assert "eval_env='module:OnlyInThisScript-v0'" in said and "training goes on" in said
    assert model.num_timesteps >= 192 and callback.evaluations == []
    assert callback.failures == {"evaluation": 1}  # checked once, no eval attempted after


def test_a_failing_eval_is_said_once_and_skipped(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The eval env's module disappears after the first evaluation: the later ones cannot
    make the env in their worker, training completes, evaluations.npz keeps the first."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.env_util import make_vec_env

    monkeypatch.chdir(tmp_path)
    module = tmp_path / "evalmod_once.py"
    module.write_text("import gymnasium as gym\ngym.register('EvalOnce-v0', max_episode_steps=20,"
                      " entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv')\n")
    tape = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                     out=tmp_path / "run", eval_env="evalmod_once:EvalOnce-v0")

    class RemoveModule(BaseCallback):
        def _on_step(self) -> bool:
            if tape.evaluations:
                module.unlink(missing_ok=True)
            return True

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 256,
                     CallbackList([tape, RemoveModule()]))
    [said] = _said(caught)
    assert "could not evaluate at step 128" in said and "evalmod_once" in said
    assert model.num_timesteps >= 256 and tape.failures == {"evaluation": 3}
    with np.load(tmp_path / "run" / "evaluations.npz") as npz:
        assert npz["timesteps"].tolist() == [64] and npz["results"].shape == (1, 2)


def test_a_full_disk_skips_checkpoints_and_evals_not_training(small_disk: Path) -> None:
    """A real full tmpfs under ``out``: each checkpoint fails (nothing half-written stays),
    its eval is skipped, said once; training completes."""
    from stable_baselines3.common.env_util import make_vec_env

    out = small_disk / "run"
    out.mkdir()
    ballast = fill(small_disk, 0)
    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 192, callback)
    [said] = _said(caught)
    assert "could not save the checkpoint of step 64" in said and "No space left" in said
    assert model.num_timesteps >= 192 and callback.evaluations == []
    assert callback.failures["save"] >= 3 and "evaluation" not in callback.failures
    assert [p.name for p in out.rglob("*") if p.is_file()] == []  # no half-written zip
    ballast.unlink()
    callback.write_summary()  # with room again, the record is written
    assert json.loads((out / "training.json").read_text())["evaluations"] == []


# -- what users of EvalCallback expect ------------------------------------------------------

def test_stop_on_reward_threshold_stops_ppo_and_best_model_is_the_best_eval(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SB3's own StopTrainingOnRewardThreshold as callback_on_new_best, unchanged: a real
    PPO run on InvertedPendulum stops at the first evaluation that meets it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import (
        StopTrainingOnNoModelImprovement,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    stop = StopTrainingOnRewardThreshold(reward_threshold=1.0, verbose=1)
    after = StopTrainingOnNoModelImprovement(max_no_improvement_evals=100)
    callback = rolltape.sb3.TapeCallback(
        record_every=None, eval_every=64, eval_episodes=2, out=tmp_path / "run",
        best_model_save_path=tmp_path / "best", callback_on_new_best=stop,
        callback_after_eval=after, verbose=1)
    import torch

    torch.set_num_threads(1)
    model = PPO("MlpPolicy", make_vec_env(ENV, n_envs=1, seed=0), n_steps=64, batch_size=64,
                n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [8]})
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(640, callback=callback)
    [first] = callback.evaluations  # every episode earns >= 1: met at the first evaluation
    assert model.num_timesteps == 64 and first["mean_reward"] >= 1.0 and first["best"]
    assert stop.parent is callback and callback.best_mean_reward == first["mean_reward"]
    assert callback.last_mean_reward == first["mean_reward"] and after.n_calls == 1
    said = capsys.readouterr().out
    assert "Eval num_timesteps=64" in said and "Stopping training because the mean reward" in said
    best = tmp_path / "best" / "best_model.zip"
    assert best.read_bytes() == Path(first["checkpoint"]).read_bytes()
    loaded = PPO.load(best, device="cpu")
    assert loaded.policy.state_dict().keys() == model.policy.state_dict().keys()
    progress = (tmp_path / "log" / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/mean_reward", "eval/mean_ep_length"} <= set(progress)


def test_best_model_follows_the_best_evaluation(tmp_path: Path) -> None:
    """Without a stop, best_model.zip is the checkpoint of the evaluation with the highest
    mean return so far, and best_mean_reward is that mean (SB3's numbers)."""
    from stable_baselines3.common.env_util import make_vec_env

    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=tmp_path / "run",
                                         best_model_save_path=tmp_path / "best")
    _ppo(make_vec_env(ENV, n_envs=1, seed=0), 192, callback)
    means = [e["mean_reward"] for e in callback.evaluations]
    assert len(means) == 3 and callback.best_mean_reward == max(means)
    best = max(callback.evaluations, key=lambda e: (e["mean_reward"], -e["step"]))
    assert (tmp_path / "best" / "best_model.zip").read_bytes() == Path(
        best["checkpoint"]).read_bytes()
    assert [e.get("best", False) for e in callback.evaluations][0]
    with pytest.raises(UsageError, match="best_by"):
        rolltape.sb3.TapeCallback(best_by="return")


def test_a_tape_gone_before_its_video_is_logged_does_not_stop_training(tmp_path: Path) -> None:
    """The user clears the videos folder while training runs: the callback cannot read a
    recorded tape back at the rollout's end; said once, training completes."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.env_util import make_vec_env

    out = tmp_path / "run"
    tape = rolltape.sb3.TapeCallback(record_every=1, out=out,
                                     record_options={"render": False})

    class ClearVideos(BaseCallback):
        def _on_step(self) -> bool:
            for path in (out / "videos").glob("*.npz"):
                path.unlink()
            return True

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 192,
                     CallbackList([tape, ClearVideos()]))
    [said] = _said(caught)
    assert "could not put the newest training video into the logger" in said
    assert "does not exist" in said and model.num_timesteps >= 192
    assert len(tape.recorded) > 3 and tape.failures["video"] >= 2


_SCRIPT = """
import gymnasium as gym, signal, sys
from rolltape.training.record import RecordTape
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
    failed = [m for m in said if "could not be rendered (" in m]
    assert len(failed) == 1 and "No space left" in failed[0], said
    assert any("videos could not be rendered in all" in m for m in said), said


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
