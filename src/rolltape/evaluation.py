"""``rolltape.evaluate``: pass 1 for the policy (and a random baseline), then pass 2 videos.
(The module is ``evaluation``: one named ``evaluate`` would hide the function once imported.)

The orchestrator imports neither torch nor GL: the policy runs in a spawned pass-1 worker,
videos come from spawned render workers, and only files and small messages travel.

May import: pass 1's job types, the render side's request types, executors, outputs. Never:
torch, GL (the policy and MuJoCo live in workers).

Example (not run: it evaluates a checkpoint):
    >>> run = evaluate("HalfCheetah-v5", "sb3:ppo.zip", vecnormalize="vecnormalize.pkl",
    ...                episodes=30, seed=1000, baseline="random", video=2, out="runs/cheetah")
    >>> run.results.summary["policy"].mean
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from rolltape import executors, stats
from rolltape.address import is_served
from rolltape.envs import env_spec, json_safe
from rolltape.errors import DivergenceError, Interrupted, RunFailed, UsageError, check_choice
from rolltape.executors.base import Executor, ShareWork
from rolltape.executors.launch import (
    check_worker_count,
    signals_deferred,
    sigterm_raises,
    stop_workers,
)
from rolltape.executors.local import Prestart
from rolltape.interpreter import NO_GL
from rolltape.limits import check_folder_name, check_fps, check_run_counts
from rolltape.outputs.artifacts import (
    RunDir,
    append_jsonl,
    artifact_paths,
    check_writable_folder,
    git_commit,
    provenance,
    read_jsonl,
    write_json,
    write_text,
)
from rolltape.pass1.remote import cut_into_tasks, play_shipped
from rolltape.pass1.rollout import EPISODE_TIMEOUT, UNITS, Episodes, PolicyJob, playing, split_jobs
from rolltape.pass1.worker import policy_worker
from rolltape.pass1.wrappers import check_wrapper_use, wrapper_entries
from rolltape.pass1.wrappers import describe as describe_wrappers
from rolltape.pass2.backends import DEFAULT_ORDER, parse_backends
from rolltape.pass2.cameras import check_layout
from rolltape.pass2.replay import MODES, QUALITY, RenderOptions, RenderRequest
from rolltape.progress import Progress
from rolltape.record import (
    SCHEMA_VERSION,
    Episode,
    EpisodeKey,
    Metadata,
    Results,
    Run,
    Summary,
    Video,
    check_success_rule,
    episodes_of,
)
from rolltape.rendering import MIN_SEGMENT, prestart_render_workers, render
from rolltape.tape import Tape

if TYPE_CHECKING:
    from rolltape.suites.manifest import Manifest, Task

ON_DIVERGENCE = ("warn", "fail")


RunResult = Run  # what evaluate() returns: the run's typed record (rolltape.record)


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
    ranked = [i for i in range(n) if returns[i] is not None]
    best = sorted(ranked, key=lambda i: (-returns[i], i))  # type: ignore[operator]
    worst = sorted(ranked, key=lambda i: (returns[i], i))
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
        if self.batched_inference and is_served(self.env or ""):
            raise UsageError("--batched-inference steps local env processes; drop it to step a "
                             "served env (--workers W opens W sessions).")
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
        check_wrapper_use(self.wrappers, self.frame_stack, batched=self.batched_inference,
                          served=bool(self.served) or is_served(self.env or ""))
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
            notes.append(f"--batched-inference: the policy acts on {self.workers} observations "
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
                and not _needs_returns(self.video) and self.suite is None)


def evaluate(env: str | None = None, policy: str = "random", *,
             out: str | Path = "runs/latest",
             overwrite: bool = False, resume: bool = False, show_progress: bool = False,
             command: list[str] | None = None, **options: Any) -> RunResult:
    """Evaluate ``policy`` on ``env`` (episode i reset with seed ``seed + i``).

    Every number comes from pass 1 (rendering off). ``video`` picks episodes to render in
    pass 2, where each replay is verified against pass 1. Writes ``results.json``,
    ``episodes.jsonl``, ``metadata.json``, ``tapes/`` and ``videos/`` under ``out``.
    ``options`` are the fields of :class:`EvalConfig` (episodes, seed, baseline, video, ...).

    ``suite`` (a built-in suite's name or a manifest.yaml, see :mod:`rolltape.suites`)
    evaluates every task of the suite instead of ``env`` (``tasks``: only those); each
    task's episode i is reset with seed ``seed + i``, and ``eval_info.json`` is written too.
    """
    if isinstance(policy, str) and policy.startswith("zoo:"):  # the folder says the rest
        from rolltape.zoo import zoo_options

        env, policy, options = zoo_options(policy, env, options)
    # Ray's options by their older keywords (and the CLI's flags): executor options now.
    for old, new in (("ray_address", "address"), ("ray_render_gpus", "render_gpus")):
        if old in options:
            value = options.pop(old)
            if value not in (None, 0, 0.0):
                options["executor_options"] = {**options.get("executor_options", {}),
                                               new: value}
    unknown = set(options) - {f.name for f in fields(EvalConfig)}
    if unknown:
        raise TypeError(f"evaluate() got unknown options {sorted(unknown)}")
    if options.get("vecnormalize") is not None:
        options["vecnormalize"] = str(options["vecnormalize"])
    options["backends"] = parse_backends(options.get("backends", DEFAULT_ORDER))
    options["env_kwargs"] = dict(options.get("env_kwargs") or {})
    options["cameras"] = tuple(options.get("cameras") or ())
    config = EvalConfig(env=env, policy=policy, **options)
    notes = config.check()
    check_folder_name("--out", out)
    check_writable_folder(out)
    targets = _targets(config)
    total = sum(t.episodes for t in targets)
    if config.workers > total:
        config = replace(config, workers=total)
    spec = targets[0].spec
    if spec.get("served"):  # tcp://HOST:PORT/ENV: pass 1 steps there, pass 2 draws here
        from rolltape.server.client import check_server

        for target in targets:  # each served before any work
            check_server(target.spec)
        if config.suite is None:  # a single env's local id: pass 2 draws the tapes here
            config = replace(config, env=spec["id"])
    for target in targets:
        check_drawing(target.spec, config)
    config.runner.check()
    run = RunDir(out, overwrite=overwrite, resume=resume)
    try:
        with sigterm_raises():
            return _run(run, targets, config, notes, show_progress, command)
    except UsageError:
        if not run.resumed or run.copied:
            run.discard()
        raise
    except (KeyboardInterrupt, Interrupted) as exc:  # Ctrl-C, or SIGTERM
        with signals_deferred():
            run.mark_stopped("interrupted")
            by = " (SIGTERM)" if getattr(exc, "signum", 2) == 15 else ""
            raise Interrupted.saying(exc, f"Interrupted{by}: {_kept(run)}; rerun the same "
                                          "command with --resume to continue.") from None
    except (RunFailed, OSError) as exc:
        reason = str(exc) if isinstance(exc, RunFailed) else _os_error_text(exc)
        detail = getattr(exc, "detail", "")  # the worker's traceback: kept, not printed
        with signals_deferred():
            run.mark_stopped("failed", reason, detail)
            kept = _kept(run)
            raise RunFailed(f"{reason.rstrip('.')}. {kept[0].upper()}{kept[1:]}; fix the cause "
                            "and rerun with --resume to continue, or with --overwrite to "
                            "discard them.", detail) from None
    except Exception as exc:  # a bug: keep what finished, say so next time, show it
        run.mark_stopped("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        run.release()


def _kept(run: RunDir) -> str:
    """'37 finished episode(s) are kept in X': what a stopped run leaves for --resume."""
    rows = read_jsonl(run.path / "episodes.jsonl")
    return f"{len(rows)} finished episode(s) are kept in '{run.path}'"


def _os_error_text(exc: OSError) -> str:
    where = f" while writing '{exc.filename}'" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"


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


def _targets(cfg: EvalConfig) -> list[Target]:
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
        check_video(cfg.video, task.episodes)
    targets = [Target(env_spec(t.env, t.kwargs, t.max_episode_steps), t.episodes, t, manifest)
               for t in manifest.tasks]
    if cfg.served is not None:  # each task steps on the server's env of its name
        from rolltape.address import served_task_spec

        targets = [replace(t, spec=served_task_spec(t.spec, cfg.served, t.task.key))
                   for t in targets if t.task is not None]
    return targets


def _run(run: RunDir, targets: list[Target], cfg: EvalConfig, warnings: list[str],
         show_progress: bool, command: list[str] | None) -> Run:
    root = run.path
    spec = targets[0].spec
    manifest = targets[0].manifest
    envs = {"env": spec["id"], "env_kwargs": spec["kwargs"],
            "max_episode_steps": spec["max_episode_steps"]} if manifest is None else \
        {"suite": manifest.to_dict()}
    if manifest is not None:
        write_json(root / "manifest.json", manifest.to_dict())  # the resolved manifest
    run.check_config({**envs, "env_versions": spec["versions"], "policy": cfg.policy,
                      "vecnormalize": cfg.vecnormalize, "algo": cfg.algo, "seed": cfg.seed,
                      "deterministic": cfg.deterministic, "baseline": cfg.baseline,
                      **({"wrappers": describe_wrappers(wrapper_entries(
                          cfg.wrappers, cfg.frame_stack))} if cfg.wrappers or cfg.frame_stack > 1
                         else {}),
                      **_input_digests(cfg)})
    timings: dict[str, float] = {}
    with Progress(show_progress) as bar, _warm_render_workers(cfg, targets) as warm:
        started = time.perf_counter()
        early = _EarlyRender.for_config(root, cfg, warnings, bar, started)
        try:  # warm workers start with the first episode done: the run then goes ahead
            played, descriptions, failed = _pass1(root, targets, cfg, warnings, bar,
                                                  on_row=early.offer if early else warm.start)
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        timings["pass1_s"] = time.perf_counter() - started
        # episodes.jsonl is the crash record; results.json is written once, at the end.
        results = _results(spec, targets, played, descriptions, cfg, failed)
        warnings.extend(_number_warnings(results))
        videos: list[Video] = []
        if early is not None:
            videos = early.finish(timings)
        elif cfg.wants_video:
            started = time.perf_counter()
            policy = list(results.episodes)  # positions differ from indices if some failed
            picked = [k for t in targets for k in _picked(cfg, policy, t)]
            videos = _pass2(root, dict(enumerate(policy)), picked, cfg, warnings, bar,
                            tasks={t.where: t for t in targets}, warm=warm)
            timings["pass2_s"] = time.perf_counter() - started
    if results.suite is not None:  # LeRobot's eval_s: the whole evaluation, videos included
        from rolltape.suites.results import eval_info

        eval_s = timings["pass1_s"] + timings.get("pass2_s", 0.0)
        n = results.suite["overall"]["n_episodes"]
        results.suite["overall"].update(eval_s=eval_s, eval_ep_s=eval_s / n if n else None)
        write_json(root / "eval_info.json", eval_info(results.suite, results.episodes, videos,
                                                      eval_s, _rules(targets)))
    results = replace(results, videos=tuple(videos), warnings=tuple(warnings))
    metadata = _metadata(spec, cfg, descriptions, videos, timings, warnings, command,
                         run.resumed, targets)
    record = Run(root, results, metadata).write()
    if cfg.report:
        _write_reports(record, cfg.viewer, warnings)
    outcome = replace(record, path=run.commit())
    if any(v.path is None for v in videos):
        raise UsageError(f"{warnings[-1]} The numbers were kept in "
                         f"'{outcome.path}/results.json'.")
    if cfg.on_divergence == "fail" and outcome.diverged:
        raise DivergenceError(f"{len(outcome.diverged)} replay(s) diverged from pass 1: "
                              + " ".join(w for w in warnings if "diverged" in w))
    return outcome


def _rules(targets: list[Target]) -> dict[tuple[Any, Any], str]:
    """Each suite task's headline success rule (its manifest's, else --success)."""
    return {t.where: t.task.success or "at_end" for t in targets if t.task is not None}


def _picked(cfg: EvalConfig, played: list[Episode], target: Target) -> list[int]:
    """Positions in ``played`` of the target's episodes that ``--video`` picks (per task)."""
    mine = [p for p, e in enumerate(played) if e.key.task_key == target.where]
    return [mine[k] for k in select_episodes(cfg.video, [played[p].ret for p in mine])]


