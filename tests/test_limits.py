"""The caps a run's counts and names must stay under (rolltape.limits), checked before any
work: each refusal names its flag and the most it may be, and the cap itself is allowed."""

from __future__ import annotations

import math

import pytest

from rolltape.errors import UsageError
from rolltape.limits import (
    MAX_EPISODE_STEPS,
    MAX_EPISODES,
    MAX_FPS,
    MAX_NAME_BYTES,
    MAX_SEED,
    check_folder_name,
    check_fps,
    check_gpus,
    check_run_counts,
)


def test_the_largest_counts_are_allowed() -> None:
    check_run_counts(episodes=MAX_EPISODES, seed=0, max_episode_steps=MAX_EPISODE_STEPS)
    check_run_counts(episodes=1, seed=MAX_SEED)  # the very last seed Gymnasium takes
    check_run_counts(episodes=10, seed=0, max_episode_steps=None)


def test_one_episode_more_than_the_cap_is_refused_naming_the_flag() -> None:
    with pytest.raises(UsageError, match=r"^--episodes 1000000000000001 .*split the work"):
        check_run_counts(episodes=MAX_EPISODES + 1, seed=0)


def test_the_last_episode_s_seed_must_fit_in_64_bits() -> None:
    check_run_counts(episodes=5, seed=2**64 - 5)  # seeds 2**64-5 .. 2**64-1
    with pytest.raises(UsageError) as refused:
        check_run_counts(episodes=6, seed=2**64 - 5)
    assert f"needs seeds up to {2**64}" in str(refused.value)
    assert "--seed" in str(refused.value) and "--episodes" in str(refused.value)


def test_a_time_limit_above_what_a_tape_holds_is_refused() -> None:
    with pytest.raises(UsageError, match="--max-episode-steps 10000001 .* at most 10,000,000"):
        check_run_counts(episodes=1, seed=0, max_episode_steps=MAX_EPISODE_STEPS + 1)


def test_fps_up_to_the_cap_passes_and_none_means_the_env_s_own() -> None:
    check_fps(None)
    check_fps(MAX_FPS)
    with pytest.raises(UsageError, match="--fps 1001 .* at most 1000 frames"):
        check_fps(MAX_FPS + 1)


@pytest.mark.parametrize("gpus", [0.0, 0.25, 4.0])
def test_a_gpu_share_of_zero_or_more_is_allowed(gpus: float) -> None:
    check_gpus("--ray-render-gpus", gpus)


@pytest.mark.parametrize("gpus", [-0.5, math.nan, math.inf])
def test_a_negative_or_non_finite_gpu_share_is_refused(gpus: float) -> None:
    with pytest.raises(UsageError, match=r"^--ray-render-gpus must be 0 \(no GPU\) or more"):
        check_gpus("--ray-render-gpus", gpus)


def test_a_folder_name_is_measured_in_bytes_not_characters() -> None:
    check_folder_name("--out", "runs/" + "x" * MAX_NAME_BYTES)
    accented = "é" * (MAX_NAME_BYTES // 2 + 1)  # fewer characters than the cap, more bytes
    with pytest.raises(UsageError, match=f"has a name of {len(accented.encode())} bytes"):
        check_folder_name("--out", f"runs/{accented}/run")


def test_a_long_name_is_shown_cut_to_100_characters() -> None:
    with pytest.raises(UsageError) as refused:
        check_folder_name("--out", "y" * 300)
    assert str(refused.value).startswith("--out '" + "y" * 99 + "…' has a name of 300 bytes")
