"""``rolltape export``: a run's verified tapes become a dataset (Minari or LeRobotDataset).

A tape holds actions and observation digests, not observations. Export replays each
chosen tape in render workers (:mod:`rolltape.datasets.episodes`), keeps the observations
(and camera frames) that verify against pass 1, leaves out and names the episodes that do
not, and writes the dataset in a staging folder beside its destination, which is renamed
into place when it is whole. An interrupted export keeps its staging folder; the same
command resumes it.

With ``renderer="mjwarp"`` (``--renderer mjwarp``) the camera frames are not the replays'
``env.render()``: every chosen episode's recorded states are drawn at once by MuJoCo Warp's
batch renderer (a ray tracer, one model camera; the frames ``render --renderer mjwarp``
draws), in a process of its own, before the replays, which then only regenerate and verify
the observations; the dataset's metadata says what drew the frames.

May import: record, files, errors, executors (through episodes), outputs' artifact
helpers, the export writers, the batch renderer's checks and sentence (lazily). Never:
policies, pass 1, torch; gymnasium or mujoco only as data types of the probe's answer
(spaces), never an env.

Example (not run: it replays a run's tapes):
    >>> out = export("runs/pusher", to="minari", dataset_id="rolltape/pusher-expert-v0",
    ...              out="datasets", success_only=True)
    >>> out.path, out.episodes, out.left_out
    (PosixPath('datasets/rolltape/pusher-expert-v0'), 12, [])
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from rolltape.envs.ids import trusted_env_id
from rolltape.errors import Interrupted, RunFailed, UsageError, check_choice
from rolltape.executors.launch import check_worker_count
from rolltape.files import move_into_place, sha256_of
from rolltape.flags import EPISODES, OUTPUT, check_flags, flag
from rolltape.groups import Pick, RunArgument, RunFolder, declared
from rolltape.limits import check_folder_name, check_fps
from rolltape.outputs.artifacts import check_writable_folder
from rolltape.pass2.request import BatchOptions, RenderRequest, ReplayVerb
from rolltape.record import Run
from rolltape.video_pick import VideoPick

FORMATS = ("minari", "lerobot")


@dataclass(frozen=True)
class ExportOutcome:
    """What an export made: the dataset's folder, how many episodes and steps it holds,
    the episodes left out because their replay did not verify (label, the step where it
    diverged) and those left out because they have no tape to replay (label, why)."""

    path: Path
    format: str
    episodes: int
    steps: int
    left_out: list[tuple[str, str]] = field(default_factory=list)
    resumed: int = 0  # episodes an interrupted export had replayed already
    # Chosen episodes with no tape to replay (label, why: none recorded, missing, a folder)
    without_tape: list[tuple[str, str]] = field(default_factory=list)
    # What drew the camera frames, when not the replays' env.render() (--renderer mjwarp)
    drawn_by: str | None = None


#: ReplayVerb's fields an export has no use for: it draws each camera as env.render()
#: draws it, into a video of its own (LeRobot's), replays exactly (a tolerance would let an
#: episode that did not verify in), leaves out and names an episode that diverged, and
#: replays the run's tapes (not tapes named one by one).
NOT_EXPORTED = ("layout", "overlay", "quality", "rtol", "atol", "on_divergence",
                "video_format", "tapes")


@dataclass(frozen=True, kw_only=True)
class ExportConfig(RunArgument, Pick, ReplayVerb, RunFolder):
    """What ``rolltape export`` is asked for: the one record the verb and :func:`export`
    build, checked on construction (each field's rule, then the rules between fields).
    The replay's choices (env, workers, backends, trust-module, mode, camera, width,
    height) are the render side's own (``pass2.request.ReplayVerb``), less
    :data:`NOT_EXPORTED`."""

    to: str = flag(MISSING, "minari or lerobot.", panel=OUTPUT)
    dataset_id: str | None = flag(None, "Minari: NAMESPACE/NAME-vN (needed). LeRobot: the "
                                  "repo id (default rolltape/<folder name>).", panel=OUTPUT,
                                  names=("--id",))
    role: str = flag("policy", "Whose episodes: policy or baseline.", panel=EPISODES)
    # Not --only (bench's benchmark names; issue 40): a switch, as it takes one value.
    success_only: bool = flag(False, "Only episodes that succeeded (the run's success "
                              "rule).", panel=EPISODES)
    min_return: float | None = flag(None, "Only episodes with at least this return.",
                                    panel=EPISODES)
    fps: float | None = declared(RenderRequest, "fps")  # the env's by default
    renderer: str = declared(BatchOptions, "renderer")  # what draws --camera's frames
    layout: str = "separate"  # each camera a video of its own

    def __post_init__(self) -> None:
        """Refuse, before any worker starts, what no export can do."""
        check_choice("--to", self.to, FORMATS)
        check_flags(self)
        if self.workers is not None:  # unset: one per core
            check_worker_count("--workers", self.workers)
        check_choice("--mode", self.mode, ("resim", "restore"))
        super().__post_init__()
        defaults = {f.name: f.default for f in fields(self)}
        for name in NOT_EXPORTED:  # left at the record's own default (layout: separate)
            if getattr(self, name) != defaults[name]:
                raise UsageError(f"export takes no {name} (it draws each camera as "
                                 "env.render() does, into a video of its own, from the run's "
                                 "tapes, and leaves out what did not replay exactly); drop it.")
        _check_renderer(self.to, self.renderer, self.cameras)
        _check_video_flags(self.to, self.cameras, self.fps, self.width, self.height)
        VideoPick.of(self.pick, "--pick").picks  # what it does not understand: now


def export(run: str | os.PathLike[str] | Run, *, on_episode: Callable[[Any], None] | None
           = None, **options: Any) -> ExportOutcome:
    """Export the verified episodes of ``run`` as a dataset (``to`` 'minari' or 'lerobot');
    ``options`` are :class:`ExportConfig`'s fields, as ``rolltape export`` takes them, but
    quiet unless ``quiet=False`` (a progress bar). ``on_episode`` is called with each
    replay as it finishes."""
    return export_run(ExportConfig(run=run, **{"quiet": True, **options}), on_episode)


def export_run(config: ExportConfig, on_episode: Callable[[Any], None] | None = None
               ) -> ExportOutcome:
    """Do what ``config`` asks (:class:`ExportConfig`).

    Minari: ``dataset_id`` (NAMESPACE/NAME-vN) under ``out`` (else ``MINARI_DATASETS_PATH``,
    else Minari's default folder). LeRobot: the dataset folder is ``out``; ``dataset_id``
    is its repo id (default ``rolltape/<folder name>``); ``cameras`` become
    ``observation.images.<camera>`` videos at ``fps`` (default: the env's), ``width`` x
    ``height``. ``workers`` render processes replay the tapes (unset: one per CPU core).
    ``env``: the env to replay on, named by the user (the tapes' own ``FILE.py:ATTR`` or
    ``module:EnvId``, whose code a tape may not name by itself). Episodes left out (no
    tape, or a replay that did not verify) are in the outcome's ``left_out``, each with
    why; unless ``quiet``, a bar (plain lines in a log) while the tapes replay."""
    from rolltape.datasets import episodes as eps
    from rolltape.executors.launch import per_core, stop_workers
    from rolltape.progress import Progress

    cfg = config  # its fields under the names the steps below use
    to, out, dataset_id, role = cfg.to, cfg.out, cfg.dataset_id, cfg.role
    cameras, fps, width, height = cfg.cameras, cfg.fps, cfg.width, cfg.height
    overwrite, mode, trust_module, env = cfg.overwrite, cfg.mode, cfg.trust_module, cfg.env
    missing = [m for m in (("minari", "pyarrow") if to == "minari" else ("pyarrow",))
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--to {to} needs {' and '.join(missing)}, which "
                         f"{'is' if len(missing) == 1 else 'are'} not installed; install the "
                         "export extra: pip install 'rolltape[export]'.")
    workers = per_core(cfg.workers or 0)  # unset: a worker per core, as eval's pass 2
    backends = cfg.backends
    batch = cfg.renderer == "mjwarp"  # camera frames from MuJoCo Warp, not the replays
    if batch:
        from rolltape.pass2.batch import check_installed

        check_installed()
    record = cfg.run if isinstance(cfg.run, Run) else Run.load(cfg.run)
    selection = {"role": role, "success_only": cfg.success_only, "min_return": cfg.min_return,
                 "pick": cfg.pick}
    chosen = eps.choose(record, **selection)
    absent = eps.without_tapes(record, **selection)
    firsts = _first_of_each_task(chosen)
    if env is not None and len(firsts) > 1:
        raise UsageError(f"--env names the env of a one-env run; run '{record.path}' plays "
                         f"{len(firsts)} tasks, whose modules --trust-module names instead.")
    final, staging, dataset_id = _destination(to, record, out, dataset_id)
    if final.exists() and not overwrite:
        raise UsageError(f"Dataset '{final}' already exists; pass --overwrite to replace "
                         "it, or choose another --id/--out.")
    # Locked before any work, so that a second export to the same place is refused at once.
    fresh = not staging.exists()  # else an interrupted export's, kept unless this one resumes
    lock = _lock_staging(staging, final)
    # Started as soon as there is something to replay, so that their interpreters start
    # while this one imports the dataset's writer (minari, pyarrow) and reads the run; the
    # first one builds the envs to check them (eps.probe). Stopped however the export ends.
    try:
        started = eps.start_workers(min(workers, len(chosen)), backends,
                                    draw=bool(cameras) and not batch,
                                    trusted=bool(trust_module or env))
    except BaseException:
        _unlock(staging, lock, remove=fresh)
        raise
    prepared = False
    try:
        writer: Any
        if to == "minari":
            from rolltape.datasets import minari as writer
        else:
            from rolltape.datasets import lerobot as writer
        _import_in_background(writer.IMPORTS)
        if mode == "restore":
            eps.check_restorable(firsts)
        specs = [eps.tape_env(c) for c in firsts]
        trusted = {c.episode.key.task_key: env or trusted_env_id(s["id"], trust_module)
                   for c, s in zip(firsts, specs)}
        specs = [{**s, "id": trusted[c.episode.key.task_key] or s["id"]}
                 for c, s in zip(firsts, specs)]
        probed = eps.probe(specs, cameras, started, [t for t in trusted.values() if t],
                           [str(c.tape) for c in firsts])
        env_of = {c.episode.key.task_key: p for c, p in zip(firsts, probed)}
        writer.check_spaces(env_of, record)
        frame_rate = fps or probed[0][3]
        if to == "lerobot":  # LeRobot's fps is an integer (its info.json, its video clocks)
            if fps is not None and fps != int(fps):
                raise UsageError(f"--fps {fps:g}: a LeRobotDataset's frame rate is a whole "
                                 "number of frames per second; give one, like --fps 30.")
            frame_rate = float(max(1, round(frame_rate)))
        choices = {"format": to, "id": dataset_id, "run": str(record.path.resolve()),
                   "results_sha256": sha256_of(record.path / "results.json"), "role": role,
                   "episodes": [c.episode.key.to_json() for c in chosen],
                   "cameras": list(cameras), "fps": frame_rate, "width": width,
                   "height": height, "mode": mode, "renderer": cfg.renderer}
        resumed = eps.prepare_staging(staging, choices)
        prepared = True
        try:
            with Progress(not cfg.quiet) as bar:
                task = bar.add("export: replaying tapes", total=len(chosen), unit="episodes")
                bar.update(task, resumed)

                def counted(r: Any) -> None:
                    bar.advance(task)
                    if on_episode is not None:
                        on_episode(r)

                drawn_by = None
                if batch:  # every episode's frames first: a refusal comes before any replay
                    drawing = bar.add("export: drawing frames on MuJoCo Warp",
                                      total=len(chosen), unit="episodes")
                    drawn = eps.draw_all(chosen, staging, camera=cameras[0], width=width,
                                         height=height, fps=frame_rate,
                                         env_ids=lambda c: trusted[c.episode.key.task_key],
                                         trusted=bool(trust_module or env))
                    bar.update(drawing, len(chosen))
                    drawn_by = _drawn_by(cameras[0], drawn)
                steps, kept, diverged = _replay_and_write(
                    writer, record, chosen, staging, final, dataset_id, env_of,
                    cameras=list(cameras), width=width, height=height, fps=frame_rate,
                    workers=workers, backends=backends, started=started, on_episode=counted,
                    overwrite=overwrite, last_frame=to == "minari",
                    env_ids=lambda c: trusted[c.episode.key.task_key], mode=mode,
                    drawn_by=drawn_by)
        except (KeyboardInterrupt, Interrupted):
            raise  # the staging folder stays: the same command resumes from it
        except OSError as exc:  # a full disk, most likely: say where, in one line
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-written is left
            raise RunFailed(f"{_os_error(exc)}; nothing was written to '{final}'. Free some "
                            "space and run the same command again.") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-written is left
            raise
        shutil.rmtree(staging, ignore_errors=True)
    except BaseException as exc:  # refused before replaying: a staging folder made for
        # nothing goes (one an interrupted export left is kept for the command that resumes)
        if not prepared and not isinstance(exc, (KeyboardInterrupt, Interrupted)):
            _unlock(staging, None, remove=fresh)
        raise
    finally:
        stop_workers(started)
        _unlock(staging, lock, remove=False)
    return ExportOutcome(final, to, len(kept), steps, diverged, resumed, absent,
                         drawn_by["images"] if drawn_by else None)


#: SVT-AV1 (LeRobot's encoder) takes at most 240 frames per second.
MAX_VIDEO_FPS = 240.0


def _check_video_flags(to: str, cameras: Sequence[str], fps: float | None,
                       width: int | None, height: int | None) -> None:
    """Refuse, before any worker starts, video flags no replay can honour (beyond each
    field's own rule: --fps above 0, a frame size a frame can be)."""
    if to == "minari" and cameras:
        raise UsageError("--camera makes videos, which only --to lerobot stores; drop --camera "
                         "for Minari.")
    if cameras and fps is not None and fps > MAX_VIDEO_FPS:
        raise UsageError(f"--fps {fps:g}: LeRobot's AV1 videos (SVT-AV1) take at most "
                         f"{MAX_VIDEO_FPS:g} frames per second; give a lower --fps.")
    check_fps(fps)
    if (width is not None or height is not None) and not cameras:
        raise UsageError("--width and --height size the camera videos; give --camera too, or "
                         "drop them.")


def _check_renderer(to: str, renderer: str, cameras: Sequence[str]) -> None:
    """Refuse, before any worker starts, a --renderer no export can use: mjwarp draws one
    model camera's video, which only LeRobot stores (which camera the model has is checked
    where the model is built)."""
    if renderer == "mjwarp" and to != "lerobot":
        raise UsageError("--renderer mjwarp draws camera videos, which only --to lerobot "
                         "stores; drop --renderer for Minari.")
    if renderer == "mjwarp" and not cameras:
        raise UsageError("--renderer mjwarp draws a model camera's frames, and no --camera "
                         "was given; name one of the env model's cameras (like 'track' on "
                         "HalfCheetah and Ant) with --camera.")
    BatchOptions(renderer=renderer).check_batch("full", "single", cameras)  # choice, cameras


def _drawn_by(camera: str, drawn: Any) -> dict[str, Any]:
    """What the dataset's metadata says drew its frames (``drawn``: the batch's result, None
    when a resumed export had drawn every episode already)."""
    from rolltape.pass2.batch import RAY_TRACED

    facts = {"device": drawn.device, "width": drawn.width, "height": drawn.height} if drawn \
        else {}
    return {"name": "mujoco_warp", "cameras": [camera], "images": f"camera '{camera}' "
            f"{RAY_TRACED}", **facts}


def _lock_staging(staging: Path, final: Path) -> int:
    """Make the staging folder and lock it as a run's is locked
    (:func:`rolltape.outputs.artifacts.lock_folder`): a second export to the same
    destination is refused at once instead of both failing. The folder itself is kept
    (its contents may be emptied) while locked: a new folder would not share the lock."""
    from rolltape.outputs.artifacts import lock_folder

    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"Cannot create '{staging}' ({_os_error(exc)}); choose a writable "
                         "--out.") from None
    return lock_folder(staging, final)


def _unlock(staging: Path, lock: int | None, remove: bool) -> None:
    """Let go of the staging folder's lock (``lock``: its descriptor, None when already
    closed) and, with ``remove``, remove the folder."""
    if remove:
        shutil.rmtree(staging, ignore_errors=True)
    if lock is not None:
        try:
            os.close(lock)
        except OSError:
            pass


def _os_error(exc: OSError) -> str:
    """'No space left on device while writing 'X'' (one short line, whatever the path)."""
    where = f" while writing '{str(exc.filename)[:200]}'" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"


def _replay_and_write(writer: Any, record: Run, chosen: Sequence[Any],
                      staging: Path, final: Path, dataset_id: str,
                      env_of: dict[Any, tuple[Any, ...]], *, cameras: list[str],
                      width: int | None, height: int | None, fps: float, workers: int,
                      backends: str | Sequence[str], started: Sequence[Any],
                      on_episode: Callable[[Any], None] | None, overwrite: bool,
                      last_frame: bool, env_ids: Callable[[Any], str | None],
                      mode: str, drawn_by: dict[str, Any] | None = None
                      ) -> tuple[int, list[Any], list[tuple[str, str]]]:
    """Replay the chosen episodes, write the dataset in the staging folder and move it into
    place; (steps, episodes kept, episodes left out and why). ``drawn_by``: the cameras'
    frames were drawn already (:func:`rolltape.datasets.episodes.draw_all`), the replays
    draw nothing; what drew them goes into the dataset's metadata."""
    from rolltape.datasets import episodes as eps

    success_keys = _success_keys(record)
    built = staging / "dataset"
    if built.exists():
        shutil.rmtree(built)
    origin: dict[str, Any] = {**_origin(record), "mode": mode}
    if cameras:  # what drew the camera frames (Minari's datasets have none)
        origin["renderer"] = drawn_by or {"name": "env.render()", "cameras": cameras}
    # A writer that streams stores each verified episode on a thread of its own as soon as
    # it and those before it have replayed: the dataset is written while the workers replay.
    stream = _WriterFeed(len(chosen), lambda feed: writer.write(
        built, dataset_id=dataset_id, run=record, replayed=feed, staging=staging,
        env_of=env_of, provenance=origin, cameras=cameras, fps=fps, chosen=len(chosen))
    ) if getattr(writer, "STREAMS", False) else None

    def done(r: Any) -> None:
        if stream is not None:
            stream.put(r)
        if on_episode is not None:
            on_episode(r)

    try:
        replayed = eps.replay_all(
            chosen, staging, cameras=[] if drawn_by else cameras, width=width,
            height=height, fps=fps,
            success_keys=lambda c: success_keys.get(c.episode.key.task_key, "is_success"),
            workers=workers, backends=backends, last_frame=last_frame, started=started,
            on_done=done, env_ids=env_ids, mode=mode)
        kept = [r for r in replayed if r.verified]
        left_out = [(r.chosen.episode.key.label, r.divergence or "it did not verify")
                    for r in replayed if not r.verified]
        if not kept:
            raise UsageError(f"None of the {len(replayed)} chosen episodes replayed exactly "
                             f"({left_out[0][0]}: {left_out[0][1]}), so there is nothing to "
                             "export; run `rolltape verify` on their tapes.")
    except BaseException:
        if stream is not None:
            stream.cancel()
        raise
    if stream is not None:
        steps = stream.finish(replayed)
    else:
        steps = writer.write(built, dataset_id=dataset_id, run=record, replayed=replayed,
                             staging=staging, env_of=env_of,
                             provenance={**origin, "episodes": [r.row() for r in replayed]},
                             cameras=cameras, fps=fps)
    _move_into_place(writer.built_folder(built, dataset_id), final, overwrite)
    writer.after_move(built, final, dataset_id)
    return steps, kept, left_out


def _destination(to: str, run: Run, out: str | os.PathLike[str] | None,
                 dataset_id: str | None) -> tuple[Path, Path, str]:
    """(final folder, staging folder beside it, dataset id)."""
    if to == "minari":
        from rolltape.datasets.minari import check_id

        if not dataset_id:
            raise UsageError("--to minari needs --id NAMESPACE/NAME-vN (like "
                             "rolltape/pusher-expert-v0).")
        check_id(dataset_id)
        root = Path(out) if out is not None else Path(
            os.environ.get("MINARI_DATASETS_PATH")
            or Path.home() / ".minari" / "datasets")
        final = root / dataset_id
        check_folder_name("--id", dataset_id)
    else:
        if out is None:
            raise UsageError("--to lerobot needs --out FOLDER (the dataset's folder).")
        final = Path(out)
        dataset_id = dataset_id or f"rolltape/{final.resolve().name}"
    check_folder_name("--out", final)
    check_writable_folder(final, "--out")
    staging = final.parent / f".{final.name}.export-partial"
    return final, staging, dataset_id


def _move_into_place(built: Path, final: Path, overwrite: bool) -> None:
    """Rename the finished dataset onto ``final`` (an old one, with --overwrite, is moved
    aside first and removed after)."""
    if final.exists() and not overwrite:  # made meanwhile by someone else
        raise UsageError(f"Dataset '{final}' appeared while exporting; pass --overwrite to "
                         "replace it.")
    move_into_place(built, final)


def _import_in_background(modules: Sequence[str]) -> None:
    """Import the writer's libraries on a thread of its own, while this process waits for
    the render workers (their start, then their replays): writing the dataset then does
    not begin with a second of imports. A module that fails to import here fails again,
    and is reported, where the writer imports it."""
    import importlib
    import threading

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    threading.Thread(target=run, name="rolltape-export-imports", daemon=True).start()


def _first_of_each_task(chosen: Sequence[Any]) -> list[Any]:
    """One chosen episode per task (one env has one; a suite one per task)."""
    first: dict[Any, Any] = {}
    for c in chosen:
        first.setdefault(c.episode.key.task_key, c)
    return list(first.values())


def _success_keys(run: Run) -> dict[tuple[str | None, str | None], str | None]:
    """The info key that says success, per task (a suite's manifest names it)."""
    keys: dict[tuple[str | None, str | None], str | None] = {(None, None): "is_success"}
    for t in (run.results.manifest or {}).get("tasks") or []:
        keys[(t.get("suite"), t.get("name"))] = t.get("success_key", "is_success")
    return keys


def _origin(run: Run) -> dict[str, Any]:
    """What the dataset came from: the run's files and their sha256s and the rolltape that
    exported it (a dataset's provenance also lists each chosen episode's seed and
    verification)."""
    from rolltape import __version__
    from rolltape.outputs.artifacts import versions

    files = {name: sha256_of(run.path / name) for name in ("results.json", "metadata.json")
             if (run.path / name).is_file()}
    return {"rolltape_version": __version__, "versions": versions(),
            "run": {"path": str(run.path.resolve()), "sha256": files,
                    "env_id": run.results.env_id, "policy": run.results.policy,
                    "seed": run.results.seed}}


class _WriterFeed:
    """``write(feed)`` on a thread of its own, fed the replays in the dataset's order as
    they finish: iterating the feed waits for the next index; :meth:`finish` returns what
    ``write`` returned or raises what it raised; :meth:`cancel` stops it quietly."""

    def __init__(self, count: int, write: Callable[[Any], int]) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.count = count
        self.ready: dict[int, Any] = {}
        self.cancelled = False
        self.changed = threading.Condition()
        pool = ThreadPoolExecutor(1, thread_name_prefix="rolltape-export-writer")
        self.writing = pool.submit(write, self)
        pool.shutdown(wait=False)  # its one task goes on

    def put(self, replayed: Any) -> None:
        with self.changed:
            self.ready.setdefault(replayed.chosen.index, replayed)
            self.changed.notify_all()

    def __iter__(self) -> Any:
        for index in range(self.count):
            with self.changed:
                self.changed.wait_for(lambda: index in self.ready or self.cancelled)
                if self.cancelled:
                    raise _Cancelled()
                replayed = self.ready.pop(index)
            yield replayed  # not holding the lock: put() never waits for the writer

    def finish(self, replayed: Sequence[Any]) -> int:
        for r in replayed:  # those an interrupted export had replayed (resumed) come now
            self.put(r)
        return int(self.writing.result())

    def cancel(self) -> None:
        with self.changed:
            self.cancelled = True
            self.changed.notify_all()
        self.writing.exception()  # waits for the writer to stop; the caller's error wins


class _Cancelled(Exception):
    """The replays stopped before the stream's end: the writer stops too."""