def _key(row: dict[str, Any]) -> EpisodeKey:
    """An episode's identity in a run, from its row in episodes.jsonl."""
    return EpisodeKey.from_json(row)


def _pass1(root: Path, targets: list[Target], cfg: EvalConfig, warnings: list[str],
           bar: Progress, on_row: Callable[[dict[str, Any]], None] | None = None
           ) -> tuple[dict[str, list[Episode]], dict[str, Any], list[dict[str, Any]]]:
    """Run (or, when resuming, finish) every episode; return the rows per role, what made
    them, and the episodes whose env failed (played again by --resume). ``on_row`` sees
    each episode's row as soon as its tape is saved."""
    jsonl = root / "episodes.jsonl"
    done = _finished_rows(root, read_jsonl(jsonl))
    if on_row is not None:
        for row in done.values():
            on_row(row)
    # Rewrite what survived (a torn last line, a tape that does not load, is dropped).
    write_text(jsonl, "".join(json.dumps(r, allow_nan=False) + "\n" for r in done.values()))
    roles = [("policy", cfg.policy)] + ([("baseline", "random")] if cfg.baseline else [])
    jobs = []
    for role, source in roles:
        mine = role == "policy"
        for target in targets:  # a suite: one job per task, dealt to workers as one sequence
            where, task = target.where, target.task
            left = [i for i in range(target.episodes)
                    if EpisodeKey(role, *where, i, cfg.seed + i) not in done] \
                if done else range(target.episodes)  # a range: nothing built for 10**12
            tapes = root / "tapes" if task is None else root / "tapes" / task.suite / task.name
            tapes.mkdir(parents=True, exist_ok=True)
            if left:
                jobs.append(PolicyJob(
                    env=target.spec, policy=source,
                    episodes=Episodes(role, left, cfg.seed, str(tapes)),
                    vecnormalize=cfg.vecnormalize if mine else None,
                    algo=cfg.algo if mine else None,
                    deterministic=cfg.deterministic if mine else False,
                    needs_rgb_array=cfg.wants_video,
                    extra_meta={} if task is None else {"suite": task.suite, "task": task.name},
                    success_key="is_success" if task is None else task.success_key,
                    wrappers=wrapper_entries(cfg.wrappers, cfg.frame_stack) if mine else ()))
    # Kept in the run so that a resumed run still knows what produced its tapes.
    described = root / "policies.json"
    descriptions = json.loads(described.read_text()) if described.is_file() else {}
    failed: list[dict[str, Any]] = []
    if jobs:
        total = sum(len(j.episodes) for j in jobs)
        how = (f"{cfg.workers} env process(es), batched inference" if cfg.batched_inference
               else f"{cfg.workers} worker(s)")
        task = bar.add(f"pass 1 (rendering off, {how})", total)
        # Batched inference is a pass-1 variant: one worker, --workers env processes.
        chunks = [jobs] if cfg.batched_inference else split_jobs(jobs, cfg.workers)
        work = ShareWork(worker=policy_worker,
                         args=(cfg.workers if cfg.batched_inference else 0,), env=NO_GL,
                         # Batched inference keeps env processes of its own: workers only.
                         task=None if cfg.batched_inference else play_shipped,
                         cut=cut_into_tasks, timeout=cfg.episode_timeout, units=UNITS,
                         stalled=lambda k, n: playing(chunks[k], n),
                         timeout_name="--episode-timeout")
        messages = cfg.runner.run_shares(work, chunks)
        with closing(messages):  # on any exception here, its workers stop now, not at GC
            for kind, payload in messages:
                if kind == "episode":
                    payload["tape"] = str(Path(payload["tape"]).relative_to(root))
                    append_jsonl(jsonl, payload)
                    done[_key(payload)] = payload
                    bar.advance(task)
                    if on_row is not None:
                        on_row(payload)
                elif kind == "episode_failed":
                    failed.append(payload)
                    bar.advance(task)
                elif kind == "policy":
                    descriptions[payload.pop("role")] = payload
                    write_json(described, descriptions)
                elif kind == "done":
                    warnings.extend(f"MuJoCo: {w}" for w in payload if f"MuJoCo: {w}" not in warnings)
    keys = {role: [EpisodeKey(role, *t.where, i, cfg.seed + i) for t in targets
                   for i in range(t.episodes)] for role, _ in roles}
    played = {role: episodes_of((done[k] for k in ks if k in done), str(jsonl))
              for role, ks in keys.items()}
    failed.sort(key=lambda f: (f["role"] != "policy", f.get("suite") or "", f.get("task") or "",
                               f["index"]))
    return played, descriptions, failed


