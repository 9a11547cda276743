"""The worker's side of a dataset export (rolltape.pass2.export): an ExportJob replays a
tape on a replayer (in this process, observations only: no GL) and keeps what the replay
regenerates, or writes nothing and names the step where it diverged; the probe of the envs
before any episode; observations split into leaves and nested back; LeRobot's statistics
and frame sampling. The whole export command: tests/datasets/."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from conftest import ENV_ID
from rolltape import Run, Tape, evaluate
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.pass2.export import (
    ExportJob,
    ImageStats,
    ProbeJob,
    _downsample,
    _leaves,
    feature_stats,
    nest,
    probe_envs,
    sample_indices,
)
from rolltape.pass2.replay import Replayer

STEPS = 8
TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Two random HalfCheetah episodes of 8 steps."""
    return evaluate(ENV_ID, "random", episodes=2, seed=11, max_episode_steps=STEPS,
                    out=tmp_path_factory.mktemp("run") / "run", report=False, viewer=False)


@pytest.fixture(scope="module")
def replayer():
    replayer = Replayer(None, lambda n: None)
    yield replayer
    replayer.close()


def tape_of(run: Run, k: int = 0) -> Path:
    return run.tape_path(run.results.episodes[k])


def fresh_observations(tape: Tape) -> np.ndarray:
    env = gym.make(ENV_ID, max_episode_steps=STEPS)
    observations = [env.reset(seed=tape.seed)[0]]
    observations += [env.step(a)[0] for a in tape.actions]
    env.close()
    return np.stack(observations)


def test_an_episode_holds_what_a_fresh_replay_of_its_tape_gives(run, replayer, tmp_path):
    out = tmp_path / "episode.npz"
    result = ExportJob(tape=str(tape_of(run)), out=str(out)).perform(replayer)
    assert result.verified and result.divergence is None
    assert result.steps == STEPS and result.files == (str(out),)
    tape = Tape.load(tape_of(run))
    with np.load(out) as saved:
        assert np.array_equal(saved["obs"], fresh_observations(tape))
        for name in ("actions", "rewards", "terminated", "truncated"):
            assert np.array_equal(saved[name], getattr(tape, name)), name
        assert saved["success"].shape == (STEPS + 1,) and not saved["success"].any()


def test_restore_mode_stores_the_same_episode_as_resim(run, replayer, tmp_path):
    resim, restore = tmp_path / "resim.npz", tmp_path / "restore.npz"
    ExportJob(tape=str(tape_of(run, 1)), out=str(resim)).perform(replayer)
    done = ExportJob(tape=str(tape_of(run, 1)), out=str(restore), mode="restore").perform(
        replayer)
    assert done.verified
    with np.load(resim) as a, np.load(restore) as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[name], b[name]) for name in a.files)


def test_a_tape_that_diverges_writes_nothing_and_names_the_step(run, replayer, tmp_path):
    tape = Tape.load(tape_of(run))
    actions = tape.actions.copy()
    actions[3] = -actions[3]  # the reward of step 3 is no longer pass 1's
    altered = dataclasses.replace(tape, actions=actions).save(tmp_path / "altered.npz")
    out = tmp_path / "episode.npz"
    result = ExportJob(tape=str(altered), out=str(out)).perform(replayer)
    assert not result.verified and result.files == ()
    assert result.divergence is not None and result.divergence.startswith("step 3"), \
        result.divergence
    assert not out.exists()


def test_a_tape_that_begins_mid_episode_is_refused(run, replayer, tmp_path):
    tape = Tape.load(tape_of(run))
    late = dataclasses.replace(tape, start_step=4).save(tmp_path / "late.npz")
    with pytest.raises(UsageError, match="begins mid-episode.*export an eval run's tapes"):
        ExportJob(tape=str(late), out=str(tmp_path / "e.npz")).perform(replayer)


def test_a_tape_naming_unknown_code_is_refused_unless_its_env_is_given(run, replayer,
                                                                        tmp_path):
    tape = Tape.load(tape_of(run))
    named = dataclasses.replace(tape, env={**tape.env, "id": "evilmod:Cheetah-v0"})
    path = named.save(tmp_path / "named.npz")
    with pytest.raises(UsageError, match="--trust-module evilmod"):
        ExportJob(tape=str(path), out=str(tmp_path / "e.npz")).perform(replayer)
    done = ExportJob(tape=str(path), out=str(tmp_path / "e.npz"), env_id=ENV_ID).perform(
        replayer)
    assert done.verified


def test_a_success_flag_is_kept_at_the_step_that_reported_it(tmp_path, replayer):
    toy = evaluate(TOY, "random", episodes=2, seed=4, out=tmp_path / "toy", report=False,
                   viewer=False)
    for row in toy.results.episodes:
        out = tmp_path / f"{row.key.seed}.npz"
        job = ExportJob(tape=str(toy.tape_path(row)), out=str(out), env_id=TOY)
        assert job.perform(replayer).verified
        with np.load(out) as saved:
            expected = np.zeros(6, bool)
            expected[-1] = row.key.seed % 2 == 0  # the toy succeeds on even seeds, at the end
            assert np.array_equal(saved["success"], expected)


