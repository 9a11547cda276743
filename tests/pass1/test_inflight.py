"""Several episodes of a served env at once (pass1.inflight), on real `rolltape serve`
processes: the tapes equal a local run's bit for bit (a random policy and a deterministic
SB3 one), the sessions really were several, an episode whose env raises fails alone while
its slot plays on, a busy server gives fewer sessions, a policy that cannot fork plays
one episode at a time, a worker holds one job's further sessions at a time, and its further
sessions are spares that a client with none takes (8 clients of an 8-session server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zmq")

from conftest import Server, server_stats, tape_bytes  # noqa: E402
from rolltape import Tape, evaluate  # noqa: E402
from rolltape.envs.ids import env_spec  # noqa: E402
from rolltape.pass1.dealer import Dealer  # noqa: E402
from rolltape.pass1.inflight import IN_FLIGHT, sessions_per_worker  # noqa: E402
from rolltape.pass1.rollout import (  # noqa: E402
    Episodes,
    OpenJobs,
    PolicyJob,
    in_flight_sessions,
    run_policy_job,
)
from rolltape.server.client import RemoteEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "HalfCheetah-v5"
STEPS = 30
TOY = "tests.assets.toy_envs:FaultToy-v0"


@pytest.fixture(scope="module")
def server():
    s = Server()  # --max-sessions 8 (its default): one worker plays 4 episodes at once
    yield s
    s.stop()


def same_tapes(a: Path, b: Path, count: int) -> None:
    names = sorted(p.name for p in (a / "tapes").glob("*.npz"))
    assert len(names) == count and names == sorted(p.name for p in (b / "tapes").glob("*.npz"))
    for name in names:
        assert tape_bytes(a / "tapes" / name) == tape_bytes(b / "tapes" / name), name


@pytest.mark.parametrize("policy", ["random", "sb3"])
def test_episodes_played_at_once_equal_a_local_run_bit_for_bit(server, ppo_checkpoint,
                                                               tmp_path, policy):
    ckpt, vecnorm = ppo_checkpoint
    kw = dict(episodes=7, seed=5, max_episode_steps=STEPS, report=False, workers=1)
    if policy == "sb3":
        kw.update(policy=f"sb3:{ckpt}", vecnormalize=vecnorm)
    else:
        kw.update(policy="random")
    before = server_stats(server.address)["opened"]
    served = evaluate(f"{server.address}/{ENV_ID}", out=tmp_path / "served", **kw)
    local = evaluate(ENV_ID, out=tmp_path / "local", **kw)
    # 4 sessions (the first and 3 more), kept across the worker's pieces of 4 and 3.
    assert server_stats(server.address)["opened"] - before == IN_FLIGHT
    assert server_stats(server.address)["sessions"] == 0
    same_tapes(served.path, local.path, 7)
    assert served.results.to_json()["summary"] == local.results.to_json()["summary"]


def test_a_raising_episode_fails_alone_and_its_slot_plays_on(tmp_path, monkeypatch):
    """Episode 2 (seed 12) raises at its third step on the server: it alone fails, its
    session is replaced, and the other 7 equal a local run's."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(ROOT))
    s = Server(what=(TOY, "--env-kwargs", "fault='raise_step'", "--env-kwargs", "at_seed=12"))
    try:
        kw = dict(env_kwargs={"fault": "raise_step", "at_seed": 12}, episodes=8, seed=10,
                  report=False, workers=1)
        served = evaluate(f"{s.address}/{TOY}", "random", out=tmp_path / "served", **kw)
        local = evaluate(TOY, "random", out=tmp_path / "local", **kw)
        assert server_stats(s.address)["sessions"] == 0
        assert server_stats(s.address)["opened"] == IN_FLIGHT + 1  # the failed one's replacement
    finally:
        s.stop()
    (failed,) = served.results.failed
    assert (failed["index"], failed["seed"]) == (2, 12)
    assert failed["error"].endswith("for seed 12")  # the last line of what it raised
    assert failed["error"] == local.results.failed[0]["error"]  # the env's own type, as here
    assert [r["index"] for r in served.results.to_json()["episodes_rows"]] == \
        [0, 1, 3, 4, 5, 6, 7]
    for r in served.results.to_json()["episodes_rows"]:
        name = Path(r["tape"]).name
        assert tape_bytes(tmp_path / "served" / "tapes" / name) == \
            tape_bytes(tmp_path / "local" / "tapes" / name), name


def job(address: str, tmp_path: Path, policy: str = "random", in_flight: int = IN_FLIGHT,
        role: str = "policy", **kw) -> PolicyJob:
    spec = env_spec(f"{address}/{ENV_ID}", max_episode_steps=STEPS)
    return PolicyJob(env=spec, policy=policy, in_flight=in_flight,
                     episodes=Episodes(role, range(6), seed=0, tapes=str(tmp_path)), **kw)


def test_a_busy_server_gives_fewer_sessions(tmp_path):
    s = Server("--max-sessions", "2")
    jobs = OpenJobs()
    try:
        sessions = in_flight_sessions(job(s.address, tmp_path), jobs.get(
            job(s.address, tmp_path), lambda message: None))
        assert len(sessions) == 2 and server_stats(s.address)["sessions"] == 2
    finally:
        jobs.close()
        assert server_stats(s.address)["sessions"] == 0
        s.stop()


