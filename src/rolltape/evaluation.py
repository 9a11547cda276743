"""``rolltape.evaluate``: pass 1 for the policy (and a random baseline), then pass 2 videos.
(The module is ``evaluation``: one named ``evaluate`` would hide the function once imported.)

The orchestrator imports neither torch nor GL: the policy runs in a spawned pass-1 worker,
videos come from spawned render workers, and only files and small messages travel.

Its parts: :mod:`rolltape.config` (the choices, checked before any work, and the envs a
run evaluates), this module (pass 1 dealt to the executor, the run's record, reports), and
:mod:`rolltape.videos` (pass 2 of the run).

May import: config, videos, pass 1's job types, the render side's request types,
executors, outputs. Never: torch, GL (the policy and MuJoCo live in workers).

Example (not run: it evaluates a checkpoint):
    >>> run = evaluate("HalfCheetah-v5", "sb3:ppo.zip", vecnormalize="vecnormalize.pkl",
    ...                episodes=30, seed=1000, baseline="random", video=2, out="runs/cheetah")
    >>> run.results.summary["policy"].mean
"""

from __future__ import annotations

import json
import time
from contextlib import closing
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, Callable

from rolltape import stats
from rolltape.config import (  # noqa: F401  (select_episodes: rolltape.evaluation's before)
    BuildCheck,
    EvalConfig,
    Target,
    check_drawing,
    select_episodes,
    targets_of,
)
from rolltape.errors import DivergenceError, Interrupted, RunFailed, UsageError
from rolltape.executors.base import ShareWork
from rolltape.executors.launch import (
    signals_deferred,
    sigterm_raises,
)
from rolltape.interpreter import NO_GL, discard_ahead
from rolltape.limits import check_folder_name
from rolltape.outputs.artifacts import (
    RunDir,
    append_jsonl,
    check_writable_folder,
    git_commit,
    provenance,
    read_jsonl,
    write_json,
    write_text,
)
from rolltape.pass1.ahead import spawn_pass1_ahead
from rolltape.pass1.dealer import Dealer
from rolltape.pass1.inflight import sessions_per_worker
from rolltape.pass1.remote import cut_into_tasks, play_shipped
from rolltape.pass1.rollout import UNITS, Episodes, PolicyJob, playing, split_jobs
from rolltape.pass1.worker import policy_worker
from rolltape.pass1.wrappers import describe as describe_wrappers
from rolltape.pass1.wrappers import wrapper_entries
from rolltape.pass2.backends import DEFAULT_ORDER, parse_backends
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
    episodes_of,
)
from rolltape.suites.hosted import HostedServer
from rolltape.tape import Tape, json_safe
from rolltape.videos import EarlyRender, pass2_videos, warm_render_workers

RunResult = Run  # what evaluate() returns: the run's typed record (rolltape.record)


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
    if isinstance(policy, str):  # --execute-steps/--policy-timeout travel in a ws:// source
        from rolltape.policy_server.wire import with_options

        policy = with_options(policy, options.pop("execute_steps", None),
                              options.pop("policy_timeout", None))
    config = EvalConfig(env=env, policy=policy, **options)
    notes = config.check()
    hosted = HostedServer()  # a benchmark venv's server (metaworld_*), stopped at the end
    try:
        config = hosted.start(config)
        check_folder_name("--out", out)
        check_writable_folder(out)
        targets = hosted.adopt(targets_of(config))
        total = sum(t.episodes for t in targets)
        if config.workers > total:
            config = replace(config, workers=total)
        spec = targets[0].spec
        if spec.get("served"):  # tcp://HOST:PORT/ENV: pass 1 steps there, pass 2 draws here
            from rolltape.server.client import check_server

            for target in targets:  # each served before any work
                described = check_server(target.spec)
                # How many sessions its workers may share (pass1.inflight plays several).
                target.spec["served"]["max_sessions"] = int(described.get("max_sessions") or 1)
            if config.suite is None:  # a single env's local id: pass 2 draws the tapes here
                config = replace(config, env=spec["id"])
        built = BuildCheck.start(targets)  # a suite's envs, built once beside what follows
        if config.policy.startswith("ws://"):  # there before any worker starts
            from rolltape.policy_server.client import check_policy_server
            from rolltape.policy_server.wire import ROLLTAPE_KEY

            described = check_policy_server(config.policy, [t.spec for t in targets])
            ours = described.get(ROLLTAPE_KEY)
            if isinstance(ours, dict) and ours.get("independent_sessions") is True:
                # how many sessions its workers may share (pass1.inflight plays several)
                config = replace(config, policy_sessions=int(ours.get("max_sessions") or 1))
            if (config.latency or "").strip() == "measured":  # one clock for every episode
                config, note = _measured_latency(config, targets[0].spec)
                notes.append(note)
        # torch imports there while the video is checked here (after the env's spec is
        # made: making it may set variables that the worker's environment must have)
        spawn_pass1_ahead(config.policy, local=config.runner.runs_workers)
        for target in targets:
            check_drawing(target.spec, config)
        config.runner.check()
        built.finish()
        run = RunDir(out, overwrite=overwrite, resume=resume)
    except BaseException:
        hosted.close()
        discard_ahead()
        raise
    try:
        with sigterm_raises():
            return _run(run, targets, config, notes, show_progress, command, hosted.benchmark)
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
        hosted.close()
        discard_ahead()
        run.release()


