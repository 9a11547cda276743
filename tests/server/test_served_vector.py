"""Served vector envs on a real `rolltape serve --num-envs 4` process: batched pass 1 over
one request per step for 4 sub-envs gives a local batched run's tapes bit for bit (an SB3
policy, one forward pass for 4 observations), a sub-env that raises fails only its own
episode, a killed server stops the run and --resume on a new one finishes it, and parity
works against such a server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zmq")

from conftest import (  # noqa: E402
    Server,
    kill_mid_run_then_resume,
    run_cli,
    server_stats,
    tape_bytes,
)
from rolltape import Tape, evaluate  # noqa: E402
from rolltape.server import protocol as P  # noqa: E402
from rolltape.server.client import Connection, RemoteVectorEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "HalfCheetah-v5"
STEPS = 30
FAST = {"ROLLTAPE_SERVER_TIMEOUT": "3"}  # a gone server is found within seconds
TOY = "tests.assets.toy_envs:FaultToy-v0"


@pytest.fixture(autouse=True)
def _toy_envs_importable(monkeypatch):
    """Servers and workers started here import the test's toy envs by module name."""
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + (os.pathsep + old if old else ""))
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture(scope="module")
def server():
    s = Server("--num-envs", "4", "--max-sessions", "4")
    yield s
    s.stop()


def sessions(address: str) -> int:
    return server_stats(address)["sessions"]


def test_served_batched_tapes_equal_a_local_batched_run_bit_for_bit(server, ppo_checkpoint,
                                                                    tmp_path):
    """6 episodes on 4 sub-envs: the second round uses 2 of them while 2 idle ones reset
    unseeded and step on, as they do locally; the policy's 4-row forward pass is the same."""
    model_zip, stats = ppo_checkpoint
    kw = dict(vecnormalize=stats, episodes=6, seed=5, max_episode_steps=STEPS, report=False,
              batched_inference=True)
    local = evaluate(ENV_ID, f"sb3:{model_zip}", workers=4, out=tmp_path / "local", **kw)
    served = evaluate(f"{server.address}/{ENV_ID}", f"sb3:{model_zip}", workers=1,
                      out=tmp_path / "served", **kw)
    names = sorted(p.name for p in (tmp_path / "local" / "tapes").glob("*.npz"))
    assert len(names) == 6
    for name in names:
        mine = tape_bytes(tmp_path / "local" / "tapes" / name)
        assert "physics" in mine
        assert mine == tape_bytes(tmp_path / "served" / "tapes" / name), name
    tape = Tape.load(tmp_path / "served" / "tapes" / names[0])
    assert tape.policy["inference"] == "batched (4 envs)" and "served" not in tape.env
    assert local.results.to_json()["summary"] == served.results.to_json()["summary"]
    assert sessions(server.address) == 0  # the worker closed its vector session


def test_one_request_steps_every_sub_env_and_physics_rows_come_per_sub_env(server):
    from rolltape.envs.build import make_env
    from rolltape.envs.ids import env_spec

    spec = env_spec(f"{server.address}/{ENV_ID}", max_episode_steps=STEPS)
    vec = RemoteVectorEnv.connect(spec, sessions=2)  # 2 sessions x 4 sub-envs
    try:
        assert vec.num_envs == 8
        reply = vec.reset(list(range(100, 108)), np.ones(8, bool))
        assert reply["obs"].shape == (8, 17) and reply["physics"].shape[0] == 8
        actions = np.random.default_rng(0).uniform(-1, 1, (8, 6))
        step = vec.step(actions)
        assert step["obs"].shape == (8, 17) and step["reward"].dtype == np.float64
        assert step["errors"] == [None] * 8
        local = make_env(env_spec(ENV_ID, max_episode_steps=STEPS))
        for s in (0, 5):  # sub-env s is its own env: seed 100 + s, its own action
            local.reset(seed=100 + s)
            obs, reward, *_ = local.step(actions[s])
            assert obs.tobytes() == step["obs"][s].tobytes() and reward == step["reward"][s]
        local.close()
        # Only the masked sub-envs reset; the reply holds their rows only.
        again = vec.reset([None, 7, None, None, None, None, None, 9],
                          np.array([0, 1, 0, 0, 0, 0, 0, 1], bool))
        assert again["rows"] == [1, 7] and again["obs"].shape == (2, 17)
        assert sessions(server.address) == 2
    finally:
        vec.close()
    assert sessions(server.address) == 0


