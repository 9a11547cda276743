"""Several policies on the same seeds: a real sweep over three checkpoints that SB3's
CheckpointCallback saved during a short training run, `rolltape compare` on real runs, and
the refusals (other envs, seeds or counts, a run twice, a glob matching nothing, a missing
VecNormalize file). Suite runs: tests/compare/test_compare_suites.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

ENV = "HalfCheetah-v5"
STEPS = 20  # per episode
EPISODES = 4
TINY = dict(max_episode_steps=STEPS, width=64, height=48, report=False, viewer=False)

TRAIN = """
import sys, torch
torch.set_num_threads(1)
import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CheckpointCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
venv = VecNormalize(DummyVecEnv([lambda: gym.make("HalfCheetah-v5")]))
model = PPO("MlpPolicy", venv, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
            policy_kwargs=dict(net_arch=[16, 16]))
model.learn(192, callback=CheckpointCallback(save_freq=64, save_path=sys.argv[1],
                                             save_vecnormalize=True))
"""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rl_model_{64,128,192}_steps.zip and their rl_model_vecnormalize_*_steps.pkl."""
    out = tmp_path_factory.mktemp("ckpt")
    subprocess.run([sys.executable, "-c", TRAIN, str(out)], check=True, cwd=out,
                   env={**os.environ, "SB3_LOGDIR": str(out / "log")})
    return out


@pytest.fixture(scope="module")
def sweep(checkpoints: Path, tmp_path_factory: pytest.TempPathFactory):
    from rolltape.drivers.sweep import evaluate_many

    out = tmp_path_factory.mktemp("sweep") / "sweep"
    # The glob is given in name order 128, 192, 64: the sweep orders it by steps.
    # No video per run (each would start a render worker); the strip is asked for alone.
    return evaluate_many(ENV, [f"sb3:{checkpoints}/rl_model_*_steps.zip"], baseline="random",
                         episodes=EPISODES, seed=5, video=0, strip=True, out=out, **TINY)


def test_a_glob_of_checkpoints_is_ordered_by_steps_with_their_own_statistics(sweep, checkpoints):
    from rolltape.files import sha256_of

    assert [e.label for e in sweep.entries] == ["steps-64", "steps-128", "steps-192"]
    for entry, run in zip(sweep.entries, sweep.runs):
        stats_file = checkpoints / f"rl_model_vecnormalize_{entry.steps}_steps.pkl"
        assert entry.vecnormalize == str(stats_file)
        assert run.metadata["vecnormalize_sha256"] == sha256_of(stats_file)
        assert run.path == sweep.path / entry.label
        # Each is a complete run of its own: tapes, results, metadata.
        assert len(list((run.path / "tapes").glob("policy-*.npz"))) == EPISODES
        assert (run.path / "metadata.json").is_file()
    seeds = {tuple(r["seed"] for r in run.results.to_json()["episodes_rows"]) for run in sweep.runs}
    assert seeds == {tuple(range(5, 5 + EPISODES))}  # the baseline too: the same seeds
    assert sweep.runs[-1].path.name == "random" and sweep.runs[-1].results.to_json()["videos"] == []


def test_the_comparison_pairs_every_checkpoint_and_draws_a_learning_curve(sweep):
    saved = json.loads((sweep.path / "comparison.json").read_text())
    assert saved["episodes"] == EPISODES and saved["seeds"] == list(range(5, 5 + EPISODES))
    pairs = [(p["a"], p["b"]) for p in saved["pairs"]]
    assert pairs == [("steps-128", "steps-64"), ("steps-192", "steps-128"),
                     ("steps-192", "steps-64"), ("steps-64", "random"),
                     ("steps-128", "random"), ("steps-192", "random")]
    rows = {r.path.name: {x["seed"]: x["return"] for x in r.results.to_json()["episodes_rows"]}
            for r in sweep.runs}
    for p in saved["pairs"]:
        r = p["returns"]
        assert r["verdict"] in ("better", "worse", "no detectable difference")
        assert p["a"] in r["sentence"] and p["b"] in r["sentence"]
        diffs = [rows[p["a"]][s] - rows[p["b"]][s] for s in saved["seeds"]]
        assert [x["diff"] for x in p["per_seed"]] == pytest.approx(diffs)
        assert r["mean_diff"] == pytest.approx(sum(diffs) / len(diffs))
        if r["verdict"] == "no detectable difference":
            assert "Underpowered" in r["sentence"]
    curve = saved["learning_curve"]
    assert [p["steps"] for p in curve["points"]] == [64, 128, 192]
    assert curve["baseline_mean"] == pytest.approx(
        sweep.runs[-1].results.to_json()["summary"]["policy"]["mean"])
    html = (sweep.path / "comparison.html").read_text()
    for title in ("Per-seed paired differences", "Return distributions", "Learning curve",
                  "Across checkpoints"):
        assert title in html
    assert "<script" not in html


def test_one_verified_video_strip_across_checkpoints(sweep):
    from rolltape.pass2.encode import count_frames

    strip = json.loads((sweep.path / "comparison.json").read_text())["strip"]
    assert strip["labels"] == ["64 steps", "128 steps", "192 steps"]
    assert strip["verified"] is True and strip["problems"] == []
    assert [p["verified"] for p in strip["parts"]] == [True, True, True]
    lengths = [next(x["length"] for x in r.results.to_json()["episodes_rows"] if x["seed"] == strip["seed"])
               for r in sweep.runs[:3]]
    assert count_frames(sweep.path / "strip.mp4") == sum(n + 1 for n in lengths)
    assert not list(sweep.path.glob(".strip-parts-*"))  # the parts are gone


