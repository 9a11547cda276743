"""The served-policy wire: openpi's msgpack_numpy encoding both ways, the caps and refusals
of untrusted messages, and the ws:// source grammar."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

from rolltape.errors import UsageError
from rolltape.policy_server import wire
from rolltape.server.protocol import ProtocolError


def test_wire_speaks_openpi_msgpack_numpy_and_refuses_what_it_cannot_trust():
    # What openpi's client packs (shape a tuple, dtype its str), decoded as arrays again.
    def openpi_pack(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str,
                    b"shape": obj.shape}
        return obj

    obs = np.arange(6, dtype=np.float64).reshape(2, 3)
    got = wire.decode(msgpack.packb({"observation": obs, "prompt": "go"}, default=openpi_pack))
    assert got["prompt"] == "go" and got["observation"].dtype == obs.dtype
    assert got["observation"].tobytes() == obs.tobytes() and got["observation"].flags.writeable
    # and what rolltape packs, openpi's decoder reads
    ours = msgpack.unpackb(wire.encode({"actions": obs}))["actions"]
    assert ours[b"__ndarray__"] is True and ours[b"dtype"] == "<f8" and ours[b"shape"] == [2, 3]

    def arr(dtype: str, shape: list[int], data: bytes) -> bytes:
        return msgpack.packb({"x": {b"__ndarray__": True, b"data": data, b"dtype": dtype,
                                    b"shape": shape}})

    import pickle

    bad = {"pickle": pickle.dumps({"x": 1}), "object dtype": arr("|O", [1], b"\0" * 8),
           "bytes short": arr("<f4", [4], b"\0" * 8), "huge shape": arr("<f4", [2**40], b""),
           "deep": msgpack.packb(eval("[" * 40 + "]" * 40)), "text": "hello",
           "over cap": b"\x91" + b"\xc0" * 2048}
    for what, data in bad.items():
        with pytest.raises(ProtocolError) as exc:
            wire.decode(data, max_payload=1024)
        assert "\n" not in str(exc.value), what


def test_sources_carry_execute_steps_and_timeout_and_bad_ones_are_one_sentence():
    assert wire.parse_source("ws://[::1]:8000?timeout=2.5") == wire.PolicyAddress(
        "ws://[::1]:8000", None, 2.5)
    assert wire.with_options("ws://h:1?execute_steps=2", None, 5.0) == \
        "ws://h:1?execute_steps=2&timeout=5.0"
    for bad, said in (("ws://h", "ws://HOST:PORT"), ("ws://h:0", "port the policy server"),
                      ("ws://h:1?execute_steps=0", "at least 1"),
                      ("ws://h:1?speed=9", "unknown option 'speed'")):
        with pytest.raises(UsageError, match=said):
            wire.parse_source(bad)
    with pytest.raises(UsageError, match="--execute-steps applies to a served policy"):
        wire.with_options("random", 3, None)
