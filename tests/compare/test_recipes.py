"""`rolltape eval --recipe` end to end: two PPO recipes on CartPole-v1 that differ in one
hyperparameter (the learning rate), three training runs each, trained once per test
session by scripts/train_recipes.py (SB3's CheckpointCallback with VecNormalize), every run
evaluated on the same seeds, then compared over training runs. The numbers are checked
against the runs' own results.json and against rliable on the same run-score matrices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from rolltape.record import Run

ROOT = Path(__file__).resolve().parents[2]  # the repository
EPISODES = 10
SEED = 7


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recipes")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "train_recipes.py"), "--out",
                    str(out), "--seeds", "3", "--timesteps", "1024"], check=True, cwd=out,
                   env={**os.environ, "SB3_LOGDIR": str(out / "log")}, capture_output=True)
    return out


@pytest.fixture(scope="module")
def compared(trained: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("evalrecipes") / "ab"
    done = run_cli("eval", "CartPole-v1",
                   "--recipe", f"fast=sb3:{trained}/fast/seed*/rl_model_*_steps.zip",
                   "--recipe", f"slow=sb3:{trained}/slow/seed*/rl_model_*_steps.zip",
                   "-n", str(EPISODES), "--seed", str(SEED), "--no-report", "--out", str(out),
                   "-q", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def _run_scores(out: Path, recipe: str) -> np.ndarray:
    manifest = json.loads((out / "recipes.json").read_text())
    rows = []
    for entry in manifest["recipes"][recipe]:
        results = Run.load(out / entry["folder"]).results
        assert [e.key.seed for e in results.episodes] == [SEED + i for i in range(EPISODES)]
        rows.append(np.mean([e.ret for e in results.episodes]))
    return np.array(rows)


def test_each_run_is_evaluated_on_the_same_seeds_with_its_own_statistics(compared, trained):
    out, _ = compared
    manifest = json.loads((out / "recipes.json").read_text())
    assert [r["label"] for r in manifest["recipes"]["fast"]] == ["seed0", "seed1", "seed2"]
    for recipe in ("fast", "slow"):
        for k, entry in enumerate(manifest["recipes"][recipe]):
            stats = Path(entry["vecnormalize"])
            assert stats == trained / recipe / f"seed{k}" / "rl_model_vecnormalize_1024_steps.pkl"
            config = json.loads((out / entry["folder"] / "metadata.json").read_text())["config"]
            assert config["vecnormalize"] == str(stats)
            _run_scores(out, recipe)  # asserts the seeds


def test_recipe_numbers_are_the_runs_own_and_equal_rliables(compared):
    from rliable import metrics

    out, stdout = compared
    result = json.loads((out / "comparison.json").read_text())
    fast, slow = _run_scores(out, "fast"), _run_scores(out, "slow")
    got = result["recipes"]
    assert got["fast"]["runs"] == 3 and result["measure"] == "return"
    assert got["fast"]["run_scores"]["CartPole-v1"] == pytest.approx(fast.tolist())
    assert got["fast"]["mean"]["value"] == pytest.approx(metrics.aggregate_mean(fast[:, None]))
    lo, hi = got["fast"]["mean"]["ci"]
    assert fast.min() - 1e-9 <= lo <= got["fast"]["mean"]["value"] <= hi <= fast.max() + 1e-9
    pair = next(p for p in result["pairs"] if (p["a"], p["b"]) == ("fast", "slow"))
    assert pair["probability_of_improvement"]["p"] == pytest.approx(
        metrics.probability_of_improvement(fast[:, None], slow[:, None]))
    assert pair["difference"]["value"] == pytest.approx(fast.mean() - slow.mean())
    lo, hi = pair["difference"]["ci"]
    assert lo <= pair["difference"]["value"] <= hi
    assert got["fast"]["note"] is None  # three runs: no warning (one run: tests/test_evidence_stats)
    html = (out / "comparison.html").read_text()
    assert html.count("<svg") == 1 and "bootstrap over runs" in html


def test_compare_rebuilds_the_recipe_comparison(compared, tmp_path):
    out, _ = compared
    again = tmp_path / "again"
    done = run_cli("compare", str(out), "--out", str(again), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    first = json.loads((out / "comparison.json").read_text())
    second = json.loads((again / "comparison.json").read_text())
    assert second["recipes"]["fast"]["mean"] == first["recipes"]["fast"]["mean"]
    assert second["pairs"] == first["pairs"]
    assert "fast vs slow" in done.stdout