@pytest.mark.parametrize("fault, words", [
    ("raise_step", ("ValueError: for seed 12",)),  # the last line, as a local failure says
    ("raise_reset", ("RuntimeError", "reset failed on purpose for seed 12"))])
def test_a_raising_sub_env_fails_only_its_episode(tmp_path, fault, words):
    """Episode 2 (seed 12) raises on the server (at its third step, or at its reset): it
    alone fails, the server rebuilds that sub-env, its slot plays the next episode, and
    every other episode equals a local per-row run's (the random policy acts row by row)."""
    s = Server("--num-envs", "4", what=(TOY, "--env-kwargs", f"fault='{fault}'",
                                        "--env-kwargs", "at_seed=12"))
    try:
        kw = dict(env_kwargs={"fault": fault, "at_seed": 12}, episodes=8, seed=10,
                  report=False)
        served = evaluate(f"{s.address}/{TOY}", "random", batched_inference=True, workers=1,
                          out=tmp_path / "served", **kw)
        local = evaluate(TOY, "random", out=tmp_path / "local", **kw)
        assert sessions(s.address) == 0
    finally:
        s.stop()
    rows = served.results.to_json()["episodes_rows"]
    assert [r["index"] for r in rows] == [0, 1, 3, 4, 5, 6, 7]
    (failed,) = served.results.failed
    assert (failed["index"], failed["seed"]) == (2, 12)
    assert all(w in failed["error"] for w in words), failed
    assert failed["error"] == local.results.failed[0]["error"]  # as a local env's failure
    for r in rows:
        name = Path(r["tape"]).name
        assert tape_bytes(tmp_path / "served" / "tapes" / name) == \
            tape_bytes(tmp_path / "local" / "tapes" / name), name


def test_a_hung_sub_env_fails_only_its_episode_with_one_sentence(tmp_path):
    """Episode 2 (seed 12) hangs at its third step on a `--num-envs 4 --request-timeout 1`
    server: the server cuts that sub-env's step and builds it again, so that episode alone
    fails, in one sentence naming the server, and the other 7 finish as a local run's. A
    one-env session's hung episode says the same."""
    s = Server("--num-envs", "4", "--request-timeout", "1",
               what=(TOY, "--env-kwargs", "fault='hang'", "--env-kwargs", "at_seed=12"))
    kw = dict(episodes=8, seed=10, report=False, workers=1)
    try:
        runs = {how: evaluate(f"{s.address}/{TOY}", "random", batched_inference=batched,
                              env_kwargs={"fault": "hang", "at_seed": 12},
                              out=tmp_path / how, **kw)
                for how, batched in (("vector", True), ("one-env", False))}
        assert sessions(s.address) == 0
    finally:
        s.stop()
    local = evaluate(TOY, "random", env_kwargs={"fault": "hang", "at_seed": 99},
                     out=tmp_path / "local", **kw)  # no episode hangs here
    sentence = (f"TimeoutError: the env served at {s.address} hung: it took more than 1 s "
                "to answer step (the server's --request-timeout)")
    for how, run in runs.items():
        (failed,) = run.results.failed
        assert (failed["index"], failed["seed"], failed["error"]) == (2, 12, sentence), how
        rows = run.results.to_json()["episodes_rows"]
        assert [r["index"] for r in rows] == [0, 1, 3, 4, 5, 6, 7], how
        for r in rows:
            name = Path(r["tape"]).name
            mine, theirs = (Tape.load(p / "tapes" / name) for p in (run.path, local.path))
            assert np.array_equal(mine.actions, theirs.actions), (how, name)
            assert np.array_equal(mine.rewards, theirs.rewards), (how, name)