def test_the_probe_answers_spaces_spec_and_frame_rate():
    [(obs, act, spec, fps)] = probe_envs([env_spec("CartPole-v1")], ())
    assert obs.shape == (4,) and act == spaces.Discrete(2)
    assert spec.id == "CartPole-v1" and fps == 50.0


def test_the_probe_refuses_a_camera_the_model_lacks():
    with pytest.raises(UsageError, match="no-such-camera"):
        ProbeJob((env_spec(ENV_ID),), ("no-such-camera",)).perform()


def test_the_probe_refuses_untrusted_env_code_and_names_the_tape():
    spec = {"id": TOY}
    with pytest.raises(UsageError, match="Tape 'x.npz' names the env code"):
        probe_envs([spec], (), tapes=("x.npz",))
    [(_, _, _, fps)] = probe_envs([spec], (), trusted=(TOY,))
    assert fps == 10.0  # SuccessToy's render_fps


def test_leaves_and_nest_round_trip_a_dict_and_tuple_observation():
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)),
                         "parts": spaces.Tuple((spaces.Box(0, 1, (3,)),
                                                spaces.Discrete(4)))})
    space.seed(0)
    rows = [space.sample() for _ in range(5)]
    leaves = _leaves(rows)
    assert list(leaves) == ["/parts/0", "/parts/1", "/pos"]  # the space's order: sorted keys
    nested = nest({f"obs{k}": np.stack(v) for k, v in leaves.items()}, space)
    assert np.array_equal(nested["pos"], np.stack([r["pos"] for r in rows]))
    assert np.array_equal(nested["parts"][0], np.stack([r["parts"][0] for r in rows]))
    assert nested["parts"][1].tolist() == [int(r["parts"][1]) for r in rows]


def test_an_array_observation_is_one_leaf():
    rows = [np.arange(3.0) + k for k in range(4)]
    leaves = _leaves(rows)
    assert list(leaves) == [""] and leaves[""] is rows
    arrays = {"obs": np.stack(rows)}
    assert nest(arrays, spaces.Box(-9, 9, (3,))) is arrays["obs"]


def test_feature_stats_per_element_match_numpy():
    values = np.random.default_rng(0).normal(size=(50, 3))
    stats = feature_stats(values)
    assert np.allclose(stats["mean"], values.mean(0)) and np.allclose(stats["std"], values.std(0))
    assert np.array_equal(stats["min"], values.min(0)) and np.array_equal(stats["max"],
                                                                          values.max(0))
    assert np.allclose(stats["q50"], np.median(values, 0))
    assert np.allclose(stats["q01"], np.percentile(values, 1, axis=0))
    assert stats["count"].tolist() == [50]


def test_feature_stats_of_images_are_per_channel():
    images = np.zeros((4, 3, 2, 2))
    images[:, 1] = 0.5
    images[:, 2] = np.arange(4).reshape(4, 1, 1) / 4
    stats = feature_stats(images, axis=(0, 2, 3))
    assert stats["mean"].shape == (3, 1, 1) and stats["count"].tolist() == [4]
    assert stats["mean"].ravel().tolist() == [0.0, 0.5, 0.375]
    assert stats["max"].ravel().tolist() == [0.0, 0.5, 0.75]


@pytest.mark.parametrize(("length", "count"), [(1, 1), (60, 60), (400, 100), (460, 100),
                                               (1000, 177),
                                               (10_000, 1000), (10**6, 10_000)])
def test_sampled_frames_are_evenly_spread_from_first_to_last(length: int, count: int):
    picked = sample_indices(length)
    assert len(picked) == count and len(set(picked)) == count
    assert picked[0] == 0 and picked[-1] == length - 1 and picked == sorted(picked)


def test_a_large_frame_is_strided_to_about_150_pixels_and_a_small_one_kept():
    large = np.arange(480 * 640 * 3, dtype=np.uint32).reshape(480, 640, 3)
    small = large[:120, :200]
    down: Any = _downsample(large)
    assert down.shape == (120, 160, 3) and np.array_equal(down, large[::4, ::4])
    assert np.array_equal(_downsample(small), small)


@pytest.mark.parametrize("shape, frames", [((480, 640, 3), 12), ((2, 2, 3), 1), ((5, 3, 3), 4),
                                           ((96, 96, 3), 7)])
def test_image_stats_from_counts_equal_the_stats_of_the_stacked_frames(shape, frames):
    """Counts per channel give feature_stats's numbers (the quantiles interpolate between
    the two nearest values as np.quantile does: tiny frames make them differ)."""
    rng = np.random.default_rng(frames)
    sampled = [(rng.integers(0, 256, shape) // rng.integers(1, 9)).astype(np.uint8)
               for _ in range(frames)]
    stats = ImageStats()
    for frame in sampled:
        stats.add(frame)
    got = stats.result()
    images = np.stack([_downsample(f) for f in sampled]).transpose(0, 3, 1, 2) / 255.0
    expected = feature_stats(images, axis=(0, 2, 3))
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name].shape == expected[name].shape, name
        assert np.allclose(got[name], expected[name], rtol=0, atol=1e-12), name
    assert got["count"].tolist() == [frames]