def _kept(run: RunDir) -> str:
    """'37 finished episode(s) are kept in X': what a stopped run leaves for --resume."""
    rows = read_jsonl(run.path / "episodes.jsonl")
    return f"{len(rows)} finished episode(s) are kept in '{run.path}'"


def _os_error_text(exc: OSError) -> str:
    where = f" while writing '{exc.filename}'" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"


def _measured_latency(config: EvalConfig, spec: dict[str, Any]) -> tuple[EvalConfig, str]:
    """``--latency measured`` made steps, timed once in a fresh interpreter (it builds the
    env, which this process must not import)."""
    from rolltape.interpreter import ChildFailed, run_once
    from rolltape.pass1.clock import measure_latency

    try:
        steps, note = run_once(measure_latency, spec, config.policy, env=NO_GL, timeout=300)
    except ChildFailed as exc:
        raise UsageError(str(exc)) from None
    return replace(config, latency=str(steps)), note


def _run(run: RunDir, targets: list[Target], cfg: EvalConfig, warnings: list[str],
         show_progress: bool, command: list[str] | None,
         benchmark: dict[str, Any] | None = None) -> Run:
    root = run.path
    spec = targets[0].spec
    manifest = targets[0].manifest
    envs = {"env": spec["id"], "env_kwargs": spec["kwargs"],
            "max_episode_steps": spec["max_episode_steps"]} if manifest is None else \
        {"suite": _without_counts(manifest.to_dict())}
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
    with Progress(show_progress) as bar, warm_render_workers(cfg, targets) as warm:
        started = time.perf_counter()
        early = EarlyRender.for_config(root, cfg, warnings, bar, started)
        try:  # warm workers start with the first episode done: the run then goes ahead
            played, descriptions, failed = _pass1(root, targets, cfg, warnings, bar,
                                                  on_row=early.offer if early else warm.start)
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        timings["pass1_s"] = time.perf_counter() - started
        if cfg.report and cfg.viewer and manifest is None:  # its probe beside pass 2
            from rolltape.outputs.viewer import describe_envs_soon

            describe_envs_soon([spec], trusted=True)
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
            videos = pass2_videos(root, dict(enumerate(policy)), picked, cfg, warnings, bar,
                            tasks={t.where: t for t in targets}, warm=warm)
            timings["pass2_s"] = time.perf_counter() - started
    if results.suite is not None:  # LeRobot's eval_s: the whole evaluation, videos included
        from rolltape.suites.results import eval_info

        eval_s = timings["pass1_s"] + timings.get("pass2_s", 0.0)
        n = results.suite["overall"]["n_episodes"]
        results.suite["overall"].update(eval_s=eval_s, eval_ep_s=eval_s / n if n else None)
        write_json(root / "eval_info.json", eval_info(results.suite, results.episodes, videos,
                                                      eval_s, _rules(targets)))
    # The run is written in a staging folder: what is said names the folder the user gets.
    warnings[:] = [w.replace(str(root), str(run.final)) for w in warnings]
    videos = [replace(v, error=v.error.replace(str(root), str(run.final))) if v.error else v
              for v in videos]
    results = replace(results, videos=tuple(videos), warnings=tuple(warnings))
    metadata = _metadata(spec, cfg, descriptions, videos, timings, warnings, command,
                         run.resumed, targets, benchmark)
    record = Run(root, results, metadata).write()
    _write_card(root, targets, cfg, descriptions, metadata)
    if cfg.report:
        before = len(warnings)
        _write_reports(record, cfg.viewer, warnings, final=run.final)
        if len(warnings) > before:  # the report's own trouble is recorded beside the numbers
            record = _with_warnings(record, warnings)
    outcome = replace(record, path=run.commit())
    undrawn = [v for v in videos if v.path is None]
    if undrawn:  # the sentence is the video's failure, whatever was warned after it
        raise UsageError(f"{undrawn[0].error} The numbers were kept in "
                         f"'{outcome.path}/results.json'.")
    if cfg.on_divergence == "fail" and outcome.diverged:
        raise DivergenceError(f"{len(outcome.diverged)} replay(s) diverged from pass 1: "
                              + " ".join(w for w in warnings if "diverged" in w))
    return outcome


