"""The cheap parts of the benchmarks against the ways rolltape replaces
(rolltape.bench.versus): the small job's env and episode length, the end-to-end workload
measured once per bench run, and SB3's evaluate_policy child on a tiny workload (an
untrained checkpoint the bench makes). No benchmark runs."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import pytest

from rolltape import evaluate
from rolltape.bench.common import ENV_ID, QUICK, Context, make_checkpoint, result
from rolltape.bench.versus import (
    SMALL_ENV_ID,
    bench_end_to_end,
    sb3_evaluate_child,
    seed000_evaluate_child,
)


def test_the_small_jobs_env_plays_100_step_episodes():
    # bench_small_job reports "steps or 100" when it leaves the env its own time limit.
    assert gym.spec(SMALL_ENV_ID).max_episode_steps == 100


def test_end_to_end_is_measured_once_per_run_and_titled(tmp_path: Path):
    logged: list[str] = []
    ctx = Context(QUICK, tmp_path, logged.append)
    measured = result(title="", ratio=0.5, target=0.8, op="<=", gating=False, ratio_of="a/b",
                  baseline="b", measured="a", raw={"steps": QUICK.e2e_steps})
    ctx.results[("seed000", QUICK.e2e_steps)] = measured  # as the first measurement left it
    row = bench_end_to_end(ctx)
    assert row == {**measured, "title": "end to end"}
    assert logged == [] and not any(tmp_path.iterdir())  # nothing made, nothing run again


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"), ENV_ID)


def test_sb3s_evaluate_policy_plays_the_episodes_asked(checkpoint):
    model, stats = checkpoint
    out = sb3_evaluate_child(str(model), str(stats), episodes=2, steps=5, seed=3)
    assert out["lengths"] == [5, 5] and len(out["returns"]) == 2
    assert all(isinstance(r, float) and math.isfinite(r) for r in out["returns"])
    assert min(out["import_s"], out["load_s"], out["evaluate_s"]) >= 0


def test_the_seed000_baseline_plays_rolltapes_random_episodes(checkpoint, tmp_path: Path):
    model, stats = checkpoint
    out = seed000_evaluate_child(str(model), str(stats), steps=5, seed=3, episodes=2)
    assert len(out["policy_returns"]) == 2
    # Episode i reset and its action space seeded with seed + i: rolltape's random policy
    # on the same seeds plays the same episodes (summed in another order: math.fsum).
    ours = evaluate(ENV_ID, "random", episodes=2, seed=3, max_episode_steps=5,
                    out=tmp_path / "run", report=False, viewer=False)
    assert out["baseline_returns"] == pytest.approx([e.ret for e in ours.results.episodes],
                                                    rel=0, abs=1e-9)