def test_a_policy_that_cannot_fork_plays_one_episode_at_a_time(server, ppo_checkpoint,
                                                               tmp_path):
    """Sampled SB3 actions draw from torch's global generator: episodes cannot interleave."""
    ckpt, _ = ppo_checkpoint
    stochastic = job(server.address, tmp_path, policy=f"sb3:{ckpt}", deterministic=False)
    jobs = OpenJobs()
    try:
        assert len(in_flight_sessions(stochastic, jobs.get(stochastic, lambda m: None))) == 1
        assert server_stats(server.address)["sessions"] == 1
    finally:
        jobs.close()


def test_a_worker_holds_one_jobs_further_sessions_at_a_time(server, tmp_path):
    """Its policy job's 3 further sessions close when it moves to the baseline job, so a
    worker never holds more than sessions_per_worker + 1 sessions."""
    policy, baseline = job(server.address, tmp_path), job(server.address, tmp_path,
                                                          role="baseline")
    jobs = OpenJobs()
    try:
        assert len(in_flight_sessions(policy, jobs.get(policy, lambda m: None))) == IN_FLIGHT
        assert server_stats(server.address)["sessions"] == IN_FLIGHT
        assert len(in_flight_sessions(baseline, jobs.get(baseline, lambda m: None))) == IN_FLIGHT
        assert server_stats(server.address)["sessions"] == 1 + IN_FLIGHT
        in_flight_sessions(policy, jobs.get(policy, lambda m: None))
        assert server_stats(server.address)["sessions"] == IN_FLIGHT + 1
    finally:
        jobs.close()
    assert server_stats(server.address)["sessions"] == 0


def test_eight_clients_of_an_eight_session_server_are_all_served(tmp_path):
    """A worker's extra sessions are spares, given up to a client that has none: with one
    worker holding its first session and 3 spares (as one playing 4 episodes at once
    does), 7 `rolltape eval` processes started at once on a `--max-sessions 8` server are
    all served (before, the third was answered BUSY). The worker whose spares were taken
    plays its episodes on the session it kept, and every client's tapes are the same."""
    s = Server("--max-sessions", "8", what=("CartPole-v1", "--max-episode-steps", "30"))
    address, jobs, procs = s.address, OpenJobs(), []
    holder = PolicyJob(env=env_spec(f"{address}/CartPole-v1", max_episode_steps=30),
                       policy="random", in_flight=IN_FLIGHT,
                       episodes=Episodes("policy", range(6), seed=0, tapes=str(tmp_path / "h")))
    (tmp_path / "h").mkdir()
    try:
        assert len(in_flight_sessions(holder, jobs.get(holder, lambda m: None))) == IN_FLIGHT
        assert server_stats(address)["spare"] == IN_FLIGHT - 1
        procs = [subprocess.Popen(
            [sys.executable, "-m", "rolltape.cli", "eval", f"{address}/CartPole-v1",
             "--policy", "random", "--episodes", "6", "--seed", "0", "--max-episode-steps",
             "30", "--workers", "1", "--no-report", "--out", str(tmp_path / f"c{k}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(7)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0] * 7, [err for _, err in outs]
        # How many of the holder's spares the 7 took depends on how their runs overlapped;
        # 7 sessions held open at once on top of the holder's first must take all of them.
        held = [RemoteEnv.connect(holder.env) for _ in range(7)]
        try:
            stats = server_stats(address)
            assert (stats["sessions"], stats["spare"]) == (8, 0)
            assert stats["reclaimed"] >= IN_FLIGHT - 1  # the holder's, and maybe the 7's own
        finally:
            for env in held:
                env.close()
        messages: list = []
        run_policy_job(holder, messages.append, jobs)  # on the session it kept
        assert sorted(m[1]["index"] for m in messages if m[0] == "episode") == list(range(6))
        assert not [m for m in messages if m[0] == "episode_failed"]
    finally:
        jobs.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        stats = server_stats(address)
        s.stop()
    assert stats["sessions"] == 0
    for i in range(6):
        name = f"policy-{i:04d}.npz"
        mine = Tape.load(tmp_path / "h" / name)
        for k in range(7):
            theirs = Tape.load(tmp_path / f"c{k}" / "tapes" / name)
            assert np.array_equal(mine.actions, theirs.actions), (k, name)
            assert np.array_equal(mine.rewards, theirs.rewards), (k, name)


def test_sessions_per_worker_leave_room_for_every_worker():
    for max_sessions in range(1, 20):
        for workers in range(1, 10):
            k = sessions_per_worker(max_sessions, workers)
            assert 1 <= k <= IN_FLIGHT
            # Every worker's sessions fit whenever one session each (as before) would.
            assert workers * (k + 1) <= max_sessions or k == 1


def test_a_piece_holds_at_least_the_episodes_played_at_once(tmp_path):
    one = PolicyJob(env={"id": "CartPole-v1"}, policy="random", in_flight=4,
                    episodes=Episodes("policy", range(10), seed=0, tapes=str(tmp_path)))
    dealer = Dealer([[one]])
    sizes = []
    while (piece := dealer(0)) is not None:
        sizes.append(sum(len(j.episodes) for j in piece))
    assert sizes == [4, 4, 2]
