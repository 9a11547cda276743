"""The env server's wire format: one msgpack map per message, nothing else.

A request is ``{"op", "sid", "gen", "rid", "token", ...}``; a reply is ``{"status", "rid",
...}`` where status is one of :data:`STATUSES`. NumPy arrays travel as a msgpack extension
holding dtype, shape and raw bytes; only numeric and bool dtypes are accepted, and sizes
are checked against the payload cap before any array is built. Nothing on the wire is ever
unpickled or executed: :func:`decode` accepts msgpack or raises :class:`ProtocolError`.

May import: errors, envs (descriptors). Never: policies, pass 1, pass 2, executors.

Example:
    >>> import numpy as np
    >>> msg = decode(encode({"op": "step", "action": np.arange(3, dtype=np.float32)}))
    >>> msg["op"], msg["action"].dtype.str, msg["action"].tolist()
    ('step', '<f4', [0.0, 1.0, 2.0])
    >>> decode(encode({"a": np.array(3)}))["a"].shape
    ()
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import numpy as np

from rolltape.errors import UsageError

PROTOCOL_VERSION = 2  # 2: arrays as a struct-packed header, not a nested msgpack list
DEFAULT_MAX_PAYLOAD = 64 * 2**20  # bytes a message may have, before decoding
ARRAY_EXT = 1  # the msgpack extension code of an array
MAX_NDIM = 8
MAX_DEPTH = 32  # nesting of maps/lists, so a deep message cannot exhaust the stack
ARRAY_KINDS = "biuf"  # bool, signed, unsigned, float: never object, void, strings or dates

OK, ERROR, STALE, BUSY, INCOMPATIBLE, UNAUTHORIZED = (
    "OK", "ERROR", "STALE", "BUSY", "INCOMPATIBLE", "UNAUTHORIZED")
STATUSES = (OK, ERROR, STALE, BUSY, INCOMPATIBLE, UNAUTHORIZED)
OPS = ("describe", "open", "reset", "step", "state", "render", "close", "stats")
MUTATIONS = ("reset", "step", "close")  # each request id is used once: repeats are STALE

# What a descriptor holds; INCOMPATIBLE names the first of these that differs.
DESCRIPTOR_FIELDS = ("id", "kwargs", "max_episode_steps", "observation_space",
                     "action_space", "gymnasium", "mujoco")


class ProtocolError(ValueError):
    """A message that is not a well-formed request or reply (the server answers ERROR)."""


def missing_extra() -> UsageError:
    """The one sentence for a plain install without pyzmq/msgpack."""
    return UsageError("The env server needs pyzmq and msgpack, which a plain install lacks; "
                      "install them with `pip install 'rolltape[server]'`.")


_MSGPACK: Any = None


def _msgpack() -> Any:
    global _MSGPACK
    if _MSGPACK is None:
        try:
            import msgpack
        except ImportError:
            raise missing_extra() from None
        _MSGPACK = msgpack
    return _MSGPACK


# An array extension is: dtype length (1 byte), dtype text (ASCII, e.g. "<f8"), ndim
# (1 byte), each size as a little-endian uint64, then the raw C-order bytes. Parsing it is
# a few struct reads, where a nested msgpack list costs an allocation per part.
_BYTE = struct.Struct("<B")
_SHAPES = [struct.Struct(f"<{n}Q") for n in range(MAX_NDIM + 1)]
_DTYPES: dict[bytes, np.dtype] = {}  # accepted dtype texts only, so it stays small
_HEADS: dict[tuple[str, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> header bytes


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in ARRAY_KINDS:
            raise TypeError(f"arrays of dtype {obj.dtype} do not travel")
        key = (obj.dtype.str, obj.shape)
        head = _HEADS.get(key)
        if head is None:
            head = array_ext_payload(obj.dtype.str, list(obj.shape), b"")
            if len(_HEADS) < 1024:  # an env's few shapes; a stream of new ones is not kept
                _HEADS[key] = head
        # tobytes() is C order for any layout; ascontiguousarray would make a 0-d array 1-d.
        return _msgpack().ExtType(ARRAY_EXT, head + obj.tobytes())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)  # float32 -> float64 is exact
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} does not travel")


def array_ext_payload(dtype: str, shape: list[int], raw: bytes) -> bytes:
    """The bytes of an array extension (what :func:`encode` writes for an array); tests
    use it to build arrays the encoder would never send."""
    text = dtype.encode()
    return (_BYTE.pack(len(text)) + text + _BYTE.pack(len(shape))
            + struct.pack(f"<{len(shape)}Q", *shape) + raw)


def encode(message: dict[str, Any]) -> bytes:
    """One message as msgpack bytes (arrays as dtype + shape + bytes)."""
    return _msgpack().packb(message, default=_default, use_bin_type=True, strict_types=False)


def decode(data: bytes, max_payload: int = DEFAULT_MAX_PAYLOAD) -> dict[str, Any]:
    """A message from msgpack bytes; anything else (pickle, JSON, garbage, a truncated or
    oversized message, an unknown extension, a map with non-string keys) raises
    :class:`ProtocolError`."""
    msgpack = _msgpack()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("a message must be bytes")
    if len(data) > max_payload:
        raise ProtocolError(f"the message has {len(data)} bytes, more than the "
                            f"{max_payload}-byte cap")

    def ext_hook(code: int, payload: bytes) -> Any:
        if code != ARRAY_EXT:
            raise ProtocolError(f"unknown msgpack extension {code}")
        return _array(payload, max_payload)

    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True,
                                  ext_hook=ext_hook, use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types for bad bytes
        raise ProtocolError(f"not a msgpack message ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a msgpack map")
    _check_depth(message)
    return message


def _check_depth(message: dict[str, Any]) -> None:
    """Refuse nesting deeper than MAX_DEPTH (only containers are visited: a flat step
    request costs one pass over its values)."""
    todo = [(message, 0)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ProtocolError(f"the message nests deeper than {MAX_DEPTH} levels")
        items = value.values() if isinstance(value, dict) else value
        todo.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))


def _array(payload: bytes, max_payload: int) -> np.ndarray:
    try:
        n = payload[0]
        dtype_text = payload[1:1 + n]
        ndim = payload[1 + n]
        shape = _SHAPES[ndim].unpack_from(payload, 2 + n)
    except (IndexError, struct.error):
        raise ProtocolError("an array must be dtype, shape and bytes") from None
    dtype = _DTYPES.get(dtype_text)
    if dtype is None:
        dtype = _DTYPES[dtype_text] = _plain_dtype(dtype_text)
    if max(shape, default=0) > max_payload:
        raise ProtocolError(f"array shape {list(shape)} has a size above the payload cap")
    start = 2 + n + 8 * ndim
    count = math.prod(shape)
    if count * dtype.itemsize != len(payload) - start:
        raise ProtocolError(f"array of shape {list(shape)} and dtype {dtype} needs "
                            f"{count * dtype.itemsize} bytes, the message has "
                            f"{len(payload) - start}")
    # A copy: the array must be writable and must not keep the whole message alive.
    return np.frombuffer(payload, dtype, count, start).reshape(shape).copy()


def _plain_dtype(text: bytes) -> np.dtype:
    """The dtype an array names, refused unless it is bool, integer or float."""
    shown = text[:16].decode("ascii", "replace")
    if len(text) > 8:
        raise ProtocolError(f"array dtype {shown!r} is not a plain numeric dtype")
    try:
        dtype = np.dtype(text.decode("ascii"))
    except Exception:
        raise ProtocolError(f"array dtype {shown!r} is not understood") from None
    if dtype.kind not in ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ProtocolError(f"array dtype {shown!r} is not a plain numeric dtype")
    return dtype


def request(op: str, *, sid: str | None = None, gen: int = 0, rid: int = 0,
            token: str | None = None, **args: Any) -> dict[str, Any]:
    """A request message (the fields every request carries, then the op's own)."""
    return {"op": op, "sid": sid, "gen": gen, "rid": rid, "token": token, **args}


def check_request(message: dict[str, Any]) -> dict[str, Any]:
    """Refuse a request whose common fields are missing or of the wrong type."""
    op = message.get("op")
    if not isinstance(op, str):
        raise ProtocolError("a request needs an 'op' string")
    if op not in OPS:
        raise ProtocolError(f"unknown op {op[:40]!r}; the server knows {', '.join(OPS)}")
    for key, kind in (("gen", int), ("rid", int)):
        if type(message.get(key, 0)) is not kind:
            raise ProtocolError(f"'{key}' must be an integer")
    for key in ("sid", "token"):
        if message.get(key) is not None and not isinstance(message[key], str):
            raise ProtocolError(f"'{key}' must be a string or nil")
    return message


# -- descriptors -----------------------------------------------------------------------

def describe_space(space: Any) -> dict[str, Any]:
    """A space as plain data that compares exactly: type, shape, dtype, and for a Box a
    digest of its bounds (they may hold infinities, which JSON has not)."""
    kind = type(space).__name__
    out: dict[str, Any] = {"type": kind, "shape": list(getattr(space, "shape", None) or ()),
                           "dtype": str(getattr(space, "dtype", None))}
    if hasattr(space, "low") and hasattr(space, "high"):
        h = hashlib.sha256()
        for bound in (space.low, space.high):
            h.update(np.ascontiguousarray(bound).tobytes())
        out["bounds_sha256"] = h.hexdigest()[:16]
    if hasattr(space, "n"):
        out["n"] = int(space.n)
    if hasattr(space, "spaces"):  # Dict / Tuple
        items = space.spaces.items() if isinstance(space.spaces, dict) else enumerate(space.spaces)
        out["spaces"] = {str(k): describe_space(v) for k, v in items}
    return out


def descriptor(spec: dict[str, Any], env: Any) -> dict[str, Any]:
    """What a client must match: env id, kwargs, spaces, time limit, library versions,
    and ``hash`` over all of them."""
    limit = spec.get("max_episode_steps")
    if limit is None and getattr(env, "spec", None) is not None:
        limit = env.spec.max_episode_steps
    versions = spec.get("versions") or {}
    desc = {"id": spec["id"], "kwargs": spec.get("kwargs") or {},
            "max_episode_steps": limit,
            "observation_space": describe_space(env.observation_space),
            "action_space": describe_space(env.action_space),
            "gymnasium": versions.get("gymnasium"), "mujoco": versions.get("mujoco")}
    desc["hash"] = descriptor_hash(desc)
    return desc


def descriptor_hash(desc: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of the descriptor fields, in a canonical JSON form."""
    text = json.dumps({k: desc.get(k) for k in DESCRIPTOR_FIELDS}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def first_difference(expected: dict[str, Any], served: dict[str, Any],
                     fields: tuple[str, ...] = DESCRIPTOR_FIELDS) -> dict[str, Any] | None:
    """The first field where two descriptors differ, as {"field", "local", "served"}."""
    for key in fields:
        if key in expected and expected.get(key) != served.get(key):
            return {"field": key, "local": expected.get(key), "served": served.get(key)}
    return None


def difference_sentence(diff: dict[str, Any]) -> str:
    """'the served env differs in kwargs: this side expects {...}, the server has {...}'."""
    return (f"the served env differs in {diff['field']}: this side expects "
            f"{_short(diff['local'])}, the server has {_short(diff['served'])}")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."
