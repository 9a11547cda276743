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


def test_the_encoder_keeps_nothing_from_a_failed_message_and_threads_do_not_mix():
    """encode reuses one msgpack Packer per thread: a message that fails to encode must not
    leave bytes for the next one, and threads encoding at once each get their own bytes."""
    import threading

    import numpy as np

    with pytest.raises(TypeError):
        P.encode({"x": np.arange(3.0), "bad": object()})
    assert P.decode(P.encode({"ok": 1})) == {"ok": 1}

    wrong: list[int] = []

    def encode_many(k: int) -> None:
        for i in range(300):
            obs = np.full(17, float(k * 1000 + i))
            got = P.decode(P.encode({"k": k, "i": i, "obs": obs, "physics": obs[:5]}))
            if (got["k"], got["i"]) != (k, i) or not np.array_equal(got["obs"], obs):
                wrong.append(k)

    threads = [threading.Thread(target=encode_many, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_array_layouts_are_checked_against_each_caller_cap():
    """A header is parsed once and cached, but the payload cap is checked on every decode."""
    import numpy as np

    data = P.encode({"a": np.zeros((0, 5000))})
    assert P.decode(data)["a"].shape == (0, 5000)
    with pytest.raises(P.ProtocolError, match="payload cap"):
        P.decode(data, max_payload=4096)
    assert P.decode(data)["a"].shape == (0, 5000)
    decoded = P.decode(P.encode({"a": np.arange(6, dtype=np.int16).reshape(2, 3)}))["a"]
    assert decoded.shape == (2, 3) and decoded.dtype == np.int16 and decoded.flags.writeable
