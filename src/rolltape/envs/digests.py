"""Digests of observations: a tape keeps one per step, so that a replay finds the first
step whose observation differs from pass 1's.

An array observation's digest is FNV-1a over its 64-bit words (:func:`obs_digests`,
vectorised across rows, so screens are digested in batches of :data:`DIGEST_BATCH`); a dict
observation's is blake2b over its leaves by sorted key (:func:`obs_digest`,
:func:`flat_items`). Pass 1, the server and pass 2 all digest with these functions, so
their digests agree by construction.

May import: numpy and the standard library only. Never: gymnasium, a simulator, policies,
pass 1, pass 2, executors, outputs.

Example:
    >>> a, b = np.zeros(3), np.array([0.0, 0.0, 1e-300])
    >>> obs_digest(a) == obs_digest(a.copy()), obs_digest(a) == obs_digest(b)
    (True, False)
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


#: Array observations of more bytes than this (screens) are digested in batches of
#: :data:`DIGEST_BATCH` as they come, in pass 1 and in replay, not all at the episode's end.
BIG_OBS = 16384
#: A digest pass is a numpy call per 8 bytes of an observation, each across every row, so
#: it costs about as much for 1 row as for 256: Atari screens 0.19 ms each in batches of 64,
#: 0.07 ms in batches of 256 (digests were a fifth of a PPO CnnPolicy's Atari pass 1), for
#: 25 MB of screens held at most.
DIGEST_BATCH = 256


def obs_digests(rows: np.ndarray) -> np.ndarray:
    """64-bit digests of many same-shaped array observations at once (one per row).

    FNV-1a over the 64-bit words of each row's exact bytes, vectorised across rows: each
    step (xor, then multiply by an odd prime) is a bijection, so two observations that
    differ in a single word always get different digests. Cheap enough to keep pass 1 as
    fast as a bare loop.
    """
    rows = np.ascontiguousarray(rows)
    flat = rows.reshape(rows.shape[0], -1).view(np.uint8)
    pad = (-flat.shape[1]) % 8
    if pad:
        flat = np.concatenate([flat, np.zeros((flat.shape[0], pad), np.uint8)], axis=1)
    words = flat.view("<u8")
    h = np.full(words.shape[0], _FNV_OFFSET, dtype=np.uint64)
    xor, multiply = np.bitwise_xor, np.multiply
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):  # in place: no new arrays per word (~12% faster)
            xor(h, words[:, j], out=h)
            multiply(h, _FNV_PRIME, out=h)
        h ^= h >> np.uint64(29)  # final mix so that low bits depend on every word
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return h


def flat_items(obs: dict[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A dict observation's leaves by sorted key, a nested dict's named ``outer/inner`` (as
    LeRobot names gym-aloha's ``pixels/top``): a dict's own bytes are not its contents.

    >>> [k for k, _ in flat_items({"pixels": {"top": 1, "angle": 2}, "agent_pos": 3})]
    ['agent_pos', 'pixels/angle', 'pixels/top']
    """
    items: list[tuple[str, Any]] = []
    for key in sorted(obs):
        if isinstance(obs[key], dict):
            items.extend(flat_items(obs[key], f"{prefix}{key}/"))
        else:
            items.append((f"{prefix}{key}", obs[key]))
    return items


def array_digest(value: Any) -> int:
    """64-bit blake2b of an array's dtype, shape and bytes: a key's digest (the tape's
    ``obs_key_digest``), and the digest of the flipped, transposed or reordered forms of a
    reset observation."""
    arr = np.ascontiguousarray(value)
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{arr.dtype.str}{arr.shape}".encode())
    h.update(arr.tobytes())
    return int.from_bytes(h.digest(), "little")


def obs_digest(obs: Any) -> int:
    """The digest of one observation: :func:`obs_digests` for arrays, blake2b of the sorted
    keys' bytes for dict observations (a nested dict's leaves, :func:`flat_items`)."""
    if isinstance(obs, dict):
        h = hashlib.blake2b(digest_size=8)
        for key, value in flat_items(obs):
            h.update(key.encode())
            h.update(np.ascontiguousarray(value).tobytes())
        return int.from_bytes(h.digest(), "little")
    return int(obs_digests(np.asarray(obs)[None])[0])