def _finished_rows(root: Path, rows: list[dict[str, Any]]) -> dict[EpisodeKey, dict[str, Any]]:
    """The rows of episodes that are really done: the tape loads and says what the row says
    (a tape cut short by a full disk or a kill is played again)."""
    done = {}
    for row in rows:
        try:
            tape = Tape.load(root / row["tape"])
            key = _key(row)
        except (UsageError, KeyError, TypeError, ValueError):
            continue
        if (tape.seed, tape.length, tape.meta.get("role"), tape.meta.get("index"),
                tape.meta.get("suite"), tape.meta.get("task")) == \
                (row.get("seed"), row.get("length"), row.get("role"), row.get("index"),
                 row.get("suite"), row.get("task")):
            done[key] = row
    return done


def _input_digests(cfg: EvalConfig) -> dict[str, str | None]:
    """sha256 of the files the policy is made of (checkpoint or policy file, VecNormalize
    statistics), so that resuming with a swapped file is refused instead of mixing two
    policies in one run."""
    from rolltape.files import sha256_of
    from rolltape.policies import sb3_checkpoint

    source = cfg.policy
    if source.startswith("sb3:"):
        source = str(sb3_checkpoint(source[len("sb3:"):]))
    elif source.startswith("tape:"):
        source = source[len("tape:"):]
    elif source.rpartition(":")[0].endswith(".py"):
        source = source.rpartition(":")[0]  # FILE.py:ATTR
    files = {"policy_sha256": source, "vecnormalize_sha256": cfg.vecnormalize}
    return {key: sha256_of(path) if path and Path(path).is_file() else None
            for key, path in files.items()}


