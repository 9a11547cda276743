"""``rolltape parity --policy ws://... --local-policy SOURCE``: a served policy against the
same policy loaded here, on the same observations.

Each seeded episode is played twice on a local env. First in lockstep: the local policy's
action steps the env, and the served policy is asked for its action on the very same
observation, so every step compares the two policies on one input (the first step and
dimension where they differ, and the largest difference over all steps). Then the served
policy plays the episode on its own through pass 1's :func:`record_episode`, so that a
difference that changes what happens (the return, the length, success) is reported as an
outcome that differs. A deterministic policy served faithfully differs nowhere.

This runs in a spawned worker (it loads the policy, maybe torch); :func:`policy_parity_worker`
is its entry point, started by :func:`rolltape.parity.check_parity`.

May import: envs, policies, pass1.rollout, errors. Never: an executor, pass 2, outputs.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable

import numpy as np

from rolltape.envs.build import make_env
from rolltape.errors import UsageError
from rolltape.pass1.rollout import last_line, record_episode
from rolltape.policies import Policy, ServedPolicy, close_policy, load_policy


def compare_actions(local: Any, served: Any) -> tuple[bool, int | None, float]:
    """(equal bit for bit, the first differing dimension, the largest absolute difference).

    >>> compare_actions(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    (False, 1, 0.5)
    >>> compare_actions(np.int64(3), np.int64(3))
    (True, None, 0.0)
    """
    a, b = np.asarray(local), np.asarray(served)
    if a.shape != b.shape:
        return False, None, float("inf")
    if a.dtype == b.dtype and a.tobytes() == b.tobytes():
        return True, None, 0.0
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(-1)
    differs = np.flatnonzero((gap > 0) | np.isnan(gap))
    dim = int(differs[0]) if len(differs) else 0  # only the dtypes differ
    return False, dim, float(np.nanmax(gap)) if gap.size else 0.0


def batch_of(obs: Any, earlier: list[Any], batch: int) -> Any:
    """``obs`` as the first row of a batch of ``batch``, the other rows the observations
    before it (the first repeated while there are too few): what a batched forward pass
    sees beside an episode's observation.

    >>> batch_of(np.array([3.0]), [np.array([2.0]), np.array([1.0])], 4)[:, 0].tolist()
    [3.0, 2.0, 1.0, 3.0]
    """
    rows = ([obs] + earlier[:batch - 1] + [obs] * batch)[:batch]
    if isinstance(obs, dict):
        return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in obs}
    return np.stack([np.asarray(r) for r in rows])


def _lockstep(env: Any, local: Policy, served: Policy, seed: int, batch: int = 1
              ) -> dict[str, Any]:
    """One episode stepped by ``local``, ``served`` asked on every observation (as the
    first row of a batch of ``batch`` when it is more than 1)."""
    obs, info = env.reset(seed=seed)
    local.reset(seed)
    served.reset(seed)
    rewards: list[float] = []
    steps, done = 0, False
    first: dict[str, Any] | None = None
    differing, largest = 0, 0.0
    earlier: list[Any] = []
    while not done:
        mine = local.act(obs)
        if batch > 1 and isinstance(served, ServedPolicy):
            theirs = served.act_batch(batch_of(obs, earlier, batch))[0]
            earlier = [obs] + earlier[:batch - 2]
        else:
            theirs = served.act(obs)
        same, dim, gap = compare_actions(mine, theirs)
        if not same:
            differing += 1
            largest = max(largest, gap)
            if first is None:
                first = {"step": steps, "dimension": dim, "local": np.asarray(mine).tolist(),
                         "served": np.asarray(theirs).tolist()}
        obs, reward, term, trunc, info = env.step(mine)
        rewards.append(reward)
        steps += 1
        done = term or trunc
    # summed as a tape's return is (np.sum), so that equal rewards give equal bits
    return {"length": steps, "return": float(np.sum(np.asarray(rewards, dtype=np.float64))), "success": info.get("is_success"),
            "differing_steps": differing, "max_abs_diff": largest, "first_difference": first}


def run_policy_parity(spec: dict[str, Any], served_source: str, local_source: str,
                      episodes: int, seed: int, *, vecnormalize: str | None = None,
                      algo: str | None = None, deterministic: bool = True, batch: int = 1,
                      on_episode: Callable[[dict[str, Any]], None] | None = None
                      ) -> dict[str, Any]:
    """Compare ``served_source`` (ws://) with ``local_source`` on ``episodes`` seeded
    episodes of the local env ``spec``; return the parity.json content. With ``batch`` B
    above 1 the served policy acts on each observation within a batch of B (one forward
    pass, its other rows the episode's earlier observations), so the report says whether
    batching changes its actions."""
    env = make_env(spec)
    served: Policy | None = None
    try:
        local = load_policy(local_source, env, vecnormalize=vecnormalize, algo=algo,
                            deterministic=deterministic)
        served = load_policy(served_source, env)
        if batch > 1 and not (isinstance(served, ServedPolicy) and served.batches):
            raise UsageError(f"--batch-size {batch}: the policy at {served_source} does not "
                             "act on a batch of observations (serve-policy does for a "
                             "deterministic SB3 policy); drop --batch-size.")
        rows = []
        for i in range(episodes):
            s = seed + i
            row: dict[str, Any] = {"episode": i, "seed": s,
                                   **_lockstep(env, local, served, s, batch)}
            alone = record_episode(env, served, s)  # the served policy's own episode
            row["served"] = {"length": len(alone["rewards"]),
                             "return": float(np.sum(alone["rewards"])),
                             "success": alone["success_at_end"]}
            row["outcome_differs"] = (
                row["served"]["length"] != row["length"]
                or row["served"]["success"] != row["success"]
                or np.float64(row["served"]["return"]).tobytes()
                != np.float64(row["return"]).tobytes())
            rows.append(row)
            if on_episode is not None:
                on_episode(row)
    finally:
        close_policy(served)
        env.close()
    firsts = [dict(episode=r["episode"], seed=r["seed"], **r["first_difference"])
              for r in rows if r["first_difference"] is not None]
    return {"env": spec, "policy": served_source, "local_policy": local_source,
            "episodes": len(rows), "seed": seed, "batch": batch,
            "differing_steps": sum(r["differing_steps"] for r in rows),
            "steps": sum(r["length"] for r in rows),
            "max_abs_diff": max((r["max_abs_diff"] for r in rows), default=0.0),
            "first_difference": firsts[0] if firsts else None,
            "outcomes_differ": [r["episode"] for r in rows if r["outcome_differs"]],
            "agree": not firsts and not any(r["outcome_differs"] for r in rows),
            "rows": rows}


def policy_parity_worker(spec: dict[str, Any], options: dict[str, Any], conn: Any) -> None:
    """Spawned process: run the comparison, send ("result", dict) or an error line."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        conn.send(("result", run_policy_parity(
            spec, options.pop("policy"), options.pop("local_policy"), options.pop("episodes"),
            options.pop("seed"), on_episode=lambda row: conn.send(("episode", row)),
            **options)))
    except UsageError as exc:
        conn.send(("usage_error", str(exc)))
    except OSError as exc:
        conn.send(("error", str(exc) or exc.strerror or last_line(exc)))
    except Exception as exc:
        conn.send(("error", last_line(exc)))
    finally:
        conn.close()
