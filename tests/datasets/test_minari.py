"""`rolltape export --to minari`: real runs (a PPO checkpoint on HalfCheetah, random
CartPole), replayed in render workers, written by minari itself and read back by
`minari.load_dataset`; every observation is checked against a fresh `gym.make` stepped
with the tape's actions from its seed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import minari  # noqa: E402  (installed by scripts/setup.sh --test: rolltape[export])
import numpy as np
import pytest

from conftest import ENV_ID, SHORT, interruptible, run_cli
from rolltape import Run, Tape, UsageError, evaluate, export


@pytest.fixture(scope="module")
def cheetah_run(ppo_checkpoint, tmp_path_factory):
    """A real MuJoCo run: the PPO checkpoint (with its VecNormalize) and a random baseline."""
    model, stats = ppo_checkpoint
    out = tmp_path_factory.mktemp("export") / "cheetah"
    evaluate(ENV_ID, f"sb3:{model}", vecnormalize=str(stats), episodes=3, seed=11,
             baseline="random", max_episode_steps=SHORT, out=out)
    return Run.load(out)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A Discrete classic-control run."""
    out = tmp_path_factory.mktemp("export") / "cartpole"
    evaluate("CartPole-v1", "random", episodes=4, seed=3, out=out)
    return Run.load(out)


def _fresh_replay(env_id: str, max_steps: int | None, tape: Tape) -> list[np.ndarray]:
    """The observations a fresh gym.make gives for the tape's seed and actions."""
    env = gym.make(env_id, max_episode_steps=max_steps)
    obs, _ = env.reset(seed=tape.seed)
    out = [obs]
    for action in tape.actions:
        obs, *_ = env.step(action)
        out.append(obs)
    env.close()
    return out


def _check_dataset(run: Run, dataset_id: str, root: Path, monkeypatch, seeds: list[int],
                   max_steps: int | None) -> object:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    data = minari.load_dataset(dataset_id)
    rows = {e.key.seed: e for e in run.results.episodes}
    assert data.total_episodes == len(seeds)
    assert data.total_steps == sum(rows[s].length for s in seeds)
    for episode, seed in zip(data.iterate_episodes(), seeds):
        tape = Tape.load(run.tape_path(rows[seed]))
        assert tape.seed == seed
        fresh = _fresh_replay(run.results.env_id, max_steps, tape)
        assert episode.observations.shape[0] == tape.length + 1
        for step, obs in enumerate(fresh):
            assert np.array_equal(episode.observations[step], obs), step
        assert np.array_equal(episode.actions, tape.actions)
        assert episode.actions.dtype == tape.actions.dtype
        assert np.array_equal(episode.rewards, tape.rewards)
        assert np.array_equal(episode.terminations, tape.terminated)
        assert np.array_equal(episode.truncations, tape.truncated)
        assert episode.infos["success"].shape == (tape.length + 1,)
    meta = data.storage.metadata
    facts = meta["rolltape"]
    assert facts["run"]["sha256"]["results.json"] == _sha(run.path / "results.json")
    assert facts["rolltape_version"]
    episodes_meta = list(data.storage.get_episode_metadata(range(len(seeds))))
    assert [m["seed"] for m in episodes_meta] == seeds
    assert all(m["rolltape"]["verified"] for m in episodes_meta)
    assert [m["rolltape"]["tape_sha256"] for m in episodes_meta] == [
        _sha(run.tape_path(rows[s])) for s in seeds]
    return data


def _sha(path: Path) -> str:
    from rolltape.files import sha256_of

    return sha256_of(path)


