"""The env server's refusals (rolltape.server.server): a STALE or INCOMPATIBLE reply is
raised where it is decided (server.Reply) and answered as it is, with the request's id;
here a real server answers real protocol bytes (its socket is bound but not needed)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from rolltape.server import protocol as P
from rolltape.server.server import EnvServer, ServeConfig


@pytest.fixture
def server() -> Iterator[EnvServer]:
    served = EnvServer(ServeConfig("CartPole-v1", bind="127.0.0.1:0", max_sessions=1),
                       log=lambda line: None)
    try:
        yield served
    finally:
        served.close()


def ask(server: EnvServer, **message: Any) -> dict[str, Any]:
    return server.handle(P.encode(message))


def test_an_env_the_server_does_not_serve_is_incompatible_and_named(server: EnvServer) -> None:
    for op, extra in (("describe", {}), ("open", {"expect": server.descriptor, "rid": 1, "gen": 0})):
        reply = ask(server, op=op, env="Nope-v0", **extra)
        assert reply["status"] == P.INCOMPATIBLE and reply["unknown"] is True
        assert reply["envs"] == ["CartPole-v1"] and "no env named 'Nope-v0'" in reply["error"]
    assert server.sessions == {}  # nothing was opened


def test_a_stale_request_is_refused_with_its_id_and_changes_nothing(server: EnvServer) -> None:
    sid = ask(server, op="open", expect=server.descriptor, rid=1, gen=0)["sid"]
    assert ask(server, op="reset", sid=sid, rid=2, gen=0, seed=0)["status"] == P.OK
    for message, said in (({"op": "step", "gen": 0, "rid": 3, "action": 0}, "generation 0"),
                          ({"op": "reset", "gen": 1, "rid": 2, "seed": 0}, "request id 2"),
                          ({"op": "state", "gen": 1, "sid": "gone", "rid": 9}, "not open")):
        reply = ask(server, **{"sid": sid, **message})
        assert reply["status"] == P.STALE and said in reply["error"]
        assert reply["rid"] == message["rid"]
    assert server.sessions[sid].last_rid == 2 and server.sessions[sid].gen == 1
    assert ask(server, op="step", sid=sid, gen=1, rid=4, action=0)["status"] == P.OK
