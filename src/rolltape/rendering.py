"""``rolltape.render``: pass 2 for a list of tapes, on the executor the caller picks.

The orchestrator's side of pass 2: check the requests, split long episodes into segments
when the executor's workers share this disk, run the jobs on the executor's render pool
(:mod:`rolltape.executors.base`), join the segments, and write the pixel-free outputs and sidecars. The drawing
itself happens in render workers (:mod:`rolltape.pass2.replay`).

A hosted suite's tapes (Meta-World's) are drawn by workers started from its benchmark venv
(:func:`rolltape.suites.hosted.render_python`), whose simulator release they need.

May import: the render side's types, executors, outputs, suites.hosted. Never: policies,
torch.

Example (not run: it spawns render processes):
    >>> results = render([RenderRequest("runs/x/tapes/policy-0000.npz", ["ep0.mp4"])])
    >>> results[0].verified, results[0].frames
    (True, 1001)
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rolltape import executors
from rolltape.envs.ids import check_tape_env_module
from rolltape.errors import UsageError
from rolltape.executors.base import Executor, RenderWork
from rolltape.executors.launch import check_worker_count, stop_workers
from rolltape.executors.local import Prestart
from rolltape.files import sha256_of
from rolltape.groups import RunFolder
from rolltape.outputs.artifacts import refuse_existing
from rolltape.pass2.backends import DEFAULT_ORDER, parse_backends, worker_environment
from rolltape.pass2.formats import TABLE, by_suffix, data_suffixes
from rolltape.pass2.remote import replay_shipped
from rolltape.pass2.replay import render_worker
from rolltape.pass2.request import BatchOptions, RenderRequest, RenderResult, ReplayVerb
from rolltape.suites.hosted import render_python
from rolltape.tape import MJWARP, Tape, sum_rewards

if TYPE_CHECKING:
    from rolltape.pass2.batch import BatchResult

MIN_SEGMENT = 50  # frames; shorter segments cost more in process start-up than they save


def plan_segments(requests: Sequence[RenderRequest], workers: int
                  ) -> list[tuple[int, RenderRequest]]:
    """Split long episodes into segments when there are more workers than episodes, so one
    long video also uses every core. Returns (request index, job) pairs in order."""
    from rolltape.tape import Tape

    per_request = max(1, workers // max(1, len(requests)))
    jobs = []
    for i, req in enumerate(requests):
        n, total = 1, 0
        if (per_request > 1 and req.outputs and req.mode in ("resim", "restore")
                and req.layout != "separate"):
            tape = Tape.load(req.tape)
            lo, stop = tape.frame_range
            total = stop - lo
            ok = tape.can_continue if req.mode == "resim" else tape.can_restore
            if ok:
                n = max(1, min(per_request, total // MIN_SEGMENT))
        if n == 1:
            jobs.append((i, req))
            continue
        bounds = [lo + round(k * total / n) for k in range(n + 1)]
        for k in range(n):
            jobs.append((i, replace(req, outputs=_segment_outputs(req.outputs, k),
                                    frames=(bounds[k], bounds[k + 1]), overwrite=True)))
    return jobs


def _segment_outputs(outputs: Sequence[str], k: int) -> tuple[str, ...]:
    """Where segment ``k`` draws. mp4 and webm get a file of their own format each (joined
    later by copying packets, no re-encoding); gif and PNG outputs share one lossless PNG
    folder (a trailing slash makes the writer draw PNG frames) that the join reads back."""
    parts, lossless = [], None
    for out in outputs:
        path = Path(out.rstrip("/"))
        if _joined_by_packets(out):
            parts.append(str(path.with_name(f".{path.stem}.segment{k}-{os.getpid()}{path.suffix}")))
        elif lossless is None:
            lossless = str(path.with_name(f".{path.name}.segment{k}-{os.getpid()}")) + "/"
            parts.append(lossless)
    return tuple(parts)


def _join(req: RenderRequest, parts: list[RenderResult]) -> RenderResult:
    """Put segment outputs together, in order, into the requested files: mp4/webm by
    copying packets, gif/PNG by reading back the PNG frames the segments drew."""
    from rolltape.pass2.encode import finishing, join_videos, open_writer, read_frames

    fps = parts[0].fps  # the rate the segments were written at (req.fps or the env's)
    drawn = [p.outputs for p in parts]  # drawn[k][j]: segment k's j-th output
    frames = sum(p.frames for p in parts)
    frame_counts = []
    try:
        writers = [open_writer(path, fps=fps, overwrite=req.overwrite) for path in req.outputs
                   if not _joined_by_packets(path)]
        with finishing(writers):
            if writers:  # gif/PNG outputs: read back the one lossless folder of each segment
                lossless = next(j for j, out in enumerate(drawn[0]) if out.endswith("/"))
                for outputs in drawn:
                    for frame in read_frames(outputs[lossless]):
                        for w in writers:
                            w.write(frame)
            frame_counts += [w.frames_written for w in writers]
        for j, path in enumerate(req.outputs):
            if _joined_by_packets(path):
                frame_counts.append(join_videos([d[j] for d in drawn], path,
                                                overwrite=req.overwrite))
    finally:
        for outputs in drawn:
            _remove(outputs)
    if any(count != frames for count in frame_counts):
        raise RuntimeError(f"Joining the segments of '{req.tape}' gave {frame_counts} frames "
                           f"where they drew {frames}; please report this.")
    divergences = [p.divergence for p in parts if p.divergence is not None]
    rewards = [r for p in parts for r in p.rewards]
    verified = None if req.mode == "restore" else not divergences
    return replace(parts[0], tape=req.tape, outputs=tuple(req.outputs), frames=frames,
                   verified=verified, divergence=divergences[0] if divergences else None,
                   replay_return=None if req.mode == "restore" else sum_rewards(rewards),
                   seconds=max(p.seconds for p in parts), segments=len(parts),
                   rewards=tuple(rewards),
                   failures=tuple(f for p in parts for f in p.failures))


def _joined_by_packets(path: str) -> bool:
    from rolltape.pass2.encode import format_from_path

    return TABLE[format_from_path(path)].join == "packets"


def _remove(paths: Sequence[str]) -> None:
    """Delete segment outputs (files or PNG folders); missing ones are fine."""
    for out in paths:
        target = Path(out.rstrip("/"))
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def check_requests(requests: Sequence[RenderRequest], backends: str | Sequence[str],
                   workers: int = 1, local: bool = True) -> list[str]:
    """Refuse bad render options up front; return the backend order. ``local``: the
    workers are processes here (not Ray tasks), so their count has this machine's limit."""
    # Here, not at the top: the encoder (PyAV, PIL) is 0.3 s of the orchestrator's start,
    # and a run needs it only once it has videos.
    from rolltape.pass2.encode import format_from_path
    from rolltape.tape import Tape

    order = list(parse_backends(backends))
    for req in requests:  # a RenderRequest has checked its own options (RenderOptions)
        if req.env_id is None:  # a tape's own env module: only an installed one is imported
            check_tape_env_module(Tape.load(req.tape).env_id, req.tape)
        for out in req.outputs:
            if not str(out).endswith(data_suffixes()):
                format_from_path(out)
            if not req.overwrite:
                refuse_existing(out, False)
    check_worker_count("--render-workers", workers, local=local)
    return order


