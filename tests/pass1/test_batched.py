"""Opt-in batched inference (``--batched-inference``): one policy process, N env processes.

Per-row inference is the default because batching may round differently; these tests pin
what must hold anyway: policies without a batched forward pass (random, callables) give
tapes identical to per-row ones, every field included, whatever N is; SB3 tapes replay
exactly and say how their actions were made; finished sub-envs are reset with the next
episode's seed (variable-length Hopper episodes exercise that); bad combinations are refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from rolltape import RenderRequest, Tape, UsageError, evaluate, render

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.assets.toy_envs:SuccessToy-v0"
FIELDS = ("actions", "rewards", "terminated", "truncated", "obs_digest", "qpos", "qvel",
          "physics")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT))
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + (os.pathsep + old if old else ""))
    monkeypatch.chdir(tmp_path)


def _tapes(run) -> dict[str, Tape]:
    return {p.name: Tape.load(p) for p in sorted((run.path / "tapes").glob("*.npz"))}


def _assert_identical(a: Tape, b: Tape) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (a.seed, a.success_at_end, a.success_once, a.metrics) == \
        (b.seed, b.success_at_end, b.success_once, b.metrics)


@pytest.mark.parametrize("envs", [2, 3])
def test_row_policies_give_the_per_row_tapes(tmp_path, envs):
    """Random Hopper falls over after a varying number of steps, so sub-envs finish out of
    step and are reset one at a time with the right seeds."""
    kw = dict(episodes=5, seed=30, baseline="random", max_episode_steps=60)
    per_row = evaluate("Hopper-v5", "random", out=tmp_path / "row", **kw)
    batched = evaluate("Hopper-v5", "random", out=tmp_path / "batched", workers=envs,
                       batched_inference=True, **kw)
    lengths = {r["length"] for r in per_row.results.to_json()["episodes_rows"]}
    assert len(lengths) > 1, "the test needs episodes of different lengths"
    a, b = _tapes(per_row), _tapes(batched)
    assert a.keys() == b.keys() and len(a) == 10
    for name in a:
        _assert_identical(a[name], b[name])
    assert per_row.results.to_json()["summary"] == batched.results.to_json()["summary"]


def test_success_and_metrics_cross_the_process_boundary(tmp_path):
    run = evaluate(TOY, "random", episodes=5, seed=10, out=tmp_path / "toy", workers=2,
                   batched_inference=True)
    rows = run.results.to_json()["episodes_rows"]
    assert [r["success_at_end"] for r in rows] == [True, False, True, False, True]
    assert [r["metrics"]["seed"] for r in rows] == [10, 11, 12, 13, 14]


def test_sb3_batched_tapes_replay_exactly_and_say_so(ppo_checkpoint, tmp_path):
    model_zip, stats = ppo_checkpoint
    kw = dict(vecnormalize=stats, episodes=4, seed=50, max_episode_steps=40)
    per_row = evaluate("HalfCheetah-v5", f"sb3:{model_zip}", out=tmp_path / "row", **kw)
    run = evaluate("HalfCheetah-v5", f"sb3:{model_zip}", out=tmp_path / "batched", workers=2,
                   batched_inference=True, **kw)
    assert run.results.to_json()["policy"]["inference"] == "batched (2 envs)"
    assert any("--batched-inference" in w for w in run.results.to_json()["warnings"])
    tapes = _tapes(run)
    assert all(t.policy["inference"] == "batched (2 envs)" for t in tapes.values())
    # Same network, same first observation: the first actions agree to float32 rounding.
    for name, tape in tapes.items():
        first = Tape.load(per_row.path / "tapes" / name).actions[0]
        assert np.allclose(tape.actions[0], first, rtol=0, atol=1e-5)
    results = render([RenderRequest(str(p)) for p in sorted((run.path / "tapes").glob("*"))])
    assert all(r.verified for r in results)


def test_refused_with_ray_and_with_sampled_actions(ppo_checkpoint, tmp_path):
    with pytest.raises(UsageError, match="local executor"):
        evaluate("HalfCheetah-v5", "random", episodes=2, executor="ray",
                 batched_inference=True, out=tmp_path / "ray")
    model_zip, stats = ppo_checkpoint
    with pytest.raises(UsageError, match="deterministic"):
        evaluate("HalfCheetah-v5", f"sb3:{model_zip}", vecnormalize=stats, episodes=2,
                 deterministic=False, batched_inference=True, workers=2,
                 max_episode_steps=10, out=tmp_path / "stochastic")
    assert not (tmp_path / "ray").exists() and not (tmp_path / "stochastic").exists()
    assert not list(tmp_path.glob(".*partial"))


def test_cli_flag(tmp_path):
    done = run_cli("eval", "Hopper-v5", "-n", "3", "-w", "2", "--batched-inference",
                   "--max-episode-steps", "20", "--out", str(tmp_path / "cli"), "-q",
                   "--no-report")
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert len(results["episodes_rows"]) == 3
    assert any("--batched-inference" in w for w in results["warnings"])
