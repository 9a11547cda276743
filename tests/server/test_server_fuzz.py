"""Fuzz the env server's message handling in-process (decode, checks, every op on a real
MuJoCo env): every input gets a reply with a known status, the reply encodes, nothing
raises, and the server still answers afterwards. scripts/fuzz_server.py runs it longer."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("zmq")

from hypothesis import strategies as st  # noqa: E402

from rolltape.server import protocol as P  # noqa: E402
from rolltape.server.server import EnvServer, ServeConfig  # noqa: E402
from server_strategies import _pack, messages, vector_fields  # noqa: E402


@pytest.fixture(scope="module")
def env_server():
    server = EnvServer(ServeConfig("HalfCheetah-v5", max_episode_steps=20, bind="127.0.0.1:0",
                                   max_sessions=4, max_payload=4096, num_envs=4),
                       log=lambda line: None)
    yield server
    server.close()


def test_every_message_gets_a_reply_and_nothing_crashes(env_server):
    tried = 0

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(messages)
    def one(data: bytes) -> None:
        nonlocal tried
        tried += 1
        reply = env_server.handle(data)
        assert reply["status"] in P.STATUSES
        P.encode(reply)

    one()
    assert tried >= 400
    assert P.decode(P.encode({"op": "describe"}))["op"] == "describe"
    assert env_server.handle(P.encode(P.request("describe")))["status"] == P.OK


def test_vector_session_requests_get_a_reply_and_the_session_serves_on(env_server):
    """A vector session (3 of the server's 4 sub-envs) fed resets and steps whose seeds,
    masks and action arrays are of any shape: each gets a reply with a known status that
    encodes, and afterwards a well-formed reset and step still work."""
    opened = env_server.handle(P.encode(P.request("open", rid=1, expect=env_server.descriptor,
                                                  num_envs=3)))
    assert opened["status"] == P.OK and opened["num_envs"] == 3
    sid, rid = opened["sid"], [1]
    tried = 0

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["reset", "step"]), vector_fields, st.booleans())
    def one(op: str, fields: dict, current_gen: bool) -> None:
        nonlocal tried
        tried += 1
        rid[0] += 1
        session = env_server.sessions.get(sid)
        gen = session.gen if session is not None and current_gen else -1
        reply = env_server.handle(_pack({"op": op, "sid": sid, "gen": gen, "rid": rid[0],
                                         "token": None, **fields}))
        assert reply["status"] in P.STATUSES
        P.encode(reply)

    one()
    assert tried >= 300
    import numpy as np

    reset = env_server.handle(P.encode(P.request("reset", sid=sid, rid=rid[0] + 1,
                                                 seeds=[1, 2, 3])))
    assert reset["status"] == P.OK and reset["obs"].shape == (3, 17)
    step = env_server.handle(P.encode(P.request("step", sid=sid, gen=reset["gen"],
                                                rid=rid[0] + 2, actions=np.zeros((3, 6)))))
    assert step["status"] == P.OK and step["errors"] is None
    assert step["physics"].shape[0] == 3 and step["terminated"].shape == (3,)
