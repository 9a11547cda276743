"""Hypothesis strategies for what a client may send the env server: raw bytes, msgpack of
any shape, and well-formed requests with wrong or odd fields (shared by
tests/server/test_server_fuzz.py and scripts/fuzz_server.py)."""

from __future__ import annotations

import struct

import msgpack
from hypothesis import strategies as st

from rolltape.server import protocol as P

DTYPES = st.sampled_from(["<f8", "<f4", "<f2", "|b1", "<i8", "|u1", "|O", "<U3", "|S2",
                          "<M8", "f8,f8", "V8", "<c16", "bogus", ""])
SHAPES = st.lists(st.one_of(st.integers(0, 8), st.integers(-3, 2**40), st.text(max_size=2)),
                  max_size=10)


def _array_ext(dtype: str, shape: list, data: bytes) -> msgpack.ExtType:
    try:
        payload = P.array_ext_payload(dtype, shape, data)
    except (struct.error, ValueError, UnicodeEncodeError):  # sizes no header can hold:
        payload = msgpack.packb([dtype, shape, data])  # send them another way, as garbage
    return msgpack.ExtType(P.ARRAY_EXT, payload)


arrays = st.one_of(
    st.builds(_array_ext, DTYPES, SHAPES, st.binary(max_size=64)),
    st.builds(lambda n: _array_ext("<f8", [6], b"\0" * n), st.integers(0, 64)),  # actions
    st.builds(lambda b: msgpack.ExtType(P.ARRAY_EXT, b), st.binary(max_size=32)),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=16)),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=True), st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(st.one_of(scalars, arrays),
                      lambda inner: st.one_of(st.lists(inner, max_size=4),
                                              st.dictionaries(st.text(max_size=8), inner,
                                                              max_size=4)),
                      max_leaves=12)
requests = st.fixed_dictionaries(
    {"op": st.one_of(st.sampled_from(P.OPS), st.text(max_size=8), st.integers(-5, 5))},
    optional={"sid": st.one_of(st.none(), st.text(max_size=20), st.integers(-5, 5)),
              "gen": st.one_of(st.integers(-2, 3), st.text(max_size=2)),
              "rid": st.one_of(st.integers(-2, 2**64 - 1), st.floats()),
              "token": st.one_of(st.none(), st.text(max_size=20)),
              "seed": st.one_of(st.none(), st.integers(-2, 2**64 - 1), st.text(max_size=3)),
              "options": values, "action": values, "expect": values,
              "width": st.one_of(st.integers(-1, 5000), st.floats()),
              "height": st.one_of(st.integers(-1, 5000), st.floats()),
              "camera": st.one_of(st.none(), st.text(max_size=10), st.integers(-5, 5)),
              "num_envs": st.one_of(st.none(), st.integers(-2, 2000), st.text(max_size=2)),
              "seeds": st.one_of(values, st.lists(st.one_of(st.none(), st.integers(-2, 2**64 - 1)),
                                                  max_size=5)),
              "mask": st.one_of(values, st.lists(st.booleans(), max_size=5)),
              "actions": values})

# The fields of a vector session's reset and step (serve --num-envs): seeds and masks of any
# length, action arrays of the right row shape for 0-4 sub-envs or anything else.
vector_fields = st.fixed_dictionaries({}, optional={
    "seeds": st.one_of(values, st.lists(st.one_of(st.none(), st.integers(-2, 2**64 - 1),
                                                  st.floats()), min_size=2, max_size=4)),
    "mask": st.one_of(values, st.lists(st.booleans(), min_size=2, max_size=4),
                      st.builds(lambda b: _array_ext("|b1", [len(b)], bytes(b)),
                                st.lists(st.integers(0, 1), max_size=4))),
    "actions": st.one_of(values, st.builds(lambda n, v: _array_ext("<f8", [n, 6], struct.pack(
        f"<{6 * n}d", *([v] * 6 * n))), st.integers(0, 4), st.floats(-2, 2))),
    "options": values})


def _pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _cut(data: bytes, at: int) -> bytes:
    return data[:at % (len(data) + 1)]


messages = st.one_of(
    st.binary(max_size=200),                                     # garbage
    st.builds(_pack, values),                                    # msgpack, any shape
    st.builds(_pack, requests),                                  # requests, fields wrong
    st.builds(_cut, st.builds(_pack, requests), st.integers()),  # truncated
    st.just(b"\x80\x04\x95" + b"\0" * 8 + b"."),                 # a pickle header
)
