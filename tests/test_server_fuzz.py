"""Fuzz the env server's message handling in-process (decode, checks, every op on a real
MuJoCo env): every input gets a reply with a known status, the reply encodes, nothing
raises, and the server still answers afterwards. scripts/fuzz_server.py runs it longer."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("zmq")

from server_strategies import messages  # noqa: E402

from rolltape.server import protocol as P  # noqa: E402
from rolltape.server.server import EnvServer, ServeConfig  # noqa: E402


@pytest.fixture(scope="module")
def env_server():
    server = EnvServer(ServeConfig("HalfCheetah-v5", max_episode_steps=20, bind="127.0.0.1:0",
                                   max_sessions=4, max_payload=4096), log=lambda line: None)
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


def test_the_decoder_refuses_anything_but_msgpack():
    import json
    import pickle

    for data in (pickle.dumps({"op": "describe"}), json.dumps({"op": "describe"}).encode(),
                 b"", b"\xc1", P.encode({"op": "describe"})[:-1]):
        with pytest.raises(P.ProtocolError):
            P.decode(data)
    with pytest.raises(P.ProtocolError, match="cap"):
        P.decode(b"\x80" * 100, max_payload=10)
    import numpy as np

    for bad in (np.array(["a"]), np.array([object()])):
        with pytest.raises(TypeError):
            P.encode({"x": bad})
