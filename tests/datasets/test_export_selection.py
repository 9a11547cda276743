"""`rolltape export --success-only` on an env that reports success (the toy of
tests/assets/toy_envs.py: ``info["is_success"]`` on the last step, True for even seeds),
to Minari and to LeRobot: exactly the episodes that succeeded are exported, each the replay
of its own tape. The toy's module is the user's own code, so it is named with
``--trust-module`` (a tape may not name code by itself)."""

from __future__ import annotations

import json

import gymnasium as gym
import minari
import numpy as np
import pyarrow.parquet as pq
import pytest
from test_lerobot import read_with_lerobot

from conftest import run_cli
from rolltape import Run, Tape, evaluate, export

TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """Six random-policy episodes, seeds 4..9: those with even seeds succeed."""
    out = tmp_path_factory.mktemp("select") / "toy"
    evaluate(TOY, "random", episodes=6, seed=4, out=out)
    run = Run.load(out)
    assert [e.key.seed for e in run.results.episodes] == [4, 5, 6, 7, 8, 9]
    return run


def _successful(run: Run) -> list[int]:
    """The seeds of the episodes whose last step said is_success, from the tapes."""
    won = [e.key.seed for e in run.results.episodes
           if Tape.load(run.tape_path(e)).success_at_end]
    assert won == [4, 6, 8]  # what the toy promises: even seeds
    return won


def _fresh(seed: int, actions: np.ndarray) -> list[np.ndarray]:
    import tests.assets.toy_envs  # noqa: F401  (registers the toy)

    env = gym.make("SuccessToy-v0")
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for action in actions:
        obs, *_ = env.step(action)
        out.append(obs)
    return out


def test_only_success_to_minari_keeps_exactly_the_successful_episodes(toy_run, tmp_path,
                                                                      monkeypatch):
    won = _successful(toy_run)
    outcome = export(toy_run, to="minari", dataset_id="toy/won-v0", out=tmp_path,
                     success_only=True, trust_module=["tests"])
    assert outcome.episodes == len(won) and not outcome.left_out
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    data = minari.load_dataset("toy/won-v0")
    metas = list(data.storage.get_episode_metadata(range(data.total_episodes)))
    assert [m["seed"] for m in metas] == won
    rows = {e.key.seed: e for e in toy_run.results.episodes}
    for episode, seed in zip(data.iterate_episodes(), won):
        tape = Tape.load(toy_run.tape_path(rows[seed]))
        assert np.array_equal(episode.observations, np.stack(_fresh(seed, tape.actions)))
        assert np.array_equal(episode.actions, tape.actions)
        # The per-step success flags are the replay's: False until the last step.
        assert episode.infos["success"].tolist() == [False] * tape.length + [True]


def test_only_success_to_lerobot_keeps_exactly_the_successful_episodes(toy_run, tmp_path):
    won = _successful(toy_run)
    out = tmp_path / "won"
    outcome = export(toy_run, to="lerobot", out=out, success_only=True, trust_module=["tests"])
    assert outcome.episodes == len(won) and not outcome.left_out
    read = read_with_lerobot(out, "rolltape/won", [], tmp_path / "read.npz")
    assert int(read["episodes"]) == len(won)
    episodes = pq.read_table(next((out / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    assert [e["rolltape/seed"] for e in episodes] == won
    rows = {e.key.seed: e for e in toy_run.results.episodes}
    for k, seed in enumerate(won):
        tape = Tape.load(toy_run.tape_path(rows[seed]))
        mine = read["episode_index"] == k
        # LeRobot's frames pair the observation each action was taken on with that action.
        fresh = np.stack(_fresh(seed, tape.actions)[:-1])
        assert np.array_equal(read["observation_state"][mine], fresh.astype(np.float32))
        # A one-number action is a scalar feature to LeRobot (a (1,) shape is a Value).
        assert np.array_equal(read["action"][mine].reshape(tape.actions.shape), tape.actions)
        assert read["next_success"][mine].tolist() == [False] * (tape.length - 1) + [True]


def test_a_tape_naming_user_code_needs_trust_module(toy_run, tmp_path):
    """Without --trust-module the tape's module is not imported (not even by the probe)."""
    result = run_cli("export", str(toy_run.path), "--to", "lerobot", "--out",
                     str(tmp_path / "ds"))
    assert result.returncode == 2, result.stderr
    assert "--trust-module tests" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists()
    result = run_cli("export", str(toy_run.path), "--to", "lerobot", "--out",
                     str(tmp_path / "ds"), "--success-only", "--trust-module", "tests")
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 3


def test_minari_refuses_an_env_registered_with_a_class(tmp_path):
    """Minari keeps the env spec as JSON: a class entry point cannot go there."""
    evaluate("tests.assets.toy_envs:FaultToy-v0", "random", episodes=1, out=tmp_path / "run")
    result = run_cli("export", str(tmp_path / "run"), "--to", "minari", "--id", "toy/f-v0",
                     "--out", str(tmp_path / "ds"), "--trust-module", "tests")
    assert result.returncode == 2, result.stderr
    assert "registered with a Python class as its entry_point" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any((tmp_path / "ds").rglob("*f-v0*"))