def _write_records(req: RenderRequest, result: RenderResult) -> RenderResult:
    """Write the pixel-free outputs and a ``.metadata.json`` sidecar beside every output."""
    from rolltape.outputs.artifacts import provenance, write_sidecar
    from rolltape.tape import Tape, json_safe

    if not req.outputs:
        return result  # verification only: nothing was written, nothing to describe
    tape = Tape.load(req.tape)
    # Paths relative to the outputs' folder: an eval renders into a staging folder that is
    # renamed when the run commits, and a relative path still names the same files then.
    here = Path(req.outputs[0].rstrip("/")).parent

    def rel(path: str) -> str:
        return os.path.relpath(path, here)

    record = {
        **provenance(),
        "tape": {"path": rel(req.tape), "sha256": sha256_of(req.tape), "env": tape.env,
                 "seed": tape.seed, "policy": tape.policy,
                 # Taken at eval time only: git would run the hooks of a folder the tape names.
                 "policy_git": tape.policy.get("git")},
        "config": json_safe({**asdict(req), "tape": rel(req.tape),
                             "outputs": [rel(o) for o in req.outputs]}),
        "result": {**result.to_dict(), "tape": rel(result.tape)},
    }
    data = [o for o in req.outputs if o.endswith(data_suffixes())]
    for out in data:
        found = by_suffix(out)
        assert found is not None  # a row without pixels: data_suffixes() are its suffixes
        found.write_from_tape(out, tape, record)
    outputs = result.outputs + tuple(data)
    record["result"]["outputs"] = [rel(o) for o in outputs]
    for out in outputs:
        write_sidecar(out, record)
    return replace(result, outputs=outputs)


