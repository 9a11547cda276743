"""Pass 2 of an evaluation: the picked episodes' videos, drawn and verified in render
workers (beside pass 1 when they are picked without returns, else after it), never losing
a number.

May import: the render side's request types, rendering (the executor's pass 2), outputs,
config. Never: torch, GL, policies.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from rolltape.config import EvalConfig, Target
from rolltape.errors import UsageError
from rolltape.executors.launch import per_core, stop_workers
from rolltape.executors.local import Prestart
from rolltape.outputs.artifacts import artifact_paths
from rolltape.pass2.request import RenderRequest, RenderResult
from rolltape.progress import Progress
from rolltape.record import Episode, Video
from rolltape.rendering import MIN_SEGMENT, prestart_render_workers, render
from rolltape.tape import json_safe

if TYPE_CHECKING:
    from rolltape.suites.manifest import Task


class EarlyRender:
    """Pass 2 started while pass 1 is still running.

    When the episodes to render are known before their returns are (a count or indices,
    not best/worst/median), each one's tape is final as soon as pass 1 saves it, so its
    video can be drawn while the other episodes play. Pass 2 runs in a thread of this
    process (its work is in render workers). No number depends on it: rendering still only
    replays tapes. By default it uses only the cores pass 1 leaves idle
    (:attr:`EvalConfig.idle_cores`), at the normal priority, so pass 1 keeps its own;
    ``render_early`` asks for every core (``render_workers``) at nice +10, which slows pass
    1 a little (measured on 2 cores: the policy process needed 12% more CPU time beside a
    render) while the whole run finished about 11% sooner.
    """

    def __init__(self, root: Path, cfg: EvalConfig, picked: list[int], warnings: list[str],
                 bar: Progress, started: float) -> None:
        self.root, self.cfg, self.picked = root, cfg, picked
        self.warnings, self.bar, self.started = warnings, bar, started
        self.rows: dict[int, Episode] = {}
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.videos: list[Video] = []
        self.pass1_done = threading.Event()  # its cores are then free for pass 2 too
        self.error: BaseException | None = None
        self.began = self.ended = 0.0

    @classmethod
    def for_config(cls, root: Path, cfg: EvalConfig, warnings: list[str], bar: Progress,
                   started: float) -> EarlyRender | None:
        if not cfg.renders_early:
            return None
        # Counts and indices only (renders_early): no returns needed, no row per episode built.
        picked = cfg.video.known_ahead(cfg.episodes)
        assert picked is not None  # renders_early: picked without the returns
        return cls(root, cfg, picked, warnings, bar, started)

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
            if self.cfg.render_early:  # asked for: every core, at a lower priority until
                # pass 1 is done (then the normal one: niced on a busy machine, two
                # 1001-frame videos took 1,364 s after a 24 s pass 1)
                self.videos = pass2_videos(self.root, self.rows, self.picked, self.cfg,
                                           self.warnings, self.bar, self.stop,
                                           calm=self.pass1_done)
            else:  # started by itself: the cores pass 1 leaves idle, at the normal priority
                # (a loaded machine starved a nice +10 render: 100 s for 101 frames at load
                # 10), then every core once pass 1 is done
                every = per_core(self.cfg.render_workers)
                idle = min(every, self.cfg.idle_cores)
                self.videos = pass2_videos(self.root, self.rows, self.picked, self.cfg,
                                           self.warnings, self.bar, self.stop, workers=idle,
                                           background=False,
                                           widen=(every - idle, self.pass1_done))
        except BaseException as exc:  # re-raised in the caller's thread by finish()
            self.error = exc
        self.ended = time.perf_counter()

    def cancel(self) -> None:
        """Pass 1 failed: stop the render workers and wait for the thread."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def finish(self, timings: dict[str, float]) -> list[Video]:
        self.pass1_done.set()
        if self.thread is None:  # cannot happen after a complete pass 1; kept safe
            self._render()
        else:
            self.thread.join()
        if self.error is not None:
            raise self.error
        timings["pass2_s"] = self.ended - self.began
        timings["pass2_started_after_s"] = self.began - self.started
        return self.videos


