"""One evaluation's choices (rolltape.config), checked before any work: which episodes
--video picks, the render options' ranges, and EvalConfig.check's refusals and notes.
(The same refusals as the command line words them: test_usage.py.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rolltape.config import (
    EvalConfig,
    check_render_options,
    check_video,
    needs_returns,
    parse_wrappers,
    select_episodes,
    targets_of,
    video_picks,
)
from rolltape.errors import UsageError

ENV = "CartPole-v1"


def config(**options: Any) -> EvalConfig:
    return EvalConfig(env=options.pop("env", ENV), **options)


def test_video_best_and_worst_pick_several_lowest_index_on_ties() -> None:
    rows = [1.0, 5.0, 3.0, 5.0, 1.0, 2.0]  # the episodes' returns
    assert select_episodes("best", rows) == [1]  # 1 and 3 tie: the lower index
    assert select_episodes("best:3", rows) == [1, 2, 3]
    assert select_episodes("worst", rows) == [0]
    assert select_episodes("worst:2", rows) == [0, 4]
    assert select_episodes("best:2,worst:1", rows) == [0, 1, 3]
    assert select_episodes("best:99", rows) == list(range(6))
    # The lower median: returns sorted are 1 1 2 3 5 5, the third is episode 5's 2.0.
    assert select_episodes("median", rows) == [5]
    assert select_episodes("median:2", rows) == [2, 5]
    with pytest.raises(UsageError, match="--video"):
        select_episodes("best:x", rows)


def test_video_picks_read_counts_words_and_indices() -> None:
    assert video_picks(3) == [("count", 3)] and video_picks(" 2 ") == [("count", 2)]
    assert video_picks("All, best:2 ,0") == [("all", 0), ("best", 2), ("index", 0)]
    assert video_picks([4, 1]) == [("index", 4), ("index", 1)]
    assert video_picks("median") == [("median", 1)]


@pytest.mark.parametrize("selection", [-1, "best:0", "best:", "first", "1.5", "worst:-2"])
def test_a_video_selection_not_understood_is_refused_naming_the_choices(selection: Any) -> None:
    with pytest.raises(UsageError, match="--video"):
        video_picks(selection)


def test_a_count_picks_the_first_episodes_and_all_picks_every_one() -> None:
    returns = [3.0, 1.0, 2.0]
    assert select_episodes(2, returns) == [0, 1] and select_episodes("0", returns) == []
    assert select_episodes(10, returns) == [0, 1, 2] == select_episodes("all", returns)
    assert select_episodes("2,0,2", returns) == [0, 2]  # sorted, each once


def test_an_episode_without_a_finite_return_is_neither_best_nor_worst() -> None:
    returns = [None, 4.0, None, -1.0]
    assert select_episodes("best", returns) == [1] and select_episodes("worst", returns) == [3]
    assert select_episodes("best:4", returns) == [1, 3]
    assert select_episodes("median", [None, None]) == []
    assert select_episodes("0", returns) == [] and select_episodes("2", returns) == [0, 1]


def test_a_video_index_outside_the_run_is_refused_before_any_work() -> None:
    check_video("0,9", 10)
    for bad in ("10", "0,-1"):
        with pytest.raises(UsageError, match=r"--video asks for episode -?\d+ but the run has "
                                             r"episodes 0\.\.9"):
            check_video(bad if "," in bad else [int(bad)], 10)


def test_only_best_worst_and_median_need_the_returns() -> None:
    assert needs_returns("best:2") and needs_returns("0,median")
    assert not needs_returns(3) and not needs_returns("all") and not needs_returns("0,4")


@pytest.mark.parametrize(("options", "flag"), [
    ({"fps": 0.0}, "--fps"), ({"fps": float("nan")}, "--fps"), ({"fps": 5000.0}, "--fps"),
    ({"render_timeout": -1.0}, "--render-timeout"),
    ({"render_timeout": float("inf")}, "--render-timeout"),
    ({"formats": "avi"}, "--format"), ({"formats": ","}, "--format")])
def test_render_options_out_of_range_are_refused_naming_the_flag(options: dict[str, Any],
                                                                 flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        check_render_options(**options)


def test_render_options_in_range_pass() -> None:
    check_render_options(fps=30.0, render_timeout=120.0, formats="mp4,gif")
    check_render_options()


def test_wrappers_from_text_become_entries_and_the_api_s_are_kept() -> None:
    given = {"target": "mine:Wrap", "kwargs": {"k": 1}}
    assert parse_wrappers(["atari", "gymnasium.wrappers:FrameStackObservation,stack_size=4",
                           given]) == (
        {"target": "atari", "kwargs": {}},
        {"target": "gymnasium.wrappers:FrameStackObservation", "kwargs": {"stack_size": 4}},
        given)
    assert parse_wrappers(None) == ()
    with pytest.raises(UsageError, match="^--wrapper 'size=big'"):
        parse_wrappers(["mine:Wrap,size=big"])


@pytest.mark.parametrize(("options", "sentence"), [
    ({"suite": "toy.yaml"}, "Give either an env ('CartPole-v1') or --suite ('toy.yaml')"),
    ({"env": None}, "Give an env to evaluate"),
    ({"tasks": "a,b"}, "--tasks picks tasks of a suite; give --suite too."),
    ({"served": "tcp://127.0.0.1:7450"}, "give --suite too"),
    ({"env": None, "suite": "s.yaml", "batched_inference": True}, "--batched-inference runs one"),
    ({"env": None, "suite": "s.yaml", "env_kwargs": {"x": 1}}, "in its manifest"),
    ({"episodes": 0}, "--episodes must be at least 1, got 0."),
    ({"workers": 0}, "--workers must be at least 1"),
    ({"render_workers": -1}, "--render-workers must be at least 0"),
    ({"baseline": "expert"}, "--baseline 'expert' is not supported"),
    ({"on_divergence": "shrug"}, "Unknown --on-divergence 'shrug'"),
    ({"success": "always"}, "--success must be 'at_end'"),
    ({"max_episode_steps": 0}, "--max-episode-steps must be at least 1, got 0."),
    ({"seed": -1}, "--seed must be 0 or more"),
    ({"seed": 2**64 - 1, "episodes": 2}, "must fit in 64 bits"),
    ({"render_timeout": 0.0}, "--render-timeout must be a number above 0"),
    ({"video_format": "avi"}, "--format"),
    ({"video": "0,7", "episodes": 3}, "--video asks for episode 7"),
    ({"episode_timeout": float("inf")}, "--episode-timeout must be a number of seconds"),
    ({"episode_timeout": 0.0}, "--episode-timeout must be a number of seconds"),
    ({"backends": ("vulkan",)}, "vulkan"),
    ({"frame_stack": -2}, "--frame-stack must be 0 (none) or more"),
    ({"executor": "slurm"}, "slurm"),
])
def test_check_refuses_a_bad_config_in_one_sentence(options: dict[str, Any],
                                                    sentence: str) -> None:
    with pytest.raises(UsageError) as refused:
        config(**options).check()
    assert sentence in str(refused.value)


def test_a_missing_checkpoint_or_statistics_file_is_refused_naming_the_path(
        tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="checkpoint '.*nope' does not exist"):
        config(policy=f"sb3:{tmp_path / 'nope'}").check()
    with pytest.raises(UsageError, match="VecNormalize statistics '.*stats.pkl' does not exist"):
        config(vecnormalize=str(tmp_path / "stats.pkl")).check()


def test_a_good_config_passes_with_no_notes() -> None:
    assert config(episodes=3, video="best", workers=1).check() == []


def test_more_workers_than_episodes_is_a_note_not_an_error() -> None:
    notes = config(episodes=2, workers=3).check()
    assert notes == ["--workers 3 is more than the 2 episodes; using 2."]


def test_batched_inference_says_its_actions_may_differ_in_the_last_bits() -> None:
    [note] = config(batched_inference=True, workers=2, episodes=2).check()
    assert note.startswith("--batched-inference: the policy acts on 2 observations")


@pytest.mark.parametrize(("video", "wanted"), [(0, False), ("0", False), ("none", False),
                                               ((), False), (1, True), ("best", True),
                                               ([0], True)])
def test_wants_video(video: Any, wanted: bool) -> None:
    assert config(video=video).wants_video is wanted


def test_render_early_needs_videos_picked_without_returns() -> None:
    early = config(video="1", render_early=True)
    assert early.renders_early
    assert not replace(early, video="best").renders_early
    assert not replace(early, video=0).renders_early
    assert "pass 2 started after pass 1" in config(video="best", render_early=True).check()[0]


def test_a_single_env_run_has_one_target_with_the_env_s_spec() -> None:
    [target] = targets_of(config(episodes=4, max_episode_steps=9, env_kwargs={"sutton": 1}))
    assert target.episodes == 4 and target.where == (None, None) and target.task is None
    assert (target.spec["id"], target.spec["max_episode_steps"]) == (ENV, 9)
    assert target.spec["kwargs"] == {"sutton": 1}
