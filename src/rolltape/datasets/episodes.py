"""Which episodes of a run become a dataset, and their replays in render workers.

Episodes are chosen from the run's typed record (:class:`rolltape.record.Run`): a role,
then ``--success-only`` (by the run's headline success rule for the episode's task),
``--min-return`` and ``--pick`` (what ``--video`` takes: a count, all, best, worst, median,
or indices of that role's episodes). Each chosen tape is
replayed by an :class:`~rolltape.pass2.export.ExportJob` in K render workers (the local
executor's render pool, with the GL backend fallback of every render); what a replay regenerates lands in the export's staging folder, one ``.npz`` (and
one mp4 per camera) per episode, and a line of ``replays.jsonl`` says how it went.

Resuming: the staging folder outlives an interrupted export. Rerun with the same choices
and the episodes already replayed (verified or not) are not replayed again.

May import: record, files, errors, executors, the render side's job types, outputs'
artifact helpers. Never: policies, pass 1, torch, gymnasium or mujoco (a probe process
builds envs: :func:`probe`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rolltape.errors import RunFailed, UsageError
from rolltape.files import sha256_of, write_json
from rolltape.record import Episode, Run
from rolltape.video_pick import Given, VideoPick

ROLES = ("policy", "baseline")


@dataclass(frozen=True)
class Chosen:
    """One episode picked for the dataset: its place in the dataset (``index``), the
    run's record of it and its tape's path."""

    index: int
    episode: Episode
    tape: Path

    @property
    def stem(self) -> str:
        return f"{self.index:06d}"


def choose(run: Run, *, role: str = "policy", success_only: bool = False,
           min_return: float | None = None, pick: VideoPick | Given = "all") -> list[Chosen]:
    """The episodes of ``run`` that the dataset holds, in the run's order, each with a tape
    on disk. A choice that leaves none, or names what the run does not have, is a
    UsageError."""
    if role not in ROLES:
        raise UsageError(f"--role must be 'policy' or 'baseline', got {role!r}.")
    results = run.results
    pool = list(results.of_role(role))
    if not pool:
        raise UsageError(f"Run '{run.path}' has no {role} episodes; "
                         f"{'evaluate with --baseline random' if role == 'baseline' else 'use --role policy'}.")
    if not any(_tape_of(run, e) for e in pool):
        raise UsageError(f"Run '{run.path}' has no tapes of its {role} episodes (its tapes/ "
                         "folder is empty or gone), so there is nothing to replay; evaluate "
                         "again to record them.")
    picked = [e for e in selected(run, role, success_only, min_return, pick) if _tape_of(run, e)]
    if not picked:
        raise UsageError(f"No {role} episode of run '{run.path}' passes the selection "
                         f"({describe_selection(success_only, min_return, pick)}); loosen it.")
    return [Chosen(k, e, run.tape_path(e)) for k, e in enumerate(picked)]


def selected(run: Run, role: str, success_only: bool, min_return: float | None,
             pick: VideoPick | Given) -> list[Episode]:
    """The ``role`` episodes that pass ``success_only`` and ``min_return`` and that ``pick``
    names, in the run's order, tape or not. A pick counts each task's episodes from 0 (a
    suite's tasks number their own) and ranks (best, worst, median) only those that pass
    the filters: ``--pick best:3 --success-only`` is the three best of the successes."""
    results = run.results
    choice = VideoPick.of(pick, "--pick")
    tasks: dict[Any, list[Episode]] = {}
    for e in results.of_role(role):
        tasks.setdefault(e.key.task_key, []).append(e)
    chosen: set[int] = set()
    for episodes in tasks.values():
        passes = [(not success_only or e.success(results.rule_of(e.key.task_key)))
                  and (min_return is None or (e.ret is not None and e.ret >= min_return))
                  for e in episodes]
        # A filtered-out episode has no return to rank: VideoPick ranks finite ones only.
        returns = [e.ret if ok else None for e, ok in zip(episodes, passes)]
        chosen.update(id(episodes[i]) for i in choice.pick(returns) if passes[i])
    return [e for e in results.of_role(role) if id(e) in chosen]


def _tape_of(run: Run, episode: Episode) -> bool:
    """Whether ``episode``'s tape is on disk, a file."""
    return bool(episode.tape) and run.tape_path(episode).is_file()


def without_tapes(run: Run, *, role: str = "policy", success_only: bool = False,
                  min_return: float | None = None, pick: VideoPick | Given = "all"
                  ) -> list[tuple[str, str]]:
    """The episodes :func:`choose` would have picked but cannot replay, each with why (no
    tape recorded, its tape missing, or a folder where its file should be): an export
    names every episode it leaves out."""
    out = []
    for e in selected(run, role, success_only, min_return, pick):
        path = run.tape_path(e) if e.tape else None
        if path is None:
            out.append((e.key.label, "it has no tape (none was recorded)"))
        elif path.is_dir():
            out.append((e.key.label, f"its tape '{path}' is a folder, not a tape file"))
        elif not path.is_file():
            out.append((e.key.label, f"its tape '{path}' is missing"))
    return out


def describe_selection(success_only: bool, min_return: float | None,
                       pick: VideoPick | Given = "all") -> str:
    """The selection's flags as given, for a sentence that refuses it."""
    parts = []
    given = VideoPick.of(pick, "--pick").given
    if given != "all":
        parts.append(f"--pick {given if isinstance(given, (int, str)) else ','.join(map(str, given or ()))}")
    if success_only:
        parts.append("--success-only")
    if min_return is not None:
        parts.append(f"--min-return {min_return:g}")
    return ", ".join(parts) or "every episode"


def probe(specs: list[dict[str, Any]], cameras: Sequence[str], started: list[Any],
          trusted: Sequence[str] = (), tapes: Sequence[str] = ()) -> list[tuple[Any, ...]]:
    """Per env spec: (observation space, action space, Gymnasium EnvSpec, frame rate),
    built by the first of the ``started`` render workers (importing MuJoCo here would fix
    its GL backend), or by a process of its own when it cannot start; a camera the env
    lacks is a UsageError. A spec's env module is imported only if it is a package of
    Gymnasium envs or its id is one of ``trusted`` (the user named its module)."""
    from rolltape.interpreter import NO_GL, ChildFailed, run_once, stop_worker
    from rolltape.pass2.export import ProbeJob, probe_envs

    named = tuple(c for c in cameras if c != "default")
    if started:
        worker = started[0]
        try:
            worker.conn.send((-1, ProbeJob(tuple(specs), named, tuple(trusted),
                                                  tuple(tapes))))
            while True:
                kind, _, payload = worker.conn.recv()
                if kind == "done":
                    return payload
                if kind == "usage_error":
                    raise UsageError(payload)
                if kind != "progress":
                    break  # its backend cannot start, or it failed: probe on its own
        except (EOFError, OSError):
            pass
        stop_worker(started.pop(0))
    try:
        return run_once(probe_envs, list(specs), named, tuple(trusted), tuple(tapes), env=NO_GL,
                        timeout=600, cwd_on_path=bool(trusted))
    except ChildFailed as exc:
        if exc.exception == "UsageError":
            raise UsageError(str(exc)) from None
        raise UsageError(f"The process that builds the env to export failed ({exc}); run "
                         "`rolltape verify` on one of the tapes to see why.") from None


def check_restorable(chosen: Sequence[Chosen]) -> None:
    """Refuse ``--mode restore`` for tapes with no recorded states to step from."""
    from rolltape.tape import Tape

    for c in chosen:
        tape = Tape.load(c.tape)
        if tape.physics is None and not tape.has_ale_state:
            raise UsageError(f"Tape '{c.tape}' holds no MuJoCo or ALE states, so --mode "
                             "restore cannot export it; use --mode resim.")


def tape_env(chosen: Chosen) -> dict[str, Any]:
    from rolltape.tape import Tape

    return dict(Tape.load(chosen.tape).env)


@dataclass(frozen=True)
class Replayed:
    """How one chosen episode's replay went (a line of ``replays.jsonl``)."""

    chosen: Chosen
    verified: bool
    divergence: str | None
    tape_sha256: str

    def row(self) -> dict[str, Any]:
        return {**self.chosen.episode.key.to_json(), "dataset_index": self.chosen.index,
                "tape": self.chosen.episode.tape, "tape_sha256": self.tape_sha256,
                "verified": self.verified, "divergence": self.divergence}


def prepare_staging(staging: Path, config: dict[str, Any]) -> int:
    """Make (or keep, to resume) the staging folder of an export with ``config``: one left
    by an interrupted export of the same choices is kept, any other is emptied. Returns
    how many episodes the kept one had replayed."""
    marker = staging / "config.json"
    if staging.is_dir():
        try:
            same = json.loads(marker.read_text()) == json.loads(json.dumps(config))
        except (OSError, ValueError):
            same = False
        if same:
            log = staging / "replays.jsonl"
            return len(log.read_text().splitlines()) if log.is_file() else 0
        for old in staging.iterdir():  # emptied, not removed: the folder holds the lock
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
    (staging / "episodes").mkdir(parents=True)
    write_json(marker, config)
    return 0


def replay_all(chosen: Sequence[Chosen], staging: Path, *, cameras: Sequence[str],
               width: int | None, height: int | None, fps: float,
               success_keys: Callable[[Chosen], str | None], workers: int,
               backends: str | Sequence[str], last_frame: bool = True,
               timeout: float = 600.0, started: Sequence[Any] = (),
               on_done: Callable[[Replayed], None] | None = None,
               env_ids: Callable[[Chosen], str | None] = lambda c: None,
               mode: str = "resim") -> list[Replayed]:
    """Replay each chosen episode (those ``replays.jsonl`` already holds are kept) in
    ``workers`` render workers; return how each went, in the dataset's order.
    ``env_ids(c)``: the env a tape replays on when the user named (trusted) its module."""
    from rolltape import executors
    from rolltape.interpreter import stop_workers
    from rolltape.outputs.artifacts import append_jsonl, read_jsonl
    from rolltape.pass2.backends import parse_backends
    from rolltape.pass2.cameras import separate_path
    from rolltape.pass2.export import ExportJob

    log = staging / "replays.jsonl"
    done: dict[int, Replayed] = {}
    by_index = {c.index: c for c in chosen}
    for row in read_jsonl(log) if log.is_file() else []:
        c = by_index.get(row.get("dataset_index"))  # type: ignore[arg-type]
        if c is not None and (not row.get("verified") or episode_file(staging, c).is_file()):
            done[c.index] = Replayed(c, bool(row.get("verified")), row.get("divergence"),
                                     str(row.get("tape_sha256")))
    todo = [c for c in chosen if c.index not in done]
    jobs = [ExportJob(tape=str(c.tape), out=str(episode_file(staging, c)),
                      videos=tuple(separate_path(str(staging / "episodes" / f"{c.stem}.mp4"),
                                                 cam) for cam in cameras),
                      cameras=tuple(cameras), width=width, height=height, fps=fps,
                      # one video per camera (RenderOptions refuses several in one frame
                      # without saying how they share it)
                      layout="separate" if len(cameras) > 1 else "single",
                      success_key=success_keys(c), last_frame=last_frame,
                      env_id=env_ids(c), mode=mode) for c in todo]

    def finished(i: int, result: Any) -> None:
        replayed = Replayed(todo[i], result.verified, result.divergence,
                            sha256_of(todo[i].tape))
        if result.torch_loaded or result.forbidden_loaded:  # the render side's promise
            raise RuntimeError(f"A render worker imported {result.forbidden_loaded}; please "
                               "report this.")
        append_jsonl(log, replayed.row())
        done[todo[i].index] = replayed
        if on_done is not None:
            on_done(replayed)

    if not jobs:
        stop_workers(started)
    else:
        # Observations only: no job draws, so workers run with no GL backend (order ()).
        order = parse_backends(backends) if cameras else ()
        trusted = any(job.env_id for job in jobs)
        pool = executors.get("local").render_pool(
            export_work(bool(cameras), len(jobs), trusted), jobs, order,
            max(1, min(workers, len(jobs))), timeout, on_progress=lambda i, n: None,
            on_done=finished, warm=started)
        pool.run()
        problems = [text if kind == "usage_error" else
                    f"Replaying '{jobs[j].tape}' failed: {text.splitlines()[0]}"
                    for j, kind, text in pool.errors]
        if not problems and len(done) < len(chosen) and (problem := pool.fallback.problem()):
            problems.append(problem)
        if problems:
            # One line: the first problem, and how many more (a full disk fails every one).
            # A worker that failed (not bad input: a full disk, a crash) is a fault, exit 1.
            unique = list(dict.fromkeys(problems))
            more = f" (and {len(unique) - 1} more like it)" if len(unique) > 1 else ""
            faulted = any(kind != "usage_error" for _, kind, _ in pool.errors)
            raise (RunFailed if faulted else UsageError)(unique[0][:1000] + more)
    return [done[c.index] for c in chosen]


def export_work(draw: bool, jobs: int = 0, trusted: bool = False) -> Any:
    """Export jobs as the local executor runs them: the render worker (which plays an
    :class:`~rolltape.pass2.export.ExportJob` itself), with no GL backend unless they draw,
    importing nothing from the current folder (a tape is data) unless the user trusted an
    env module (``--trust-module``), which may live there."""
    from rolltape.executors import RenderWork
    from rolltape.pass2.replay import render_worker

    return RenderWork(worker=render_worker, args=(0, 0), task=_not_remote, ship=lambda job: None,
                      environment=_export_environment, needs_backend=[draw] * jobs,
                      cwd_on_path=trusted)


def _not_remote(*_: Any) -> tuple[str, Any, Any]:
    return ("usage_error", "rolltape export runs on the local executor.", None)


def start_workers(count: int, backends: str | Sequence[str], draw: bool,
                  trusted: bool = False) -> list[Any]:
    """Render workers for :func:`replay_all`, started now (their interpreters and imports
    overlap reading the run): on the first GL backend when drawing, else on none."""
    from rolltape import executors
    from rolltape.pass2.backends import parse_backends

    backend = parse_backends(backends)[0] if draw else None
    return executors.get("local").warm_render_workers(
        export_work(draw, trusted=trusted), backend, count)  # type: ignore[arg-type]


def _export_environment(backend: str | None, workers: int) -> dict[str, str]:
    """A render worker's variables (:func:`rolltape.pass2.backends.worker_environment`),
    with SVT-AV1's banner of settings per video (on stderr, from C) down to its errors."""
    import os

    from rolltape.pass2.backends import worker_environment

    env = worker_environment(backend, workers)
    if "SVT_LOG" not in os.environ:
        env["SVT_LOG"] = "1"
    return env


def episode_file(staging: Path, chosen: Chosen) -> Path:
    return staging / "episodes" / f"{chosen.stem}.npz"


def frames_file(staging: Path, chosen: Chosen) -> Path:
    """The image statistics of an episode's frames drawn on MuJoCo Warp (:func:`draw_all`),
    written after its video: its presence says the video is whole."""
    return staging / "episodes" / f"{chosen.stem}.frames.npz"


def draw_all(chosen: Sequence[Chosen], staging: Path, *, camera: str, width: int | None,
             height: int | None, fps: float, env_ids: Callable[[Chosen], str | None],
             trusted: bool = False) -> Any:
    """``--renderer mjwarp``: every chosen episode's camera video (the one a render worker
    would have drawn, same name) drawn from its tape's recorded states on MuJoCo Warp's
    batch renderer (:func:`rolltape.pass2.export.draw_videos`), in a process of its own
    (this one never builds an env); those a resumed export had drawn are kept. Returns the
    batch's result, or None when every episode was drawn already. What MuJoCo Warp cannot
    draw (a tape without states, a camera the model lacks) is a UsageError."""
    import os

    from rolltape.interpreter import NO_GL, ChildFailed, run_once
    from rolltape.pass2.cameras import separate_path
    from rolltape.pass2.export import BatchVideos, draw_videos

    todo = [c for c in chosen if not frames_file(staging, c).is_file()]
    if not todo:
        return None
    job = BatchVideos(
        tapes=tuple(str(c.tape) for c in todo),
        videos=tuple(separate_path(str(staging / "episodes" / f"{c.stem}.mp4"), camera)
                     for c in todo),
        stats=tuple(str(frames_file(staging, c)) for c in todo),
        env_ids=tuple(env_ids(c) for c in todo), camera=camera, width=width, height=height,
        fps=fps)
    quiet = {} if "SVT_LOG" in os.environ else {"SVT_LOG": "1"}  # SVT-AV1's banner per video
    try:  # what the child prints (Warp's "no CUDA driver" on a CPU machine) stays off the
        # terminal; a failure carries it
        return run_once(draw_videos, job, env={**NO_GL, **quiet}, cwd_on_path=trusted,
                        capture=True)
    except ChildFailed as exc:
        if exc.exception == "UsageError":
            raise UsageError(str(exc)) from None
        raise RunFailed(f"Drawing the episodes on MuJoCo Warp failed ({exc}); nothing was "
                        "exported.") from None