def render(
    requests: Sequence[RenderRequest],
    *,
    backends: str | Sequence[str] = DEFAULT_ORDER,
    workers: int = 1,
    timeout: float = 120.0,
    executor: str | Executor = "local",
    split: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, RenderResult], None] | None = None,
    cancel: threading.Event | None = None,
    background: bool = False,
    warm: Sequence[Any] = (),
    cores: int | None = None,
    widen: tuple[int, threading.Event] | None = None,
    calm: threading.Event | None = None,
) -> list[RenderResult | None]:
    """Replay each request in spawned workers; return one result per request, in order.

    With more ``workers`` than requests and ``split``, long episodes are rendered in
    segments on several workers and joined. A request that fails on every backend gets
    None and the reasons are raised at the end as one :class:`UsageError` (after every other
    request has finished), so that results already made are kept. ``on_progress(i, frames)``
    and ``on_result(i, result)`` let a caller show progress and save results as they come.
    Setting ``cancel`` (from another thread) stops the workers; unfinished requests get None.
    ``background`` runs the workers at a lower CPU priority (nice +10), so that work beside
    them (pass 1, with ``render_early``) comes first and rendering takes what is left;
    ``calm``, when set (that work is done), puts them back at the normal priority
    (executors that warm workers, the local one, only).
    ``warm`` are workers from :func:`warm_render_workers`, used (or stopped) here.
    ``cores``: how many cores the workers share (llvmpipe's drawing threads are dealt
    from them; default: every core of this machine), e.g. the ones pass 1 leaves idle.
    ``widen`` (N, event): when the event is set, N more workers may start (pass 1 ended and
    gave its cores back); long episodes are split for ``workers`` + N from the start.
    Executors that warm workers (the local one) only.
    ``executor``: a name of :mod:`rolltape.executors` or one built with its options.
    """
    runner = executors.get(executor) if isinstance(executor, str) else executor
    order = check_requests(requests, backends, workers, local=runner.runs_workers)
    # Pixels are drawn in workers; npz/jsonl copies and sidecars are written here after.
    drawn = [replace(r, outputs=tuple(o for o in r.outputs if not o.endswith(data_suffixes())))
             for r in requests]
    # Where workers share this disk, long episodes are split across them and joined; else
    # each episode is drawn by one task (its outputs come back as bytes).
    jobs = plan_segments(drawn, workers + (widen[0] if widen else 0)
                         if split and runner.splits_segments else 1)
    owner = [i for i, _ in jobs]
    parts: dict[int, dict[int, RenderResult]] = {i: {} for i in range(len(requests))}
    need = {i: owner.count(i) for i in range(len(requests))}
    progress = [0] * len(jobs)
    results: list[RenderResult | None] = [None] * len(requests)

    def job_progress(j: int, frames: int) -> None:
        progress[j] = frames
        if on_progress is not None:
            on_progress(owner[j], sum(p for k, p in enumerate(progress) if owner[k] == owner[j]))

    def job_done(j: int, result: RenderResult) -> None:
        i = owner[j]
        parts[i][j] = replace(result, failures=tuple(pool.fallback.failures[j]))
        if len(parts[i]) < need[i]:
            return
        done = [parts[i][k] for k in sorted(parts[i])]
        result = done[0] if need[i] == 1 else _join(drawn[i], done)
        results[i] = written = _write_records(requests[i], result)
        if on_result is not None:
            on_result(i, written)

    plain = [job for _, job in jobs]
    if not runner.shares_disk:
        from rolltape.pass2.encode import open_writer

        for req in plain:  # the checks (and messages) a local writer makes before it starts
            for path in req.outputs:
                open_writer(path, fps=req.fps or 30, overwrite=req.overwrite).abort()
    if not runner.warms_workers:
        stop_workers(warm)
        warm = ()
    work = _render_work((10 if background else 0, 0), [job.env_id for job in plain],
                        needs_backend=[(bool(job.outputs) and not _draws_without_gl(job))
                                       or _observes_images(job) for job in plain], cores=cores,
                        python=render_python(job.env_id or Tape.load(job.tape).env_id
                                             for job in plain))
    pool = runner.render_pool(work, plain, order, workers, timeout, on_progress=job_progress,
                              on_done=job_done, cancel=cancel, warm=warm,
                              **({"widen": widen} if widen and runner.warms_workers else {}),
                              **({"calm": ((0, 0), calm)} if background and calm is not None
                                 and runner.warms_workers else {}))
    try:
        pool.run()
    finally:
        for i, job in jobs:  # segment outputs of a request that could not finish
            if job is not drawn[i]:
                _remove(job.outputs)
    problems = [text if kind == "usage_error" else
                f"Rendering '{plain[j].tape}' failed: {text.splitlines()[0]} (rerun the command "
                "to reproduce)." for j, kind, text in pool.errors]
    unfinished = [i for i, r in enumerate(results) if r is None and requests[i].outputs]
    if unfinished and (problem := pool.fallback.problem()):
        problems.append(problem)
    if problems:
        raise UsageError(" ".join(problems))
    return results


