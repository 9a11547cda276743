"""The fields of a tape from what one episode produced, shared by every pass-1 loop (per
row, batched, through policy-side wrappers, in training).

May import: envs, tape. Never: policies, the render side, executors, outputs.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from rolltape.envs.digests import (
    BIG_OBS,
    DIGEST_BATCH,
    array_digest,
    flat_items,
    obs_digest,
    obs_digests,
)
from rolltape.tape import json_safe


def tape_fields(seed: int | None, options: dict[str, Any] | None, first_obs: Any,
                steps: list[tuple[Any, ...]], physics: tuple[Any, Any, Any],
                success: Any, metrics: Any, started: float) -> dict[str, Any]:
    """The fields of a tape from what one episode produced: ``steps`` holds one (action,
    reward, terminated, truncated, kept observation) tuple per step, ``physics`` is
    (state, qpos, qvel) with one row per frame (Nones for non-MuJoCo envs), ``success`` and
    ``metrics`` come from the last step's info, ``started`` is when the episode began."""
    actions, rewards, terminated, truncated, observations = zip(*steps)
    digests = digest_all([first_obs, *observations])
    keys, by_key = key_digests([first_obs, *observations])
    wall = time.perf_counter() - started
    state, qpos, qvel = physics
    return {
        "seed": seed,
        "options": options,
        "actions": np.stack(actions),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "terminated": np.asarray(terminated, dtype=bool),
        "truncated": np.asarray(truncated, dtype=bool),
        "obs_digest": digests,
        "qpos": qpos,
        "qvel": qvel,
        "physics": state,
        "success_at_end": success_flag(success),
        "metrics": json_safe(metrics) if isinstance(metrics, dict) else None,
        "wall_s": wall,
        "obs_keys": tuple(keys) if keys is not None else None,
        "obs_key_digest": by_key,
    }


def image_facts(obs: Any, env: Any) -> dict[str, Any] | None:
    """:attr:`rolltape.tape.Tape.obs_images` for a dict observation holding images (uint8
    arrays of rank 3): their keys and the GL backend that drew them, the ``MUJOCO_GL`` of
    the process that steps the env (a served env's server says its own); None without
    images. Different rasterizers may differ in pixels, so pass 2 compares the images'
    digests only when it draws with the same backend."""
    if not isinstance(obs, dict):
        return None
    keys = [k for k, v in flat_items(obs)
            if isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 3]
    if not keys:
        return None
    while env is not None and not hasattr(env, "gl_backend") and hasattr(env, "env"):
        env = env.env  # through wrappers, down to a served env's session
    backend = (env.gl_backend if hasattr(env, "gl_backend")
               else os.environ.get("MUJOCO_GL") or None)
    return {"keys": keys, "backend": backend.lower() if isinstance(backend, str) else None}


def success_flag(value: Any) -> bool | None:
    """``info["is_success"]`` as a flag: None when the env does not say, and NaN (an
    undefined outcome) is not a success."""
    if value is None:
        return None
    try:
        if math.isnan(float(value)):
            return False
    except (TypeError, ValueError):
        pass
    return bool(value)


def kept_obs(obs: Any) -> Any:
    """A copy of an array observation (an env may reuse its buffer), else its digest now
    (a dict observation's carries each key's digest too: :class:`KeyedDigest`)."""
    if isinstance(obs, np.ndarray):
        return obs.copy()
    if isinstance(obs, dict):
        return KeyedDigest(obs_digest(obs), {k: array_digest(v) for k, v in flat_items(obs)})
    return obs_digest(obs)


class KeyedDigest(int):
    """The whole digest of a dict observation (the int every loop already keeps), with
    each key's own digest beside it, so that ``rolltape diff`` can name the key where two
    episodes part. One blake2b per key: a dict observation is digested twice, both cheap."""

    per_key: dict[str, int]

    def __new__(cls, whole: int, per_key: dict[str, int]) -> KeyedDigest:
        made = super().__new__(cls, whole)
        made.per_key = per_key
        return made


