"""One evaluation's choices, checked before any work: :class:`EvalConfig` and the envs a
run evaluates (:class:`Target`, one per env or suite task). What ``--video`` picks is a
:class:`rolltape.video_pick.VideoPick` (``EvalConfig.video``); ``video_picks``,
``check_video``, ``needs_returns`` and ``select_episodes`` here are its questions asked of a
value in any form the API takes.

Everything here is refused or accepted before a worker starts, so a bad flag costs nothing
and leaves nothing half-written.

May import: the render side's request types and checks, executors (to pick one), envs,
suites, limits, errors, video_pick. Never: torch, GL (checks that need MuJoCo run in a fresh
interpreter), the orchestrator.

>>> video_picks("best:2,0")
[('best', 2), ('index', 0)]
>>> select_episodes("best", [1.0, 5.0, 3.0])
[1]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from rolltape import executors
from rolltape.address import is_served
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.executors.base import Executor
from rolltape.executors.launch import check_worker_count
from rolltape.flags import (
    EPISODES,
    OUTPUT,
    POLICY,
    SCALE,
    VIDEO,
    above,
    check_field,
    flag,
    parse_kwargs,
)
from rolltape.groups import (
    EnvOptions,
    Episodes,
    ExecutorChoice,
    PolicyFiles,
    Served,
    SuiteOptions,
    Workers,
    declared,
)
from rolltape.interpreter import NO_GL
from rolltape.limits import check_fps, check_run_counts
from rolltape.outputs.artifacts import artifact_paths
from rolltape.pass1.rollout import EPISODE_TIMEOUT
from rolltape.pass1.wrappers import split_wrapper, wrapper_entries
from rolltape.pass2.request import RenderOptions, ReplayOptions
from rolltape.record import check_success_rule
from rolltape.video_pick import Given, VideoPick

if TYPE_CHECKING:
    from rolltape.suites.manifest import Manifest, Task



def video_picks(selection: VideoPick | Given) -> list[tuple[str, int]]:
    """Parse ``--video`` without the episodes: ("count", N), ("all", 0), ("index", i), or
    ("best" | "worst" | "median", how many). Refuses what it does not understand."""
    return list(VideoPick.of(selection).picks)


def check_video(selection: VideoPick | Given, episodes: int) -> None:
    """Refuse, before any work, a ``--video`` index outside the run's episodes."""
    VideoPick.of(selection).check(episodes)


def select_episodes(selection: VideoPick | Given,
                    returns: Sequence[float | None]) -> list[int]:
    """Which episodes get a video: a count (the first N), 'all', 'best', 'worst', 'median'
    (``best:3``: the three best), or explicit indices like '0,7,12'; several words may be
    joined with commas; ``returns`` are the episodes' (None: not a finite number). Among equal
    returns the lowest index comes first (:meth:`VideoPick.pick`)."""
    return VideoPick.of(selection).pick(returns)


def check_render_options(*, fps: float | None = None, render_timeout: float | None = None,
                         formats: str | None = None) -> None:
    """Refuse render options given on their own (before their records are made), by the
    rules their fields declare: ``fps`` (a request's), ``render_timeout`` (eval's); and an
    unknown or empty ``formats``."""
    from rolltape.pass2.request import RenderRequest

    check_field(RenderRequest, "fps", fps)
    check_fps(fps)
    check_field(EvalConfig, "render_timeout", render_timeout)
    artifact_paths("x", formats)  # refuses an unknown or empty --format


def check_drawing(spec: dict[str, Any], cfg: EvalConfig) -> None:
    """Before pass 1: a video's --width/--height and --camera must fit the env (an unknown
    camera or body, or a size the env ignores, would otherwise surface only after every
    episode was played). Checked in a spawned process, which imports MuJoCo for us."""
    cameras = [c for c in cfg.cameras if c != "default"]
    if not cfg.wants_video or (not cameras and cfg.width is None and cfg.height is None):
        return
    from rolltape.interpreter import ChildFailed, run_once
    from rolltape.pass2.cameras import drawing_problem
    from rolltape.suites.hosted import render_python

    python = render_python([spec["id"]])
    if python is not None:  # a hosted suite's env: pass 2 draws it in its venv, built there
        spec = {key: value for key, value in spec.items() if key != "served"}
    try:
        problem = run_once(drawing_problem, spec, cfg.width, cfg.height, cameras, env=NO_GL,
                           python=python)
    except ChildFailed:
        problem = None  # it died: pass 1 builds the same env and reports why
    if problem:
        raise UsageError(problem)