def _draws_without_gl(req: RenderRequest) -> bool:
    """True for an Atari tape: its frames are ALE's screen, so its worker needs no GL
    backend (and does not pay for starting one: importing MuJoCo and PyOpenGL, making a
    context)."""
    from rolltape.envs.ids import is_atari
    from rolltape.tape import Tape

    return is_atari(req.env_id or Tape.load(req.tape).env_id)  # loaded once: a cached read


def _observes_images(req: RenderRequest) -> bool:
    """True for a tape whose observations hold images (:attr:`Tape.obs_images`): the env
    draws them at every step, so even a replay that only verifies runs on a GL backend, the
    one its result names (their digests are compared when it is the one pass 1 drew with)."""
    from rolltape.tape import Tape

    return Tape.load(req.tape).obs_images is not None  # loaded once: a cached read


def _render_work(args: tuple[int, int], env_ids: Sequence[str | None],
                 needs_backend: Sequence[bool] = (), cores: int | None = None,
                 python: str | None = None) -> RenderWork:
    """Pass 2 as an executor runs it: the render worker (``args``: its CPU niceness while
    drawing and while starting; ``python``: its interpreter, None for this one's) or the
    same replay as a task on shipped tape bytes."""
    return RenderWork(worker=render_worker, args=args, task=replay_shipped, ship=_tape_bytes,
                      environment=functools.partial(worker_environment, cores=cores),
                      needs_backend=needs_backend,
                      # A tape is data: a worker imports installed modules only, unless the
                      # user named an env module with --env (maybe a local file).
                      cwd_on_path=any(":" in (e or "") for e in env_ids), python=python)


