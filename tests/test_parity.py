"""``rolltape parity``'s comparison (rolltape.parity): the first difference between a
local and a served episode is named by step and field, bit for bit; run against a real
server (CartPole: no GL, one short-lived process), the same episodes agree and every
session opened is closed. (The verb as a user runs it: server/test_server.py.)"""

from __future__ import annotations

import multiprocessing
import signal
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from conftest import Server
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.parity import compare_episode, open_sessions, parity_worker, run_parity
from rolltape.pass1.rollout import record_episode
from rolltape.policies import load_policy
from rolltape.tape import Tape

STEPS = 12


def episode(n: int = 3, **fields: Any) -> dict[str, Any]:
    """Tape fields of an n-step episode, made by hand."""
    base = {"actions": np.zeros((n, 1), np.float32), "rewards": np.ones(n),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "obs_digest": np.arange(n + 1, dtype=np.uint64), "physics": None,
            "success_at_end": None, "success_once": None}
    return {**base, **fields}


def test_compare_episode_names_the_first_divergent_step_and_field():
    env = make_env(env_spec("HalfCheetah-v5", max_episode_steps=10))
    fields = record_episode(env, load_policy("random", env), seed=3)
    env.close()
    assert compare_episode(fields, fields) is None
    other = {**fields, "rewards": fields["rewards"].copy()}
    other["rewards"][6] = np.nextafter(other["rewards"][6], np.inf)  # one bit
    assert compare_episode(fields, other)["field"] == "rewards"
    assert compare_episode(fields, other)["step"] == 7
    other = {**fields, "physics": fields["physics"].copy()}
    other["physics"][4, 2] += 1e-12
    assert compare_episode(fields, other) == {**compare_episode(fields, other), "step": 4,
                                              "field": "physics"}


def test_equal_means_the_same_bits() -> None:
    nan = episode(rewards=np.array([1.0, np.nan, 2.0]))
    assert compare_episode(nan, episode(rewards=np.array([1.0, np.nan, 2.0]))) is None
    zero = compare_episode(episode(rewards=np.array([1.0, 0.0, 2.0])),
                           episode(rewards=np.array([1.0, -0.0, 2.0])))
    assert zero == {"step": 2, "field": "rewards", "local": 0.0, "served": -0.0}
    wider = episode(actions=np.zeros((3, 1), np.float64))
    assert compare_episode(episode(), wider)["field"] == "actions"  # same values, other dtype


def test_the_reset_s_observation_is_step_0() -> None:
    other = episode(obs_digest=np.array([9, 1, 2, 3], np.uint64))
    assert compare_episode(episode(), other) == {"step": 0, "field": "obs_digest",
                                                 "local": 0, "served": 9}


def test_physics_on_one_side_only_is_a_difference() -> None:
    served = episode(physics=np.zeros((4, 5)))
    assert compare_episode(episode(), served) == {"step": 0, "field": "physics",
                                                  "local": False, "served": True}


def test_a_shorter_episode_differs_in_length_after_the_common_steps() -> None:
    assert compare_episode(episode(3), episode(4)) == {"step": 3, "field": "length",
                                                       "local": 3, "served": 4}


def test_success_flags_are_compared_last() -> None:
    diff = compare_episode(episode(success_once=True), episode(success_once=False))
    assert diff == {"step": 3, "field": "success_once", "local": True, "served": False}


def test_a_large_value_is_described_not_printed() -> None:
    a = episode(physics=np.zeros((4, 20)))
    b = episode(physics=np.zeros((4, 20)))
    b["physics"][1, 7] = 1.0
    diff = compare_episode(a, b)
    assert diff is not None and (diff["step"], diff["field"]) == (1, "physics")
    assert diff["local"] == diff["served"] == "float64 array [20] (sha of bytes differs)"


@pytest.fixture(scope="module")
def served() -> Iterator[dict[str, Any]]:
    server = Server(what=("CartPole-v1", "--max-episode-steps", str(STEPS)))
    try:
        yield env_spec(f"{server.address}/CartPole-v1", max_episode_steps=STEPS)
    finally:
        server.stop()


def test_the_same_episodes_agree_and_every_session_is_closed(served: dict[str, Any]) -> None:
    seen: list[dict[str, Any]] = []
    result = run_parity(served, "random", 2, 5, frames=False, on_episode=seen.append)
    assert result["agree"] and result["first_divergence"] is None
    assert [(r["seed"], r["length"], r["served_length"]) for r in result["rows"]] == [
        (5, STEPS, STEPS), (6, STEPS, STEPS)]
    assert seen == result["rows"] and "served" not in result["env"]
    assert result["open_sessions"] == {"before": 0, "after": 0}
    assert open_sessions(served) == 0


def tape_of(env_id: str, seed: int, path: Path) -> str:
    spec = env_spec(env_id, max_episode_steps=STEPS)
    env = make_env(spec)
    fields = record_episode(env, load_policy("random", env), seed=seed)
    env.close()
    return str(Tape(env=spec, **fields).save(path))


def test_tapes_are_replayed_from_their_own_seeds(served: dict[str, Any],
                                                 tmp_path: Path) -> None:
    tapes = [tape_of("CartPole-v1", seed, tmp_path / f"{seed}.npz") for seed in (8, 3)]
    result = run_parity(served, "random", 99, 0, frames=False, tapes=tapes)
    assert result["agree"] and result["policy"] == "tapes" and result["episodes"] == 2
    assert [(r["seed"], r["tape"]) for r in result["rows"]] == [(8, tapes[0]), (3, tapes[1])]


def test_a_tape_of_another_env_is_refused_before_any_session(served: dict[str, Any],
                                                             tmp_path: Path) -> None:
    other = tape_of("MountainCar-v0", 0, tmp_path / "car.npz")
    with pytest.raises(UsageError, match="was recorded on MountainCar-v0, not on CartPole-v1"):
        run_parity(served, "random", 1, 0, frames=False, tapes=[other])
    assert open_sessions(served) == 0


def test_the_worker_sends_each_episode_then_the_result_or_the_sentence(
        served: dict[str, Any]) -> None:
    before = signal.getsignal(signal.SIGTERM)  # the worker's own handler, restored after
    try:
        mine, theirs = multiprocessing.Pipe()
        parity_worker(served, {"policy": "random", "episodes": 2, "seed": 1, "frames": False},
                      theirs)
        kinds = []
        with pytest.raises(EOFError):  # the worker closes its end when it is done
            while True:
                kinds.append(mine.recv()[0])
        assert kinds == ["episode", "episode", "result"]
        mine, theirs = multiprocessing.Pipe()
        parity_worker(served, {"policy": "sb3:/nonexistent/model.zip", "episodes": 1,
                               "seed": 0, "frames": False}, theirs)
        kind, text = mine.recv()
        assert kind == "usage_error" and "model.zip" in text
    finally:
        signal.signal(signal.SIGTERM, before)
    assert open_sessions(served) == 0
