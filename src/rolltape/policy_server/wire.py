"""The served-policy wire: openpi's ``msgpack_numpy`` encoding, capped, and ``ws://`` sources.

An array travels as a msgpack map ``{b"__ndarray__": True, b"data": <bin>, b"dtype": "<f4",
b"shape": [H, 6]}`` and a NumPy scalar as ``{b"__npgeneric__": True, b"data": 1.5, b"dtype":
"<f8"}``, as openpi's client packs them, so openpi's own client and servers speak to rolltape's.
A message is untrusted data: its size is capped before decoding, only bool, integer and float
arrays are built (the env server's rule, :mod:`rolltape.server.protocol`), a shape must match
its bytes, nesting is bounded, and nothing is ever unpickled. Anything else raises
:class:`ProtocolError` with one sentence.

A policy source ``ws://HOST:PORT`` may carry ``?execute_steps=K&timeout=S`` (the eval flags
``--execute-steps`` and ``--policy-timeout`` write them there, so every verb that takes a
policy source, suites and comparisons included, passes them on unchanged).

May import: numpy, msgpack, errors, flags and groups (a rule), address, server.protocol. Never: gymnasium, torch.

Example:
    >>> import numpy as np
    >>> msg = decode(encode({"actions": np.arange(6, dtype=np.float32).reshape(3, 2)}))
    >>> msg["actions"].dtype.str, msg["actions"].shape
    ('<f4', (3, 2))
    >>> type(decode(encode({"x": np.float32(1.5)}))["x"]).__name__
    'float32'
    >>> parse_source("ws://127.0.0.1:8000?execute_steps=4")
    PolicyAddress(uri='ws://127.0.0.1:8000', execute_steps=4, timeout=30.0)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rolltape.address import DEFAULT_TIMEOUT, split_host_port
from rolltape.errors import UsageError
from rolltape.flags import check_field
from rolltape.groups import PolicyFiles
from rolltape.server import protocol as P
from rolltape.server.protocol import DEFAULT_MAX_PAYLOAD, ProtocolError

SCHEME = "ws://"
ARRAY = b"__ndarray__"
SCALAR = b"__npgeneric__"
RESET = "reset"  # {"__ctrl__": "reset", "seed": ...}: rolltape's servers answer {"__ack__": ...}
CONTROL = "__ctrl__"
ACK = "__ack__"
# The metadata key under which rolltape's server describes itself (an openpi server's
# metadata lacks it: its policy is taken to be stateless, and nothing is sent at a reset).
ROLLTAPE_KEY = "rolltape"

__all__ = ["ProtocolError", "encode", "decode", "parse_source", "is_policy_source",
           "PolicyAddress", "with_options"]


def _default(obj: Any) -> Any:
    """openpi's encoding of arrays and NumPy scalars; other types are msgpack's own."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in P.ARRAY_KINDS:
            raise TypeError(f"an array of dtype {obj.dtype} cannot be sent (bool, integer and "
                            "float arrays only)")
        return {ARRAY: True, b"data": np.ascontiguousarray(obj).tobytes(),
                b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        if obj.dtype.kind not in P.ARRAY_KINDS:
            raise TypeError(f"a NumPy {obj.dtype} scalar cannot be sent")
        return {SCALAR: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"a {type(obj).__name__} cannot be sent")


def encode(message: Any) -> bytes:
    """msgpack bytes of ``message`` (maps, lists, numbers, strings, bytes, NumPy arrays)."""
    return bytes(P._msgpack().packb(message, default=_default, use_bin_type=True))


def decode(data: Any, max_payload: int = DEFAULT_MAX_PAYLOAD) -> Any:
    """A message from msgpack bytes, refusing anything but what :func:`encode` writes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("a message must be a binary websocket message (msgpack), not text")
    if len(data) > max_payload:
        raise ProtocolError(f"the message has {len(data)} bytes, more than the "
                            f"{max_payload}-byte cap")
    try:
        message = P._msgpack().unpackb(
            data, raw=False, strict_map_key=True, use_list=True,
            object_hook=functools.partial(_object_hook, max_payload=max_payload))
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types for bad bytes
        raise ProtocolError(f"not a msgpack message ({type(exc).__name__})") from None
    if type(message) is dict or type(message) is list:
        P._check_depth(message)
    return message


def _object_hook(obj: dict[Any, Any], max_payload: int) -> Any:
    """An array or scalar from its map (checked before anything is built); any other map."""
    if ARRAY in obj:
        dtype = _dtype(obj.get(b"dtype"))
        shape, raw = obj.get(b"shape"), obj.get(b"data")
        if (not isinstance(shape, list) or len(shape) > P.MAX_NDIM
                or not all(type(n) is int and n >= 0 for n in shape)):
            raise ProtocolError(f"an array's shape must be a list of at most {P.MAX_NDIM} "
                                "sizes")
        if not isinstance(raw, bytes):
            raise ProtocolError("an array's data must be bytes")
        if max(shape, default=0) > max_payload:
            raise ProtocolError(f"array shape {shape} has a size above the payload cap")
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise ProtocolError(f"array of shape {shape} and dtype {dtype} needs "
                                f"{math.prod(shape) * dtype.itemsize} bytes, the message has "
                                f"{len(raw)}")
        return np.frombuffer(raw, dtype).reshape(shape).copy()  # writable, as a local one
    if SCALAR in obj:
        dtype = _dtype(obj.get(b"dtype"))
        value = obj.get(b"data")
        if type(value) not in (bool, int, float):
            raise ProtocolError("a NumPy scalar's data must be a number")
        try:
            return dtype.type(value)
        except (OverflowError, ValueError):
            raise ProtocolError(f"{value!r} does not fit a NumPy {dtype} scalar") from None
    return obj


def _dtype(text: Any) -> np.dtype:
    if not isinstance(text, str):
        raise ProtocolError("an array's dtype must be a string such as '<f4'")
    return P._plain_dtype(text.encode("ascii", "replace"))


@dataclass(frozen=True)
class PolicyAddress:
    """A served policy: its websocket URI, how many actions of each chunk run open loop
    (None: as the server's metadata says, else the whole chunk) and the reply timeout."""

    uri: str
    execute_steps: int | None = None
    timeout: float = DEFAULT_TIMEOUT


def is_policy_source(source: str) -> bool:
    return source.startswith(SCHEME)


def parse_source(source: str) -> PolicyAddress:
    """The :class:`PolicyAddress` of ``ws://HOST:PORT[?execute_steps=K&timeout=S]``."""
    if not is_policy_source(source):
        raise UsageError(f"Policy server '{source}' must look like ws://HOST:PORT.")
    where, _, query = source[len(SCHEME):].partition("?")
    try:
        host, port = split_host_port(where.rstrip("/"), "--policy")
    except UsageError:
        raise UsageError(f"--policy '{source}' must look like ws://HOST:PORT, e.g. "
                         "ws://127.0.0.1:8000.") from None
    if port == 0:
        raise UsageError(f"--policy '{source}' needs the port the policy server printed.")
    options: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key == "execute_steps":
            options[key] = _number(value, int, "--execute-steps", source)
            check_field(PolicyFiles, "execute_steps", options[key])  # its one rule
        elif key == "timeout":
            options[key] = _number(value, float, "--policy-timeout", source)
            if not 0 < options[key] < 1e6:
                raise UsageError(f"--policy-timeout must be a number of seconds above 0, got "
                                 f"{value}.")
        else:
            raise UsageError(f"--policy '{source}': unknown option '{key}'; a policy server "
                             "takes execute_steps=K and timeout=SECONDS.")
    host = f"[{host}]" if ":" in host else host
    return PolicyAddress(f"{SCHEME}{host}:{port}", **options)


def _number(text: str, kind: type, flag: str, source: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"{flag} '{text}' (in '{source}') must be a number.") from None


def with_options(source: str, execute_steps: int | None, timeout: float | None) -> str:
    """``source`` with the eval flags written into its query (a ``ws://`` source only).

    >>> with_options("ws://127.0.0.1:8000", 4, None)
    'ws://127.0.0.1:8000?execute_steps=4'
    """
    if not is_policy_source(source):
        if execute_steps is not None or timeout is not None:
            flag = "--execute-steps" if execute_steps is not None else "--policy-timeout"
            raise UsageError(f"{flag} applies to a served policy (--policy ws://HOST:PORT), "
                             f"not to '{source}'.")
        return source
    address = parse_source(source)
    parts = [f"execute_steps={execute_steps or address.execute_steps}"
             if (execute_steps or address.execute_steps) else "",
             f"timeout={timeout}" if timeout is not None else
             (f"timeout={address.timeout}" if address.timeout != DEFAULT_TIMEOUT else "")]
    query = "&".join(p for p in parts if p)
    return address.uri + (f"?{query}" if query else "")
