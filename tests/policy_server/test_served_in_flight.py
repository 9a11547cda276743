"""Several episodes at once against a served policy (pass1.inflight.AskAhead), on real
`rolltape serve-policy` processes: a deterministic SB3 server's sessions are independent, so a
worker plays episodes on several sessions, each with a local env of its own, and the tapes
equal a local run's bit for bit; a sampling server's are not, so its episodes play one at a
time and still equal the local ones; an episode whose env raises fails alone while the
others play on. Nothing here asserts how the processes overlapped in time."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import Server
from policy_servers import PolicyServer
from rolltape import evaluate
from rolltape.bench.common import make_checkpoint
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.pass1.inflight import AskAhead
from rolltape.pass1.rollout import (
    Episodes,
    OpenJobs,
    PolicyJob,
    in_flight_sessions,
    record_episode,
    run_policy_job,
)
from rolltape.policies import load_policy
from rolltape.policy_server import wire
from rolltape.policy_server.client import check_policy_server

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "HalfCheetah-v5"
STEPS = 30
TOY = "tests.assets.toy_envs:FaultToy-v0"


def arrays(path: Path) -> dict[str, bytes]:
    """A tape's arrays as bytes (its header names the policy, which differs served/local)."""
    with np.load(path) as npz:
        return {k: npz[k].tobytes() for k in npz.files if k != "header"}


def play(address: str, tmp_path: Path, episodes: int) -> tuple[PolicyJob, list[Any], OpenJobs]:
    """A job of ``episodes`` HalfCheetah episodes against ``address``, 3 at most at once,
    opened (not played yet)."""
    job = PolicyJob(env=env_spec(ENV_ID, max_episode_steps=STEPS), policy=address,
                    episodes=Episodes("policy", range(episodes), seed=0, tapes=str(tmp_path)),
                    in_flight=3)
    return job, [], OpenJobs()


def assert_local_tapes(tmp_path: Path, episodes: int, model: Path, stats: Path,
                       deterministic: bool) -> None:
    """Each tape in ``tmp_path`` is the one pass 1's loop records playing it alone here."""
    env = make_env(env_spec(ENV_ID, {}, STEPS))
    local = load_policy(f"sb3:{model}", env, vecnormalize=str(stats),
                        deterministic=deterministic)
    try:
        for i in range(episodes):
            fields = record_episode(env, local, i)
            with np.load(tmp_path / f"policy-{i:04d}.npz") as npz:
                assert npz["actions"].tobytes() == fields["actions"].tobytes(), i
                assert npz["rewards"].tobytes() == fields["rewards"].tobytes(), i
    finally:
        env.close()


@pytest.fixture(scope="module")
def sb3_server(ppo_checkpoint: tuple[Path, Path]) -> Any:
    """The deterministic PPO checkpoint served once for the module, 5 sessions at most."""
    model, stats = ppo_checkpoint
    server = PolicyServer(f"sb3:{model}", "--vecnormalize", str(stats), "--max-sessions", "5")
    yield server
    server.stop()


def until_sessions(server: PolicyServer, n: int) -> int:
    """The server's open sessions once they are ``n`` (a closed one is counted off when its
    handler sees the close), or after 20 s."""
    deadline = time.monotonic() + 20
    while server.sessions() != n and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.sessions()


def test_a_deterministic_served_policy_plays_episodes_at_once_with_the_local_tapes(
        ppo_checkpoint: tuple[Path, Path], sb3_server: PolicyServer, tmp_path: Path):
    model, stats = ppo_checkpoint
    ours = check_policy_server(sb3_server.address)[wire.ROLLTAPE_KEY]
    assert ours["independent_sessions"] is True and ours["max_sessions"] == 5
    job, sent, opened = play(sb3_server.address, tmp_path, 5)
    try:
        rows = in_flight_sessions(job, opened.get(job, sent.append))
        assert len(rows) == 3 and all(isinstance(env, AskAhead) for env, _ in rows)
        assert len({id(policy.session) for _, policy in rows}) == 3
        assert sb3_server.sessions() == 3  # one policy session per episode played at once
        run_policy_job(job, sent.append, opened)
    finally:
        opened.close()
    assert sorted(p["index"] for k, p in sent if k == "episode") == [0, 1, 2, 3, 4]
    assert_local_tapes(tmp_path, 5, model, stats, deterministic=True)
    assert until_sessions(sb3_server, 0) == 0  # every session closed with the job


