"""`--wrapper atari` on a served Atari game (issue 34, item 13): SB3's Atari wrappers ask
the env itself for its action names, lives and np_random; a served game answers them as
the local one does, and sends its emulator states, so the served run's tapes are the local
run's, action for action and state for state. A zoo folder plays its env served."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tests.conftest import Server, tape_bytes

from rolltape import Tape, UsageError, evaluate

GAME = "BreakoutNoFrameskip-v4"
STEPS = 150


class AtariServer(Server):
    """`rolltape serve GAME`, past the banner ALE's emulator prints when a game is built."""

    def __init__(self, *extra: str, steps: int = STEPS) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.cli", "serve", GAME, "--max-episode-steps",
             str(steps), "--bind", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self._line(60)
        while line.startswith(("A.L.E:", "[Powered by Stella]")):
            line = self._line(60)
        assert line.startswith("serving"), line
        self.address = next(w for w in line.split() if w.startswith("tcp://"))


def test_atari_wrappers_on_a_served_game_play_the_local_games(tmp_path) -> None:
    kw = dict(wrappers=("atari",), frame_stack=4, episodes=2, seed=21,
              max_episode_steps=STEPS, report=False)
    local = evaluate(GAME, "random", out=tmp_path / "local", **kw)
    server = AtariServer()
    try:
        served = evaluate(f"{server.address}/{GAME}", "random", out=tmp_path / "served", **kw)
    finally:
        server.stop()
    for name in ("policy-0000.npz", "policy-0001.npz"):
        a = Tape.load(local.path / "tapes" / name)
        b = Tape.load(served.path / "tapes" / name)
        # The no-op starts (NoopResetEnv draws them from the game's np_random), FIRE on
        # reset and the life-loss resets all happened as in the local games.
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.rewards, b.rewards)
        assert np.array_equal(a.obs_digest, b.obs_digest)
        # The server sends the emulator's state with each reply: the served tape holds the
        # local tape's states, byte for byte (what --mode restore draws from).
        assert b.has_ale_state and np.array_equal(a.ale_state, b.ale_state)
        assert np.array_equal(a.ale_state_offsets, b.ale_state_offsets)
    assert (a.actions[:5] == 0).any()  # (the game began with no-ops, as noop_max allows)
    assert served.metadata.facts["policy"]["wrappers"] == ["atari", "frame_stack=4"]


def test_a_served_vector_game_records_the_local_games_states(tmp_path) -> None:
    """A `--num-envs 2` server's vector session (batched pass 1, one request per step for
    both sub-envs) sends each row's emulator state: its tapes equal a local per-row run's
    byte for byte, states included (3 episodes: the third starts on a sub-env that played
    one already, while the other resets unseeded and idles)."""
    kw = dict(episodes=3, seed=7, max_episode_steps=40, report=False)
    local = evaluate(GAME, "random", out=tmp_path / "local", **kw)
    server = AtariServer("--num-envs", "2", steps=40)
    try:
        served = evaluate(f"{server.address}/{GAME}", "random", workers=1,
                          batched_inference=True, out=tmp_path / "served", **kw)
    finally:
        server.stop()
    names = sorted(p.name for p in (local.path / "tapes").glob("*.npz"))
    assert len(names) == 3
    for name in names:
        mine = tape_bytes(local.path / "tapes" / name)
        assert "ale_state" in mine and "ale_state_offsets" in mine
        assert mine == tape_bytes(served.path / "tapes" / name), name


def test_a_zoo_folder_plays_its_env_served(tmp_path) -> None:
    """`--policy zoo:FOLDER` with the folder's env served (it was refused with advice that
    ran it locally); another env than the folder's is still refused."""
    from stable_baselines3 import PPO

    repo = tmp_path / "repo"
    repo.mkdir()
    PPO("MlpPolicy", "CartPole-v1", seed=0).save(repo / "ppo-CartPole-v1.zip")
    (repo / "config.yml").write_text("{}\n")
    (repo / "args.yml").write_text("env: CartPole-v1\nalgo: ppo\n")
    server = Server(what=("CartPole-v1",))
    try:
        with pytest.raises(UsageError, match="was trained on 'CartPole-v1', not 'Acrobot-v1'"):
            evaluate(f"{server.address}/Acrobot-v1", f"zoo:{repo}", out=tmp_path / "no")
        served = evaluate(f"{server.address}/CartPole-v1", f"zoo:{repo}", episodes=2,
                          seed=40, out=tmp_path / "served", report=False)
    finally:
        server.stop()
    assert len(served.results.episodes) == 2
    assert served.metadata.facts["config"]["zoo"]["env"] == "CartPole-v1"
