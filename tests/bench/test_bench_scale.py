"""The cheap parts of the scaling benchmarks (rolltape.bench.scale): how many tapes kept
every action bit and the largest action difference (the batched-inference check), and the
child that times pass 1 on an executor, run here on a tiny workload. No benchmark runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rolltape import Run, Tape, evaluate
from rolltape.bench.scale import _action_bits, pass1_executor_child

TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(scope="module")
def tapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Random-action toy tapes of one run: "a" on seeds 0..2, "other" on seeds 3..5."""
    run = evaluate(TOY, "random", episodes=6, seed=0, out=tmp_path_factory.mktemp("t") / "r",
                   report=False, viewer=False)
    paths = [run.tape_path(e) for e in run.results.episodes]
    return {"a": paths[:3], "other": paths[3:]}


def test_tapes_with_the_same_actions_count_and_differ_by_nothing(tapes, tmp_path):
    copies = [Path(shutil.copy(p, tmp_path / p.name)) for p in tapes["a"]]
    assert _action_bits(tapes["a"], copies) == (3, 0.0)


def test_the_largest_action_difference_is_found(tapes):
    same, worst = _action_bits(tapes["a"], tapes["other"])
    expected = max(float(np.abs(Tape.load(x).actions.astype(np.float64)
                                - Tape.load(y).actions).max())
                   for x, y in zip(tapes["a"], tapes["other"]))
    assert same == 0 and worst == expected > 0


def test_one_tape_differing_is_one_fewer_and_its_difference(tapes):
    mixed = [tapes["a"][0], tapes["other"][1], tapes["a"][2]]
    same, worst = _action_bits(tapes["a"], mixed)
    a, b = Tape.load(tapes["a"][1]).actions, Tape.load(tapes["other"][1]).actions
    assert same == 2 and worst == float(np.abs(a.astype(np.float64) - b).max())


def test_the_executor_child_reports_the_runs_own_rows(tmp_path: Path):
    out = tmp_path / "run"
    result = pass1_executor_child("local", episodes=2, steps=5, seed=3, workers=1, out=str(out))
    rows = json.loads((out / "results.json").read_text())["episodes_rows"]
    assert result["returns"] == [r["return"] for r in rows]
    assert result["lengths"] == [r["length"] for r in rows] == [5, 5]
    assert [r["seed"] for r in rows] == [3, 4]
    assert 0 < result["pass1_s"] <= result["evaluate_s"]
    assert result["import_s"] >= 0 and result["shutdown_s"] >= 0
    assert Run.load(out).results.env_id == "HalfCheetah-v5"  # the benchmark's env
