"""``rolltape branch``'s cost benchmark (rolltape.bench.branch) on its quick workload (one
100-step Pusher episode of the bundled policy, a branch every 25 steps, 2 each): both sides
play the same branch steps, the branches are real branch tapes, and the row follows from
its own timings. The timings are never asserted."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolltape.bench.branch import bench_branch_step_cost
from rolltape.bench.common import QUICK, Context
from rolltape.tape import Tape


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("bench")
    return bench_branch_step_cost(Context(QUICK, work, lambda line: None)), work


def test_both_sides_play_every_branch_to_the_end(row):
    raw = row[0]["raw"]
    assert (raw["episodes"], raw["steps"], raw["every"], raw["branches_per_step"]) == \
        (1, 100, 25, 2)
    assert raw["branches"] == 8
    # From t = 0, 25, 50, 75 to step 100, twice each (the bench raises if the bare loop
    # played another number of steps).
    assert raw["branch_steps"] == 2 * (100 + 75 + 50 + 25)
    assert len(raw["bare_s"]) == len(raw["branch_s"]) == raw["reps"] == 2


def test_the_branches_are_real_branch_tapes(row):
    """Each branch wrote its tape, beginning with the recorded step before t, restored
    exactly, and the noise moved it off the recorded episode."""
    _, work = row
    [folder] = work.glob("*-branch")
    source = Tape.load(folder / "source-0.npz")
    # Each repetition wrote its own files (as a branch run does), in a folder of its own.
    reps = sorted(work.glob("*-branches*"))
    assert len(reps) == 3  # 2 repetitions and the warm-up
    [first] = work.glob("*-branches0")
    assert len(list(first.glob("e0-t*-k*.npz"))) == 8
    late = Tape.load(first / "e0-t050-k1.npz")
    assert late.meta["step"] == 50 and late.start_step == 49 and late.length == 51
    assert np.array_equal(late.physics[:2], source.physics[49:51])  # restored exactly
    assert not np.array_equal(late.actions[1:], source.actions[50:])  # noise 0.1


def test_the_ratio_is_the_median_branch_time_over_the_median_bare_time(row):
    result, _ = row
    raw = result["raw"]
    expected = statistics.median(raw["branch_s"]) / statistics.median(raw["bare_s"])
    assert result["ratio"] == pytest.approx(expected, rel=1e-12)
    assert raw["cpu_time_ratio"] == pytest.approx(
        statistics.median(raw["branch_cpu_s"]) / statistics.median(raw["bare_cpu_s"]),
        rel=1e-12)
    assert raw["branch_us_per_step"] == pytest.approx(
        statistics.median(raw["branch_s"]) / raw["branch_steps"] * 1e6, rel=1e-9)
    assert (result["op"], result["target"]) == ("<=", 1.2)
    assert result["passed"] is (result["ratio"] <= 1.2)
