"""One evaluation's choices, checked before any work: :class:`EvalConfig`, what ``--video``
picks, and the envs a run evaluates (:class:`Target`, one per env or suite task).

Everything here is refused or accepted before a worker starts, so a bad flag costs nothing
and leaves nothing half-written.

May import: the render side's request types and checks, executors (to pick one), envs,
suites, limits, errors. Never: torch, GL (checks that need MuJoCo run in a fresh
interpreter), the orchestrator.

>>> video_picks("best:2,0")
[('best', 2), ('index', 0)]
>>> select_episodes("best", [1.0, 5.0, 3.0])
[1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rolltape import executors
from rolltape.address import is_served
from rolltape.envs import env_spec
from rolltape.errors import UsageError, check_choice
from rolltape.executors.base import Executor
from rolltape.executors.launch import check_worker_count
from rolltape.interpreter import NO_GL
from rolltape.limits import check_fps, check_run_counts
from rolltape.outputs.artifacts import artifact_paths
from rolltape.pass1.rollout import EPISODE_TIMEOUT
from rolltape.pass1.wrappers import wrapper_entries
from rolltape.pass2.backends import DEFAULT_ORDER, parse_backends
from rolltape.pass2.cameras import check_layout
from rolltape.pass2.replay import MODES, QUALITY, RenderOptions
from rolltape.record import check_success_rule

if TYPE_CHECKING:
    from rolltape.suites.manifest import Manifest, Task

ON_DIVERGENCE = ("warn", "fail")


def video_picks(selection: int | str | Sequence[int]) -> list[tuple[str, int]]:
    """Parse ``--video`` without the episodes: ("count", N), ("all", 0), ("index", i), or
    ("best" | "worst" | "median", how many). Refuses what it does not understand."""
    hint = ("use a count, 'all', 'best', 'worst', 'median' (best:3 for several) or "
            "episode indices like '0,3'.")
    if isinstance(selection, int):
        if selection < 0:
            raise UsageError(f"--video must be a count of 0 or more, got {selection}.")
        return [("count", selection)]
    if not isinstance(selection, str):
        return [("index", int(i)) for i in selection]
    text = selection.strip().lower()
    if text.isdigit():
        return [("count", int(text))]
    picks = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        name, colon, many = word.partition(":")
        if name in ("best", "worst", "median") and (not colon or many.isdigit()):
            if colon and int(many) < 1:
                raise UsageError(f"--video '{word}' picks no episode; {hint}")
            picks.append((name, int(many) if colon else 1))
        elif word == "all":
            picks.append(("all", 0))
        elif word.lstrip("-").isdigit():
            picks.append(("index", int(word)))
        else:
            raise UsageError(f"--video '{selection}' is not understood; {hint}")
    return picks


def check_video(selection: int | str | Sequence[int], episodes: int) -> None:
    """Refuse, before any work, a ``--video`` index outside the run's episodes."""
    for kind, i in video_picks(selection):
        if kind == "index" and not 0 <= i < episodes:
            raise UsageError(f"--video asks for episode {i} but the run has episodes "
                             f"0..{episodes - 1}.")