def test_a_served_env_and_policy_play_at_once_and_close_their_further_sessions(
        sb3_server: PolicyServer, tmp_path: Path):
    """On a served env too, each episode played at once has a policy session of its own,
    closed with the env session when the worker moves to another job."""
    env_server = Server()
    try:
        spec = env_spec(f"{env_server.address}/{ENV_ID}", max_episode_steps=STEPS)
        job = PolicyJob(env=spec, policy=sb3_server.address, in_flight=3,
                        episodes=Episodes("policy", range(3), seed=0, tapes=str(tmp_path)))
        opened = OpenJobs()
        sent: list[Any] = []
        try:
            slot = opened.get(job, sent.append)
            assert len(in_flight_sessions(job, slot)) == 3 and sb3_server.sessions() == 3
            run_policy_job(job, sent.append, opened)
            slot.close_more()  # what a worker does when it plays another job
            assert until_sessions(sb3_server, 1) == 1  # the job's own, kept for its next piece
        finally:
            opened.close()
        assert [k for k, _ in sent].count("episode") == 3
        assert until_sessions(sb3_server, 0) == 0
    finally:
        env_server.stop()


def test_a_sampling_served_policy_plays_one_episode_at_a_time(
        ppo_checkpoint: tuple[Path, Path], tmp_path: Path):
    """Its sessions share the server's torch generator: interleaved, one episode's draws
    would move another's, so the client does not fork it."""
    model, stats = ppo_checkpoint
    server = PolicyServer(f"sb3:{model}", "--vecnormalize", str(stats), "--stochastic")
    try:
        assert check_policy_server(server.address)[wire.ROLLTAPE_KEY][
            "independent_sessions"] is False
        job, sent, opened = play(server.address, tmp_path, 3)
        try:
            (row,) = in_flight_sessions(job, opened.get(job, sent.append))
            assert not isinstance(row[0], AskAhead)  # the plain loop, one at a time
            run_policy_job(job, sent.append, opened)
        finally:
            opened.close()
        assert_local_tapes(tmp_path, 3, model, stats, deterministic=False)
    finally:
        server.stop()


def test_an_episode_whose_env_raises_fails_alone_while_the_others_play_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Episode 2 (seed 12) raises at its third step in the worker's local env: it alone
    fails, its slot gets a new env, and the other 7 equal a local run's."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "toy").mkdir()
    model, stats = make_checkpoint(tmp_path / "toy", TOY)  # untrained: acts all the same
    server = PolicyServer(f"sb3:{model}", "--vecnormalize", str(stats))
    try:
        kw: dict[str, Any] = dict(env_kwargs={"fault": "raise_step", "at_seed": 12},
                                  episodes=8, seed=10, report=False)
        served = evaluate(TOY, server.address, out=tmp_path / "served", **kw)
        local = evaluate(TOY, f"sb3:{model}", vecnormalize=str(stats),
                         out=tmp_path / "local", **kw)
    finally:
        server.stop()
    (failed,) = served.results.failed
    assert (failed["index"], failed["seed"]) == (2, 12)
    assert failed["error"] == local.results.failed[0]["error"]
    rows = served.results.to_json()["episodes_rows"]
    assert [r["index"] for r in rows] == [0, 1, 3, 4, 5, 6, 7]
    for r in rows:
        name = Path(r["tape"]).name
        assert arrays(tmp_path / "served" / "tapes" / name) == \
            arrays(tmp_path / "local" / "tapes" / name), name