def warm_render_workers(runner: Executor, backends: str | Sequence[str], workers: int,
                        env_ids: Sequence[str | None]) -> list[Any]:
    """Start ``workers`` render workers on the first backend now, for a later
    :func:`render` (``warm=``): while pass 1 plays, their interpreters start and import
    the simulator and the encoder at a low CPU priority, so pass 2 begins drawing at once
    (at the normal priority).
    ``env_ids`` are the envs as the user named them (their own module may need this
    folder)."""
    order = parse_backends(backends)
    return runner.warm_render_workers(_render_work((0, 10), env_ids,
                                                   python=render_python(env_ids)),
                                      order[0], workers)


def prestart_render_workers(runner: Executor, backends: str | Sequence[str], workers: int,
                            env_ids: Sequence[str | None]) -> Prestart:
    """:func:`warm_render_workers`, started only when the caller calls ``start()`` (once
    the run is known to go ahead: its first episode is done)."""
    return Prestart(lambda: warm_render_workers(runner, backends, workers, env_ids))


def _tape_bytes(req: RenderRequest) -> bytes | None:
    """What a remote task gets of a tape: its bytes (None when it does not exist: the
    task's loader then says so, as a local worker's would)."""
    path = Path(req.tape)
    return path.read_bytes() if path.is_file() else None


#: A render worker's variables (kept under this name for the executors' tests).
_worker_environment = worker_environment


@dataclass(frozen=True, kw_only=True)
class RenderJob(ReplayVerb, RunFolder, BatchOptions):
    """What ``rolltape render`` and ``verify`` do, as the Python API takes it: replay
    ``tapes`` (drawing ``video_format`` files under ``out`` unless ``draw`` is off), or,
    with ``batch``, draw their recorded states on MuJoCo Warp (:func:`replay_batch`).

    ``out``: one tape's output file, or a folder for several (or PNG frames: end it with
    /); unset, each video goes to the run's videos/ folder (else beside its tape)."""

    fps: float | None = None  # the flag is RenderRequest.fps
    draw: bool = True  # verify: re-simulate and compare, draw nothing

    def __post_init__(self) -> None:
        # --renderer mjwarp's refusals first: a classic one ("2 cameras need a --layout")
        # would mislead there
        self.check_batch(self.quality, self.layout, self.cameras)
        ReplayVerb.__post_init__(self)  # every field's rule (RenderOptions checks them)
        from rolltape.config import check_render_options
        from rolltape.outputs.artifacts import check_output_name

        check_render_options(fps=self.fps, formats=self.video_format)
        if self.workers is not None:  # the one check of a worker count: least and most
            check_worker_count("--workers", self.workers)
        if self.out is not None:
            check_output_name(self.out, several=len(self.tapes) > 1)

    def requests(self) -> list[RenderRequest]:
        """One request per tape, each on the env it replays on (``env``, else its own id
        when ``trust_module`` names that id's module)."""
        from rolltape.envs.ids import trusted_env_id
        from rolltape.outputs.artifacts import artifact_paths

        made = []
        for tape in map(Path, self.tapes):
            env = self.env
            if env is None and self.trust_module:
                env = trusted_env_id(Tape.load(tape).env_id, list(self.trust_module))
            if not self.draw:
                made.append(RenderRequest(str(tape), (), rtol=self.rtol, atol=self.atol,
                                          env_id=env))
                continue
            base: str | Path = (default_video_path(tape) if self.out is None else self.out
                                if len(self.tapes) == 1 else Path(self.out) / tape.stem)
            made.append(RenderRequest(str(tape), artifact_paths(base, self.video_format),
                                      fps=self.fps, overwrite=self.overwrite, env_id=env,
                                      **self.render_options()))
        return made


