"""Suite results (rolltape.suites.results): exact success counting per task with Wilson
intervals, rewards and metrics per task, LeRobot's eval_info.json, resume, videos per task,
and a task whose rewards overflow.

The exact numbers come from ``tests/assets/suite_envs.py``: an episode succeeds when its
seed is divisible by 3, reported at the end, only mid-episode, once, or never.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli
from rolltape import evaluate
from rolltape.stats import wilson_interval

PATTERN = "tests.assets.suite_envs:SuccessPattern"
MANIFEST = f"""
pattern:
  episodes: 7
  tasks:
    end: {{env: "{PATTERN}", kwargs: {{report: end, at: 2}}}}
    mid: {{env: "{PATTERN}", kwargs: {{report: mid, at: 3}}}}
    once:
      env: "{PATTERN}"
      kwargs: {{report: once, at: 4, key: success}}
      success_key: success
      episodes: 4
    never: {{env: "{PATTERN}", kwargs: {{report: never}}}}
"""


def seeds(n: int) -> list[int]:
    return list(range(n))


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "bench.yaml"
    path.write_text(MANIFEST)
    return path


@pytest.fixture(scope="module")
def run(manifest, tmp_path_factory):
    """One suite run of the pattern env: 4 tasks, 2 workers, a random baseline, a video
    per task."""
    return evaluate(suite=str(manifest), seed=0, workers=2, baseline="random", video=1,
                    out=tmp_path_factory.mktemp("suite") / "run")


# --------------------------------------------------------------------------- one suite run


def test_counts_success_at_the_end_once_and_unknown_exactly(run):
    """The headline is LeRobot's rule (the key on the terminal step); success at some step
    is reported beside it, named, for every task."""
    per_task = {t["task"]: t for t in run.results.to_json()["suite"]["per_task"]}
    assert list(per_task) == ["end", "mid", "once", "never"]
    wins = lambda n: sum(1 for s in seeds(n) if s % 3 == 0)  # noqa: E731
    end, mid, once, never = (per_task[k] for k in ("end", "mid", "once", "never"))
    assert all(t["success_rule"] == "at_end" for t in per_task.values())
    assert (end["n_success"], end["success_once"]["n_success"]) == (wins(7), wins(7))
    assert (mid["n_success"], mid["success_once"]["n_success"]) == (0, wins(7))
    assert mid["success_at_end"]["n_success"] == mid["n_success"]
    assert once["n_episodes"] == 4 and once["success_once"]["n_success"] == wins(4) == 2
    assert once["n_unknown"] == 4 and once["pc_success"] is None  # the key is gone at the end
    assert never["n_unknown"] == 7 and never["pc_success"] is None and never["n_success"] is None
    lo, hi = wilson_interval(3, 7)
    assert end["pc_success_ci95"] == pytest.approx([100 * lo, 100 * hi], rel=1e-12)
    suite = run.results.to_json()["suite"]["per_suite"]["pattern"]
    assert (suite["n_episodes"], suite["n_success"], suite["n_unknown"]) == (25, 3, 11)
    assert suite["pc_success"] == pytest.approx(300 / 14)
    assert suite["success_once"]["n_success"] == 8
    assert suite["mean_of_task_rates"]["pc_mean_task_success"] == pytest.approx(
        100 * (3 / 7 + 0 / 7) / 2)
    assert any("pattern/never" in w and "is_success" in w for w in run.results.warnings)


def test_rows_rewards_and_metrics(run):
    rows = run.results.to_json()["episodes_rows"]
    assert len(rows) == 25 and len(run.results.to_json()["baseline_rows"]) == 25
    for r in rows:
        assert r["max_reward"] == r["seed"] % 4 and r["return"] == r["seed"] % 4 - 5
        assert r["tape"] == f"tapes/pattern/{r['task']}/policy-{r['index']:04d}.npz"
        assert r["seed"] == r["index"]  # episode i of every task: seed + i
    end = run.results.to_json()["suite"]["per_task"][0]
    assert end["avg_max_reward"] == pytest.approx(np.mean([s % 4 for s in seeds(7)]))
    assert end["metrics"] == {"score": pytest.approx(np.mean([s % 5 for s in seeds(7)])),
                              "ok": 1.0}
    assert end["improvement_over_baseline"]["mean_diff"] == 0.0  # rewards ignore actions
    overall = run.results.to_json()["suite"]["overall"]["improvement_over_baseline"]
    assert (overall["n_pairs"], overall["mean_diff"]) == (25, 0.0)  # paired by task and seed
    streamed = [json.loads(line) for line in (run.path / "episodes.jsonl").read_text().splitlines()]
    assert {(r["suite"], r["task"]) for r in streamed} == {("pattern", t) for t in
                                                           ("end", "mid", "once", "never")}
    recorded = json.loads((run.path / "manifest.json").read_text())
    assert [t["name"] for t in recorded["tasks"]] == ["end", "mid", "once", "never"]


def _no_nan(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in eval_info.json")
    return json.loads(text, parse_constant=refuse)


def test_eval_info_has_lerobots_layout(run):
    info = _no_nan((run.path / "eval_info.json").read_text())
    assert list(info) == ["per_task", "per_group", "overall"]
    task = info["per_task"][0]
    assert set(task) == {"task_group", "task_id", "metrics", "n_episodes", "n_success",
                         "pc_success", "pc_success_ci95"}
    assert set(task["metrics"]) == {"sum_rewards", "max_rewards", "successes", "video_paths",
                                    "predicted_video_paths"}
    assert (task["task_group"], task["task_id"]) == ("pattern", "end")
    assert task["metrics"]["successes"] == [s % 3 == 0 for s in seeds(7)]  # task 'end'
    assert task["metrics"]["video_paths"] == ["videos/pattern/end/policy-0000.mp4"]
    group_keys = {"avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes", "n_success",
                  "pc_success_ci95", "video_paths", "predicted_video_paths"}
    assert set(info["per_group"]["pattern"]) == group_keys
    assert set(info["overall"]) == group_keys | {"eval_s", "eval_ep_s"}
    never = info["per_task"][3]
    assert never["pc_success"] is None and never["metrics"]["successes"] == [None] * 7
    assert info["overall"]["n_episodes"] == 25 and info["overall"]["eval_s"] > 0


def test_videos_per_task_verify_and_the_report_shows_the_forest_plot(run):
    videos = run.results.to_json()["videos"]
    assert [(v["task"], v["index"]) for v in videos] == [(t, 0) for t in
                                                         ("end", "mid", "once", "never")]
    assert all(v["verified"] is True and v["frames"] == 7 for v in videos)
    html = (run.path / "report.html").read_text()
    assert 'class="chart forest"' in html and "pattern/never" in html
    assert 'id="video-pattern-mid-0"' in html and "unweighted mean of 2 task rates" in html


def test_resume_plays_only_the_missing_episodes(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run.path, copy)
    gone = copy / "tapes/pattern/mid/policy-0002.npz"
    kept = copy / "tapes/pattern/once/policy-0001.npz"
    gone.unlink()
    before = kept.stat().st_mtime_ns
    again = evaluate(suite=run.results.to_json()["manifest"]["source"], seed=0, workers=2,
                     baseline="random", video=0, out=copy, resume=True, report=False)
    assert gone.is_file() and kept.stat().st_mtime_ns == before
    strip = lambda rows: [{**r, "wall_s": 0} for r in rows]  # noqa: E731
    assert strip(again.results.to_json()["episodes_rows"]) == strip(run.results.to_json()["episodes_rows"])


def test_a_task_with_overflowing_rewards_loses_no_other_tasks_numbers(tmp_path):
    """Rewards of 1.5e308 a step: each return overflows (flagged, left out) and the mean of
    the max rewards would too; every other number of every task is still written."""
    path = tmp_path / "m.yaml"
    path.write_text("s:\n  tasks:\n"
                    "    huge: {env: 'tests.assets.toy_envs:FaultToy-v0', kwargs: {fault: overflow}}\n"
                    f"    fine: {{env: '{PATTERN}'}}\n")
    out = tmp_path / "run"
    done = run_cli("eval", "--suite", str(path), "-n", "3", "--out", str(out), "-q",
                   "--no-report", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())  # valid JSON: no inf
    huge, fine = results["suite"]["per_task"]
    assert huge["nonfinite_returns"] == 3 and huge["avg_sum_reward"] is None
    assert huge["avg_max_reward"] == pytest.approx(1.5e308)  # one step's reward: finite
    assert fine["avg_sum_reward"] == pytest.approx(np.mean([s % 4 - 5 for s in range(3)]))
    assert "not a finite number" in done.stderr
    again = run_cli("eval", "--suite", str(path), "-n", "3", "--out", str(out), "-q",
                    "--no-report", "--resume", cwd=ROOT)
    assert again.returncode == 0, again.stderr
