"""The fields of a tape from what one episode produced, shared by every pass-1 loop (per
row, batched, through policy-side wrappers, in training).

May import: envs, tape. Never: policies, the render side, executors, outputs.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from rolltape.envs import BIG_OBS, DIGEST_BATCH, json_safe, obs_digest, obs_digests


def tape_fields(seed: int | None, options: dict[str, Any] | None, first_obs: Any,
                steps: list[tuple[Any, ...]], physics: tuple[Any, Any, Any],
                success: Any, metrics: Any, started: float) -> dict[str, Any]:
    """The fields of a tape from what one episode produced: ``steps`` holds one (action,
    reward, terminated, truncated, kept observation) tuple per step, ``physics`` is
    (state, qpos, qvel) with one row per frame (Nones for non-MuJoCo envs), ``success`` and
    ``metrics`` come from the last step's info, ``started`` is when the episode began."""
    actions, rewards, terminated, truncated, observations = zip(*steps)
    digests = digest_all([first_obs, *observations])
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
    }


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
    """A copy of an array observation (an env may reuse its buffer), else its digest now."""
    return obs.copy() if isinstance(obs, np.ndarray) else obs_digest(obs)


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
