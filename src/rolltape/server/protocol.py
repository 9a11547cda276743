"""The env server's wire format: one msgpack map per message, nothing else.

A request is ``{"op", "sid", "gen", "rid", "token", ...}``; a reply is ``{"status", "rid",
...}`` where status is one of :data:`STATUSES`. NumPy arrays travel as a msgpack extension
holding dtype, shape and raw bytes; only numeric and bool dtypes are accepted, and sizes
are checked against the payload cap before any array is built. Nothing on the wire is ever
unpickled or executed: :func:`decode` accepts msgpack or raises :class:`ProtocolError`.

A vector session (``open`` with ``num_envs`` k, up to the server's ``--num-envs``) steps k
sub-envs per request: ``reset`` carries ``seeds`` (k, nil or integers) and optionally
``mask`` (k booleans: which to reset), ``step`` carries ``actions`` (an array, k rows); the
reply holds ``obs`` stacked (the reset rows only, for a reset), ``reward``/``terminated``/
``truncated`` arrays (step), and per row ``info``, a ``physics`` row and ``errors`` (nil, or
a list with nil or the sentence of a sub-env that raised: that sub-env must be reset); an
Atari game's reply adds ``ale_states``, each row's emulator state (bytes; nil for a failed
row), as a one-env session's ``ale_state``.

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

import functools
import hashlib
import json
import math
import struct
import threading
from typing import Any, Callable

import numpy as np

from rolltape.errors import EnvRaised, UsageError

PROTOCOL_VERSION = 3  # 2: arrays as a struct-packed header; 3: vector sessions
DEFAULT_MAX_PAYLOAD = 64 * 2**20  # bytes a message may have, before decoding
ARRAY_EXT = 1  # the msgpack extension code of an array
MAX_NDIM = 8
MAX_SUB_ENVS = 1024  # sub-envs a vector session may hold (serve --num-envs)
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


_RAISED = "the env raised "


def env_raised(exc: BaseException) -> str:
    """The sentence an ERROR reply (or a vector row's error) gives for what an env raised.

    >>> env_raised(ValueError("boom"))
    'the env raised ValueError: boom'
    """
    return f"{_RAISED}{type(exc).__name__}: {exc}"


def raised_from(sentence: str) -> EnvRaised | None:
    """What an env raised, back from its :func:`env_raised` sentence (a type name has no
    colon); None for any other sentence.

    >>> e = raised_from(env_raised(ValueError("a: b")))
    >>> e.kind, str(e)
    ('ValueError', 'a: b')
    """
    if not sentence.startswith(_RAISED):
        return None
    kind, colon, message = sentence[len(_RAISED):].partition(": ")
    return EnvRaised(kind, message) if colon and kind.isidentifier() else None


_HUNG = "the env hung: "


def env_hung(op: str, seconds: float) -> str:
    """The sentence an ERROR reply (or a vector row's error) gives for an env call that the
    server cut at its ``--request-timeout``.

    >>> env_hung("step", 3)
    "the env hung: it took more than 3 s to answer step (the server's --request-timeout)"
    """
    return f"{_HUNG}it took more than {seconds:g} s to answer {op} (the server's --request-timeout)"


def hung_from(sentence: str, address: str) -> EnvRaised | None:
    """A hung env's :func:`env_hung` sentence as its episode's failure (a TimeoutError of
    the env served at ``address``, read as a local env's exception is); None for any other.

    >>> str(hung_from(env_hung("step", 3), "tcp://h:1"))
    "the env served at tcp://h:1 hung: it took more than 3 s to answer step (the server's --request-timeout)"
    """
    if not sentence.startswith(_HUNG):
        return None
    return EnvRaised("TimeoutError", f"the env served at {address} hung: "
                                     f"{sentence[len(_HUNG):]}")


class ProtocolError(ValueError):
    """A message that is not a well-formed request or reply (the server answers ERROR)."""


def missing_extra() -> UsageError:
    """The one sentence for a plain install without pyzmq/msgpack."""
    return UsageError("The env server needs pyzmq and msgpack, which a plain install lacks; "
                      "install them with `pip install 'rolltape[server]'`.")


_MSGPACK: Any = None
_EXT_TYPE: Any = None  # msgpack.ExtType


def _msgpack() -> Any:
    global _MSGPACK, _EXT_TYPE
    if _MSGPACK is None:
        try:
            import msgpack
        except ImportError:
            raise missing_extra() from None
        _MSGPACK, _EXT_TYPE = msgpack, msgpack.ExtType
    return _MSGPACK


# An array extension is: dtype length (1 byte), dtype text (ASCII, e.g. "<f8"), ndim
# (1 byte), each size as a little-endian uint64, then the raw C-order bytes. Parsing it is
# a few struct reads, where a nested msgpack list costs an allocation per part.
_BYTE = struct.Struct("<B")
_SHAPES = [struct.Struct(f"<{n}Q") for n in range(MAX_NDIM + 1)]
_HEADS: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> header


def _default(obj: Any) -> Any:
    if type(obj) is np.ndarray:
        head = _HEADS.get((obj.dtype, obj.shape))
        if head is None:
            if obj.dtype.kind not in ARRAY_KINDS:
                raise TypeError(f"arrays of dtype {obj.dtype} do not travel")
            head = array_ext_payload(obj.dtype.str, list(obj.shape), b"")
            if len(_HEADS) < 1024:  # an env's few shapes; a stream of new ones is not kept
                _HEADS[(obj.dtype, obj.shape)] = head
        # tobytes() is C order for any layout; ascontiguousarray would make a 0-d array 1-d.
        # ExtType is a namedtuple whose constructor checks its fields in Python; these are
        # known good, so the tuple is made directly (a third of an array's encoding time).
        return tuple.__new__(_EXT_TYPE, (ARRAY_EXT, head + obj.tobytes()))
    if isinstance(obj, np.ndarray):  # a subclass (a masked or memory-mapped array)
        return _default(np.asarray(obj))
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


_LOCAL = threading.local()  # a Packer per thread: it keeps a buffer, and is not thread-safe


def encode(message: dict[str, Any]) -> bytes:
    """One message as msgpack bytes (arrays as dtype + shape + bytes)."""
    packer = getattr(_LOCAL, "packer", None)
    if packer is None:  # packb would build a Packer and its buffer for every message
        packer = _LOCAL.packer = _msgpack().Packer(default=_default, use_bin_type=True)
    return packer.pack(message)  # a failed pack empties the buffer (msgpack >= 0.6.1)


_PEEK_BYTES = 65536  # a request's token comes in its first fields (see :func:`request`)


def peek_token(data: bytes) -> str | None:
    """The ``token`` of a request, read from its first bytes without decoding the rest
    (a server with a token refuses a stranger's message before expanding it); None when it
    is not among the first fields or the bytes are not a msgpack map."""
    msgpack = _msgpack()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=_PEEK_BYTES, max_str_len=4096,
                                max_bin_len=4096, max_ext_len=4096, max_array_len=64,
                                max_map_len=64)
    unpacker.feed(bytes(memoryview(data)[:_PEEK_BYTES]))
    try:
        for _ in range(min(unpacker.read_map_header(), 8)):
            key = unpacker.unpack()
            if key == "token":
                value = unpacker.unpack()
                return value if isinstance(value, str) else None
            unpacker.skip()
    except Exception:  # not a map, a field too long for a peek, cut short: no token seen
        return None
    return None


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

    hook: Callable[[int, bytes], np.ndarray] = _ext_hook
    if max_payload != DEFAULT_MAX_PAYLOAD:
        hook = functools.partial(_ext_hook, max_payload=max_payload)

    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True,
                                  ext_hook=hook, use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types for bad bytes
        raise ProtocolError(f"not a msgpack message ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a msgpack map")
    for value in message.values():  # the top level here: most values are not containers
        if type(value) is dict or type(value) is list:
            _check_depth(value, 1)
    return message


def _check_depth(value: dict[str, Any] | list[Any], depth: int = 0) -> None:
    """Refuse nesting deeper than MAX_DEPTH (only containers are visited: a flat step
    request costs one pass over its values). msgpack decodes to exact dicts and lists."""
    for v in (value.values() if type(value) is dict else value):
        if type(v) is dict or type(v) is list:
            if depth >= MAX_DEPTH:
                raise ProtocolError(f"the message nests deeper than {MAX_DEPTH} levels")
            _check_depth(v, depth + 1)


def _ext_hook(code: int, payload: bytes, max_payload: int = DEFAULT_MAX_PAYLOAD
              ) -> np.ndarray:
    """The array an extension holds (the only extension there is)."""
    if code != ARRAY_EXT:
        raise ProtocolError(f"unknown msgpack extension {code}")
    try:
        n = payload[0]
        start = 2 + n + 8 * payload[1 + n]
    except IndexError:
        raise ProtocolError("an array must be dtype, shape and bytes") from None
    layout = _LAYOUTS.get(payload[:start])
    if layout is None:
        layout = _layout(payload[:start])
    dtype, shape, nbytes, widest = layout
    if widest > max_payload:
        raise ProtocolError(f"array shape {list(shape)} has a size above the payload cap")
    if nbytes != len(payload) - start:
        raise ProtocolError(f"array of shape {list(shape)} and dtype {dtype} needs "
                            f"{nbytes} bytes, the message has {len(payload) - start}")
    flat = np.frombuffer(payload, dtype, offset=start)
    # A copy: the array must be writable, as a local env's is.
    return (flat if len(shape) == 1 else flat.reshape(shape)).copy()


# An array header (dtype and shape) -> (dtype, shape, byte count, widest size): an env
# sends the same few, so each is parsed and checked once. Bounded: a stream of new ones
# is checked every time, and not kept.
_LAYOUTS: dict[bytes, tuple[np.dtype, tuple[int, ...], int, int]] = {}


def _layout(head: bytes) -> tuple[np.dtype, tuple[int, ...], int, int]:
    n = head[0]
    try:
        shape = _SHAPES[head[1 + n]].unpack_from(head, 2 + n)
    except (IndexError, struct.error):
        raise ProtocolError("an array must be dtype, shape and bytes") from None
    dtype = _plain_dtype(head[1:1 + n])
    widest = max(shape, default=0)
    # Python ints: no overflow; a size past any payload fails the byte count check.
    layout = (dtype, shape, math.prod(shape) * dtype.itemsize, widest)
    if len(_LAYOUTS) < 1024:
        _LAYOUTS[head] = layout
    return layout


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
    for key in ("gen", "rid"):
        if type(message.get(key, 0)) is not int:
            raise ProtocolError(f"'{key}' must be an integer")
        # A session's requests are ordered by them (a mutation is never replayed).
        if key not in message and op not in ("describe", "stats"):
            raise ProtocolError(f"a '{op}' request needs '{key}', an integer")
    for key in ("sid", "token"):
        if type(message.get(key)) not in (str, type(None)):
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
