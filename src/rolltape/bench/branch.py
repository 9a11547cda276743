"""``rolltape branch``'s cost (``branch_step_cost``): a branch step against a bare step from
a restored state.

The workload is the README's worked example, shrunk: the bundled PPO Pusher policy
(:mod:`rolltape.demo`), episodes of 100 steps, a branch every few steps, K branches each
with Gaussian action noise 0.1 (the default for a deterministic policy). Both sides run
in this process, on the same env and the same loaded policy, interleaved (A B B A ...):

- **branch**: :func:`~rolltape.pass1.rollout.run_policy_job` of a
  :class:`~rolltape.pass1.branches.BranchJob`, what a pass-1 worker runs for its share of
  the branches: restore to continue (seeded reset, the recorded state t - 1, its step
  again, checked bit for bit), the perturbed policy, the recording, the tape written;
- **bare**: what one would write by hand to branch: a seeded reset, ``mj_setState`` of the
  recorded state t (and ``mj_forward`` so the observation is right), the time limit
  advanced, then ``policy.act`` + the same seeded noise + ``env.step`` to the end.

The ratio is per branch step (both play the same steps, from t to the end): total time
over total time. Starting the workers (once per run) and reading the branches back for
``branch.json`` are left out; the rest of a branch's cost is per branch (the restored
step, the check, the tape's file), so it weighs less the longer the branches.

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import rolltape.bench.common as common

BRANCH_ENV = "Pusher-v5"
NOISE = 0.1  # rolltape.branching.DEFAULT_NOISE, the default for a deterministic policy


def branch_sizes(ctx: common.Context) -> tuple[int, int, int, int, int]:
    """(episodes, steps per episode, grid step, branches per grid step, repetitions)."""
    return (1, 100, 25, 2, 2) if ctx.config.quick else (3, 100, 5, 8, 3)


def bench_branch_step_cost(ctx: common.Context) -> dict[str, Any]:
    """Branch steps (a BranchJob, in process) vs bare steps from states restored with
    mj_setState, same env, policy, noise and steps."""
    from rolltape.branching import branch_seed
    from rolltape.demo import demo_assets
    from rolltape.envs.ids import env_spec
    from rolltape.pass1.branches import BranchJob, BranchUnit
    from rolltape.pass1.rollout import OpenJobs, record_episode, run_policy_job
    from rolltape.tape import Tape

    episodes, steps, every, k, reps = branch_sizes(ctx)
    demo = demo_assets()
    spec = env_spec(BRANCH_ENV, max_episode_steps=steps)
    folder = ctx.dir("branch")
    policy_source = f"sb3:{demo['policy']}"
    job = BranchJob(env=spec, policy=policy_source, vecnormalize=demo["vecnormalize"],
                    deterministic=True, episodes=[])
    opened = OpenJobs()
    sent: list[Any] = []
    try:
        slot = opened.get(job, sent.append)
        env, policy = slot.env, slot.policy
        sources: list[Tape] = []
        units: list[BranchUnit] = []
        for e in range(episodes):  # the recorded episodes, by pass 1's own loop
            fields = record_episode(env, policy, common.SEED + e)
            path = folder / f"source-{e}.npz"
            Tape(env=spec, policy=policy.description, meta={}, **fields).save(path)
            sources.append(Tape.load(path))
            for t in range(0, steps, every):
                for b in range(k):
                    units.append(BranchUnit(
                        "branch", len(units), branch_seed(0, common.SEED + e, t, b),
                        f"e{e}-t{t:03d}-k{b}.npz", source=str(path), step=t, branch=b,
                        noise=NOISE))
        branch_steps = sum(steps - u.step for u in units)
        by_source = {str(folder / f"source-{e}.npz"): s for e, s in enumerate(sources)}
        # Each repetition writes new files, as a branch run does: renaming a tape over an
        # existing one makes ext4 flush it first (auto_da_alloc), ~0.4 ms a tape.
        jobs = []
        for r in range(reps + 1):  # the last made is the warm-up's
            out = ctx.dir(f"branches{r}")
            jobs.append(replace(job, episodes=[replace(u, tape_path=str(out / u.tape_path))
                                               for u in units]))

        def branch() -> int:
            sent.clear()
            run_policy_job(jobs.pop(), sent.append, opened)
            failed = [p for kind, p in sent if kind == "episode_failed"]
            if failed:
                raise RuntimeError(f"a branch failed: {failed[0]['error']}")
            return branch_steps

        def bare() -> int:
            return bare_branches(env, policy, units, by_source, NOISE)

        warm = jobs.pop()
        run_policy_job(replace(warm, episodes=warm.episodes[:1]), sent.append, opened)
        bare_branches(env, policy, units[:1], by_source, NOISE)
        times: dict[str, list[float]] = {"bare": [], "branch": []}
        cpu: dict[str, list[float]] = {"bare": [], "branch": []}
        played: dict[str, int] = {}
        for _, (name, fn) in common.interleaved(reps, [("bare", bare), ("branch", branch)]):
            started, cpu_started = time.perf_counter(), time.process_time()
            played[name] = fn()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
    finally:
        opened.close()
    if played["bare"] != played["branch"]:
        raise RuntimeError(f"the bare loop played {played['bare']} steps, the branches "
                           f"{played['branch']}")
    n = len(units)
    ratio = common.median(times["branch"]) / common.median(times["bare"])
    cpu_ratio = common.median(cpu["branch"]) / common.median(cpu["bare"])
    bare_us = common.median(times["bare"]) / branch_steps * 1e6
    branch_us = common.median(times["branch"]) / branch_steps * 1e6
    per_branch_ms = (common.median(cpu["branch"]) - common.median(cpu["bare"])) / n * 1e3
    return common.result(
        title="branch step vs a bare step from a restored state", ratio=ratio, target=1.2,
        op="<=",
        ratio_of="median time of the branches (BranchJob in process) / median time of a bare "
                 "mj_setState + act/step loop over the same branches, per branch step",
        baseline=f"bare restored step {bare_us:.0f} us",
        measured=f"branch step {branch_us:.0f} us",
        raw={"env": BRANCH_ENV, "policy": "bundled PPO (rolltape.demo)", "episodes": episodes,
             "steps": steps, "every": every, "branches_per_step": k, "branches": n,
             "noise": NOISE, "branch_steps": branch_steps, "reps": reps,
             "bare_s": times["bare"], "branch_s": times["branch"],
             "bare_cpu_s": cpu["bare"], "branch_cpu_s": cpu["branch"],
             "bare_us_per_step": bare_us, "branch_us_per_step": branch_us,
             "cpu_time_ratio": cpu_ratio, "extra_cpu_ms_per_branch": per_branch_ms,
             "ratio_of_minima": min(times["branch"]) / min(times["bare"]),
             "mean_branch_steps": branch_steps / n},
        notes=[f"{n} branches of {branch_steps / n:.0f} steps on average ({episodes} x "
               f"{steps}-step {BRANCH_ENV} episodes, every {every} steps, {k} branches, noise "
               f"{NOISE}); both sides play them in this process",
               f"CPU-time ratio (process_time, insensitive to other load on the machine): "
               f"{cpu_ratio:.3f}; a branch costs {per_branch_ms:.2f} ms of CPU more than its "
               "bare loop (the restored step and its check, the recording, the tape's file)",
               "left out of both: starting the workers (once per run) and reading the "
               "branch tapes back for branch.json"])


def bare_branches(env: Any, policy: Any, units: list[Any], sources: dict[str, Any],
                  noise: float) -> int:
    """Branch by hand: for each unit, a seeded reset, its recorded state t set with
    ``mj_setState`` (``mj_forward`` for the observation), the time limit advanced, and
    ``policy.act`` + seeded Gaussian noise + ``env.step`` to the end. Returns the steps."""
    import mujoco
    import numpy as np

    from rolltape.envs.state import physics_spec, set_elapsed_steps

    base = env.unwrapped
    model, data, bits = base.model, base.data, physics_spec()
    low, high = env.action_space.low, env.action_space.high
    scale = noise * ((high - low) / 2)  # Pusher's bounds are finite
    played = 0
    for unit in units:
        source = sources[unit.source]
        env.reset(seed=source.seed)
        policy.reset(unit.seed)
        rng = np.random.default_rng(unit.seed)
        mujoco.mj_setState(model, data, source.physics[unit.step], bits)
        mujoco.mj_forward(model, data)
        set_elapsed_steps(env, unit.step)
        obs = base._get_obs()
        done = False
        while not done:
            action = policy.act(obs)
            noisy = action + scale * rng.standard_normal(action.shape)
            np.minimum(np.maximum(noisy, low, out=noisy), high, out=noisy)
            action = noisy.astype(action.dtype, copy=False)
            obs, _, term, trunc, _ = env.step(action)
            played += 1
            done = term or trunc
    return played

