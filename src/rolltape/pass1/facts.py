"""What the env a pass-1 worker built is, as plain data for the run's protocol card
(``protocol.json``, :mod:`rolltape.outputs.protocol`): its spaces (keys, shapes, dtypes,
value ranges), its control rate (MuJoCo's timestep x frame skip), the Gymnasium wrappers
``make`` put around it and the policy-side wrappers with their arguments.

Only the worker has the env: the orchestrator imports no simulator, so the worker reports
these facts once per job, beside the policy's description.

May import: tape (json_safe), numpy. Never: policies, the render side, executors, outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rolltape.tape import json_safe

_MAX_BOUNDS = 64  # per-dimension bounds kept for spaces this small; larger: min and max


def env_facts(env: Any, seen: Any = None, served: bool = False) -> dict[str, Any]:
    """Facts of ``env`` (the base env the tape records) and, when the policy sees it through
    wrappers, of ``seen`` (the env the policy acts on: its spaces; the wrappers themselves
    are the run's ``--wrapper`` entries, arguments included). Never raises: a fact that cannot be
    read is left out: a ``served`` env has its spaces here, its simulator (control rate,
    time limit, wrappers) on its server, so only the spaces are said."""
    out: dict[str, Any] = {}
    if served:
        for name, space in (("observation", env.observation_space), ("action", env.action_space)):
            out[name] = space_facts(space, name if name == "action" else "obs")
        return json_safe(out)
    base = getattr(env, "unwrapped", env)
    dt = _number(getattr(base, "dt", None))
    frame_skip = getattr(base, "frame_skip", None)
    timestep = None
    model = getattr(base, "model", None)
    if model is not None and hasattr(model, "opt"):
        timestep = _number(getattr(model.opt, "timestep", None))
    out["control"] = {"dt": dt, "frame_skip": frame_skip if isinstance(frame_skip, int) else None,
                      "timestep": timestep,
                      "rate_hz": round(1.0 / dt, 6) if dt else None}
    metadata = getattr(env, "metadata", None) or {}
    out["render_fps"] = _number(metadata.get("render_fps"))
    for name, space in (("observation", getattr(env, "observation_space", None)),
                        ("action", getattr(env, "action_space", None))):
        if space is not None:
            out[name] = space_facts(space, name if name == "action" else "obs")
    out["env_wrappers"] = wrapper_chain(env)
    out["horizon"] = time_limit(env)
    if seen is not None:
        out["policy_observation"] = space_facts(seen.observation_space)
        out["policy_action"] = space_facts(seen.action_space, "action")
    return json_safe(out)


def space_facts(space: Any, key: str = "obs") -> dict[str, Any]:
    """A space as the card shows it: per key of a Dict (or the one ``key``) its type,
    shape, dtype and value range (one low and high when every dimension has the same, per
    dimension when small, else the smallest low and the largest high; infinities as
    "inf")."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        return {str(k): _one_space(v) for k, v in spaces.items()}
    return {key: _one_space(space)}


def _one_space(space: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(space).__name__,
                           "shape": list(getattr(space, "shape", None) or ()),
                           "dtype": str(getattr(space, "dtype", None))}
    if hasattr(space, "n"):
        out["n"] = int(space.n)
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is not None and high is not None:
        low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
            out["low"], out["high"] = _bound(float(low.flat[0])), _bound(float(high.flat[0]))
        elif low.size <= _MAX_BOUNDS:
            out["low"] = [_bound(x) for x in low.ravel()]
            out["high"] = [_bound(x) for x in high.ravel()]
        else:
            out["low"] = _bound(float(low.min()))
            out["high"] = _bound(float(high.max()))
    return out


def wrapper_chain(env: Any) -> list[dict[str, Any]]:
    """The wrappers from ``env`` down to the base env, outermost first, each its class name
    and the arguments it was made with (Gymnasium keeps them)."""
    chain = []
    while env is not None and hasattr(env, "env"):
        entry: dict[str, Any] = {"name": type(env).__name__}
        saved = getattr(env, "_saved_kwargs", None)
        if isinstance(saved, dict):
            entry["kwargs"] = {str(k): v if isinstance(v, (int, float, str, bool, type(None)))
                               else repr(v)[:80] for k, v in saved.items() if k != "env"}
        chain.append(entry)
        env = getattr(env, "env", None)
    return chain[:32]


def time_limit(env: Any) -> int | None:
    """The steps after which the env's TimeLimit truncates (its registered limit when the
    run set none), or None without one."""
    while env is not None:
        limit = getattr(env, "_max_episode_steps", None)
        if type(env).__name__ == "TimeLimit" and isinstance(limit, int):
            return limit
        env = getattr(env, "env", None)
    return None


def _bound(x: float) -> float | str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