def select_episodes(selection: int | str | Sequence[int],
                    returns: Sequence[float | None]) -> list[int]:
    """Which episodes get a video: a count (the first N), 'all', 'best', 'worst', 'median'
    (``best:3``: the three best), or explicit indices like '0,7,12'; several words may be
    joined with commas; ``returns`` are the episodes' (None: not a finite number). Among equal
    returns the lowest index comes first."""
    n = len(returns)
    check_video(selection, n)
    # Highest return first, lowest index first among equals (and the same for worst); an
    # episode whose return is not a finite number (None) is neither best nor worst.
    finite = {i: r for i in range(n) if (r := returns[i]) is not None}
    ranked = list(finite)
    best = sorted(finite, key=lambda i: (-finite[i], i))
    worst = sorted(finite, key=lambda i: (finite[i], i))
    n_ranked = len(ranked)
    picked: list[int] = []
    for kind, k in video_picks(selection):
        if kind == "count":
            picked.extend(range(min(k, n)))
        elif kind == "all":
            picked.extend(range(n))
        elif kind == "index":
            picked.append(k)
        elif kind == "best":
            picked.extend(best[:k])
        elif kind == "worst":
            picked.extend(worst[:k])
        else:  # the k episodes around the median return
            first = max(0, min((n_ranked - 1) // 2 - (k - 1) // 2, n_ranked - k))
            picked.extend(worst[first:first + k])
    return sorted(set(picked))


def check_render_options(*, width: int | None = None, height: int | None = None,
                         fps: float | None = None, rtol: float = 0.0, atol: float = 0.0,
                         render_timeout: float | None = None, formats: str | None = None
                         ) -> None:
    """Refuse render options out of range (shared by eval and render), before any work."""
    for flag, size in (("--width", width), ("--height", height)):
        if size is not None and size < 1:
            raise UsageError(f"{flag} must be at least 1 pixel, got {size}.")
    # `not x > 0` is also true for NaN, which every comparison rejects.
    for flag, seconds in (("--fps", fps), ("--render-timeout", render_timeout)):
        if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
            raise UsageError(f"{flag} must be a number above 0, got {seconds}.")
    check_fps(fps)
    for flag, tol in (("--rtol", rtol), ("--atol", atol)):
        if not (tol >= 0 and math.isfinite(tol)):
            raise UsageError(f"{flag} must be a finite number of 0 or more, got {tol}.")
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

    try:
        problem = run_once(drawing_problem, spec, cfg.width, cfg.height, cameras, env=NO_GL)
    except ChildFailed:
        problem = None  # it died: pass 1 builds the same env and reports why
    if problem:
        raise UsageError(problem)


@dataclass(frozen=True)
class EvalConfig(RenderOptions):
    """Every choice of one evaluation; stored in metadata.json as the run's config. How
    videos are drawn and checked is the :class:`RenderOptions` every render request has."""

    env: str | None  # None: a suite run (``suite``)
    policy: str = "random"
    episodes: int = 10
    seed: int = 0
    baseline: str | None = None
    success: str = "at_end"  # the headline success: "at_end" (LeRobot's rule) or "once"
    vecnormalize: str | None = None
    algo: str | None = None
    deterministic: bool = True
    wrappers: tuple[Any, ...] = ()  # policy-side: presets, MODULE:CLASS or {target, kwargs}
    frame_stack: int = 0  # policy-side, as SB3's VecFrameStack (0 or 1: none)
    zoo: dict[str, Any] | None = None  # --policy zoo:FOLDER: the folder and the files read
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    workers: int = 1
    batched_inference: bool = False  # one policy process, `workers` env processes (opt-in)
    executor: str = "local"  # a name of rolltape.executors (local, ray, or one registered)
    executor_options: dict[str, Any] = field(default_factory=dict)  # e.g. Ray's address
    video: Any = 0
    video_format: str = "mp4"
    backends: tuple[str, ...] = DEFAULT_ORDER
    render_workers: int = 0  # 0: one per CPU core (a long video is split across them)
    render_early: bool = False  # start pass 2 beside pass 1 (sooner overall; pass 1 may slow)
    on_divergence: str = "warn"
    render_timeout: float = 120.0
    episode_timeout: float = EPISODE_TIMEOUT  # a pass-1 worker that finishes no episode for
                                              # this long is stopped (a hung env or policy)
    report: bool = True  # report.html and report.ipynb
    viewer: bool = False  # the 3-D replay page (copies ~13 MB of WebAssembly into the run)
    suite: str | None = None  # a built-in suite's name or a manifest.yaml (rolltape.suites)
    tasks: str | None = None  # with ``suite``: only these tasks (comma-separated)
    served: str | None = None  # with ``suite``: tcp://HOST:PORT of `rolltape serve --suite`

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
        if self.episodes < 1:
            raise UsageError(f"--episodes must be at least 1, got {self.episodes}.")
        local = self.runner.runs_workers  # built here: an unknown name or option is refused
        check_worker_count("--workers", self.workers, local=local)
        check_worker_count("--render-workers", self.render_workers, 0, local)  # 0: per core
        if self.baseline not in (None, "random"):
            raise UsageError(f"--baseline '{self.baseline}' is not supported; use 'random' "
                             "or leave it off.")
        check_choice("--on-divergence", self.on_divergence, ON_DIVERGENCE)
        check_success_rule(self.success)
        check_choice("--mode", self.mode, MODES)
        check_choice("--quality", self.quality, tuple(QUALITY))
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise UsageError(f"--max-episode-steps must be at least 1, got "
                             f"{self.max_episode_steps}.")
        if self.seed < 0:
            raise UsageError(f"--seed must be 0 or more (Gymnasium seeds are unsigned), got "
                             f"{self.seed}.")
        check_run_counts(episodes=self.episodes, seed=self.seed,
                         max_episode_steps=self.max_episode_steps)
        check_render_options(width=self.width, height=self.height, rtol=self.rtol,
                             atol=self.atol, render_timeout=self.render_timeout,
                             formats=self.video_format)
        if self.suite is None:  # a suite's tasks may set their own counts: checked per task
            check_video(self.video, self.episodes)
        if not self.episode_timeout > 0 or self.episode_timeout == float("inf"):
            raise UsageError(f"--episode-timeout must be a number of seconds above 0, got "
                             f"{self.episode_timeout}.")
        check_layout(self.layout, self.cameras)
        parse_backends(self.backends)
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
        if self.render_early and self.wants_video and not self.renders_early:
            notes.append("--render-early needs one env (not a suite), the local executor and "
                         "videos picked by count or index (best/worst/median wait for every "
                         "return); pass 2 started after pass 1.")
        if self.workers > self.episodes and self.suite is None:
            notes.append(f"--workers {self.workers} is more than the {self.episodes} episodes; "
                         f"using {self.episodes}.")
        return notes

    @cached_property
    def runner(self) -> Executor:
        """The executor, picked once from its name and options (not part of the config)."""
        return executors.get(self.executor, **self.executor_options)

    @property
    def wants_video(self) -> bool:
        return self.video not in (0, "0", "", "none", None, [], ())

    @property
    def renders_early(self) -> bool:
        """Pass 2 starts beside pass 1: asked for, and possible (local executor, videos
        picked without needing the returns)."""
        return (self.render_early and self.wants_video and self.runner.warms_workers
                and not needs_returns(self.video) and self.suite is None)


def needs_returns(selection: Any) -> bool:
    """True when picking the episodes to render needs their returns (best/worst/median)."""
    return any(kind in ("best", "worst", "median") for kind, _ in video_picks(selection))


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
        check_video(cfg.video, task.episodes or cfg.episodes)  # with_defaults set it
    targets = [Target(env_spec(t.env, t.kwargs, t.max_episode_steps), t.episodes or cfg.episodes,
                      t, manifest)
               for t in manifest.tasks]
    if cfg.served is not None:  # each task steps on the server's env of its name
        from rolltape.address import served_task_spec

        targets = [replace(t, spec=served_task_spec(t.spec, cfg.served, t.task.key))
                   for t in targets if t.task is not None]
    return targets