def default_video_path(tape: Path) -> Path:
    """Beside the run's tapes/ folder in videos/, else beside the tape (no suffix yet)."""
    folder = tape.parent.parent / "videos" if tape.parent.name == "tapes" else tape.parent
    return folder / tape.stem


def replay_tapes(job: RenderJob) -> list[RenderResult | None]:
    """``rolltape render`` / ``verify``: replay the job's tapes in render processes (one
    per core unless ``workers``) under a progress bar; an interrupt keeps the tapes that
    finished and says so."""
    from rolltape.errors import Interrupted
    from rolltape.executors.launch import per_core, sigterm_raises
    from rolltape.progress import Progress

    requests = job.requests()
    # Loading every tape first also reports a bad one before any work or progress bar.
    tapes = [Tape.load(r.tape) for r in requests]
    totals = [stop - first for first, stop in (tape.frame_range for tape in tapes)]
    backends = job.backends if job.draw else DEFAULT_ORDER
    workers = per_core(job.workers or 0)
    check_requests(requests, backends, workers)  # a tape's env code too, before any work
    if not job.draw and tapes and all(t.meta.get("backend") == MJWARP for t in tapes):
        # MuJoCo Warp tapes: verified many at once as the worlds of one batch, no GL
        from rolltape.pass2.replay import verify_mjwarp

        with Progress(not job.quiet) as bar:
            task = bar.add(f"verifying {len(requests)} MJWarp tape(s)", sum(totals), "frames")
            return list(verify_mjwarp(requests, tapes, lambda n: bar.update(task, n)))
    finished: list[int] = []
    with Progress(not job.quiet) as bar:
        on_progress, on_result = bar.frames(f"replaying {len(requests)} tape(s)", totals)

        def result(i: int, r: Any) -> None:
            finished.append(i)
            on_result(i, r)

        try:
            with sigterm_raises():
                return render(requests, backends=backends, workers=workers,
                              on_progress=on_progress, on_result=result)
        except (KeyboardInterrupt, Interrupted) as exc:
            raise Interrupted.saying(exc, f"{Interrupted.heading(exc)}: {len(finished)} of "
                                          f"{len(requests)} tape(s) were finished and their "
                                          "files kept; the others wrote nothing. Rerun with "
                                          "the other tapes (or --overwrite).") from None


def replay_batch(job: RenderJob) -> BatchResult:
    """``rolltape render --renderer mjwarp``: draw the job's tapes all at once on MuJoCo
    Warp's batch renderer (:mod:`rolltape.pass2.batch`) under a progress bar, then write
    each output's sidecar (which says a ray tracer drew it) and the data formats (npz,
    jsonl) asked for."""
    from rolltape.pass2.batch import BatchRequest, render_batch
    from rolltape.progress import Progress

    requests = job.requests()
    pixels = [tuple(o for o in r.outputs if not o.endswith(data_suffixes())) for r in requests]
    batch = BatchRequest(tapes=tuple(r.tape for r in requests), outputs=tuple(pixels),
                         env_ids=tuple(r.env_id for r in requests), width=job.width,
                         height=job.height, camera=job.cameras[0] if job.cameras else None,
                         depth=job.depth, segmentation=job.segmentation, fps=job.fps,
                         overlay=job.overlay, overwrite=job.overwrite)
    tapes = [Tape.load(t) for t in batch.tapes]  # read once: the bar's total, the drawing
    total = sum(stop - first for first, stop in (tape.frame_range for tape in tapes))
    with Progress(not job.quiet) as bar:
        task = bar.add(f"batch-rendering {len(requests)} tape(s)", total, "frames")
        done = render_batch(batch, lambda frames: bar.update(task, frames), tapes)
    written = tuple(_write_records(req, result)
                    for req, result in zip(requests, done.results))
    return replace(done, results=written)