def test_a_killed_server_stops_the_batched_run_and_resume_finishes(tmp_path):
    """Long episodes so the kill lands mid-run: finished episodes are kept, --resume on a
    new server plays the rest, and the tapes equal a local per-row run's (random actions)."""
    steps, episodes = 400, 16
    out = tmp_path / "run"
    args = ["--max-episode-steps", str(steps), "--episodes", str(episodes), "--seed", "5",
            "-q", "--no-report", "--batched-inference", "--out", str(out)]
    kill_mid_run_then_resume(
        lambda: Server("--num-envs", "4", what=(ENV_ID, "--max-episode-steps", str(steps))),
        ENV_ID, args, out, at_least=4, episodes=episodes)
    local = evaluate(ENV_ID, "random", episodes=episodes, seed=5, max_episode_steps=steps,
                     report=False, out=tmp_path / "local")
    for path in sorted((local.path / "tapes").glob("*.npz")):
        for name in ("actions", "rewards", "physics", "obs_digest"):
            assert np.load(path)[name].tobytes() == \
                np.load(out / "tapes" / path.name)[name].tobytes(), (path.name, name)


def test_parity_works_on_a_sub_env_of_a_vector_server(server, tmp_path):
    out = tmp_path / "parity.json"
    result = run_cli("parity", ENV_ID, "--served", server.address, "--max-episode-steps",
                     str(STEPS), "--episodes", "2", "--no-frames", "--out", str(out),
                     env=FAST)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["agree"] and [r["length"] for r in report["rows"]] == [STEPS, STEPS]
    assert report["open_sessions"]["before"] == report["open_sessions"]["after"] == 0


def test_bad_vector_requests_get_one_sentence_and_the_session_serves_on(server):
    conn = Connection(server.address, timeout=10)
    try:
        desc = conn.call("describe")["descriptor"]
        assert conn.call("describe")["num_envs"] == 4
        too_many = conn.call("open", expect=desc, num_envs=5)
        assert too_many["status"] == P.ERROR and "from 1 to 4" in too_many["error"]
        opened = conn.call("open", expect=desc, num_envs=3)
        sid = opened["sid"]
        assert opened["num_envs"] == 3
        bad = conn.call("step", sid=sid, gen=0, actions=np.zeros((3, 6)))
        assert bad["status"] == P.OK and all("reset first" in e for e in bad["errors"])
        for fields, words in (({"seeds": [1, 2]}, "a list of 3 seeds"),
                              ({"seeds": [1, 2, -1]}, "reset seed"),
                              ({"seeds": [1, 2, 3], "mask": [1, 0, 1]}, "3 booleans")):
            reply = conn.call("reset", sid=sid, gen=0, **fields)
            assert reply["status"] == P.ERROR and words in reply["error"], reply
        gen = conn.call("reset", sid=sid, gen=0, seeds=[1, 2, 3])["gen"]
        for actions, words in ((np.zeros((2, 6)), "shape (3, 6)"),
                               (np.zeros((3, 6), np.int64) > 0, "dtype bool")):
            reply = conn.call("step", sid=sid, gen=gen, actions=actions)
            assert reply["status"] == P.ERROR and words in reply["error"], reply
        for op in ("state", "render"):
            reply = conn.call(op, sid=sid, gen=gen)
            assert reply["status"] == P.ERROR and "one-env session" in reply["error"]
        ok = conn.call("step", sid=sid, gen=gen, actions=np.zeros((3, 6)))
        assert ok["status"] == P.OK and ok["obs"].shape == (3, 17)
        assert conn.call("close", sid=sid, gen=gen)["status"] == P.OK
    finally:
        conn.close()
