"""``rolltape export``: a run's verified tapes become a dataset (Minari or LeRobotDataset).

A tape holds actions and observation digests, not observations. Export replays each
chosen tape in render workers (:mod:`rolltape.datasets.episodes`), keeps the observations
(and camera frames) that verify against pass 1, leaves out and names the episodes that do
not, and writes the dataset in a staging folder beside its destination, which is renamed
into place when it is whole. An interrupted export keeps its staging folder; the same
command resumes it.

May import: record, files, errors, executors (through episodes), outputs' artifact
helpers, the export writers. Never: policies, pass 1, torch; gymnasium or mujoco only as
data types of the probe's answer (spaces), never an env.

Example (not run: it replays a run's tapes):
    >>> out = export("runs/pusher", to="minari", dataset_id="rolltape/pusher-expert-v0",
    ...              out="datasets", only="success")
    >>> out.path, out.episodes, out.left_out
    (PosixPath('datasets/rolltape/pusher-expert-v0'), 12, [])
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rolltape.envs import trusted_env_id
from rolltape.errors import Interrupted, UsageError, check_choice
from rolltape.files import move_into_place, sha256_of
from rolltape.record import Run

FORMATS = ("minari", "lerobot")


@dataclass(frozen=True)
class ExportOutcome:
    """What an export made: the dataset's folder, how many episodes and steps it holds,
    and the episodes left out because their replay did not verify (label, why)."""

    path: Path
    format: str
    episodes: int
    steps: int
    left_out: list[tuple[str, str]] = field(default_factory=list)
    resumed: int = 0  # episodes an interrupted export had replayed already


def export(run: str | os.PathLike[str] | Run, *, to: str, out: str | os.PathLike[str] | None = None,
           dataset_id: str | None = None, role: str = "policy", only: str | None = None,
           min_return: float | None = None, episodes: str | Sequence[int] | None = None,
           cameras: Sequence[str] = (), fps: float | None = None, width: int | None = None,
           height: int | None = None, workers: int = 0, overwrite: bool = False,
           backends: str | Sequence[str] | None = None,
           on_episode: Callable[[Any], None] | None = None, mode: str = "resim",
           trust_module: Sequence[str] = ()) -> ExportOutcome:
    """Export the verified episodes of ``run`` as a dataset ``to`` 'minari' or 'lerobot'.

    Minari: ``dataset_id`` (NAMESPACE/NAME-vN) under ``out`` (else ``MINARI_DATASETS_PATH``,
    else Minari's default folder). LeRobot: the dataset folder is ``out``; ``dataset_id``
    is its repo id (default ``rolltape/<folder name>``); ``cameras`` become
    ``observation.images.<camera>`` videos at ``fps`` (default: the env's), ``width`` x
    ``height``. ``workers`` render processes replay the tapes (0: one per CPU core)."""
    from rolltape.datasets import episodes as eps
    from rolltape.executors.launch import check_worker_count, per_core, stop_workers
    from rolltape.pass2.backends import DEFAULT_ORDER

    check_choice("--to", to, FORMATS)
    missing = [m for m in (("minari", "pyarrow") if to == "minari" else ("pyarrow",))
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--to {to} needs {' and '.join(missing)}, which "
                         f"{'is' if len(missing) == 1 else 'are'} not installed; install the "
                         "export extra: pip install 'rolltape[export]'.")
    check_worker_count("--workers", workers, 0)
    workers = per_core(workers)  # 0: a worker per core, as eval's pass 2
    check_choice("--mode", mode, ("resim", "restore"))
    if to == "minari" and cameras:
        raise UsageError("--camera makes videos, which only --to lerobot stores; drop --camera "
                         "for Minari.")
    if fps is not None and not fps > 0:
        raise UsageError(f"--fps must be a positive number, got {fps}.")
    record = run if isinstance(run, Run) else Run.load(run)
    indices = eps.parse_indices(episodes)
    chosen = eps.choose(record, role=role, only=only, min_return=min_return, indices=indices)
    backends = backends or DEFAULT_ORDER
    # Started as soon as there is something to replay, so that their interpreters start
    # while this one imports the dataset's writer (minari, pyarrow) and reads the run; the
    # first one builds the envs to check them (eps.probe). Stopped however the export ends.
    started = eps.start_workers(min(workers, len(chosen)), backends, draw=bool(cameras),
                                trusted=bool(trust_module))
    try:
        final, staging, dataset_id = _destination(to, record, out, dataset_id)
        if final.exists() and not overwrite:
            raise UsageError(f"Dataset '{final}' already exists; pass --overwrite to replace "
                             "it, or choose another --id/--out.")
        writer: Any
        if to == "minari":
            from rolltape.datasets import minari as writer
        else:
            from rolltape.datasets import lerobot as writer
        _import_in_background(writer.IMPORTS)
        firsts = _first_of_each_task(chosen)
        if mode == "restore":
            eps.check_restorable(firsts)
        specs = [eps.tape_env(c) for c in firsts]
        trusted = {c.episode.key.task_key: trusted_env_id(s["id"], trust_module)
                   for c, s in zip(firsts, specs)}
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
        config = {"format": to, "id": dataset_id, "run": str(record.path.resolve()),
                  "results_sha256": sha256_of(record.path / "results.json"), "role": role,
                  "episodes": [c.episode.key.to_json() for c in chosen],
                  "cameras": list(cameras), "fps": frame_rate, "width": width,
                  "height": height, "mode": mode}
        resumed = eps.prepare_staging(staging, config)
        try:
            steps, kept, left_out = _replay_and_write(
                writer, record, chosen, staging, final, dataset_id, env_of,
                cameras=list(cameras), width=width, height=height, fps=frame_rate,
                workers=workers, backends=backends, started=started, on_episode=on_episode,
                overwrite=overwrite, last_frame=to == "minari",
                env_ids=lambda c: trusted[c.episode.key.task_key], mode=mode)
        except (KeyboardInterrupt, Interrupted):
            raise  # the staging folder stays: the same command resumes from it
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-written is left
            raise
    finally:
        stop_workers(started)
    shutil.rmtree(staging, ignore_errors=True)
    return ExportOutcome(final, to, len(kept), steps, left_out, resumed)


def _replay_and_write(writer: Any, record: Run, chosen: Sequence[Any],
                      staging: Path, final: Path, dataset_id: str,
                      env_of: dict[Any, tuple[Any, ...]], *, cameras: list[str],
                      width: int | None, height: int | None, fps: float, workers: int,
                      backends: str | Sequence[str], started: Sequence[Any],
                      on_episode: Callable[[Any], None] | None, overwrite: bool,
                      last_frame: bool, env_ids: Callable[[Any], str | None],
                      mode: str) -> tuple[int, list[Any], list[tuple[str, str]]]:
    """Replay the chosen episodes, write the dataset in the staging folder and move it into
    place; (steps, episodes kept, episodes left out and why)."""
    from rolltape.datasets import episodes as eps

    success_keys = _success_keys(record)
    built = staging / "dataset"
    if built.exists():
        shutil.rmtree(built)
    origin = {**_origin(record), "mode": mode}
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
            chosen, staging, cameras=cameras, width=width, height=height, fps=fps,
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
    else:
        if out is None:
            raise UsageError("--to lerobot needs --out FOLDER (the dataset's folder).")
        final = Path(out)
        dataset_id = dataset_id or f"rolltape/{final.resolve().name}"
    staging = final.parent / f".{final.name}.export-partial"
    final.parent.mkdir(parents=True, exist_ok=True)
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
