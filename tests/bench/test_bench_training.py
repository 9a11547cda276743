"""The cheap parts of the training benchmarks (rolltape.bench.training): the training child
run as the bench runs it on a tiny PPO (a tape of every episode, or nothing at all),
Gymnasium's RecordVideo with the bench's trigger, and the per-step cost row on its quick
size, whose numbers are checked to follow from its own raw timings. No background videos
(they start render workers)."""

from __future__ import annotations

import statistics
from pathlib import Path

import gymnasium as gym
import pytest

from rolltape import Tape
from rolltape.bench.common import ENV_ID, FULL, QUICK, Context
from rolltape.bench.training import (
    _inline_video,
    _sizes,
    bench_record_tape_step_cost,
    train_child,
)

STEPS, EPISODE = 128, 30


def test_quick_sizes_are_no_larger_than_full_ones(tmp_path: Path):
    quick = _sizes(Context(QUICK, tmp_path, print))
    full = _sizes(Context(FULL, tmp_path, print))
    assert set(quick) == set(full)
    assert all(0 < quick[k] <= full[k] for k in quick)


def test_training_with_tapes_records_every_step_it_took(tmp_path: Path):
    folder = tmp_path / "tapes"
    result = train_child("tapes", steps=STEPS, episode=EPISODE, n_steps=64, folder=str(folder),
                         seed=0, width=64, height=48)
    assert result["steps"] == STEPS and result["learn_s"] > 0
    tapes = [Tape.load(p) for p in sorted(folder.glob("*.npz"))]
    # 4 whole episodes, and the one under way when training stopped (kept at close).
    assert [t.length for t in tapes] == [EPISODE] * 4 + [STEPS - 4 * EPISODE]
    assert {t.env_id for t in tapes} == {ENV_ID}


def test_training_without_recording_writes_nothing(tmp_path: Path):
    folder = tmp_path / "none"
    result = train_child("none", steps=64, episode=EPISODE, n_steps=64, folder=str(folder),
                         seed=0, width=64, height=48)
    assert result["steps"] == 64 and not folder.exists()


def test_the_inline_video_baseline_draws_every_tenth_episode(tmp_path: Path):
    env = gym.make(ENV_ID, render_mode="rgb_array", width=64, height=48)
    wrapped = _inline_video(env, str(tmp_path / "videos"))
    try:
        assert isinstance(wrapped, gym.wrappers.RecordVideo)  # moviepy is installed here
        trigger = wrapped.episode_trigger
        assert trigger is not None
        assert [e for e in range(25) if trigger(e)] == [0, 10, 20]
    finally:
        wrapped.close()


@pytest.fixture(scope="module")
def step_cost(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    work = tmp_path_factory.mktemp("bench")
    return bench_record_tape_step_cost(Context(QUICK, work, lambda line: None)), work


def test_the_step_cost_is_the_difference_of_median_step_times(step_cost):
    result, _ = step_cost
    raw = result["raw"]
    n = raw["steps"]
    assert n == _sizes(Context(QUICK, Path("."), print))["bare_steps"]
    bare, wrapped = (statistics.median(raw["seconds"][k]) for k in ("bare", "wrapped"))
    assert len(raw["seconds"]["bare"]) == len(raw["seconds"]["wrapped"]) == 3
    assert result["value"] == pytest.approx((wrapped - bare) / n * 1e6, rel=1e-9)
    assert raw["extra_us_per_step"] == result["value"]
    assert result["ratio"] == pytest.approx(wrapped / bare, rel=1e-12)


def test_the_step_cost_is_judged_in_microseconds_against_two(step_cost):
    result, _ = step_cost
    assert (result["unit"], result["op"], result["target"]) == ("us", "<=", 2.0)
    assert result["passed"] is (result["value"] <= 2.0)


def test_a_wrapper_that_never_records_leaves_its_folder_empty(step_cost):
    _, work = step_cost
    [folder] = work.iterdir()
    assert folder.name.endswith("step-cost") and not any(folder.iterdir())