class BuildCheck:
    """Before a suite's pass 1, each task's env is built once in a fresh interpreter (which
    imports the simulators, never this process), so that a task whose kwargs its env
    refuses is one sentence before any episode, not a failure after the tasks before it
    played. It starts with :meth:`start` and runs beside the pass-1 worker's imports;
    :meth:`finish` waits for it. A single env is tried by pass 1's first opening of it
    (:func:`rolltape.pass1.rollout.open_policy_env`), before any episode too."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from rolltape.envs.build import build_problem
        from rolltape.interpreter import run_once

        self._answer = None
        if specs:
            pool = ThreadPoolExecutor(1, thread_name_prefix="rolltape-build-check")
            self._answer = pool.submit(run_once, build_problem, specs, env=NO_GL, timeout=600)
            pool.shutdown(wait=False)

    @classmethod
    def start(cls, targets: list[Target]) -> BuildCheck:
        """Try the envs of a suite run's targets (those built here, not served ones)."""
        local = [t.spec for t in targets if not t.spec.get("served")]
        return cls(local if targets and targets[0].manifest is not None else [])

    def finish(self) -> None:
        """Refuse the first env that could not be built (a child that died or hung says
        nothing: pass 1 builds the same envs and reports why)."""
        from rolltape.interpreter import ChildFailed

        if self._answer is None:
            return
        try:
            problem = self._answer.result()
        except ChildFailed:
            return
        if problem:
            raise UsageError(problem)


def parse_wrappers(texts: Sequence[Any] | None) -> tuple[Any, ...]:
    """``--wrapper`` values: a preset (atari) or MODULE:CLASS, then ``,KEY=VALUE`` arguments;
    what is not text (the Python API's {target, kwargs}) is kept as given."""
    out: list[Any] = []
    for text in texts or ():
        if isinstance(text, str):
            target, pairs = split_wrapper(text)
            text = {"target": target, "kwargs": parse_kwargs(pairs, "--wrapper")}
        out.append(text)
    return tuple(out)