def test_mujoco_run_becomes_a_minari_dataset(cheetah_run, tmp_path, monkeypatch):
    out = export(cheetah_run, to="minari", dataset_id="rolltape/cheetah-ppo-v0",
                 out=tmp_path, workers=2)
    assert out.episodes == 3 and not out.left_out
    seeds = [e.key.seed for e in cheetah_run.results.episodes]
    data = _check_dataset(cheetah_run, "rolltape/cheetah-ppo-v0", tmp_path, monkeypatch,
                          seeds, SHORT)
    meta = data.storage.metadata
    summary = cheetah_run.results.summary
    assert meta["ref_min_score"] == summary["baseline"].mean
    assert meta["ref_max_score"] == summary["policy"].mean
    assert meta["ref_min_score"] != meta["ref_max_score"]
    assert meta["algorithm_name"] == "PPO"
    assert meta["author"] and meta["code_permalink"]
    env = data.recover_environment()
    assert env.spec.id == ENV_ID and env.spec.max_episode_steps == SHORT
    eval_env = data.recover_environment(eval_env=True)
    assert eval_env.spec.id == ENV_ID
    # The dataset's env replays the first episode exactly (Minari's own spec round trip).
    first = next(data.iterate_episodes())
    obs, _ = env.reset(seed=seeds[0])
    assert np.array_equal(obs, first.observations[0])
    # Nothing of the staging folder is left beside the dataset.
    assert sorted(p.name for p in (tmp_path / "rolltape").iterdir()) == [
        "cheetah-ppo-v0", "namespace_metadata.json"]


def test_discrete_run_with_a_selection(cartpole_run, tmp_path, monkeypatch):
    assert "baseline" not in cartpole_run.results.summary
    out = export(cartpole_run, to="minari", dataset_id="cartpole-picked-v1", out=tmp_path,
                 pick="0,2,3")
    seeds = [3, 5, 6]
    assert out.episodes == 3
    data = _check_dataset(cartpole_run, "cartpole-picked-v1", tmp_path, monkeypatch, seeds,
                          None)
    assert isinstance(data.action_space, gym.spaces.Discrete)
    assert "ref_min_score" not in data.storage.metadata  # no baseline: no reference scores
    assert data.recover_environment().spec.id == "CartPole-v1"


def test_min_return_and_role_choose_episodes(cheetah_run, tmp_path, monkeypatch):
    baseline = cheetah_run.results.baseline
    cut = sorted(e.ret for e in baseline)[1]
    out = export(cheetah_run, to="minari", dataset_id="base-v0", out=tmp_path,
                 role="baseline", min_return=cut)
    picked = [e.key.seed for e in baseline if e.ret >= cut]
    assert out.episodes == len(picked) == 2
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    data = minari.load_dataset("base-v0")
    assert [m["seed"] for m in data.storage.get_episode_metadata(range(2))] == picked
    assert {m["rolltape"]["role"] for m in data.storage.get_episode_metadata(range(2))} == {
        "baseline"}