@contextmanager
def warm_render_workers(cfg: EvalConfig, targets: list[Target]) -> Iterator[Prestart]:
    """Pass 2's local workers, started while pass 1 plays (at a low CPU priority, so that
    pass 1 keeps its speed): a small job then does not wait for interpreters and imports
    after its numbers are done. Whatever pass 2 did not use is stopped at the end."""
    if not cfg.wants_video or not cfg.runner.warms_workers or cfg.renders_early:
        yield Prestart()
        return
    workers = per_core(cfg.render_workers)
    ahead = cfg.video.known_ahead(cfg.episodes)
    if ahead is not None:  # a count, indices or all: no more workers than videos, but
        # long episodes are split across workers, so one video can use them all.
        workers = min(workers, max(workers if len(ahead) == 1 else len(ahead), 1))
    steps: list[int] = [t.spec.get("max_episode_steps") or 0 for t in targets]
    if all(steps):  # no more than the segments every episode could be cut into
        episodes = sum(t.episodes for t in targets)
        workers = min(workers, episodes * max(1, (max(steps) + 1) // MIN_SEGMENT))
    warm = prestart_render_workers(cfg.runner, cfg.backends, workers,
                                   [cfg.env if t.task is None else t.task.env for t in targets])
    try:
        yield warm
    finally:
        stop_workers(warm)


def pass2_videos(root: Path, rows: Mapping[int, Episode], picked: list[int], cfg: EvalConfig,
           warnings: list[str], bar: Progress, cancel: threading.Event | None = None,
           tasks: Mapping[tuple[Any, Any], Target] | None = None,
           warm: Sequence[Any] = (), workers: int | None = None,
           background: bool | None = None,
           widen: tuple[int, threading.Event] | None = None,
           calm: threading.Event | None = None) -> list[Video]:
    """Render and verify the chosen episodes; a rendering failure never loses the numbers.
    With ``cancel`` (pass 2 started early, beside pass 1) the render workers run at a lower
    CPU priority unless ``background`` is False, so that pass 1 keeps its speed. ``rows``
    are keyed by what ``picked`` names; a suite's videos go to ``videos/<suite>/<task>/`` and replay on their task's env
    (``tasks``: which the user's manifest named), verified to its ``reward_atol``.
    ``workers``: render processes at most (default: ``render_workers``, 0 one per core),
    and ``widen`` more once its event is set; ``calm`` set: lower-priority workers return
    to the normal one (see :func:`rolltape.rendering.render`)."""
    def folder(e: Episode) -> Path:
        suite, task = e.key.task_key
        return root / "videos" / suite / task if suite and task else root / "videos"

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
        env_id=cfg.env if (task := task_of(rows[i])) is None else task.env,
    ) for i in picked]
    on_progress, on_result = bar.frames(f"pass 2 (render {len(picked)} video(s))",
                                        [rows[i].length + 1 for i in picked])
    finished: dict[int, RenderResult] = {}  # kept when another request fails
    why = "not rendered"  # what a video left undrawn says (the failure's own sentence)

    def keep(i: int, result: RenderResult) -> None:
        finished[i] = result
        on_result(i, result)

    try:
        workers = workers or per_core(cfg.render_workers)
        rendered = render(requests, backends=cfg.backends, workers=workers,
                          timeout=cfg.render_timeout, executor=cfg.runner,
                          on_progress=on_progress, on_result=keep, cancel=cancel,
                          background=cancel is not None if background is None else background,
                          warm=warm, widen=widen, calm=calm,
                          cores=None if widen is None else workers)
    except UsageError as exc:  # the videos drawn before or beside the failure still count
        rendered = [finished.get(i) for i in range(len(requests))]
        warnings.append(why := str(exc))
    videos = []
    for i, result in zip(picked, rendered):
        episode = rows[i]
        if result is None:
            videos.append(Video(episode.key, episode.tape, error=why))
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
