"""Pass 1's recording overhead benchmark (rolltape.bench.pass1), on a workload of two
10-step episodes: the row it reports is computed from its own raw timings (ratio of
medians, pairwise ratios, per-step cost, verdict), with an untrained PPO checkpoint made by
the bench itself. The timings are never asserted, only how the row follows from them."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rolltape.bench.common import POLICY_NOTE, QUICK, Context
from rolltape.bench.pass1 import bench_pass1_overhead

EPISODES, STEPS = 2, 10


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str]]:
    logged: list[str] = []
    config = replace(QUICK, overhead_episodes=EPISODES, overhead_steps=STEPS)
    ctx = Context(config, tmp_path_factory.mktemp("bench"), logged.append)
    return bench_pass1_overhead(ctx), logged


def test_the_ratio_is_the_median_record_time_over_the_median_bare_time(row):
    result, _ = row
    raw = result["raw"]
    assert len(raw["bare_s"]) == len(raw["record_s"]) == EPISODES
    expected = statistics.median(raw["record_s"]) / statistics.median(raw["bare_s"])
    assert result["ratio"] == pytest.approx(expected, rel=1e-12)
    assert result["value"] == result["ratio"]


def test_pairwise_ratios_and_the_per_step_cost_follow_from_the_timings(row):
    raw = row[0]["raw"]
    pairs = [r / b for r, b in zip(raw["record_s"], raw["bare_s"])]
    assert raw["pairwise_ratios"] == pytest.approx(pairs, rel=1e-12)
    assert raw["median_pairwise_ratio"] == pytest.approx(statistics.median(pairs), rel=1e-12)
    per_step = (statistics.median(raw["record_s"]) - statistics.median(raw["bare_s"])) / STEPS
    assert raw["overhead_us_per_step"] == pytest.approx(per_step * 1e6, rel=1e-9)
    assert raw["cpu_time_ratio"] == pytest.approx(
        statistics.median(raw["record_cpu_s"]) / statistics.median(raw["bare_cpu_s"]), rel=1e-12)


def test_both_loops_play_the_whole_episodes(row):
    raw = row[0]["raw"]
    assert (raw["episodes_each"], raw["steps_per_episode"]) == (EPISODES, STEPS)
    assert raw["steps_each"] == EPISODES * STEPS  # HalfCheetah never ends early


def test_the_verdict_is_the_ratio_against_its_target(row):
    result, _ = row
    assert (result["op"], result["target"]) == ("<=", 1.05)
    assert result["passed"] is (result["ratio"] <= 1.05)
    assert result["gating"] is True and POLICY_NOTE in result["notes"]


def test_the_checkpoint_is_made_once_and_said(row):
    result, logged = row
    assert len([line for line in logged if "untrained PPO" in line]) == 1
    assert result["title"] == "pass-1 recording overhead"


def test_the_checkpoint_is_an_sb3_file_with_statistics(tmp_path: Path):
    ctx = Context(QUICK, tmp_path, lambda line: None)
    model, stats = ctx.checkpoint()
    assert ctx.checkpoint() == (model, stats)  # once per run
    assert model.name == "model.zip" and stats.name == "vecnormalize.pkl"
    assert model.stat().st_size > 0 and stats.stat().st_size > 0