def _write_card(root: Path, targets: list[Target], cfg: EvalConfig,
                descriptions: dict[str, Any], metadata: Metadata) -> None:
    """protocol.json: how the run was made, per task, for `rolltape diff`."""
    from rolltape.outputs.protocol import build_card, write_card

    specs, rules = {}, {}
    for t in targets:
        label = "env" if t.task is None else f"{t.task.suite}/{t.task.name}"
        specs[label] = {k: v for k, v in t.spec.items() if k != "served"}
        rules[label] = {"success_key": "is_success" if t.task is None else t.task.success_key,
                        "success_rule": cfg.success if t.task is None
                        else t.task.success or "at_end"}
    policy = descriptions.get("policy") or {}
    render = metadata.get("render") or {}
    write_card(root, build_card(
        specs=specs, rules=rules, config=cfg, policy=policy,
        env_facts=descriptions.get("env_facts") or {},
        wrappers=describe_wrappers(wrapper_entries(cfg.wrappers, cfg.frame_stack)),
        gl_backend=render.get("backend_used"),
        served=any(t.spec.get("served") for t in targets)))


def _without_counts(manifest: dict[str, Any]) -> dict[str, Any]:
    """A suite's resolved manifest without its tasks' episode counts: as for one env, a
    resumed run may play more episodes (episode i is seed + i, so those played stay as
    they are; ``eval --until`` grows a run batch by batch)."""
    tasks = [{k: v for k, v in t.items() if k != "episodes"} for t in manifest["tasks"]]
    return {**manifest, "tasks": tasks}


def _rules(targets: list[Target]) -> dict[tuple[Any, Any], str]:
    """Each suite task's headline success rule (its manifest's, else --success)."""
    return {t.where: t.task.success or "at_end" for t in targets if t.task is not None}


