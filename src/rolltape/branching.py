"""``rolltape branch``: where was an episode decided? Branch rollouts from a tape's states.

For each chosen episode of a run and each step t of a grid (every N steps), the episode is
restored at t (:mod:`rolltape.pass1.branches`: the physics state and the env's bookkeeping,
checked bit for bit) and the run's own policy plays on K times, each branch seeded, under
a declared perturbation: the policy's own sampling for a stochastic policy, seeded
Gaussian action noise (``--noise``) for a deterministic one. What the branches give is an
estimate, per t, of P(success | state at t) with a Wilson 95% band, or for an env that does
not report success the expected return from t on with a bootstrap 95% band.

The points: for a failed episode the *point of no return* is the first grid step from
which the band's upper end stays below ``--threshold``; for a successful one the *point
of safety* is the first from which its lower end stays above it. ``crossing`` is the
first step from which the estimate itself stays on the episode's side of the threshold.

Branches are pass-1 work (:class:`~rolltape.pass1.branches.BranchJob`), dealt to workers
piece by piece as episodes are (:mod:`rolltape.pass1.dealer`) or run on Ray; each is a
tape under ``OUT/EPISODE/tapes`` that ``rolltape verify`` re-simulates. ``--budget``
caps the total steps: the grid is thinned (its step doubled) until the estimate of the
steps fits, and ``branch.json`` says so.

May import: pass 1's job types, executors, stats, record, tape, outputs, config, files.
Never: torch, GL (the policy and MuJoCo live in workers).

Example (not run: it plays policies):
    >>> result = branch("runs/pusher", pick="worst:3", branches=16, every=5)
    >>> result.episodes[0]["point_of_no_return"]
"""

from __future__ import annotations

import math
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rolltape import executors
from rolltape.envs.ids import check_tape_env_module
from rolltape.errors import UsageError
from rolltape.executors.base import ShareWork
from rolltape.executors.launch import check_worker_count, per_core
from rolltape.files import atomic_folder, write_json
from rolltape.flags import EPISODES, POLICY, SCALE, Rule, at_least, check_flags, flag, non_negative
from rolltape.groups import (
    ExecutorChoice,
    Pick,
    PolicyFiles,
    PolicySource,
    RunArgument,
    RunFolder,
    Workers,
    declared,
)
from rolltape.interpreter import NO_GL
from rolltape.pass2.request import ReplayVerb
from rolltape.video_pick import VideoPick

if TYPE_CHECKING:  # the work's types; the modules load when a branch run starts
    from rolltape.pass1.branches import BranchUnit
    from rolltape.record import Episode, Run
    from rolltape.tape import Tape

