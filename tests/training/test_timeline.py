"""The page of a training run (rolltape.training.timeline), from made-up records: every
training episode and evaluation drawn, each recorded episode linked to its video with what
its replay said, evaluation runs linked, and timeline.png a real PNG."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rolltape.training.timeline import draw_timeline, timeline_report

EVALS = [{"step": 100, "mean_reward": 1.5, "ci": [1.0, 2.0], "std_reward": 0.4,
          "mean_ep_length": 12.0},
         {"step": 200, "mean_reward": 3.25, "ci": None, "success_rate": 0.5}]
EPISODES = [(40, 1.0, 40), (90, 2.0, 50), (150, 4.0, 60)]


def _recorded(out: Path, verified: object, k: int = 0) -> dict[str, object]:
    video = out / "videos" / f"episode-{k}.mp4"
    video.parent.mkdir(parents=True, exist_ok=True)
    video.write_bytes(b"mp4")
    record = {"verified": verified, "frames": 13, "divergence_text": "step 4 (reward)"}
    Path(f"{video}.metadata.json").write_text(json.dumps({"result": record}))
    return {"step": 90 + k, "monitor_return": 2.0, "monitor_length": 12,
            "tape": str(video.with_suffix(".npz")), "video": str(video)}


def test_timeline_png_is_a_png_with_or_without_anything_to_draw(tmp_path: Path):
    assert draw_timeline(EVALS, [{"step": 90, "monitor_return": 2.0}],
                         tmp_path / "t.png") == "t.png"
    assert draw_timeline([], [], tmp_path / "empty.png") == "empty.png"
    for name in ("t.png", "empty.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_episode_and_evaluation_is_on_the_chart(tmp_path: Path):
    page = timeline_report(tmp_path, None, EVALS, [], EPISODES, steps=200)
    drawn = dict(re.findall(r'data-key="(\w+)" data-xs=\'([^\']*)\'', page))
    assert json.loads(drawn["episodes"]) == [40.0, 90.0, 150.0]
    assert json.loads(drawn["evaluations"]) == [100.0, 200.0]
    assert "recorded" not in drawn


def test_a_recorded_episode_links_to_its_video_relative_to_the_page(tmp_path: Path):
    page = timeline_report(tmp_path, "timeline.png", EVALS, [_recorded(tmp_path, True)],
                           EPISODES)
    assert '<a href="#video-0">' in page and 'id="video-0"' in page
    assert 'src="videos/episode-0.mp4"' in page and "timeline.png" in page
    assert page.count("verified: the replay earned exactly what training earned") == 1
    assert page.count("<script") == 0  # self-contained


def test_each_replay_outcome_has_its_own_headline(tmp_path: Path):
    rows = [_recorded(tmp_path, False, 0), _recorded(tmp_path, None, 1),
            {"step": 5, "tape": str(tmp_path / "t.npz"), "video": None}]
    page = timeline_report(tmp_path, None, [], rows)
    assert "diverged from training at step 4 (reward)" in page
    assert "drawn from the recorded states (not re-simulated)" in page
    assert "not rendered (yet): its tape is kept" in page


def test_an_evaluation_links_its_run_only_when_its_results_exist(tmp_path: Path):
    run = tmp_path / "evals" / "step-100"
    run.mkdir(parents=True)
    (run / "results.json").write_text("{}")
    gone = str(tmp_path / "evals" / "step-200")
    page = timeline_report(tmp_path, None, [{**EVALS[0], "run": str(run)},
                                            {**EVALS[1], "run": gone}], [])
    assert 'href="evals/step-100/results.json"' in page
    assert 'href="evals/step-200/results.json"' not in page
    assert "50%" in page  # the second evaluation's success rate
