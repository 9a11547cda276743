"""Videos of training tapes, drawn off the training loop: a bounded queue, one thread that
hands batches of tapes to :func:`rolltape.render` (render processes at nice +10, each
replay verified), and a close that waits a while, then leaves the rest as tapes.

The training loop only ever puts a small job on the queue. When the queue is full, the
video is dropped (its tape stays, and a warning says so) unless ``on_full="block"`` asked
to wait for room instead. A render worker that crashes, or a GL backend that cannot draw,
fails that video only: the tape stays for ``rolltape render`` and training goes on.

May import: rendering (the orchestrator's render entry point), pass2 (types, encode), tape,
errors. Never: policies, pass 1, torch or SB3.
"""

from __future__ import annotations

import atexit
import os
import queue
import re
import shutil
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rolltape.errors import UsageError, check_choice
from rolltape.pass2.backends import DEFAULT_ORDER
from rolltape.pass2.formats import TABLE
from rolltape.pass2.request import RenderRequest, RenderResult

FULL_POLICIES = ("drop", "block")
# A recording of several tapes is joined packet by packet: the formats that join so.
VIDEO_FORMATS = tuple(name for name, f in TABLE.items() if f.join == "packets")


class RecordingWarning(UserWarning):
    """Something about a training recording the user should know (never an exception:
    training goes on)."""


def warn(message: str) -> None:
    warnings.warn(message, RecordingWarning, stacklevel=3)


@dataclass(frozen=True)
class VideoJob:
    """One recording: its tapes in order (several when it ran across resets) and the
    videos to make of them."""

    name: str
    tapes: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class VideoDone:
    """What became of one recording's video."""

    job: VideoJob
    outputs: tuple[str, ...] = ()
    frames: int = 0
    # True only when every frame's observation (and reward) was compared with training's
    # and agreed; None when nothing was compared, or rewards alone (``checked`` says so).
    verified: bool | None = None
    checked: str | None = None  # "observations" or "rewards" (no digests to compare)
    divergence: str | None = None
    error: str | None = None
    results: list[RenderResult] = field(default_factory=list)


