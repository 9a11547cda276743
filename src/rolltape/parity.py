"""``rolltape parity``: the same seeded episodes locally and on a server, compared whole.

Each episode is played to its end on a local env and on a served session, with the same
policy reset with the same seed, through pass 1's own :func:`record_episode`; then every
step's observation digest, action, reward (bit for bit), terminated/truncated flag and
MuJoCo physics state, the success flag, the length, and the terminal frame (drawn by the
same code on both sides, byte-equal on the same GL backend) are compared. The first
difference is named: episode, step, field, both values.

This runs in a spawned worker (it loads the policy and draws with GL); :func:`parity_worker`
is its entry point.

It sits beside the orchestrator (it uses the wire, :mod:`rolltape.server`, and pass 1);
:mod:`rolltape.cli.serve` starts it.

May import: envs, policies, pass1.rollout, server.client, server.frames, errors. Never: an
executor, the rest of pass 2, outputs.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import numpy as np

from rolltape.envs.build import make_env
from rolltape.errors import UsageError
from rolltape.pass1.rollout import last_line, record_episode
from rolltape.policies import load_policy
from rolltape.server.client import RemoteEnv, connect, expect_ok, local_spec
from rolltape.server.frames import FrameDrawer


def open_sessions(spec: dict[str, Any]) -> int:
    """How many sessions the server has open now."""
    conn = connect(spec)
    try:
        return int(expect_ok(conn.call("stats"), spec["served"]["address"], "stats")["sessions"])
    finally:
        conn.close()


def _same(a: Any, b: Any) -> bool:
    """Bit for bit (NaN equals NaN, -0.0 differs from 0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _show(value: Any) -> Any:
    value = np.asarray(value)
    if value.size > 12:
        return f"{value.dtype} array {list(value.shape)} (sha of bytes differs)"
    return value.tolist()


def compare_episode(local: dict[str, Any], served: dict[str, Any]) -> dict[str, Any] | None:
    """The first difference between two episodes' tape fields, or None. ``step`` k is the
    k-th ``env.step`` (0 is the reset): its action, reward and flags, then the observation
    digest and physics state it led to."""
    steps = min(len(local["rewards"]), len(served["rewards"]))
    for k in range(steps + 1):
        names = (("actions", "rewards", "terminated", "truncated") if k else ()) + \
            ("obs_digest", "physics")
        for name in names:
            row = k - 1 if name not in ("obs_digest", "physics") else k
            a, b = local[name], served[name]
            if a is None or b is None:
                if (a is None) != (b is None):
                    return {"step": k, "field": name, "local": a is not None,
                            "served": b is not None}
                continue
            if not _same(a[row], b[row]):
                return {"step": k, "field": name, "local": _show(a[row]),
                        "served": _show(b[row])}
    if len(local["rewards"]) != len(served["rewards"]):
        return {"step": steps, "field": "length", "local": len(local["rewards"]),
                "served": len(served["rewards"])}
    for name in ("success_at_end", "success_once"):
        if local[name] != served[name]:
            return {"step": steps, "field": name, "local": local[name],
                    "served": served[name]}
    return None


def run_parity(spec: dict[str, Any], policy_source: str, episodes: int, seed: int, *,
               vecnormalize: str | None = None, algo: str | None = None,
               deterministic: bool = True, width: int = 480, height: int = 480,
               camera: str | None = None, frames: bool = True, tapes: list[str] | None = None,
               on_episode: Any = None) -> dict[str, Any]:
    """Play ``episodes`` episodes (seed + i) locally and served, or with ``tapes`` each
    tape's actions from its own seed and options; return the parity.json content."""
    here = local_spec(spec)
    sessions_before = open_sessions(spec)
    local_env = make_env(here)
    served_env: RemoteEnv | None = None
    drawer = FrameDrawer(here) if frames else None
    rows: list[dict[str, Any]] = []
    first = None
    try:
        plan = _plan(policy_source, episodes, seed, tapes, local_env, vecnormalize, algo,
                     deterministic)
        served_env = RemoteEnv.connect(spec)
        for i, (ep_seed, options, policy) in enumerate(plan):
            mine = record_episode(local_env, policy, ep_seed, options)
            theirs = record_episode(served_env, policy, ep_seed, options)
            diff = compare_episode(mine, theirs)
            if diff is None and drawer is not None and mine["physics"] is not None:
                frame_l = drawer.draw(mine["physics"][-1], width, height, camera)
                frame_s = served_env.render_frame(width, height, camera)
                if not _same(frame_l, frame_s):
                    changed = int(np.count_nonzero(np.any(frame_l != frame_s, axis=-1))) \
                        if frame_l.shape == frame_s.shape else None
                    diff = {"step": len(mine["rewards"]), "field": "terminal_frame",
                            "local": f"{list(frame_l.shape)} uint8",
                            "served": f"{list(frame_s.shape)} uint8, {changed} pixel(s) differ"}
            row = {"episode": i, "seed": ep_seed, "tape": tapes[i] if tapes else None,
                   "length": len(mine["rewards"]),
                   "served_length": len(theirs["rewards"]),
                   "return": float(np.sum(mine["rewards"])),
                   "success_at_end": mine["success_at_end"],
                   "success_once": mine["success_once"], "agree": diff is None}
            if diff is not None:
                row["first_difference"] = diff
                if first is None:
                    first = {"episode": i, "seed": ep_seed, **diff}
            rows.append(row)
            if on_episode is not None:
                on_episode(row)
    finally:
        if served_env is not None:
            served_env.close()
        local_env.close()
        if drawer is not None:
            drawer.close()
    sessions_after = open_sessions(spec)
    if first is None and sessions_after != sessions_before:
        first = {"episode": None, "seed": None, "step": None, "field": "open_sessions",
                 "local": sessions_before, "served": sessions_after}
    return {"env": here, "server": spec["served"]["address"],
            "policy": "tapes" if tapes else policy_source, "episodes": len(rows), "seed": seed, "agree": first is None,
            "first_divergence": first, "frames": {"compared": frames, "width": width,
                                                  "height": height, "camera": camera},
            "open_sessions": {"before": sessions_before, "after": sessions_after},
            "rows": rows}


def _plan(source: str, episodes: int, seed: int, tapes: list[str] | None, env: Any,
          vecnormalize: str | None, algo: str | None, deterministic: bool
          ) -> list[tuple[int | None, Any, Any]]:
    """(seed, reset options, policy) per episode: the policy on seed + i, or each tape's
    actions on its own seed and options."""
    if tapes:
        from rolltape.tape import Tape

        plan = []
        for path in tapes:
            tape = Tape.load(path)
            if tape.env_id != env.spec.id:
                raise UsageError(f"Tape '{path}' was recorded on {tape.env_id}, not on "
                                 f"{env.spec.id}; give tapes of the env you compare.")
            plan.append((tape.seed, tape.options, load_policy(f"tape:{path}", env)))
        return plan
    policy = load_policy(source, env, vecnormalize=vecnormalize, algo=algo,
                         deterministic=deterministic)
    return [(seed + i, None, policy) for i in range(episodes)]


def parity_worker(spec: dict[str, Any], options: dict[str, Any], conn: Any) -> None:
    """Spawned process: run the parity check, send ("result", dict) or an error line.
    Stopped (SIGTERM, after Ctrl-C in the command), it still closes its server session."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        conn.send(("result", run_parity(
            spec, options.pop("policy"), options.pop("episodes"), options.pop("seed"),
            on_episode=lambda row: conn.send(("episode", row)), **options)))
    except UsageError as exc:
        conn.send(("usage_error", str(exc)))
    except OSError as exc:
        conn.send(("error", exc.strerror or last_line(exc)))
    except Exception as exc:
        conn.send(("error", last_line(exc)))
    finally:
        conn.close()
