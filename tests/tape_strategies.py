"""Damaged tapes for fuzzing ``Tape.load``, shared by tests/test_tape_fuzz.py (a bounded
run) and scripts/fuzz_tapes.py (a long one).

Each strategy draws the bytes of an ``.npz`` file made from a valid tape by one kind of
damage: truncation, flipped bytes, a lying zip directory, an edited JSON header, edited
arrays, or a hand-made ``.npy`` member. :func:`load_outcome` loads such bytes from a real
file; whatever the damage, the loader must return a tape or raise rolltape's UsageError.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rolltape import Tape, UsageError

ARRAYS = ("actions", "rewards", "terminated", "truncated", "obs_digest", "obs_key_digest",
          "qpos", "qvel", "physics")
HEADER_FIELDS = ("schema_version", "env", "seed", "options", "success_at_end", "metrics", "policy",
                 "wall_s", "meta", "length", "return", "obs_keys", "obs_reset")
ENV_FIELDS = ("id", "kwargs", "max_episode_steps", "versions")


def _valid_tapes() -> list[Tape]:
    """A MuJoCo-like tape with every array, a discrete one without state, an empty one."""
    rng = np.random.default_rng(0)
    n = 5
    mujoco_like = Tape(
        env={"id": "HalfCheetah-v5", "kwargs": {"ctrl_cost_weight": 0.1},
             "max_episode_steps": 1000, "versions": {"gymnasium": "1.2.0", "mujoco": "3.3.0"}},
        seed=3, actions=rng.standard_normal((n, 6)).astype(np.float32),
        rewards=rng.standard_normal(n), terminated=np.zeros(n, bool),
        truncated=np.r_[np.zeros(n - 1, bool), True],
        obs_digest=rng.integers(0, 2**63, n + 1, dtype=np.uint64),
        qpos=rng.standard_normal((n + 1, 9)), qvel=rng.standard_normal((n + 1, 9)),
        physics=rng.standard_normal((n + 1, 20)), policy={"kind": "sb3", "source": "ppo.zip"},
        wall_s=0.5, metrics={"dist": 0.25}, success_at_end=True, meta={"role": "policy", "index": 0},
    )
    discrete = Tape(
        env={"id": "CartPole-v1", "kwargs": {}, "max_episode_steps": None, "versions": {}},
        seed=None, options={"low": -0.1}, actions=np.array([0, 1, 1]),
        rewards=np.ones(3), terminated=np.array([False, False, True]),
        truncated=np.zeros(3, bool), policy={"kind": "random"},
        # a dict observation's per-key digests and its reset forms (rolltape diff reads them)
        obs_digest=rng.integers(0, 2**63, 4, dtype=np.uint64), obs_keys=("pixels", "state"),
        obs_key_digest=rng.integers(0, 2**63, (4, 2), dtype=np.uint64),
        obs_reset={"pixels": {"value": "00ff", "flip_vertical": "0a0b", "seen": "0a0b"},
                   "state": {"value": "1234", "negated": "4321"}},
    )
    empty = Tape(env={"id": "CartPole-v1"}, seed=0, actions=np.zeros((0, 2)),
                 rewards=np.zeros(0), terminated=np.zeros(0, bool), truncated=np.zeros(0, bool),
                 obs_digest=np.zeros(1, np.uint64))
    return [mujoco_like, discrete, empty]


def _saved(tape: Tape) -> tuple[bytes, dict[str, np.ndarray], dict[str, Any]]:
    """(file bytes, arrays, header) of a tape written by Tape.save to a real file."""
    with tempfile.TemporaryDirectory() as folder:
        path = tape.save(Path(folder) / "t.npz")
        data = path.read_bytes()
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
    header = json.loads(arrays.pop("header").tobytes())
    return data, arrays, header


BASES = [_saved(tape) for tape in _valid_tapes()]


def npz_bytes(arrays: dict[str, np.ndarray], compressed: bool = True) -> bytes:
    """An .npz file in memory, written by numpy (object arrays are pickled, as numpy does)."""
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def _header_array(header: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)  # NaN stays NaN


bases = st.sampled_from(BASES)

# Any JSON value, with the awkward ones often: NaN, infinities, huge and negative numbers.
json_leaves = (st.none() | st.booleans() | st.integers() | st.floats()
               | st.sampled_from([float("nan"), float("inf"), -1, 2**64, 10**400, 1e308, ""])
               | st.text(max_size=12))
json_values = st.recursive(json_leaves, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


@st.composite
def truncated(draw: st.DrawFn) -> bytes:
    data = draw(bases)[0]
    return data[:draw(st.integers(0, len(data) - 1))]


@st.composite
def flipped(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(bases)[0])
    for _ in range(draw(st.integers(1, 8))):
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(data)


@st.composite
def lying_sizes(draw: st.DrawFn) -> bytes:
    """A zip directory whose sizes, offsets or counts say something else than the data."""
    data = bytearray(draw(bases)[0])
    # (signature, offsets of 4-byte fields): local header sizes and CRC; central directory
    # CRC, sizes and local header offset; end record's entry count, size and offset.
    fields = {b"PK\x03\x04": (14, 18, 22), b"PK\x01\x02": (16, 20, 24, 42),
              b"PK\x05\x06": (8, 12, 16)}
    signature = draw(st.sampled_from(sorted(fields)))
    starts = [i for i in range(len(data) - 4) if data[i:i + 4] == signature]
    start = draw(st.sampled_from(starts))
    offset = start + draw(st.sampled_from(fields[signature]))
    value = draw(st.sampled_from([0, 1, 2**31, 2**32 - 1]) | st.integers(0, 2**32 - 1))
    if offset + 4 <= len(data):
        data[offset:offset + 4] = struct.pack("<I", value)
    return bytes(data)


@st.composite
def header_edits(draw: st.DrawFn) -> bytes:
    """One field of the JSON header set to any JSON value or removed, or the whole header
    replaced: by another JSON value, raw bytes, deep nesting, or a header array of another
    dtype or shape."""
    _, arrays, header = draw(bases)
    arrays, header = dict(arrays), json.loads(json.dumps(header))
    kind = draw(st.sampled_from(["set", "delete", "env", "replace", "raw", "array"]))
    if kind == "set":
        header[draw(st.sampled_from(HEADER_FIELDS) | st.text(max_size=6))] = draw(json_values)
    elif kind == "delete":
        header.pop(draw(st.sampled_from(HEADER_FIELDS)), None)
    elif kind == "env":
        if not isinstance(header.get("env"), dict):
            header["env"] = {}
        key = draw(st.sampled_from(ENV_FIELDS))
        if draw(st.booleans()):
            header["env"][key] = draw(json_values)
        else:
            header["env"].pop(key, None)
    if kind == "replace":
        arrays["header"] = _header_array(draw(json_values))
    elif kind == "raw":
        depth = draw(st.integers(1, 100_000))
        text = draw(st.sampled_from([
            b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth,
            b'{"schema_version": 1, "seed": ' + b"9" * depth + b"}",
            b'{"schema_version": 1, "wall_s": NaN}', b'{"schema_version": 1, "wall_s": 1e999}',
            b"\xff\xfe{}", b"",
        ]) | st.binary(max_size=64))
        arrays["header"] = np.frombuffer(text, dtype=np.uint8)
    elif kind == "array":
        raw = _header_array(header)
        arrays["header"] = draw(st.sampled_from([
            raw.astype(np.int32), raw.reshape(1, -1), np.array(raw[0]), raw.astype(np.float64),
            np.array([json.dumps(header)]), np.array([header], dtype=object),
        ]))
    else:
        arrays["header"] = _header_array(header)
    return npz_bytes(arrays, compressed=draw(st.booleans()))


dtypes = st.sampled_from([np.float64, np.float32, np.int64, np.uint64, np.int8, np.bool_,
                          np.complex128, ">f8", "<U3", "S2", "V4", "M8[s]", "m8[s]",
                          [("a", "<f8"), ("b", "<i4")]])


@st.composite
def any_array(draw: st.DrawFn) -> np.ndarray:
    if draw(st.integers(0, 9)) == 0:  # object arrays: numpy pickles them
        return np.array(draw(st.lists(json_leaves, min_size=1, max_size=4)), dtype=object)
    dtype = np.dtype(draw(dtypes))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=7))
    size = int(np.prod(shape)) * dtype.itemsize  # any bytes: NaNs, huge values, garbage
    array = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype).reshape(shape)
    return np.asfortranarray(array) if draw(st.booleans()) else array


@st.composite
def array_edits(draw: st.DrawFn) -> bytes:
    """One array removed, replaced by any array (any dtype, 0-d to 3-d, object), cut to
    another length, or given NaN and huge values; or an unknown array added."""
    _, arrays, header = draw(bases)
    arrays = dict(arrays)
    name = draw(st.sampled_from(ARRAYS + ("unknown",)))
    kind = draw(st.sampled_from(["delete", "replace", "length", "values"]))
    old = arrays.get(name)
    if kind == "delete":
        arrays.pop(name, None)
    elif kind == "replace" or old is None:
        arrays[name] = draw(any_array())
    elif kind == "length":
        arrays[name] = np.resize(old, (draw(st.integers(0, 12)), *old.shape[1:]))
    elif old.size and old.dtype.kind == "f":
        changed = old.copy()
        changed.flat[draw(st.integers(0, old.size - 1))] = draw(
            st.sampled_from([np.nan, np.inf, -np.inf, 1e308]))
        arrays[name] = changed
    arrays["header"] = _header_array(header)
    return npz_bytes(arrays, compressed=draw(st.booleans()))


@st.composite
def npy_edits(draw: st.DrawFn) -> bytes:
    """A hand-made .npy member: any format version, a header that claims any shape (huge,
    negative), dtype or order, followed by too few, enough or too many bytes."""
    _, arrays, header = draw(bases)
    name = draw(st.sampled_from(ARRAYS + ("header",)))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 5, 6, -1, 2**31, 2**62, 10**30])
                                | st.integers(-3, 40), max_size=3)))
    descr = draw(st.sampled_from(["<f8", "<f4", "|u1", "<u8", "|b1", "|O", "<U5", "x", "",
                                  "[('a', '<f8')]", "('<f8', (2,))"]))
    fortran = draw(st.sampled_from(["False", "True", "0", "'no'"]))
    text = draw(st.sampled_from([
        f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {shape!r}, }}",
        f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape!r}, }}",
        "{'descr': '<f8'}", "[" * 200, "",
    ]) | st.text(max_size=40)).encode("utf-8", "replace")
    version = draw(st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x00\x07"]))
    length = struct.pack("<H" if version == b"\x01\x00" else "<I", len(text) + 1)
    body = b"\x93NUMPY" + version + length + text + b"\n"
    body += draw(st.binary(max_size=80))
    buffer = io.BytesIO()
    method = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for other, array in {**arrays, "header": _header_array(header)}.items():
            if other != name:
                with archive.open(f"{other}.npy", "w") as f:
                    np.lib.format.write_array(f, array)
        archive.writestr(f"{name}.npy", body)
    return buffer.getvalue()


damaged_tapes = st.one_of(truncated(), flipped(), lying_sizes(), header_edits(),
                          array_edits(), npy_edits())


def load_outcome(data: bytes, folder: Path) -> str | None:
    """Load ``data`` as a tape file in ``folder``: None when it loads, the UsageError's text
    when refused; anything else raised is a loader bug and propagates."""
    path = folder / "fuzzed.npz"
    path.write_bytes(data)
    try:
        Tape.load(path)
    except UsageError as exc:
        return str(exc)
    return None