class BackgroundRenderer:
    """Renders :class:`VideoJob` s in render processes, off the caller's thread.

    ``workers`` render processes at most run at once (each batch of queued jobs is one
    :func:`rolltape.render` call); ``queue_size`` jobs wait at most. ``on_done(done)`` is
    called (on the render thread) for every finished or failed video.
    """

    def __init__(self, *, workers: int = 1, queue_size: int = 8, on_full: str = "drop",
                 backends: str | Sequence[str] = DEFAULT_ORDER, width: int | None = None,
                 height: int | None = None, fps: float | None = None,
                 timeout: float = 120.0,
                 on_done: Callable[[VideoDone], None] | None = None) -> None:
        check_choice("on_full", on_full, FULL_POLICIES)
        if workers < 1 or queue_size < 1:
            raise UsageError(f"render_workers and queue_size must be at least 1, got "
                             f"{workers} and {queue_size}.")
        self.workers, self.on_full, self.backends = workers, on_full, backends
        self.width, self.height, self.fps, self.timeout = width, height, fps, timeout
        self.on_done = on_done
        self.done: list[VideoDone] = []
        self.dropped: list[VideoJob] = []
        self._queue: queue.Queue[VideoJob | None] = queue.Queue(maxsize=queue_size)
        self._busy: list[VideoJob] = []  # the batch being rendered now
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._diverged_envs: set[str] = set()  # envs whose divergence was reported
        self.failed = 0  # videos that could not be rendered (the first is said, all counted)
        # Set when a failure was said (here, or by the recorder for a tape it could not
        # write): a full disk fails tapes and videos alike, and is said once, not per episode.
        self.failure_said = False

    # -- the caller's side -------------------------------------------------------------
    def submit(self, job: VideoJob) -> bool:
        """Queue a video; False when it was dropped (queue full and ``on_full="drop"``)."""
        if self._closed:
            raise RuntimeError("BackgroundRenderer.submit after close")
        if self._thread is None:  # no thread, no process, until the first video
            self._thread = threading.Thread(target=self._loop, name="rolltape-render",
                                            daemon=True)
            self._thread.start()
            # A script that ends without close(): its render workers are stopped politely
            # at exit (a killed one would leave its half-written video in the user's folder).
            atexit.register(_stop_at_exit, weakref.ref(self))
        try:
            self._queue.put(job, block=self.on_full == "block")
        except queue.Full:
            self.dropped.append(job)
            warn(f"Dropped the video {job.name}: {self._queue.maxsize} videos were already "
                 "waiting to be rendered (queue_size). Its tape is kept; render it later with "
                 f"`rolltape render {job.tapes[0]} --out {job.outputs[0]}`, or pass "
                 "on_full='block' to wait instead.")
            return False
        return True

    def pending(self) -> list[VideoJob]:
        """Videos queued or being drawn now."""
        with self._lock:
            busy = list(self._busy)
        return busy + [j for j in list(self._queue.queue) if j is not None]

    def wait(self, timeout: float | None = 60.0) -> int:
        """Wait up to ``timeout`` s until no video is queued or being drawn; returns how
        many still are (the renderer stays open)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending() and (deadline is None or time.monotonic() < deadline):
            if self._thread is None or not self._thread.is_alive():
                break
            time.sleep(0.1)
        return len(self.pending())

    def close(self, timeout: float | None = 60.0) -> list[VideoJob]:
        """Wait up to ``timeout`` seconds for the queued videos, then stop the render
        processes; returns the jobs left undone (their tapes are on disk)."""
        if self._closed:
            return []
        self._closed = True
        if self._thread is None:
            return []
        deadline = None if timeout is None else time.monotonic() + timeout
        try:  # a full queue ("block" mode) takes the end mark once there is room, or never
            self._queue.put(None, timeout=None if deadline is None else max(0.0, timeout or 0))
        except queue.Full:
            pass  # the deadline passed first: the cancel below stops the thread instead
        while self._thread.is_alive():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._thread.join(0.2 if left is None else min(0.2, left))
        left_over = self.pending() if self._thread.is_alive() else []
        self._cancel.set()  # render() stops its workers; the batch's videos stay undone
        # Bounded: the thread stops its workers within a few seconds, on its own (a daemon;
        # at exit, _stop_at_exit waits for it), so close returns in about ``timeout``.
        self._thread.join(_STOP_WAIT)
        return left_over

    # -- the render thread -------------------------------------------------------------
    def _loop(self) -> None:
        from rolltape.rendering import render

        stop = False
        while not stop:
            job = self._queue.get()
            if job is None:
                break
            batch = [job]
            while len(batch) < self.workers:  # whatever else waits goes in the same call
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            with self._lock:
                self._busy = batch
            try:
                self._render_batch(render, batch)
            finally:
                with self._lock:
                    self._busy = []
                # A render worker killed mid-video left its half-written file: remove it.
                for folder in {Path(out).parent for job in batch for out in job.outputs}:
                    remove_stale_partials(folder)
            if self._cancel.is_set():
                break

    def _render_batch(self, render: Callable[..., list[RenderResult | None]],
                      batch: list[VideoJob]) -> None:
        requests, owners = [], []
        for j, job in enumerate(batch):
            for k, tape in enumerate(job.tapes):
                outs = job.outputs if len(job.tapes) == 1 else tuple(
                    _part_path(out, k) for out in job.outputs)
                # auto: a replay that diverges is drawn from its recorded states (MuJoCo).
                requests.append(RenderRequest(tape, outs, mode="auto", width=self.width,
                                              height=self.height, fps=self.fps,
                                              overwrite=True))
                owners.append(j)
        results: list[RenderResult | None] = [None] * len(requests)
        error = None
        try:
            results = render(requests, backends=self.backends, workers=self.workers,
                             timeout=self.timeout, background=True, cancel=self._cancel,
                             on_result=lambda i, r: results.__setitem__(i, r))
        except Exception as exc:  # every backend failed, a worker crashed: this batch only
            error = str(exc)
        for j, job in enumerate(batch):
            mine = [results[i] for i, owner in enumerate(owners) if owner == j]
            self._finish(job, mine, error)

    def _finish(self, job: VideoJob, mine: list[RenderResult | None], error: str | None) -> None:
        done = VideoDone(job)
        if self._cancel.is_set() and any(r is None for r in mine):
            return  # closed before it was drawn: close() lists it
        if any(r is None for r in mine):
            done.error = error or "the render worker gave no result"
            self.failed += 1
            if not self.failure_said:  # a full disk fails every video alike: said once
                self.failure_said = True
                warn(f"The video {job.name} could not be rendered ({done.error}); training "
                     f"goes on and its tape is kept: `{render_command(job)}`. Later videos "
                     "or tapes that fail are counted (RecordTape.renderer.failed, "
                     "write_failures), not said again.")
        else:
            results = [r for r in mine if r is not None]
            done.results = results
            done.frames = sum(r.frames for r in results)
            done.verified, done.checked = verdict(results)
            diverged = [r for r in results if r.divergence is not None]
            if diverged:
                first = diverged[0]
                assert first.divergence is not None  # picked for having one
                done.divergence = first.divergence.describe()
                self._warn_divergence(job, first)
            try:
                done.outputs = _join_parts(job, results) if len(job.tapes) > 1 else job.outputs
            except Exception as exc:
                done.error = f"joining its parts failed: {exc}"
                warn(f"The video {job.name} could not be written ({done.error}).")
        self.done.append(done)
        if self.on_done is not None:
            self.on_done(done)


    def _warn_divergence(self, job: VideoJob, result: RenderResult) -> None:
        """Say once per env that its replays are not exact (every video would say it)."""
        from rolltape.tape import Tape

        assert result.divergence is not None
        env_id = Tape.load(result.tape).env_id
        if env_id in self._diverged_envs:
            return
        self._diverged_envs.add(env_id)
        drawn = ("drawn from the recorded states" if result.mode == "restore"
                 else "of the replay, not of training")
        warn(f"{env_id} does not replay deterministically: the replay of {job.name} "
             f"diverged from training at {result.divergence.describe()}; its video is "
             f"{drawn}, and later divergences of {env_id} are noted in each VideoDone, not "
             "said again.")


_STOP_WAIT = 5.0  # seconds close() waits, past its timeout, for the render workers to stop


def render_command(job: VideoJob) -> str:
    """The ``rolltape render`` command that makes ``job``'s video from its tapes (with
    ``--overwrite`` where the video is there already; a recording of several tapes, one
    video per tape, into its folder)."""
    import shlex

    tapes = " ".join(shlex.quote(t) for t in job.tapes)
    out = job.outputs[0]
    target = out if len(job.tapes) == 1 else str(Path(out).parent) + os.sep
    again = " --overwrite" if any(Path(o).exists() for o in job.outputs) else ""
    return f"rolltape render {tapes} --out {shlex.quote(target)}{again}"


def verdict(results: Sequence[RenderResult]) -> tuple[bool | None, str | None]:
    """(verified, checked) of a video from its parts' replays: verified only when every
    part compared its observations and agreed, False when one diverged, None when a part
    was checked on rewards alone (``checked`` "rewards") or not re-simulated at all."""
    if any(r.verified is False for r in results):
        return False, _least_checked(results)
    checked = _least_checked(results)
    if checked is None:
        return None, None
    return (True if checked == "observations" else None), checked


def _least_checked(results: Sequence[RenderResult]) -> str | None:
    kinds = [r.checked for r in results]
    if not kinds or None in kinds:
        return None
    return "rewards" if "rewards" in kinds else "observations"


def _stop_at_exit(ref: weakref.ref[BackgroundRenderer]) -> None:
    renderer = ref()
    if renderer is not None and not renderer._closed and renderer._thread is not None:
        renderer._closed = True
        renderer._cancel.set()  # render() stops its workers, which remove their partial files
        renderer._thread.join(15)


_PARTIAL = re.compile(r"\.partial-(\d+)(-\d+)?(\.[A-Za-z0-9]+)?$")


def remove_stale_partials(folder: Path) -> int:
    """Delete the half-written videos (``NAME.partial-PID-N.mp4``) of writers whose process
    is gone (a killed render worker), in ``folder`` only; returns how many."""
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        found = _PARTIAL.search(path.name)
        if found is None or _alive(int(found.group(1))):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _part_path(out: str, k: int) -> str:
    path = Path(out)
    return str(path.with_name(f".{path.stem}.part{k}-{os.getpid()}{path.suffix}"))


def _join_parts(job: VideoJob, results: list[RenderResult]) -> tuple[str, ...]:
    """One video per output from the videos of the recording's tapes, in order, with a
    sidecar naming every tape and each part's verified replay."""
    from rolltape.files import write_json
    from rolltape.pass2.encode import join_videos

    for out in job.outputs:
        parts = [_part_path(out, k) for k in range(len(job.tapes))]
        try:
            frames = join_videos(parts, out, overwrite=True)
        finally:
            for part in parts:
                Path(part).unlink(missing_ok=True)
                Path(f"{part}.metadata.json").unlink(missing_ok=True)
        write_json(f"{out}.metadata.json", {
            "recording": job.name, "tapes": list(job.tapes),
            "result": {"verified": verdict(results)[0], "checked": verdict(results)[1],
                       "frames": frames,
                       "parts": [r.to_dict() for r in results]}})
    return job.outputs


def output_paths(folder: Path, name: str, formats: Sequence[str]) -> tuple[str, ...]:
    """Where a recording's videos go: ``{folder}/{name}.{format}`` for each format."""
    for fmt in formats:
        check_choice("video format", fmt, VIDEO_FORMATS)
    return tuple(str(folder / f"{name}.{fmt}") for fmt in formats)