def key_digests(observations: list[Any]) -> tuple[list[str] | None, np.ndarray | None]:
    """(key names, (T+1, keys) uint64 digests) of dict observations kept by
    :func:`kept_obs`; (None, None) for other observations or keys that change mid-episode."""
    first = observations[0]
    if not isinstance(first, KeyedDigest):
        return None, None
    names = sorted(first.per_key)
    rows = []
    for o in observations:
        if not isinstance(o, KeyedDigest) or sorted(o.per_key) != names:
            return None, None
        rows.append([o.per_key[n] for n in names])
    return names, np.array(rows, dtype=np.uint64).reshape(len(observations), len(names))


def reset_forms(obs: Any) -> dict[str, dict[str, str]]:
    """Digests (hex) of each key of a reset observation ("obs" for a plain array) as it is
    and as it would be flipped, transposed, with its channels reordered, reversed or
    negated: two runs reset with the same seed see the same observation, so when one run's
    digest equals a form of the other's, ``rolltape diff`` can say which transform
    separates them. Computed once per episode: cheap."""
    items = flat_items(obs) if isinstance(obs, dict) else [("obs", obs)]
    out: dict[str, dict[str, str]] = {}
    for name, value in items:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf" or arr.ndim == 0:
            continue
        forms = {"value": arr}
        if arr.ndim == 1:
            forms["reversed"] = arr[::-1]
        else:
            # Images are H x W (x C) unless the first axis is a channel axis (C x H x W).
            chw = arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4)
            h, w = (1, 2) if chw else (0, 1)
            forms["flip_vertical"] = np.flip(arr, h)
            forms["flip_horizontal"] = np.flip(arr, w)
            forms["flip_both"] = np.flip(arr, (h, w))
            forms["transpose"] = np.swapaxes(arr, h, w)
            if arr.ndim == 3:
                c = 0 if chw else 2
                forms["channels_reversed"] = np.flip(arr, c)
                forms["channels_first" if not chw else "channels_last"] = \
                    np.moveaxis(arr, 2, 0) if not chw else np.moveaxis(arr, 0, 2)
        if arr.dtype.kind in "if":
            forms["negated"] = -arr
        out[str(name)] = {form: f"{array_digest(a):016x}" for form, a in forms.items()}
    return out


def digest_all(observations: list[Any]) -> np.ndarray:
    """Digests of every observation; array observations in one vectorised pass."""
    first = observations[0]
    if isinstance(first, np.ndarray) and all(
            isinstance(o, np.ndarray) and o.shape == first.shape and o.dtype == first.dtype
            for o in observations):
        return obs_digests(np.stack(observations))
    out = np.empty(len(observations), dtype=np.uint64)
    groups: dict[tuple[Any, ...], list[int]] = {}  # same-shaped arrays: one pass each
    for i, o in enumerate(observations):
        if isinstance(o, np.ndarray):
            groups.setdefault((o.shape, o.dtype.str), []).append(i)
        else:
            out[i] = o if isinstance(o, int) else obs_digest(o)
    for rows in groups.values():
        out[rows] = obs_digests(np.stack([observations[i] for i in rows]))
    return out


def compact(steps: list[tuple[Any, ...]]) -> None:
    """Replace the kept observations of the last :data:`DIGEST_BATCH` steps by their digests
    when they are large arrays (screens), so an episode's memory does not grow by a screen a
    step (an Atari game of 100,000 frames would hold 10 GB). Call it every DIGEST_BATCH
    steps; small observations are left for one pass at the end."""
    last = steps[-DIGEST_BATCH:]
    first = last[0][-1]
    if not (isinstance(first, np.ndarray) and first.nbytes > BIG_OBS):
        return
    digests = digest_all([s[-1] for s in last])
    start = len(steps) - len(last)
    for k, (step, digest) in enumerate(zip(last, digests)):
        steps[start + k] = (*step[:-1], int(digest))