DEFAULT_NOISE = 0.1  # of the action range's half-width, for a deterministic policy
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class BranchConfig(RunArgument, Pick, PolicySource, PolicyFiles, ExecutorChoice, RunFolder):
    """What ``rolltape branch`` (and :func:`branch`) is asked for: each field checked on
    construction by its own rule. ``out`` defaults to RUN/branch."""

    pick: Any = declared(Pick, "pick", "worst:3")  # the three worst, unless asked
    branches: int = flag(16, "Branches K played from each grid step.", panel=EPISODES,
                         rule=at_least(1))
    every: int = flag(10, "Grid: a branch point every N steps from step 0.", panel=EPISODES,
                      rule=at_least(1, "step"))
    noise: float | None = flag(  # None: DEFAULT_NOISE for a deterministic policy, else 0
        None, "Gaussian action noise, in half-widths of the action range, added to a "
        "deterministic policy's actions (discrete actions: the probability of a random one); "
        "default 0.1, or 0 for a stochastic policy (its own sampling). 0 with a "
        "deterministic policy replays the tape.", panel=POLICY, rule=non_negative())
    budget: int | None = flag(None, "At most this many env steps in all: the grid is thinned "
                              "to fit.", panel=SCALE, rule=at_least(1, "step"))
    threshold: float = flag(0.5, "The point of no return (safety) is where the band's upper "
                            "(lower) end stays below (above) this.", panel=EPISODES,
                            rule=Rule(lambda v: 0 < v < 1, "lie strictly between 0 and 1"))
    # Not --seed (eval's: episode i is reset with seed + i): a base the branches' draw from.
    branch_seed: int = flag(0, "Seeds every branch's sampling and noise (with its episode's "
                            "seed, step and number).", panel=EPISODES,
                            rule=at_least(0, why="numpy's SeedSequence takes no sign"))
    # eval's pass-1 processes; unset here: one per core (branches are many short episodes)
    workers: int | None = declared(Workers, "workers")
    env: str | None = declared(ReplayVerb, "env")  # play the branches on it, not the tapes'
    # The executor's own options (its OPTIONS record: Ray's address, ...). On a cluster the
    # run's tapes and policy files must sit at the same path on every machine.
    executor_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse, before any work, numbers no branch run can use."""
        check_flags(self)
        self.one_policy(None)  # one policy (the run's own when none is named)
        if self.workers is not None:
            check_worker_count("--workers", self.workers)
        if self.execute_steps is not None:
            raise UsageError("--execute-steps is for a served policy's chunks, which branch "
                             "does not play; drop it.")


@dataclass
class BranchResult:
    """What a branch run made: its folder and one ``branch.json`` record per episode."""

    out: Path
    episodes: list[dict[str, Any]] = field(default_factory=list)
    thinned: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Source:
    """One chosen episode: its row, tape and grid."""

    episode: Episode
    path: str
    tape: Tape
    grid: list[int]
    label: str


def branch(run: str, **options: Any) -> BranchResult:
    """Branch the chosen episodes of ``run`` (see the module's docstring); options are
    :class:`BranchConfig`'s fields (the API is quiet unless ``quiet=False``)."""
    return branch_run(BranchConfig(run=run, **{"quiet": True, **options}))


def branch_run(cfg: BranchConfig) -> BranchResult:
    """Do what ``cfg`` asks: branch the chosen episodes of its run."""
    from rolltape.outputs.branch_chart import draw_branch_chart
    from rolltape.record import Run

    runner = executors.get(cfg.executor, **cfg.executor_options)  # a bad name: before work
    loaded = Run.load(cfg.run)
    policy, made = _policy_of(loaded, cfg)
    sources = _sources(loaded, cfg)
    deterministic = bool(made.get("deterministic", True))
    noise = cfg.noise if cfg.noise is not None else (DEFAULT_NOISE if deterministic else 0.0)
    every, thinned = _thin(sources, cfg.every, cfg.branches, cfg.budget)
    for s in sources:
        s.grid = list(range(0, s.tape.length, every))
    out = Path(cfg.out) if cfg.out else loaded.path / "branch"
    if out.exists() and not cfg.overwrite:
        raise UsageError(f"'{out}' already exists; pass --overwrite to replace it or choose "
                         "another --out.")
    result = BranchResult(out=out, thinned=thinned)
    with atomic_folder(out) as tmp:
        units = _units(sources, tmp, cfg, noise)
        rows = _play(units, sources, policy, cfg, _success_keys(loaded), runner)
        for s in sources:
            rule = loaded.results.rule_of(s.episode.key.task_key)
            record = _record(s, units, rows, tmp, out, cfg, rule, noise, deterministic,
                             every, thinned)
            write_json(tmp / s.label / "branch.json", record)
            draw_branch_chart(record, tmp / s.label / "branch.png")
            result.episodes.append(record)
    if out == loaded.path / "branch" and (loaded.path / "report.html").is_file():
        _rebuild_report(loaded, result)
    return result


def _rebuild_report(run: Run, result: BranchResult) -> None:
    """Draw the curves under the run's videos (report.html reads ``branch/``); a report
    that cannot be rebuilt is a note, never a lost branch run."""
    from rolltape.outputs.report import build_report

    try:
        build_report(run)
    except (UsageError, OSError) as exc:
        result.notes.append(f"report.html was not rebuilt ({exc}); run `rolltape report "
                            f"{run.path}`.")


def _policy_of(run: Run, cfg: BranchConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's policy as a job needs it ({policy, vecnormalize, algo, deterministic}),
    and its description. A policy that is code named only in the run's files (a module or
    a .py file) is run only when the user names it again with --policy."""
    meta: dict[str, Any] = dict(run.metadata) if run.metadata is not None else {}
    config: dict[str, Any] = dict(meta.get("config") or {})
    made: dict[str, Any] = dict(meta.get("policy") or {})
    named = cfg.one_policy(None)  # the policy the user named, if any
    source = named or config.get("policy")
    if isinstance(source, list):
        source = source[0] if len(source) == 1 else None
    if not source:
        raise UsageError(f"'{run.path}' does not say which policy played it (no metadata.json); "
                         "name it with --policy.")
    if named is None and not (source == "random" or source.startswith(("sb3:", "zoo:"))
                                   or source.endswith(".zip")):
        raise UsageError(f"The run's policy '{source[:200]}' is code (or a server) named only "
                         "in its files, which rolltape does not run (or connect to) unasked; if "
                         f"you trust it, name it with --policy {source[:200]}.")
    if named is not None:
        made = {"deterministic": config.get("deterministic", True)}
    job = {"policy": source, "vecnormalize": cfg.vecnormalize or config.get("vecnormalize"),
           "algo": cfg.algo or config.get("algo"), "deterministic": bool(config.get("deterministic", True))}
    made.setdefault("deterministic", job["deterministic"])
    if source == "random":
        made["deterministic"] = False
    return job, made


def _sources(run: Run, cfg: BranchConfig) -> list[_Source]:
    """The chosen policy episodes, their tapes loaded and checked for branching."""
    from rolltape.outputs.branch_chart import branch_label
    from rolltape.pass1.branches import branch_refusal
    from rolltape.tape import Tape

    episodes = list(run.results.of_role("policy"))
    if not episodes:
        raise UsageError(f"'{run.path}' has no policy episodes to branch.")
    picked = VideoPick.of(cfg.pick, "--pick").pick([e.ret for e in episodes])
    if not picked:
        raise UsageError(f"--pick '{cfg.pick}' picks no episode of '{run.path}'.")
    sources = []
    for i in picked:
        ep = episodes[i]
        path = str(run.tape_path(ep))
        tape = Tape.load(path)
        if cfg.env is None:
            check_tape_env_module(tape.env_id, path)
        refusal = branch_refusal(tape, path)
        if refusal:
            raise UsageError(refusal)
        label = branch_label(ep.tape) if ep.tape else f"policy-{ep.key.index:04d}"
        sources.append(_Source(ep, path, tape, [], label))
    return sources


def _cost(sources: Sequence[_Source], every: int, k: int) -> int:
    """Steps the branches will take at most: from each grid step t to the episode's end as
    recorded (a branch may end sooner), one step more to restore, K times."""
    return k * sum(s.tape.length - t + 1 for s in sources for t in range(0, s.tape.length, every))


def _thin(sources: Sequence[_Source], every: int, k: int, budget: int | None
          ) -> tuple[int, str | None]:
    """The grid step to use: ``every``, doubled until the estimated steps fit ``budget``.

    A budget smaller than the sparsest grid (t = 0 alone) is refused."""
    if budget is None:
        return every, None
    asked, cost = every, _cost(sources, every, k)
    longest = max(s.tape.length for s in sources)
    while cost > budget and every < longest:
        every *= 2
        cost = _cost(sources, every, k)
    if cost > budget:
        raise UsageError(f"--budget {budget} steps cannot hold even one grid point per episode "
                         f"({cost} steps with --branches {k}); raise --budget or lower "
                         "--branches or --pick.")
    if every == asked:
        return every, None
    return every, (f"--budget {budget}: grid thinned from every {asked} to every {every} "
                   f"steps (at most {cost} steps, {_cost(sources, asked, k)} asked)")


def _units(sources: Sequence[_Source], tmp: Path, cfg: BranchConfig, noise: float
           ) -> list[list[BranchUnit]]:
    """Every branch of every source, in order of index; one list per source."""
    from rolltape.pass1.branches import BranchUnit

    units: list[list[BranchUnit]] = []
    index = 0
    for s in sources:
        (tmp / s.label / "tapes").mkdir(parents=True)
        mine = []
        for t in s.grid:
            for k in range(cfg.branches):
                seed = branch_seed(cfg.branch_seed, s.tape.seed or 0, t, k)
                path = tmp / s.label / "tapes" / f"t{t:05d}-k{k:03d}.npz"
                mine.append(BranchUnit("branch", index, seed, str(path), source=s.path,
                                       step=t, branch=k, noise=noise))
                index += 1
        units.append(mine)
    return units


def branch_seed(base: int, episode_seed: int, t: int, k: int) -> int:
    """The seed of branch k from step t of the episode reset with ``episode_seed``: the
    policy's sampling and the action noise draw from it (a 31-bit int, numpy's
    SeedSequence of the four numbers).

    >>> branch_seed(0, 1000, 5, 0) == branch_seed(0, 1000, 5, 0) != branch_seed(0, 1000, 5, 1)
    True
    """
    return int(np.random.SeedSequence([base, episode_seed, t, k]).generate_state(1)[0] >> 1)


def _success_keys(run: Run) -> dict[tuple[Any, Any], str | None]:
    """The info key that says success, per task of a suite run (its resolved manifest's);
    a task not listed (or a one-env run) uses ``is_success``."""
    tasks = (run.results.manifest or {}).get("tasks") or []
    return {(t.get("suite"), t.get("name")): t.get("success_key", "is_success")
            for t in tasks if isinstance(t, dict)}


def _play(units: list[list[BranchUnit]], sources: Sequence[_Source], policy: dict[str, Any],
          cfg: BranchConfig, success_keys: dict[tuple[Any, Any], str | None],
          runner: executors.Executor) -> dict[int, dict[str, Any] | None]:
    """Play every branch on ``runner``'s workers (Ray's: tasks that read the source tapes
    where they run, and return the branch tapes as bytes); each branch's row (None: it
    failed)."""
    from rolltape.pass1.branches import BranchJob
    from rolltape.pass1.dealer import Dealer
    from rolltape.pass1.remote import cut_into_tasks, play_shipped
    from rolltape.pass1.rollout import UNITS, PolicyJob, playing, split_jobs
    from rolltape.pass1.worker import policy_worker
    from rolltape.progress import Progress

    jobs: list[PolicyJob] = []
    for s, mine in zip(sources, units):
        spec = dict(s.tape.env)
        if cfg.env is not None:
            spec["id"] = cfg.env
        jobs.append(BranchJob(env=spec, policy=policy["policy"], episodes=mine,
                              vecnormalize=policy["vecnormalize"], algo=policy["algo"],
                              deterministic=policy["deterministic"],
                              success_key=success_keys.get(s.episode.key.task_key,
                                                           "is_success")))
    total = sum(len(m) for m in units)
    workers = min(per_core(cfg.workers or 0), max(1, total))  # unset: one per core
    chunks = split_jobs(jobs, workers)
    runner.check()
    dealer = Dealer(chunks) if runner.runs_workers else None
    work = ShareWork(worker=policy_worker, args=(0, dealer is not None), env=NO_GL,
                     task=play_shipped, cut=cut_into_tasks, timeout=600.0, units=UNITS,
                     stalled=lambda k, n: playing(dealer.playing[k] if dealer else chunks[k], n),
                     timeout_name="600 s", deal=dealer)
    rows: dict[int, dict[str, Any] | None] = {}
    with Progress(enabled=not cfg.quiet) as bar:
        task = bar.add(f"branches ({workers} worker(s))", total)
        messages = runner.run_shares(work, chunks)
        with closing(messages):
            for kind, payload in messages:
                if kind == "episode":
                    rows[int(payload["index"])] = payload
                    bar.advance(task)
                elif kind == "episode_failed":
                    rows[int(payload["index"])] = None
                    bar.advance(task)
    return rows


def _outcome(tape: Tape, start: int, rule: str, has_success: bool) -> float | None:
    """A branch's outcome: success (1.0/0.0) by the run's rule, or its return from the
    branch step on (the recorded step it begins with left out); None when unknown."""
    from rolltape.tape import sum_rewards

    if has_success:
        flag = tape.success_at_end if rule == "at_end" else tape.success_once
        return None if flag is None else float(bool(flag))
    ret = sum_rewards(tape.rewards[start:].tolist())
    return ret if math.isfinite(ret) else None


def _record(s: _Source, units: list[list[BranchUnit]], rows: dict[int, dict[str, Any] | None],
            tmp: Path, out: Path, cfg: BranchConfig, rule: str, noise: float,
            deterministic: bool, every: int, thinned: str | None) -> dict[str, Any]:
    """The branch.json record of one source episode."""
    from rolltape.tape import Tape, json_safe

    mine = next(m for m in units if m and m[0].source == s.path)
    recorded = s.episode.success(rule)
    has_success = recorded is not None
    points = []
    identical = []
    for t in s.grid:
        outcomes, failed = [], 0
        for u in (u for u in mine if u.step == t):
            if rows.get(u.index) is None:
                failed += 1
                continue
            tape = Tape.load(u.tape_path)
            outcome = _outcome(tape, t - tape.start_step, rule, has_success)
            if outcome is None:
                failed += 1
                continue
            outcomes.append(outcome)
            if noise == 0 and deterministic:
                identical.append(same_as_source(tape, s.tape, t))
        points.append(_point(t, outcomes, failed, has_success, s.tape, cfg.branch_seed))
    band = "hi" if recorded is False else "lo"
    record: dict[str, Any] = {
        "schema_version": SCHEMA,
        "run": str(Path(cfg.run)),
        "episode": {"index": s.episode.key.index, "seed": s.episode.key.seed,
                    "tape": s.episode.tape, "length": s.tape.length,
                    "return": s.episode.ret, "success": recorded},
        "estimate": "P(success | state at t)" if has_success else "E[return from t | state at t]",
        "success_rule": rule if has_success else None,
        "band": ("Wilson 95%" if has_success else "bootstrap 95% of the mean"),
        "perturbation": ((f"a uniformly random action with probability {noise:g}, seeded "
                          "per branch" if s.tape.actions.dtype.kind in "iu" else
                          f"Gaussian action noise sigma={noise:g} of the action range's "
                          "half-width, seeded per branch") if noise else
                         ("the policy's own sampling, seeded per branch" if not deterministic
                          else "none (deterministic policy, noise 0): every branch replays "
                               "the episode")),
        "branches": cfg.branches,
        "every": every,
        "asked_every": cfg.every,
        "thinned": thinned,
        "threshold": cfg.threshold,
        "grid": s.grid,
        "points": points,
        "tapes": f"{s.label}/tapes",
    }
    if has_success:
        name = "point_of_no_return" if recorded is False else "point_of_safety"
        record[name] = _stays(points, band, cfg.threshold, below=recorded is False)
        record["crossing"] = _stays(points, "p", cfg.threshold, below=recorded is False)
    if identical:
        record["replays_source"] = all(identical)
    return json_safe(record)


def _point(t: int, outcomes: list[float], failed: int, has_success: bool, tape: Tape,
           seed: int) -> dict[str, Any]:
    """One grid step's estimate and band."""
    from rolltape.stats import bootstrap_ci, wilson_interval
    from rolltape.tape import sum_rewards

    n = len(outcomes)
    row: dict[str, Any] = {"t": t, "n": n, "failed": failed}
    if not n:
        return {**row, "p": None, "lo": None, "hi": None}
    if has_success:
        s = int(sum(outcomes))
        lo, hi = wilson_interval(s, n)
        return {**row, "successes": s, "p": s / n, "lo": lo, "hi": hi}
    mean = float(np.mean(outcomes))
    lo, hi = bootstrap_ci(outcomes, np.mean, seed=seed)
    recorded = sum_rewards(tape.rewards[t:].tolist())
    return {**row, "p": mean, "lo": float(lo), "hi": float(hi), "recorded": recorded}


