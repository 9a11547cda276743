"""Pass 2 of an evaluation (rolltape.videos): the picked episodes' videos land in the run's
videos/ folder with paths relative to it, a video that fails never costs the ones drawn
beside it, and an early pass 2 starts once every picked tape exists. Real CartPole tapes
(no GL) drawn by real render workers, a second each."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rolltape.config import EvalConfig, Target
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.pass1.rollout import record_episode
from rolltape.policies import load_policy
from rolltape.progress import Progress
from rolltape.record import Episode, EpisodeKey
from rolltape.tape import Tape
from rolltape.videos import EarlyRender, pass2_videos, warm_render_workers

ENV = "CartPole-v1"
STEPS = 10


@pytest.fixture(scope="module")
def tapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder's tapes/: three 10-step CartPole episodes, seeds 0..2."""
    root = tmp_path_factory.mktemp("run")
    (root / "tapes").mkdir()
    spec = env_spec(ENV, max_episode_steps=STEPS)
    env = make_env(spec)
    for i in range(3):
        fields = record_episode(env, load_policy("random", env), seed=i)
        Tape(env=spec, **fields).save(root / "tapes" / f"policy-{i:04d}.npz")
    env.close()
    return root / "tapes"


@pytest.fixture
def root(tapes: Path, tmp_path: Path) -> Path:
    shutil.copytree(tapes, tmp_path / "tapes")
    return tmp_path


def row(i: int, role: str = "policy") -> dict[str, Any]:
    return Episode(EpisodeKey(role, None, None, i, i), float(STEPS), STEPS,
                   tape=f"tapes/{role}-{i:04d}.npz").to_json()


def config(**options: Any) -> EvalConfig:
    return EvalConfig(env=ENV, **{"episodes": 3, "video_format": "gif", "render_workers": 1,
                                  **options})


def test_picked_episodes_get_verified_videos_under_the_run(root: Path) -> None:
    rows = {i: Episode.from_json(row(i)) for i in range(3)}
    warnings: list[str] = []
    with Progress(enabled=False) as bar:
        videos = pass2_videos(root, rows, [0, 2], config(video="0,2"), warnings, bar)
    assert [(v.key.index, v.paths, v.verified) for v in videos] == [
        (0, ("videos/policy-0000.gif",), True), (2, ("videos/policy-0002.gif",), True)]
    assert all((root / v.paths[0]).stat().st_size > 0 for v in videos)
    assert videos[0].get("frames") == STEPS + 1 and "outputs" not in videos[0].detail
    assert warnings == [] and not (root / "videos" / "policy-0001.gif").exists()


def test_a_video_that_fails_keeps_the_ones_drawn_beside_it(root: Path) -> None:
    """The tape of episode 1 is damaged after pass 1: its video fails in its worker, and
    episode 0's video, drawn and verified, is still reported (it was 'not rendered' too)."""
    (root / "tapes" / "policy-0001.npz").write_bytes(b"not a tape")
    rows = {i: Episode.from_json(row(i)) for i in range(2)}
    warnings: list[str] = []
    with Progress(enabled=False) as bar:
        good, bad = pass2_videos(root, rows, [0, 1], config(video="all"), warnings, bar)
    assert good.paths == ("videos/policy-0000.gif",) and good.verified and good.error is None
    [warning] = warnings
    assert "policy-0001.npz' is corrupt or truncated" in warning
    assert bad.paths == () and bad.error == warning  # why, not only "not rendered"


@pytest.mark.parametrize(("video", "picked"), [("2", [0, 1]), ("0,2", [0, 2]),
                                               ("all", [0, 1, 2]), (5, [0, 1, 2])])
def test_an_early_pass_2_knows_its_episodes_before_their_returns(video: Any,
                                                                  picked: list[int]) -> None:
    with Progress(enabled=False) as bar:
        early = EarlyRender.for_config(Path("run"), config(video=video, render_early=True),
                                       [], bar, 0.0)
    assert early is not None and early.picked == picked


def test_no_early_pass_2_when_the_returns_pick_the_videos() -> None:
    with Progress(enabled=False) as bar:
        assert EarlyRender.for_config(Path("run"), config(video="best", render_early=True),
                                      [], bar, 0.0) is None


def test_an_early_pass_2_starts_once_every_picked_tape_exists(root: Path) -> None:
    warnings: list[str] = []
    timings: dict[str, float] = {}
    with Progress(enabled=False) as bar:
        early = EarlyRender.for_config(root, config(video="0,2", render_early=True), warnings,
                                       bar, 0.0)
        assert early is not None
        for offered in (row(0), row(1), row(2, role="baseline")):
            early.offer(offered)  # an unpicked episode and a baseline's do not count
            assert early.thread is None
        early.offer(row(2))
        assert early.thread is not None
        videos = early.finish(timings)
    assert [v.paths for v in videos] == [("videos/policy-0000.gif",),
                                         ("videos/policy-0002.gif",)]
    assert timings["pass2_s"] > 0 and warnings == []


def test_workers_are_warmed_only_for_a_run_with_videos_and_only_when_started() -> None:
    target = Target(env_spec(ENV, max_episode_steps=STEPS), 3)
    with warm_render_workers(config(video=0), [target]) as warm:
        warm.start()
        assert list(warm) == []  # no video: nothing to start
    with warm_render_workers(config(video="1"), [target]) as warm:
        assert list(warm) == []  # not before the run is known to go ahead