class _EarlyRender:
    """Pass 2 started while pass 1 is still running (``render_early``, opt-in).

    When the episodes to render are known before their returns are (a count or indices,
    not best/worst/median), each one's tape is final as soon as pass 1 saves it, so its
    video can be drawn while the other episodes play. Pass 2 runs in a thread of this
    process (its work is in render workers, at a lower CPU priority), so it mostly takes
    the cores pass 1 leaves idle. No number depends on it: rendering still only replays
    tapes. It is opt-in because sharing a machine still slows pass 1 a little (measured on
    2 cores: the policy process needed 12% more CPU time beside a render), while the whole
    run finished about 11% sooner.
    """

    def __init__(self, root: Path, cfg: EvalConfig, picked: list[int], warnings: list[str],
                 bar: Progress, started: float) -> None:
        self.root, self.cfg, self.picked = root, cfg, picked
        self.warnings, self.bar, self.started = warnings, bar, started
        self.rows: dict[int, Episode] = {}
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.videos: list[Video] = []
        self.error: BaseException | None = None
        self.began = self.ended = 0.0

    @classmethod
    def for_config(cls, root: Path, cfg: EvalConfig, warnings: list[str], bar: Progress,
                   started: float) -> _EarlyRender | None:
        if not cfg.renders_early:
            return None
        # Counts and indices only (renders_early): no returns needed, no row per episode built.
        picked = {i for kind, k in video_picks(cfg.video)
                  for i in (range(min(k, cfg.episodes)) if kind == "count" else
                            range(cfg.episodes) if kind == "all" else [k])}
        return cls(root, cfg, sorted(picked), warnings, bar, started)

    def offer(self, row: dict[str, Any]) -> None:
        """A finished pass-1 episode: start pass 2 once every chosen tape exists."""
        if row["role"] != "policy" or row["index"] not in self.picked or self.thread:
            return
        self.rows[row["index"]] = Episode.from_json(row)
        if len(self.rows) == len(self.picked):
            self.thread = threading.Thread(target=self._render, name="rolltape-pass2",
                                           daemon=True)
            self.thread.start()

    def _render(self) -> None:
        self.began = time.perf_counter()
        try:
            self.videos = _pass2(self.root, self.rows, self.picked, self.cfg, self.warnings,
                                 self.bar, self.stop)
        except BaseException as exc:  # re-raised in the caller's thread by finish()
            self.error = exc
        self.ended = time.perf_counter()

    def cancel(self) -> None:
        """Pass 1 failed: stop the render workers and wait for the thread."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def finish(self, timings: dict[str, float]) -> list[Video]:
        if self.thread is None:  # cannot happen after a complete pass 1; kept safe
            self._render()
        else:
            self.thread.join()
        if self.error is not None:
            raise self.error
        timings["pass2_s"] = self.ended - self.began
        timings["pass2_started_after_s"] = self.began - self.started
        return self.videos


def _needs_returns(selection: Any) -> bool:
    """True when picking the episodes to render needs their returns (best/worst/median)."""
    return any(kind in ("best", "worst", "median") for kind, _ in video_picks(selection))


@contextmanager
def _warm_render_workers(cfg: EvalConfig, targets: list[Target]) -> Iterator[Prestart]:
    """Pass 2's local workers, started while pass 1 plays (at a low CPU priority, so that
    pass 1 keeps its speed): a small job then does not wait for interpreters and imports
    after its numbers are done. Whatever pass 2 did not use is stopped at the end."""
    if not cfg.wants_video or not cfg.runner.warms_workers or cfg.renders_early:
        yield Prestart()
        return
    workers = cfg.render_workers or os.cpu_count() or 1
    if not _needs_returns(cfg.video):  # a count or indices: no more workers than videos
        picked = video_picks(cfg.video)
        if all(kind != "all" for kind, _ in picked):
            counts = [min(k, cfg.episodes) if kind == "count" else 1 for kind, k in picked]
            # Long episodes are split across workers, so one video can use them all.
            workers = min(workers, max(workers if sum(counts) == 1 else sum(counts), 1))
    steps = [t.spec.get("max_episode_steps") for t in targets]
    if all(steps):  # no more than the segments every episode could be cut into
        episodes = sum(t.episodes for t in targets)
        workers = min(workers, episodes * max(1, (max(steps) + 1) // MIN_SEGMENT))
    warm = prestart_render_workers(cfg.runner, cfg.backends, workers,
                                   [cfg.env if t.task is None else t.task.env for t in targets])
    try:
        yield warm
    finally:
        stop_workers(warm)


def _pass2(root: Path, rows: Mapping[int, Episode], picked: list[int], cfg: EvalConfig,
           warnings: list[str], bar: Progress, cancel: threading.Event | None = None,
           tasks: Mapping[tuple[Any, Any], Target] | None = None,
           warm: Sequence[Any] = ()) -> list[Video]:
    """Render and verify the chosen episodes; a rendering failure never loses the numbers.
    With ``cancel`` (pass 2 started early, beside pass 1) the render workers run at a lower
    CPU priority, so that pass 1 keeps its speed. ``rows`` are keyed by what ``picked``
    names; a suite's videos go to ``videos/<suite>/<task>/`` and replay on their task's env
    (``tasks``: which the user's manifest named), verified to its ``reward_atol``."""
    def folder(e: Episode) -> Path:
        return root / "videos" / e.key.suite / e.key.task if e.key.suite else root / "videos"

    def task_of(e: Episode) -> Task | None:
        target = (tasks or {}).get(e.key.task_key)
        return None if target is None else target.task

    requests = [RenderRequest(
        tape=str(root / rows[i].tape),
        outputs=artifact_paths(folder(rows[i]) / f"policy-{rows[i].key.index:04d}",
                               cfg.video_format),
        overwrite=True,
        **{**cfg.render_options(),
           "atol": max(cfg.atol, getattr(task_of(rows[i]), "reward_atol", 0.0))},
        # Named by the user (on the command line or in their manifest), so its module may
        # be their own file.
        env_id=cfg.env if task_of(rows[i]) is None else task_of(rows[i]).env,
    ) for i in picked]
    on_progress, on_result = bar.frames(f"pass 2 (render {len(picked)} video(s))",
                                        [rows[i].length + 1 for i in picked])
    try:
        workers = cfg.render_workers or os.cpu_count() or 1
        rendered = render(requests, backends=cfg.backends, workers=workers,
                          timeout=cfg.render_timeout, executor=cfg.runner,
                          on_progress=on_progress, on_result=on_result, cancel=cancel,
                          background=cancel is not None, warm=warm)
    except UsageError as exc:
        rendered = [None] * len(requests)
        warnings.append(str(exc))
    videos = []
    for i, result in zip(picked, rendered):
        episode = rows[i]
        if result is None:
            videos.append(Video(episode.key, episode.tape, error="not rendered"))
            continue
        detail = result.to_dict()
        for w in detail.pop("warnings"):
            if f"MuJoCo: {w}" not in warnings:
                warnings.append(f"MuJoCo: {w}")
        if result.divergence is not None:
            warnings.append(f"{episode.key.label.capitalize()} diverged on replay at "
                            f"{result.divergence.describe()}.")
        paths = tuple(str(Path(p).relative_to(root)) for p in detail.pop("outputs"))
        for name in ("tape", "verified"):
            detail.pop(name)
        # a replay of NaN rewards has a NaN return: json_safe makes it null
        videos.append(Video(episode.key, episode.tape, paths, result.verified,
                            detail=json_safe(detail)))
    return videos


def _write_reports(run: Run, with_viewer: bool, warnings: list[str]) -> None:
    """report.html (with the 3-D replay when asked) and report.ipynb; a problem here is a
    warning, never a lost run."""
    from rolltape.outputs.notebook import write_notebook
    from rolltape.outputs.report import build_report

    viewer = None
    if with_viewer:
        from rolltape.outputs.viewer import export_viewer

        shown = [run.tape_path(v) for v in run.results.videos if v.path] or \
            [run.tape_path(e) for e in run.results.episodes[:1]]
        try:
            exported = export_viewer(run.path, shown, overwrite=True, trusted=True)  # our env
            viewer = {"href": exported["href"], "note": exported["note"]}
        except UsageError as exc:
            viewer = {"href": None, "note": f"3-D replay unavailable: {exc}"}
        except OSError as exc:
            viewer = {"href": None, "note": f"3-D replay unavailable: {_os_error_text(exc)}"}
    try:
        build_report(run, viewer=viewer)
        write_notebook(run)
    except UsageError as exc:
        warnings.append(f"The report could not be written: {exc}")
    except OSError as exc:  # a full disk: the numbers are written already, keep the run
        warnings.append(f"The report could not be written ({_os_error_text(exc)}); free some "
                        "space and rebuild it with `rolltape report RUN`.")


def _metadata(spec: dict[str, Any], cfg: EvalConfig, descriptions: dict[str, Any],
              videos: list[Video], timings: dict[str, float], warnings: list[str],
              command: list[str] | None, resumed: bool, targets: list[Target]) -> Metadata:
    """metadata.json: provenance of the run (a suite's envs are its manifest's, each tape
    has its spec; its seeds are given per task)."""
    policy = descriptions.get("policy") or {}
    manifest = targets[0].manifest
    if manifest is None:
        envs: dict[str, Any] = {"env": spec}
        seeds: dict[str, Any] = {"base": cfg.seed,
                                 "episodes": [cfg.seed + i for i in range(cfg.episodes)]}
    else:
        envs = {"env": None, "suite": manifest.to_dict()}
        seeds = {"base": cfg.seed, "per_task": {
            t.task.key: [cfg.seed, cfg.seed + t.episodes - 1]
            for t in targets if t.task is not None}}
    return Metadata({
        **provenance(command),
        "schema_version": SCHEMA_VERSION,
        "config": json_safe(asdict(cfg)),
        **envs,
        "policy": descriptions.get("policy"),
        "baseline": descriptions.get("baseline"),
        "checkpoint_sha256": policy.get("sha256"),
        "policy_git": git_commit(policy.get("source")),
        "vecnormalize_sha256": policy.get("vecnormalize_sha256"),
        "seeds": seeds,
        "render": {"backends_tried": list(cfg.backends),
                   "backend_used": sorted({v.get("backend") for v in videos
                                           if v.get("backend")}) or None,
                   "failures": [f for v in videos for f in v.get("failures", [])]},
        "timings": timings,
        "warnings": warnings,
        "resumed": resumed,
    })


def _results(spec: dict[str, Any], targets: list[Target], played: dict[str, list[Episode]],
             descriptions: dict[str, Any], cfg: EvalConfig,
             failed: list[dict[str, Any]]) -> Results:
    """What the run measured: a summary per role, the improvement over the baseline paired
    by task and seed, every episode, and for a suite its numbers per task, per suite and
    overall. Statistics use the episodes with a finite return; the others are counted, not
    hidden."""
    manifest = targets[0].manifest
    rules: str | dict[tuple[Any, Any], str] = cfg.success if manifest is None \
        else _rules(targets)
    policy, baseline = played["policy"], played.get("baseline", [])
    improvement = None
    if baseline:
        base = {e.key.pairing: e.ret for e in baseline if e.ret is not None}
        pairs = [(e.ret, base[e.key.pairing]) for e in policy
                 if e.ret is not None and e.key.pairing in base]
        if pairs:
            improvement = stats.paired_improvement([p for p, _ in pairs], [b for _, b in pairs])
    summary = {role: Summary.of(eps, rules) for role, eps in played.items()}
    results = Results(
        env_id=spec["id"], env=spec, policy=descriptions.get("policy"),
        n_episodes=cfg.episodes, seed=cfg.seed, summary=summary, episodes=tuple(policy),
        baseline=tuple(baseline), improvement_over_baseline=improvement,
        failed=tuple(failed), success_rule=summary["policy"].success_rule)
    if manifest is None:
        return results
    from rolltape.suites.results import suite_summary

    suite = suite_summary(policy, baseline, [t.where for t in targets],
                          {t.where: getattr(t.task, "success_key", None) for t in targets},
                          _rules(targets))
    results = replace(results, env_id=f"suite{'s' if len(manifest.suites) > 1 else ''} "
                                      f"{', '.join(manifest.suites)}",
                      env=None, manifest=manifest.to_dict(), suite=suite,
                      n_episodes=sum(t.episodes for t in targets))
    return results


def _number_warnings(results: Results) -> list[str]:
    """Say what the numbers leave out: episodes with non-finite returns, failed episodes,
    suite tasks that never reported success."""
    notes = list((results.suite or {}).pop("warnings", []))
    for role, s in results.summary.items():
        if s.nonfinite_returns:
            notes.append(f"{s.nonfinite_returns} of {s.episodes} {role} episode(s) had a "
                         "return that is not a finite number (NaN or infinite rewards); the "
                         "statistics leave them out and episodes.jsonl flags them.")
    if results.failed:
        first = results.failed[0]
        where = f"{first['suite']}/{first['task']} " if first.get("suite") else ""
        notes.append(f"{len(results.failed)} episode(s) failed and are left out of the "
                     f"numbers; the first: {first['role']} {where}episode {first['index']} "
                     f"(seed {first['seed']}): {first['error']}. Rerun with --resume to play "
                     "them again.")
    return notes
