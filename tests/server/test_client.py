"""The client side of `rolltape serve` (rolltape.server.client) against a real server
process: a served env steps as the local one does, each refusal status is its one sentence,
a server of another env, version or protocol is refused before any step, and a silent
address is ServerGone within the timeout."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from conftest import Server
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import EnvRaised, UsageError
from rolltape.pass1.rollout import last_line
from rolltape.server import protocol as P
from rolltape.server.client import (
    Connection,
    RemoteEnv,
    ServerGone,
    check_server,
    describe,
    expect_ok,
    local_spec,
    row_error,
)

ENV_ID = "HalfCheetah-v5"
STEPS = 30  # the conftest Server's --max-episode-steps


@pytest.fixture(scope="module")
def server():
    s = Server("--max-sessions", "2")
    yield s
    s.stop()


def _free_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_served_env_steps_bit_for_bit_as_the_local_one(server):
    spec = env_spec(f"{server.address}/{ENV_ID}", max_episode_steps=STEPS)
    local = make_env(local_spec(spec))
    remote = RemoteEnv.connect(spec)
    try:
        assert remote.observation_space == local.observation_space
        obs_l, _ = local.reset(seed=4)
        obs_r, _ = remote.reset(seed=4)
        assert obs_r.dtype == obs_l.dtype and obs_r.tobytes() == obs_l.tobytes()
        rng = np.random.default_rng(0)
        for _ in range(5):
            action = rng.uniform(-1, 1, 6).astype(np.float32)
            got, want = remote.step(action), local.step(action)
            assert got[0].tobytes() == want[0].tobytes()
            assert got[1:4] == want[1:4]
        assert remote.physics_dims == (9, 9)
        assert len(remote.state()) == len(remote.last_physics)
    finally:
        remote.close()
        local.close()


def test_closing_a_served_env_frees_its_session(server):
    spec = env_spec(f"{server.address}/{ENV_ID}", max_episode_steps=STEPS)
    conn = Connection(server.address, timeout=10)
    try:
        before = conn.call("stats")["sessions"]
        remote = RemoteEnv.connect(spec)
        assert conn.call("stats")["sessions"] == before + 1
        remote.close()
        remote.close()  # twice is fine
        assert conn.call("stats")["sessions"] == before
    finally:
        conn.close()


def test_a_spec_of_another_time_limit_is_refused_naming_the_field(server):
    spec = env_spec(f"{server.address}/{ENV_ID}", max_episode_steps=STEPS + 1)
    with pytest.raises(UsageError) as info:
        check_server(spec)
    assert str(info.value) == (f"The env server at {server.address} serves a different env: "
                               "the served env differs in max_episode_steps: this side "
                               f"expects {STEPS + 1}, the server has {STEPS}; start it with "
                               "the same env, kwargs and versions.")


def test_no_server_at_an_address_is_one_sentence_within_the_timeout(monkeypatch):
    monkeypatch.setenv("ROLLTAPE_SERVER_TIMEOUT", "0.5")
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(UsageError) as info:
        describe(env_spec(f"{address}/{ENV_ID}"))
    assert str(info.value) == (f"No env server answers at {address} (waited 0.5 s); start one "
                               f"with `rolltape serve {ENV_ID} --bind HOST:PORT` or fix the "
                               "address.")


def test_a_request_without_a_reply_is_server_gone_never_a_resend():
    conn = Connection(f"tcp://127.0.0.1:{_free_port()}", timeout=0.3)
    try:
        with pytest.raises(ServerGone) as info:
            conn.call("describe")
        assert info.value.timed_out and conn.rid == 1
        assert "did not answer describe within 0.3 s" in str(info.value)
        assert "ROLLTAPE_SERVER_TIMEOUT" in str(info.value)
    finally:
        conn.close()


@pytest.mark.parametrize(("status", "error", "kind", "words"), [
    (P.INCOMPATIBLE, "kwargs differ", UsageError,
     "serves a different env: kwargs differ; start it with the same env"),
    (P.BUSY, "3 sessions", UsageError, "is busy (3 sessions); use fewer --workers"),
    (P.UNAUTHORIZED, "bad token", UsageError, "refused the request: bad token."),
    (P.STALE, "old gen", ServerGone, "answered step STALE (old gen); the episode cannot"),
    (P.ERROR, "boom", RuntimeError, "answered step with an error: boom"),
])
def test_each_refusal_status_is_its_own_sentence(status, error, kind, words):
    with pytest.raises(kind) as info:
        expect_ok({"status": status, "error": error}, "tcp://h:1", "step")
    assert words in str(info.value) and "tcp://h:1" in str(info.value)


def test_what_the_env_raised_comes_back_as_its_own_type_and_message():
    """The server's sentence for an env's exception becomes that exception's type name and
    message (EnvRaised), so a failed episode reads as a local one; other errors do not."""
    with pytest.raises(EnvRaised) as info:
        expect_ok({"status": P.ERROR, "error": P.env_raised(KeyError("no 'x': here"))},
                  "tcp://h:1", "step")
    assert (info.value.kind, str(info.value)) == ("KeyError", '"no \'x\': here"')
    assert last_line(info.value) == last_line(KeyError("no 'x': here"))
    for sentence in ("the env raised nothing", "the env raised not a name: x", "boom"):
        assert P.raised_from(sentence) is None
        assert type(row_error(sentence, "tcp://h:1")) is RuntimeError


def test_an_ok_reply_is_returned_and_a_tape_keeps_the_local_spec():
    reply = {"status": P.OK, "obs": 1}
    assert expect_ok(reply, "tcp://h:1", "step") is reply
    spec = {"id": ENV_ID, "served": {"address": "tcp://h:1"}}
    assert local_spec(spec) == {"id": ENV_ID}


def test_a_server_of_another_protocol_version_is_refused_before_any_work(server,
                                                                        monkeypatch):
    """Arrays changed their wire form between versions: a client must not step a server
    that speaks another one (it would misread every observation)."""
    spec = env_spec(f"{server.address}/{ENV_ID}", max_episode_steps=STEPS)
    assert check_server(spec)["protocol"] == P.PROTOCOL_VERSION
    monkeypatch.setattr(P, "PROTOCOL_VERSION", P.PROTOCOL_VERSION + 1)
    with pytest.raises(UsageError, match="speaks protocol .* same rolltape version"):
        check_server(spec)
