"""The env server's wire format (rolltape.server.protocol): msgpack maps only, arrays as
dtype + shape + bytes checked against the payload cap, requests checked field by field,
descriptors that compare exactly and name their first difference."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rolltape.server import protocol as P


def test_arrays_of_every_plain_dtype_and_shape_round_trip_bit_for_bit():
    for dtype in ("?", "i1", "<i8", "<u2", "<f2", "<f4", ">f8"):
        for shape in ((), (0,), (3,), (2, 0, 4), (2, 3, 1)):
            a = (np.arange(int(np.prod(shape))) % 2).astype(dtype).reshape(shape)
            got = P.decode(P.encode({"a": a}))["a"]
            assert got.dtype == a.dtype and got.shape == a.shape, (dtype, shape)
            assert got.tobytes() == a.tobytes()


def test_numpy_scalars_and_tuples_arrive_as_plain_values():
    got = P.decode(P.encode({"b": np.bool_(True), "i": np.int64(-3), "f": np.float32(0.5),
                             "t": (1, (2, 3))}))
    assert got == {"b": True, "i": -3, "f": 0.5, "t": [1, [2, 3]]}
    assert type(got["i"]) is int and type(got["f"]) is float


def test_a_non_contiguous_array_travels_in_c_order():
    a = np.arange(12, dtype=np.int32).reshape(3, 4).T
    assert np.array_equal(P.decode(P.encode({"a": a}))["a"], a)


def test_a_request_carries_the_common_fields_first_and_passes_its_check():
    message = P.request("step", sid="s1", gen=2, rid=7, token="t", action=[0.0])
    assert list(message)[:5] == ["op", "sid", "gen", "rid", "token"]
    assert P.check_request(P.decode(P.encode(message))) == message


@pytest.mark.parametrize(("message", "words"), [
    ({}, "needs an 'op' string"),
    ({"op": "fly"}, "unknown op 'fly'; the server knows describe, open"),
    ({"op": "step", "gen": 0}, "a 'step' request needs 'rid', an integer"),
    ({"op": "step", "gen": 0, "rid": 1.0}, "'rid' must be an integer"),
    ({"op": "reset", "gen": 0, "rid": 1, "sid": 3}, "'sid' must be a string or nil"),
    ({"op": "describe", "token": b"x"}, "'token' must be a string or nil"),
])
def test_a_request_with_a_bad_common_field_is_refused_naming_it(message, words):
    with pytest.raises(P.ProtocolError, match=words):
        P.check_request(message)


def test_describe_and_stats_need_no_request_ids():
    assert P.check_request({"op": "stats"}) == {"op": "stats"}


def test_the_token_is_peeked_without_decoding_the_rest():
    data = P.encode(P.request("step", token="secret", action=np.zeros(10**5)))
    assert P.peek_token(data) == "secret"
    assert P.peek_token(P.encode(P.request("describe"))) is None
    assert P.peek_token(b"\x93\x01\x02\x03") is None  # a list, not a map
    assert P.peek_token(b"garbage") is None


def test_a_map_nested_deeper_than_the_limit_is_refused():
    deep: dict = {}
    inner = deep
    for _ in range(P.MAX_DEPTH + 2):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(P.ProtocolError, match="nests deeper"):
        P.decode(P.encode({"a": deep}))
    assert P.decode(P.encode({"a": [[[1]]]})) == {"a": [[[1]]]}


@pytest.mark.parametrize(("payload", "words"), [
    (P.array_ext_payload("|O", [1], b"\0" * 8), "not a plain numeric dtype"),
    (P.array_ext_payload("<U4", [1], b"\0" * 16), "not a plain numeric dtype"),
    (P.array_ext_payload("zz", [1], b"\0"), "not understood"),
    (P.array_ext_payload("<f8", [2], b"\0" * 8), "needs 16 bytes, the message has 8"),
    (b"\x03<f8", "dtype, shape and bytes"),
])
def test_an_array_the_encoder_would_never_send_is_refused(payload: bytes, words: str):
    import msgpack

    data = msgpack.packb({"a": msgpack.ExtType(P.ARRAY_EXT, payload)})
    with pytest.raises(P.ProtocolError, match=words):
        P.decode(data)


def test_an_unknown_extension_is_refused():
    import msgpack

    with pytest.raises(P.ProtocolError, match="unknown msgpack extension 5"):
        P.decode(msgpack.packb({"a": msgpack.ExtType(5, b"")}))


def test_a_descriptor_hash_covers_every_field_and_only_those():
    env = gym.make("CartPole-v1")
    desc = P.descriptor({"id": "CartPole-v1", "versions": {"gymnasium": "1.0"}}, env)
    env.close()
    assert desc["max_episode_steps"] == 500  # the env's own limit when the spec has none
    assert desc["hash"] == P.descriptor_hash(desc)
    assert P.descriptor_hash({**desc, "extra": 1}) == desc["hash"]
    for field in P.DESCRIPTOR_FIELDS:
        assert P.descriptor_hash({**desc, field: "other"}) != desc["hash"], field


def test_box_bounds_are_part_of_a_space_s_description():
    a = P.describe_space(gym.spaces.Box(-1.0, 1.0, (3,)))
    b = P.describe_space(gym.spaces.Box(-2.0, 1.0, (3,)))
    assert {k: v for k, v in a.items() if k != "bounds_sha256"} == \
        {k: v for k, v in b.items() if k != "bounds_sha256"}
    assert a["bounds_sha256"] != b["bounds_sha256"]
    d = P.describe_space(gym.spaces.Dict({"n": gym.spaces.Discrete(4)}))
    assert d["spaces"]["n"]["n"] == 4


def test_the_first_difference_is_named_in_one_sentence():
    mine = {"id": "X-v0", "kwargs": {"a": 1}, "max_episode_steps": 10}
    theirs = {"id": "X-v0", "kwargs": {"a": 2}, "max_episode_steps": 20}
    diff = P.first_difference(mine, theirs)
    assert diff == {"field": "kwargs", "local": {"a": 1}, "served": {"a": 2}}
    assert P.difference_sentence(diff) == ("the served env differs in kwargs: this side "
                                           'expects {"a": 1}, the server has {"a": 2}')
    assert P.first_difference(mine, {**mine, "gymnasium": "9"}) is None  # not asked about


def test_a_long_value_is_cut_in_the_sentence():
    diff = {"field": "kwargs", "local": {"k": "x" * 500}, "served": {}}
    sentence = P.difference_sentence(diff)
    assert "..." in sentence and len(sentence) < 260


def test_a_plain_install_s_sentence_names_the_extra():
    assert "pip install 'rolltape[server]'" in str(P.missing_extra())


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
