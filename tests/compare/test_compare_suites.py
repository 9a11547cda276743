"""Comparisons of real suite runs: several policies in one `rolltape eval --suite` run, and
`rolltape compare` on suite runs made apart. Episodes pair by seed within each task; the
verdicts are per task; the normalized aggregates (random 0, a reference 1) and performance
profiles are rliable's, checked against the rows; runs of other tasks are refused.

The env is ``tests/assets/suite_envs.py:Lever`` (returns depend on the policy, each task
its own reward scale); the policies are random, ``pull_mostly`` (right two steps in three)
and ``pull_target`` (always right).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from conftest import ROOT, run_cli
from rolltape import evaluate

LEVER = "tests.assets.suite_envs:Lever"
MANIFEST = f"""
lever:
  episodes: 8
  tasks:
    small: {{env: "{LEVER}", kwargs: {{scale: 1.0}}}}
    big: {{env: "{LEVER}", kwargs: {{scale: 100.0, steps: 10}}}}
"""
TASKS = ["lever/small", "lever/big"]
SEED = 3
MOSTLY, TARGET = "tests.assets.suite_envs:pull_mostly", "tests.assets.suite_envs:pull_target"


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "lever.yaml"
    path.write_text(MANIFEST)
    return path


@pytest.fixture(scope="module")
def sweep(manifest: Path, tmp_path_factory: pytest.TempPathFactory):
    """Three policies and the random baseline on the suite, from the command line."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    done = run_cli("eval", "--suite", str(manifest), "--policy", "random", "--policy", MOSTLY,
                   "--policy", TARGET, "--baseline", "random", "--reference", "pull_target",
                   "--seed", str(SEED), "--workers", "2", "--no-report", "-q",
                   "--out", str(out), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out, done.stdout, json.loads((out / "comparison.json").read_text())


def _rows(folder: Path, role: str = "episodes_rows") -> dict[tuple[str, int], float]:
    results = json.loads((folder / "results.json").read_text())
    return {(f"{r['suite']}/{r['task']}", r["seed"]): r["return"] for r in results[role]}


def test_every_policy_plays_every_task_on_the_same_seeds(sweep):
    out, _, saved = sweep
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["suite"].endswith("lever.yaml") and manifest["env"] is None
    folders = [e["folder"] for e in manifest["entries"]]
    assert folders == ["policy-random", "pull_mostly", "pull_target", "random"]
    keys = {(t, SEED + i) for t in TASKS for i in range(8)}
    for folder in folders:
        assert set(_rows(out / folder)) == keys
    assert saved["identity"] == {"suite": "lever", "tasks": TASKS}
    assert saved["tasks"] == TASKS and saved["episodes"] == 16  # the manifest's order