def _picked(cfg: EvalConfig, played: list[Episode], target: Target) -> list[int]:
    """Positions in ``played`` of the target's episodes that ``--video`` picks (per task)."""
    mine = [p for p, e in enumerate(played) if e.key.task_key == target.where]
    return [mine[k] for k in cfg.video.pick([played[p].ret for p in mine])]


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
            # A served env or policy: each worker plays several episodes at once
            # (pass1.inflight), as many as every server it uses leaves room for.
            served = target.spec.get("served") or {}
            rooms = [served["max_sessions"]] if "max_sessions" in served else []
            if mine and cfg.policy_sessions > 1:
                rooms.append(cfg.policy_sessions)
            in_flight = sessions_per_worker(min(rooms, default=1), cfg.workers)
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
                    wrappers=wrapper_entries(cfg.wrappers, cfg.frame_stack) if mine else (),
                    in_flight=in_flight, clock=cfg.clock_request() if mine else None,
                    simulator=cfg.simulator))
    # Kept in the run so that a resumed run still knows what produced its tapes.
    described = root / "policies.json"
    descriptions = json.loads(described.read_text()) if described.is_file() else {}
    failed: list[dict[str, Any]] = []
    if jobs:
        total = sum(len(j.episodes) for j in jobs)
        mjwarp = cfg.simulator == "mjwarp"
        how = ("MuJoCo Warp, every episode a world of one batch" if mjwarp else
               f"{cfg.workers} env process(es), batched inference" if cfg.batched_inference
               else f"{cfg.workers} worker(s)")
        task = bar.add(f"pass 1 (rendering off, {how})", total, "episodes")
        # MJWarp's worlds all end at the time limit: its steps show progress meanwhile.
        steps_task = None
        if mjwarp:
            from rolltape.envs.mjwarp import time_limit

            steps_task = bar.add("MuJoCo Warp steps", sum(time_limit(j.env) for j in jobs),
                                 "steps")
        # Batched inference and MJWarp are pass-1 variants: one worker (with its own env
        # processes, or the batch of worlds), not shares dealt to several.
        one = cfg.batched_inference or mjwarp
        chunks = [jobs] if one else split_jobs(jobs, cfg.workers)
        # Local workers are dealt their shares a piece at a time (pass1.dealer).
        dealer = None if one else Dealer(chunks)
        work = ShareWork(worker=policy_worker,
                         args=(cfg.workers if cfg.batched_inference else 0, dealer is not None),
                         env=NO_GL,
                         task=None if one else play_shipped,
                         cut=cut_into_tasks, timeout=cfg.episode_timeout,
                         units=(*UNITS, "stepped") if mjwarp else UNITS,
                         stalled=lambda k, n: playing(dealer.playing[k] if dealer else chunks[k], n),
                         timeout_name="--episode-timeout", deal=dealer)
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
                elif kind == "stepped":
                    bar.advance(steps_task, payload)
                elif kind == "episode_failed":
                    failed.append(payload)
                    bar.advance(task)
                elif kind == "policy":
                    descriptions[payload.pop("role")] = payload
                    write_json(described, descriptions)
                elif kind == "env_facts":  # for protocol.json, kept for --resume too
                    label = "/".join(str(payload.pop(k)) for k in ("suite", "task")
                                     if k in payload)
                    if payload.pop("role") == "policy":
                        descriptions.setdefault("env_facts", {})[label] = payload
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


def _write_reports(run: Run, with_viewer: bool, warnings: list[str],
                   final: Path | None = None) -> None:
    """report.html (with the 3-D replay when asked) and report.ipynb; a problem here is a
    warning, never a lost run. The run is written in a staging folder that becomes
    ``final``: a warning names the folder the user will have."""
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
    except (UsageError, OSError) as exc:  # a full disk: the numbers are written, keep the run
        why = (f": {exc}" if isinstance(exc, UsageError) else f" ({_os_error_text(exc)}); "
               f"free some space and rebuild it with `rolltape report {final or 'RUN'}`.")
        text = f"The report could not be written{why}"
        warnings.append(text if final is None else text.replace(str(run.path), str(final)))
        # All or nothing: half a report is not left to be named, and its space lets the
        # warning be recorded in results.json too.
        for name in ("report.html", "report.ipynb"):
            (run.path / name).unlink(missing_ok=True)


def _with_warnings(record: Run, warnings: list[str]) -> Run:
    """The run with every warning made while writing it, written again (results.json and
    metadata.json are small; on a disk still too full for them the earlier, complete
    files stay, and the warnings are still printed from the returned record)."""
    meta = record.metadata
    record = replace(record, results=replace(record.results, warnings=tuple(warnings)),
                     metadata=None if meta is None else Metadata({**meta.facts,
                                                                   "warnings": list(warnings)}))
    try:
        return record.write()
    except OSError:
        return record


def _metadata(spec: dict[str, Any], cfg: EvalConfig, descriptions: dict[str, Any],
              videos: list[Video], timings: dict[str, float], warnings: list[str],
              command: list[str] | None, resumed: bool, targets: list[Target],
              benchmark: dict[str, Any] | None = None) -> Metadata:
    """metadata.json: provenance of the run (a suite's envs are its manifest's, each tape
    has its spec; its seeds are given per task). ``benchmark``: the benchmark venv a hosted
    suite ran in (``benchmark_env``: its name, interpreter and package versions)."""
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
        "config": json_safe({**asdict(cfg), "video": cfg.video.given}),  # as given
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
        **({"benchmark_env": benchmark} if benchmark else {}),
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
    # Taken out of the suite's numbers (suite_summary's dict) into the run's warnings.
    suite = results.suite
    notes = list(suite.pop("warnings", []) if isinstance(suite, dict) else [])
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
