"""The suite benchmarks (rolltape.bench.suites) on their quick size (the built-in ``mazes``
suite, 4 PointMaze tasks x 2 episodes of 30 steps): each row is computed from its own raw
timings, the workers row compares every tape of its two runs, and the aggregation row
writes eval_info.json beside the run it aggregates. The timings are never asserted."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from rolltape.bench.common import FULL, QUICK, Context
from rolltape.bench.suites import SUITE, _sizes, bench_suite_aggregation, bench_suite_workers

TASKS, EPISODES = 4, 2


def context(work: Path) -> Context:
    return Context(QUICK, work, lambda line: None)


@pytest.fixture(scope="module")
def aggregation(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("bench")
    return bench_suite_aggregation(context(work)), work


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return bench_suite_workers(context(tmp_path_factory.mktemp("bench")))


def test_quick_sizes_are_a_smaller_suite_run(tmp_path: Path):
    quick, full = _sizes(context(tmp_path)), _sizes(Context(FULL, tmp_path, print))
    assert quick == (EPISODES, 30, 1)
    assert all(0 < q <= f for q, f in zip(quick, full))


def test_the_workers_row_is_the_speed_up_of_median_pass_1_times(workers):
    raw = workers["raw"]
    assert (raw["suite"], raw["tasks"], raw["episodes_per_task"]) == (SUITE, TASKS, EPISODES)
    one, two = raw["pass1_s_workers1"], raw["pass1_s_workers2"]
    assert len(one) == len(two) == 1
    assert workers["ratio"] == pytest.approx(statistics.median(one) / statistics.median(two),
                                             rel=1e-12)
    assert (workers["op"], workers["target"]) == (">=", 1.7)
    assert workers["passed"] is (workers["ratio"] >= 1.7)


def test_the_workers_row_compared_every_tape_bit_for_bit(workers):
    assert workers["raw"]["tapes_compared"] == TASKS * EPISODES
    assert workers["raw"]["tapes_identical"] is True


def test_the_aggregation_row_is_its_median_time_over_pass_1(aggregation):
    result, _ = aggregation
    raw = result["raw"]
    assert len(raw["aggregate_s"]) == 5 and raw["episodes"] == TASKS * EPISODES
    assert result["ratio"] == pytest.approx(statistics.median(raw["aggregate_s"])
                                            / raw["pass1_s"], rel=1e-12)
    assert (result["op"], result["target"]) == ("<=", 0.01)
    assert result["passed"] is (result["ratio"] <= 0.01)


def test_the_aggregation_writes_eval_info_with_every_tasks_returns(aggregation):
    _, work = aggregation
    [run] = work.iterdir()
    info = json.loads((run / "eval_info.json").read_text())
    rows = json.loads((run / "results.json").read_text())["episodes_rows"]
    assert sorted(info) == ["overall", "per_group", "per_task"]
    assert list(info["per_group"]) == [SUITE]
    assert info["overall"]["n_episodes"] == TASKS * EPISODES
    for task in info["per_task"]:
        returns = [r["return"] for r in rows if r["task"] == task["task_id"]]
        assert task["n_episodes"] == EPISODES
        assert sorted(task["metrics"]["sum_rewards"]) == sorted(returns)