def test_pairs_match_seeds_within_each_task_with_a_verdict_per_task(sweep):
    out, stdout, saved = sweep
    rows = {f: _rows(out / f) for f in ("policy-random", "pull_mostly", "pull_target", "random")}
    by = {(p["a"], p["b"], p["task"]): p for p in saved["pairs"]}
    assert len(by) == len(saved["pairs"]) == 6 * 2  # 3 between policies, 3 against random
    for (a, b, task), p in by.items():
        diffs = [rows[a][(task, s["seed"])] - rows[b][(task, s["seed"])] for s in p["per_seed"]]
        assert [s["diff"] for s in p["per_seed"]] == pytest.approx(diffs)
        assert [s["seed"] for s in p["per_seed"]] == list(range(SEED, SEED + 8))
    for task, scale in (("lever/small", 1), ("lever/big", 100)):
        better = by[("pull_target", "pull_mostly", task)]["returns"]
        assert better["verdict"] == "better"
        # pull_mostly misses every third step: exactly that many pulls fewer, every seed.
        steps = 8 if scale == 1 else 10
        assert better["mean_diff"] == pytest.approx(scale * (steps // 3))
        assert by[("pull_mostly", "policy-random", task)]["success"]["verdict"] == "better"
        # Random against the random baseline: the same seeds, the same actions.
        same = by[("policy-random", "random", task)]["returns"]
        assert same["mean_diff"] == 0 and "the same return on each of the 8" in same["sentence"]
    assert f"[lever/big] {by[('pull_target', 'pull_mostly', 'lever/big')]['returns']['sentence']}" \
        in stdout
    suite = {(p["a"], p["b"]): p["probability_of_improvement"] for p in saved["suite_pairs"]}
    assert suite[("pull_target", "pull_mostly")]["p"] == 1.0
    assert suite[("policy-random", "random")]["p"] == 0.5  # every pair a tie
    assert suite[("pull_target", "pull_mostly")]["tasks"] == 2


def test_normalized_aggregates_and_profiles_from_the_rows(sweep):
    out, stdout, saved = sweep
    rand = _rows(out / "random")
    scores = {}
    for label in ("policy-random", "pull_mostly", "pull_target"):
        mine, per_task = _rows(out / label), {}
        for task in TASKS:
            lo = np.mean([v for (t, _), v in rand.items() if t == task])
            hi = np.mean([v for (t, _), v in _rows(out / "pull_target").items() if t == task])
            per_task[task] = np.array([(v - lo) / (hi - lo) for (t, _), v in sorted(mine.items())
                                       if t == task])
        scores[label] = per_task
    agg = saved["aggregates"]
    assert set(agg) == set(scores) and saved["reference"] == "pull_target"
    for label, per_task in scores.items():
        pooled = np.concatenate(list(per_task.values()))
        want = {"mean": np.mean([v.mean() for v in per_task.values()]),
                "median": np.median([v.mean() for v in per_task.values()]),
                "iqm": sps.trim_mean(pooled, 0.25),
                "optimality_gap": 1 - np.mean([np.minimum(v, 1).mean()
                                               for v in per_task.values()])}
        for key, value in want.items():
            assert agg[label][key]["value"] == pytest.approx(value, abs=1e-12), (label, key)
            lo, hi = agg[label][key]["ci"]
            assert lo - 1e-12 <= value <= hi + 1e-12
    assert agg["pull_target"]["mean"]["value"] == pytest.approx(1.0)
    assert 0.3 < agg["pull_mostly"]["mean"]["value"] < 0.7
    profiles = saved["profiles"]
    assert set(profiles) == set(scores)
    for label, p in profiles.items():
        want = [np.mean([(v > tau).mean() for v in scores[label].values()]) for tau in p["taus"]]
        assert p["fraction"] == pytest.approx(want)
    assert "normalized (random 0, pull_target 1): pull_mostly  IQM" in stdout


def test_the_page_draws_the_suite_per_task(sweep):
    out, _, _ = sweep
    html = (out / "comparison.html").read_text()
    for words in ("Per task", "P(first &gt; second) per task", "Performance profiles",
                  "Normalized aggregates", "suite lever, tasks lever/small, lever/big",
                  "100% [81%, 100%]"):
        assert words in html, words
    # Returns of tasks with other scales share no axis: no pooled per-seed chart.
    assert "Per-seed paired differences" not in html and "<script" not in html


@pytest.fixture(scope="module")
def apart(manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Suite runs made one by one: random with its baseline, and runs that do not pair."""
    root = tmp_path_factory.mktemp("apart")
    common = dict(seed=SEED, report=False, workers=1)
    made = {"random": evaluate(suite=str(manifest), baseline="random", out=root / "random",
                               **common),
            "big only": evaluate(suite=str(manifest), tasks="big", out=root / "big", **common),
            "shorter": evaluate(suite=str(manifest), max_episode_steps=5, out=root / "short",
                                **common),
            "one env": evaluate(LEVER, episodes=16, out=root / "env", **common)}
    return {k: v.path for k, v in made.items()}


def test_compare_two_suite_runs_made_apart(sweep, apart, tmp_path):
    out, _, _ = sweep
    alone = json.loads((apart["random"] / "results.json").read_text())
    # The run's own improvement over its baseline pairs seeds within each task too.
    assert alone["improvement_over_baseline"] == alone["suite"]["overall"][
        "improvement_over_baseline"]
    assert alone["improvement_over_baseline"]["n_pairs"] == 16
    done = run_cli("compare", str(apart["random"]), str(out / "pull_target"), "--reference",
                   "pull_target", "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert [(p["a"], p["b"], p["task"]) for p in saved["pairs"][:2]] == [
        ("pull_target", "random", "lever/small"), ("pull_target", "random", "lever/big")]
    assert [e["label"] for e in saved["entries"]] == ["random", "pull_target",
                                                      "random-baseline"]
    sweep_agg = json.loads((out / "comparison.json").read_text())["aggregates"]
    assert saved["aggregates"]["random"]["mean"]["value"] == pytest.approx(
        sweep_agg["policy-random"]["mean"]["value"])
    assert "Performance profiles" in (tmp_path / "cmp" / "comparison.html").read_text()


@pytest.mark.parametrize("odd, words", [
    ("big only", "different suite tasks (lever/small only in the first)"),
    ("shorter", "Task lever/small was run with max_episode_steps null in"),
    ("one env", "is a run of suite lever and"),
])
def test_compare_refuses_suite_runs_that_do_not_pair(sweep, apart, odd, words, tmp_path):
    out, _, _ = sweep
    done = run_cli("compare", str(out / "pull_target"), str(apart[odd]),
                   "--out", str(tmp_path / "x"))
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_strip_across_suite_runs_replays_on_the_tasks_env(sweep, tmp_path):
    """A sweep over checkpoints of a suite joins one seed of one task: the env is that
    task's, from the run's manifest (there is no single env to name)."""
    from rolltape.compare.runs import LoadedRun
    from rolltape.compare.strip import make_strip
    from rolltape.pass2.encode import count_frames

    out, _, _ = sweep
    runs = [LoadedRun.load(out / f) for f in ("policy-random", "pull_mostly", "pull_target")]
    strip = make_strip(tmp_path, runs, None, options={})
    assert strip["verified"] is True and strip["problems"] == []
    assert strip["task"] in TASKS and strip["labels"] == [r.label for r in runs]
    key = next(k for k in runs[-1].rows if f"{k[0]}/{k[1]}" == strip["task"]
               and k[2] == strip["seed"])
    assert count_frames(tmp_path / "strip.mp4") == sum(r.rows[key].length + 1 for r in runs)