def _stays(points: list[dict[str, Any]], key: str, threshold: float, below: bool) -> int | None:
    """The first grid step from which ``key`` stays below (or above) ``threshold`` to the
    end of the grid, or None when the last point is not there yet.

    >>> pts = [{"t": 0, "hi": .9}, {"t": 5, "hi": .3}, {"t": 10, "hi": .6}, {"t": 15, "hi": .2}]
    >>> _stays(pts, "hi", 0.5, below=True)
    15
    """
    first = None
    for p in points:
        value = p.get(key)
        ok = value is not None and (value < threshold if below else value > threshold)
        if ok and first is None:
            first = p["t"]
        elif not ok:
            first = None
    return first


def same_as_source(branch_tape: Tape, source: Tape, t: int) -> bool:
    """Whether a branch from step t replays the source's steps t.. bit for bit: its
    actions, rewards and both flags (with the source's steps it begins with, from its
    ``start_step``)."""
    first = branch_tape.start_step
    n = source.length - first
    if branch_tape.length != n:
        return False
    return (np.array_equal(branch_tape.actions, source.actions[first:])
            and np.array_equal(branch_tape.rewards, source.rewards[first:], equal_nan=True)
            and np.array_equal(branch_tape.terminated, source.terminated[first:])
            and np.array_equal(branch_tape.truncated, source.truncated[first:]))