@dataclass(frozen=True)
class EvalConfig(Episodes, EnvOptions, SuiteOptions, Served, PolicyFiles, ExecutorChoice,
                 ReplayOptions, RenderOptions):
    """Every choice of one evaluation; stored in metadata.json as the run's config. How
    videos are drawn and checked is the :class:`RenderOptions` every render request has."""

    env: str | None  # None: a suite run (``suite``); the command's argument
    policy: str = "random"  # the command line's --policy is repeatable (a comparison)
    baseline: str | None = flag(None, "'random': run it on the same seeds.", panel=POLICY)
    success: str = flag(  # the headline success
        "at_end", "Headline success: at_end (the env's success key on the last step, "
        "LeRobot's rule) or once (at some step); both are reported.", panel=EPISODES)
    deterministic: bool = True  # the command line's --stochastic / --deterministic
    policy_timeout: float | None = flag(  # folded into a ws:// source (policy_server.wire)
        None, "A served policy: seconds to wait for one answer before the episode fails "
        "(default 30).", panel=POLICY)
    # A served policy's --max-sessions, from its metadata: each worker plays several episodes
    # at once on sessions of their own when its sessions are independent (pass1.inflight).
    policy_sessions: int = 1
    latency: str | None = flag(  # a simulated clock (pass1.clock): D steps, 'Dms', or a list
        None, "Inference latency on a simulated clock: D control steps (or 'Dms', rounded up "
        "to whole steps) between an observation and its chunk taking over; several (0,2,4) "
        "evaluate each and chart success against latency.", panel=POLICY)
    execution: str = flag(
        "sync", "With --latency: sync (the next chunk is asked for when the current one is "
        "done) or async (D steps before it is done); 'sync,async' evaluates both.",
        panel=POLICY)
    hold: str = flag("last", "With --latency: what plays while no chunk has an action left: "
                             "last (the last action) or zero.", panel=POLICY)
    blend: str = flag("none", "With --latency and async execution: none, or linear (mix the "
                              "overlap of two chunks).", panel=POLICY)
    wrappers: tuple[Any, ...] = flag(  # presets, MODULE:CLASS or {target, kwargs}
        (), "Policy-side wrapper, repeatable: a preset (atari: SB3's AtariWrapper) or "
        "MODULE:CLASS[,KEY=VALUE...]; the tape records the base env.", panel=POLICY,
        names=("--wrapper",), cli_type=Optional[List[str]], cli_default=None,
        parse=parse_wrappers)
    frame_stack: int = flag(0, "Stack N observations for the policy, as SB3's VecFrameStack "
                               "does (0 or 1: none).", panel=POLICY)
    zoo: dict[str, Any] | None = None  # --policy zoo:FOLDER: the folder and the files read
    workers: int = declared(Workers, "workers", 1)  # pass 1: each process loads the policy
    batched_inference: bool = flag(  # one policy process, `workers` env processes (opt-in)
        False, "One policy process acting on --workers env processes (a served env: --workers "
        "sessions of its server's --num-envs) in one forward pass per step; actions can "
        "differ in the last bits from per-row inference.", panel=SCALE)
    simulator: str = flag(  # what pass 1 steps: the env's own, or MuJoCo Warp (pass1.mjwarp)
        "env", "What pass 1 steps: env (the env's own simulator) or mjwarp (MuJoCo Warp: "
        "every episode a world of one batch, on the GPU when there is one; HalfCheetah-v5 and "
        "Ant-v5). GL libraries are --backends.", panel=SCALE)
    executor_options: dict[str, Any] = field(default_factory=dict)  # e.g. Ray's address
    video: VideoPick = flag(  # the API's count, text or indices become a record (post_init)
        VideoPick(0), "Episodes to render: N, all, best, worst, median (best:3: several), "
        "or 0,3,7.", panel=VIDEO, cli_type=str, cli_default="0")
    render_workers: int = flag(  # 0: one per CPU core (a long video is split across them)
        0, "Pass-2 render processes; 0 (default): one per CPU core, splitting long videos.",
        panel=SCALE)
    render_early: bool = flag(  # pass 2 beside pass 1 on every core, not only idle ones
        False, "Render videos picked by count or index on every core while pass 1 still runs "
        "(without it: on the cores pass 1 leaves idle): the run ends sooner, pass 1 itself may "
        "slow a little.", panel=SCALE)
    render_timeout: float = flag(120.0, "Seconds without progress before a render worker "
                                        "counts as hung.", panel=SCALE, rule=above(0))
    episode_timeout: float = flag(  # a pass-1 worker that finishes no episode for this long
        EPISODE_TIMEOUT, "Seconds a pass-1 worker may take for one episode before it counts "
        "as hung.", panel=SCALE,  # is stopped (a hung env or policy)
        rule=above(0, "a number of seconds"))
    report: bool = flag(True, "Write report.html and report.ipynb.", panel=OUTPUT)
    viewer: bool = flag(  # copies ~13 MB of WebAssembly into the run: the API opts in
        False, "Add the interactive 3-D replay to the report.", panel=OUTPUT,
        cli_default=True)

    def __post_init__(self) -> None:
        RenderOptions.__post_init__(self)
        ReplayOptions.__post_init__(self)
        # The Python API (and dataclasses.replace) give --video as a count, text or
        # indices: it is read once, here, into the record every reader asks.
        object.__setattr__(self, "video", VideoPick.of(self.video))

    def clock_request(self) -> dict[str, Any] | None:
        """The simulated clock pass 1 plays the policy on (None: none, as at D = 0 sync).
        ``latency`` stays text: milliseconds become steps in the worker, from its env's
        control period."""
        from rolltape.pass1.clock import Clock, latency_steps

        if self.latency is None:
            Clock(0, self.execution, self.hold, self.blend)
            return None
        if "," in self.latency or "," in self.execution:
            raise UsageError("Several --latency or --execution values make a sweep, which "
                             "`rolltape eval` runs; evaluate() takes one of each.")
        if self.batched_inference:
            raise UsageError("--latency plays each episode on its own clock; drop "
                             "--batched-inference.")
        if self.latency.strip() == "measured":
            if not self.policy.startswith("ws://"):
                raise UsageError("--latency measured times a policy server's answers; give "
                                 "--policy ws://HOST:PORT, or the latency in steps or ms.")
            Clock(1, self.execution, self.hold, self.blend)
            return {"latency": "measured", "execution": self.execution, "hold": self.hold,
                    "blend": self.blend}  # made steps before pass 1 (evaluation)
        steps = latency_steps(self.latency, 1.0)  # the syntax; the steps come from the env
        clock = Clock(min(steps, 1) if self.latency.strip().endswith("ms") else steps,
                      self.execution, self.hold, self.blend)
        if clock.changes_nothing:
            return None
        return {"latency": self.latency.strip(), "execution": self.execution,
                "hold": self.hold, "blend": self.blend}

    def check(self) -> list[str]:
        """Refuse bad values before any work; return notes (e.g. a clamped worker count)."""
        notes = []
        if self.suite is not None and self.env is not None:
            raise UsageError(f"Give either an env ('{self.env}') or --suite ('{self.suite}'), "
                             "not both: a suite names its envs.")
        if self.suite is None and self.env is None:
            raise UsageError("Give an env to evaluate (e.g. HalfCheetah-v5) or --suite NAME "
                             "(see `rolltape suites`).")
        if self.tasks is not None and self.suite is None:
            raise UsageError("--tasks picks tasks of a suite; give --suite too.")
        if self.served is not None and self.suite is None:
            raise UsageError("--served steps a suite's tasks on `rolltape serve --suite`; give "
                             "--suite too, or one served env as tcp://HOST:PORT/ENV_ID.")
        if self.suite is not None and self.batched_inference:
            raise UsageError("--batched-inference runs one env; drop it for a --suite run.")
        if self.suite is not None and self.env_kwargs:
            raise UsageError("--env-kwargs shapes one env; give a suite's tasks their kwargs "
                             "in its manifest.")
        local = self.runner.runs_workers  # built here: an unknown name or option is refused
        check_worker_count("--workers", self.workers, local=local)
        check_worker_count("--render-workers", self.render_workers, 0, local)  # 0: per core
        if self.baseline not in (None, "random"):
            raise UsageError(f"--baseline '{self.baseline}' is not supported; use 'random' "
                             "or leave it off.")
        check_success_rule(self.success)
        check_run_counts(episodes=self.episodes, seed=self.seed,
                         max_episode_steps=self.max_episode_steps)
        check_render_options(render_timeout=self.render_timeout, formats=self.video_format)
        if self.suite is None:  # a suite's tasks may set their own counts: checked per task
            self.video.check(self.episodes)
        self.clock_request()  # refuses a malformed --latency, --execution, --hold or --blend
        wrapper_entries(self.wrappers, self.frame_stack)  # refuses a malformed one
        from rolltape.policies import sb3_checkpoint

        checkpoint = self.policy[4:] if self.policy.startswith("sb3:") else self.policy
        if self.policy.startswith("sb3:") and not sb3_checkpoint(checkpoint).is_file():
            raise UsageError(f"--policy: checkpoint '{checkpoint}' does not exist; check the "
                             "path.")
        for path, what in ((checkpoint, "Checkpoint"),
                           (self.vecnormalize, "VecNormalize statistics")):
            if path and str(path).endswith((".zip", ".pkl")) and not Path(path).is_file():
                raise UsageError(f"{what} '{path}' does not exist; check the path.")
        if self.batched_inference:
            if not self.runner.runs_workers:
                raise UsageError(f"--batched-inference runs its env processes on this machine "
                                 f"(the local executor); drop --executor {self.executor} or "
                                 "--batched-inference.")
            envs = (f"{self.workers} session(s) x the server's --num-envs" if
                    is_served(self.env or "") else str(self.workers))
            notes.append(f"--batched-inference: the policy acts on {envs} observations "
                         "in one forward pass, which can round differently from one at a time; "
                         "tapes may differ in the last bits of their actions from a run "
                         "without it (they still replay exactly).")
        if self.simulator != "env":
            notes.extend(self.check_simulator())
        if self.render_early and self.wants_video and not self.renders_early:
            notes.append("--render-early needs one env (not a suite), the local executor and "
                         "videos picked by count or index (best/worst/median wait for every "
                         "return); pass 2 started after pass 1.")
        if self.workers > self.episodes and self.suite is None and self.simulator == "env":
            notes.append(f"--workers {self.workers} is more than the {self.episodes} episodes; "
                         f"using {self.episodes}.")
        return notes

    def check_simulator(self) -> list[str]:
        """Refuse what ``--simulator mjwarp`` cannot do (one env it models, one local process,
        the policy acting on the whole batch); return its notes."""
        if self.simulator != "mjwarp":
            raise UsageError(f"--simulator '{self.simulator}' is not one rolltape steps; "
                             "use env (the env's own, the default) or mjwarp (GL libraries "
                             "go in --backends).")
        from rolltape.envs.mjwarp import SUPPORTED, require_extra

        if self.env not in SUPPORTED:
            raise UsageError(f"--simulator mjwarp steps {', '.join(SUPPORTED)}, not "
                             f"{self.env or 'a suite'!r}; evaluate that with its own "
                             "simulator (drop --simulator).")
        for given, name in ((self.batched_inference, "--batched-inference"),
                            (self.wrappers or self.frame_stack > 1, "--wrapper/--frame-stack"),
                            (self.latency is not None, "--latency")):
            if given:
                raise UsageError(f"--simulator mjwarp plays every episode in one batch of "
                                 f"worlds; drop {name}.")
        if not self.runner.runs_workers:
            raise UsageError(f"--simulator mjwarp runs on this machine (the local executor); "
                             f"drop --executor {self.executor}.")
        require_extra("--simulator mjwarp")
        return [f"--simulator mjwarp: {self.episodes} worlds stepped at once in one process "
                "(--workers is not used); MJWarp computes in float32, so its tapes verify on "
                "MJWarp, and `rolltape verify --flips` says how CPU MuJoCo would differ."]

    @cached_property
    def runner(self) -> Executor:
        """The executor, picked once from its name and options (not part of the config)."""
        return executors.get(self.executor, **self.executor_options)

    @property
    def wants_video(self) -> bool:
        return self.video.wanted

    @property
    def renders_early(self) -> bool:
        """Pass 2 starts beside pass 1: asked for, and possible (local executor, videos
        picked without needing the returns)."""
        # By itself only for the first N or given indices: 'all' waits for every episode
        # anyway, and its workers start warm while pass 1 plays.
        alone = self.idle_cores > 0 and self.wants_video and all(
            kind in ("count", "index") for kind, _ in self.video.picks)
        return ((self.render_early or alone) and self.wants_video
                and self.runner.warms_workers and not self.video.needs_returns
                and self.suite is None)

    @property
    def idle_cores(self) -> int:
        """Cores pass 1 leaves idle on this machine (its workers, and with batched
        inference its policy process, take one each): pass 2 starts on them beside pass 1
        by itself when the videos are picked without returns, so a small job does not wait
        for its video after its numbers; ``render_early`` takes every core instead."""
        busy = (1 if self.simulator == "mjwarp" else
                self.workers + (1 if self.batched_inference else 0))
        return max(0, (os.cpu_count() or 1) - busy)