def test_episodes_that_do_not_verify_are_left_out_and_named(cartpole_run, tmp_path,
                                                            monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(cartpole_run.path, run_dir)
    run = Run.load(run_dir)
    bad = run.tape_path(run.results.episodes[1])
    tape = Tape.load(bad)
    rewards = tape.rewards.copy()
    rewards[2] += 0.5
    dataclasses.replace(tape, rewards=rewards).save(bad)
    # Another whose observation digest after step 4 (and reward at step 6) is not pass 1's:
    # the first divergence is named.
    odd = run.tape_path(run.results.episodes[3])
    tape = Tape.load(odd)
    digests, rewards = tape.obs_digest.copy(), tape.rewards.copy()
    digests[5] ^= 1
    rewards[6] += 1.0
    dataclasses.replace(tape, obs_digest=digests, rewards=rewards).save(odd)
    out = export(run, to="minari", dataset_id="cartpole-v0", out=tmp_path / "ds")
    assert out.episodes == 2
    assert len(out.left_out) == 2
    (label, why), (label3, why3) = out.left_out
    assert "episode 1 (seed 4)" in label and "step 2: reward" in why
    assert "episode 3 (seed 6)" in label3 and why3.startswith("step 4: observation"), why3
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    data = minari.load_dataset("cartpole-v0")
    assert [m["seed"] for m in data.storage.get_episode_metadata(range(2))] == [3, 5]
    rows = data.storage.metadata["rolltape"]
    assert "episodes" not in rows  # per-episode facts are in each episode's metadata


def test_bad_input_is_one_line_and_writes_nothing(cartpole_run, tmp_path):
    ds = tmp_path / "ds"
    cases = [
        (["--to", "parquet", "--id", "a-v0"], "Unknown --to 'parquet'"),
        (["--to", "minari"], "needs --id"),
        (["--to", "minari", "--id", "a-v0", "--pick", "0,9"], "--pick asks for episode 9"),
        (["--to", "minari", "--id", "a-v0", "--role", "baseline"], "no baseline episodes"),
        (["--to", "minari", "--id", "a-v0", "--camera", "default"], "only --to lerobot"),
        (["--to", "minari", "--id", "a-v0", "--success-only"], "passes the selection"),
    ]
    for args, said in cases:
        result = run_cli("export", str(cartpole_run.path), *args, "--out", str(ds))
        assert result.returncode == 2, (args, result.stderr)
        assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not ds.exists() or not any(ds.rglob("*-v0")), args
    # A run whose tapes are gone.
    bare = tmp_path / "bare"
    shutil.copytree(cartpole_run.path, bare)
    shutil.rmtree(bare / "tapes")
    result = run_cli("export", str(bare), "--to", "minari", "--id", "a-v0", "--out", str(ds))
    assert result.returncode == 2 and "has no tapes" in result.stderr, result.stderr
    # An existing dataset is not replaced without --overwrite.
    (ds / "a-v0").mkdir(parents=True)
    result = run_cli("export", str(cartpole_run.path), "--to", "minari", "--id", "a-v0",
                     "--out", str(ds))
    assert result.returncode == 2 and "--overwrite" in result.stderr
    assert list((ds / "a-v0").iterdir()) == []
    with pytest.raises(UsageError, match="is a Graph space"):
        from rolltape.datasets.minari import check_spaces

        check_spaces({(None, None): (gym.spaces.Dict({"g": gym.spaces.Graph(
            gym.spaces.Box(0, 1, (2,)), None)}), gym.spaces.Discrete(2), None, 30)}, cartpole_run)


def test_export_interrupted_resumes_to_the_same_files(tmp_path):
    run_dir = tmp_path / "run"
    evaluate(ENV_ID, "random", episodes=8, seed=1, max_episode_steps=200, out=run_dir)
    whole = run_cli("export", str(run_dir), "--to", "minari", "--id", "whole-v0", "--out",
                    str(tmp_path / "a"))
    assert whole.returncode == 0, whole.stderr
    staging = tmp_path / "b" / ".cut-v0.export-partial"
    cmd = [sys.executable, "-m", "rolltape.cli", "export", str(run_dir), "--to", "minari",
           "--id", "cut-v0", "--out", str(tmp_path / "b")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible, start_new_session=True)
    log = staging / "replays.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 2:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the export finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not (tmp_path / "b" / "cut-v0").exists()
    kept = len(log.read_text().splitlines())
    assert 2 <= kept < 8
    again = run_cli("export", str(run_dir), "--to", "minari", "--id", "cut-v0", "--out",
                    str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert f"resumed after {kept} replayed episodes" in again.stdout
    assert not staging.exists()
    a, b = tmp_path / "a" / "whole-v0", tmp_path / "b" / "cut-v0"
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files_a:
        if rel.name == "metadata.json" and rel.parent.name == "data":
            one, two = (json.loads((root / rel).read_text()) for root in (a, b))
            assert one.pop("dataset_id") == "whole-v0" and two.pop("dataset_id") == "cut-v0"
            assert one == two
        else:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_the_export_job_stays_on_the_render_side():
    """An export job runs in a render worker: what it imports never reaches the policy
    side, torch, the orchestrator or an executor (the run-time check is in every replay:
    a worker that loaded one fails the export)."""
    from rolltape.pass2.replay import FORBIDDEN
    from test_layout import closure

    reached = closure("rolltape.pass2.export")
    assert "rolltape.pass2.replay" in reached
    assert sorted(m for m in reached if any(m == f or m.startswith(f + ".")
                                            for f in FORBIDDEN + ("rolltape.outputs",))) == []
