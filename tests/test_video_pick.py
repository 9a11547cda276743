"""What ``--video`` picks (rolltape.video_pick): parsed once into a record that says whether
the returns are needed, which episodes are known before any return, and which given them;
and EvalConfig holds that record whatever form the Python API gave."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rolltape.config import EvalConfig
from rolltape.errors import UsageError
from rolltape.video_pick import VideoPick


@pytest.mark.parametrize(("given", "ahead"), [
    (2, [0, 1]), ("2", [0, 1]), (9, [0, 1, 2, 3]), ("all", [0, 1, 2, 3]),
    ("3,1,1", [1, 3]), ([3, 0], [0, 3]), ("2,1", [1, 2]), (0, []),
    ("best", None), ("0,median:2", None), ("worst:3", None)])
def test_known_ahead_are_the_episodes_picked_before_any_return(given: Any,
                                                               ahead: list[int] | None) -> None:
    pick = VideoPick.of(given)
    assert pick.known_ahead(4) == ahead
    assert pick.needs_returns is (ahead is None)
    if ahead is not None:  # what is known ahead is what the returns would pick
        assert pick.pick([5.0, None, -1.0, 2.0]) == ahead


def test_pick_ranks_by_return_and_skips_what_is_not_a_number() -> None:
    returns = [1.0, None, 7.0, 7.0, -3.0]
    assert VideoPick("best").pick(returns) == [2]  # a tie: the lower index
    assert VideoPick("best:2,worst").pick(returns) == [2, 3, 4]
    assert VideoPick("median:3").pick(returns) == [0, 2, 4]
    assert VideoPick("median").pick([None, None]) == []


def test_the_record_is_read_once_and_refuses_in_one_sentence() -> None:
    pick = VideoPick("best:2,3")
    assert pick.picks is pick.picks  # parsed once, then kept
    for bad, said in (("fastest", "'fastest' is not understood"), ("best:0", "picks no"),
                      (-1, "a count of 0 or more")):
        with pytest.raises(UsageError, match=said):
            VideoPick.of(bad).check(5)
    with pytest.raises(UsageError, match=r"episode 5 but the run has episodes 0\.\.4"):
        VideoPick("1,5").check(5)


def test_eval_config_holds_a_record_for_every_form_the_api_gives() -> None:
    cfg = EvalConfig(env="CartPole-v1", video="best")
    assert cfg.video == VideoPick("best") and cfg.video.needs_returns
    for given, wanted in ((0, False), ("none", False), ([], False), ([2], True), (1, True)):
        other = replace(cfg, video=given)  # replace gives the raw value again
        assert isinstance(other.video, VideoPick) and other.wants_video is wanted
    assert replace(cfg, video=cfg.video).video is cfg.video
    assert EvalConfig(env="CartPole-v1", video=[1, 2]).video.given == (1, 2)