def needs_returns(selection: VideoPick | Given) -> bool:
    """True when picking the episodes to render needs their returns (best/worst/median)."""
    return VideoPick.of(selection).needs_returns


@dataclass(frozen=True)
class Target:
    """One env of a run: a single-env run has one, a suite run one per task."""

    spec: dict[str, Any]
    episodes: int
    task: Task | None = None  # a suite's task
    manifest: Manifest | None = None  # the suite run's resolved manifest (on every target)

    @property
    def where(self) -> tuple[str | None, str | None]:
        return (self.task.suite, self.task.name) if self.task is not None else (None, None)


def targets_of(cfg: EvalConfig) -> list[Target]:
    """The envs ``cfg`` evaluates: its env, or every task of its suite (checked here:
    each task's benchmark package installed, each env id known)."""
    if cfg.suite is None:
        assert cfg.env is not None  # EvalConfig.check refuses neither
        return [Target(env_spec(cfg.env, cfg.env_kwargs, cfg.max_episode_steps), cfg.episodes)]
    from rolltape.suites.builtin import check_installed, resolve_suite
    from rolltape.suites.manifest import select_tasks, with_defaults

    manifest = with_defaults(select_tasks(resolve_suite(cfg.suite), cfg.tasks), cfg.episodes,
                             cfg.max_episode_steps, cfg.success)
    for task in manifest.tasks:
        check_installed(task)
        cfg.video.check(task.episodes or cfg.episodes)  # with_defaults set it
    targets = [Target(env_spec(t.env, t.kwargs, t.max_episode_steps), t.episodes or cfg.episodes,
                      t, manifest)
               for t in manifest.tasks]
    if cfg.served is not None:  # each task steps on the server's env of its name
        from rolltape.address import served_task_spec

        targets = [replace(t, spec=served_task_spec(t.spec, cfg.served, t.task.key))
                   for t in targets if t.task is not None]
    return targets