def test_compare_cli_on_two_runs_and_on_a_sweep_folder(sweep, tmp_path):
    out = tmp_path / "cmp"
    done = run_cli("compare", str(sweep.path / "steps-64"), str(sweep.path / "steps-192"),
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    saved = json.loads((out / "comparison.json").read_text())
    assert [(p["a"], p["b"]) for p in saved["pairs"]] == [("steps-192", "steps-64")]
    assert "steps-192" in done.stdout and "comparison written to" in done.stdout
    again = run_cli("compare", str(sweep.path / "steps-64"), str(sweep.path / "steps-192"),
                    "--out", str(out))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    # The folder of a multi-policy eval: its runs and its random baseline, with aggregates
    # normalized by the last checkpoint (random 0, steps-192 1) and performance profiles.
    rebuilt = run_cli("compare", str(sweep.path), "--reference", "steps-192",
                      "--out", str(tmp_path / "agg"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    saved = json.loads((tmp_path / "agg" / "comparison.json").read_text())
    assert saved["aggregates"]["steps-192"]["mean"]["value"] == pytest.approx(1.0)
    assert set(saved["profiles"]) == {"steps-64", "steps-128", "steps-192"}
    assert "Performance profiles" in (tmp_path / "agg" / "comparison.html").read_text()


@pytest.fixture(scope="module")
def odd_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random runs that differ from the sweep in seed, count or env."""
    from rolltape.evaluation import evaluate

    root = tmp_path_factory.mktemp("odd")
    made = {}
    for name, env, episodes, seed in (("seed", ENV, EPISODES, 99), ("count", ENV, 2, 5),
                                      ("env", "Hopper-v5", EPISODES, 5)):
        made[name] = evaluate(env, "random", episodes=episodes, seed=seed, out=root / name,
                              **TINY).path
    return made


@pytest.mark.parametrize("odd, words", [("seed", "different seeds"),
                                        ("count", "has 4 episodes and"),
                                        ("env", "different envs")])
def test_compare_refuses_runs_that_do_not_pair(sweep, odd_runs, odd, words, tmp_path):
    done = run_cli("compare", str(sweep.path / "steps-64"), str(odd_runs[odd]),
                   "--out", str(tmp_path / "x"))
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_compare_refuses_a_run_compared_with_itself(sweep, tmp_path):
    run = str(sweep.path / "steps-64")
    done = run_cli("compare", run, run + "/", "--out", str(tmp_path / "x"))
    assert done.returncode == 2 and "given twice" in done.stderr
    assert not (tmp_path / "x").exists()


def test_eval_refuses_a_glob_matching_nothing(tmp_path):
    done = run_cli("eval", ENV, "--policy", f"sb3:{tmp_path}/rl_model_*_steps.zip",
                   "--baseline", "random", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "matches no file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_eval_refuses_a_checkpoint_whose_statistics_are_missing(checkpoints, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoints, folder, ignore=shutil.ignore_patterns("log"))
    (folder / "rl_model_vecnormalize_128_steps.pkl").unlink()
    done = run_cli("eval", ENV, "--policy", f"sb3:{folder}/rl_model_*_steps.zip",
                   "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "rl_model_128_steps.zip" in done.stderr and "rl_model_vecnormalize_128_steps.pkl" \
        in done.stderr
    assert not (tmp_path / "out").exists()


def test_two_policies_from_the_command_line(tmp_path):
    """`--policy` repeated: each policy its own run folder, then the comparison."""
    policy = tmp_path / "zero.py"
    policy.write_text("import numpy as np\ndef act(obs):\n    return np.zeros(6, dtype=np.float32)\n")
    out = tmp_path / "ab"
    done = run_cli("eval", ENV, "--policy", "random", "--policy", f"{policy}:act",
                   "--episodes", "3", "--max-episode-steps", str(STEPS), "--no-report",
                   "--workers", "2", "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["comparison.html", "comparison.json",
                                                     "policy-random", "sweep.json", "zero"]
    saved = json.loads((out / "comparison.json").read_text())
    assert [(p["a"], p["b"]) for p in saved["pairs"]] == [("zero", "policy-random")]
    assert saved["pairs"][0]["returns"]["sentence"] in done.stdout
    for run in ("policy-random", "zero"):  # --workers applies to each policy's run
        assert json.loads((out / run / "metadata.json").read_text())["config"]["workers"] == 2


def test_bad_input_for_several_policies_leaves_nothing(tmp_path):
    done = run_cli("eval", ENV, "--policy", "random", "--policy", "random", "--episodes", "0",
                   "--out", str(tmp_path / "new" / "ab"))
    assert done.returncode == 2 and "--episodes" in done.stderr
    assert not (tmp_path / "new").exists()


def test_resume_keeps_the_finished_runs(sweep):
    """Last in this file: it rewrites the sweep's comparison (without the strip)."""
    from rolltape.drivers.sweep import evaluate_many

    before = {r.path.name: (r.path / "results.json").stat().st_mtime_ns for r in sweep.runs}
    again = evaluate_many(ENV, [e.policy for e in sweep.entries], baseline="random",
                          episodes=EPISODES, seed=5, video=0, out=sweep.path, resume=True,
                          **TINY)
    assert {r.path.name: (r.path / "results.json").stat().st_mtime_ns
            for r in again.runs} == before
    assert again.comparison["pairs"] == sweep.comparison["pairs"]
