"""LeRobotDataset (codebase v3.0) folders, written with pyarrow and PyAV.

LeRobot itself needs Python 3.12 and pins torch, numpy and PyAV releases rolltape's own
environment cannot share, so the layout is written here, as LeRobot's v3 writer lays it
out (read in its source: ``LeRobotDataset.create/save_episode/finalize``,
``meta/info.json``, ``encode_video_frames``), and the tests load what this writes with
``lerobot`` itself, installed in a virtual environment of its own:

```
meta/info.json                       features (dtype, shape, names), fps, codebase version
meta/stats.json                      per feature: min max mean std count q01 q10 q50 q90 q99
meta/tasks.parquet                   task_index, indexed by the task string
meta/episodes/chunk-000/file-000.parquet   one row per episode: its tasks, length, rows,
                                     video files and timestamps, and its own stats
data/chunk-000/file-000.parquet      one row per frame: observation.state, action,
                                     next.reward, next.done, next.success, timestamp,
                                     frame_index, episode_index, index, task_index
videos/observation.images.CAM/chunk-CCC/file-FFF.mp4   one file per episode (AV1 as
                                     LeRobot encodes: SVT-AV1, yuv420p, g 2, crf 30)
```

A frame is an observation and the action taken on it: an episode of T steps is T frames
(the observation after the last step is not one), ``next.*`` are what that step returned.
``observation.state`` is the observation as float32, flattened (a dict observation in
Gymnasium's ``flatten`` order, its names saying which key each element comes from). A
suite run is one dataset: each episode's task string is its task's name.

May import: errors, files, the render side's statistics (pass2.export), numpy, pyarrow,
gymnasium's spaces, PyAV. Never: policies, torch, lerobot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import write_json

#: What :func:`write` imports, imported ahead while the episodes replay.
IMPORTS = ("pyarrow", "pyarrow.parquet", "av")

CODEBASE_VERSION = "v3.0"
CHUNK_SIZE = 1000  # files per chunk folder, as LeRobot
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
#: The settings of every video, as LeRobot's info.json records them (pass2.encode writes them).
VIDEO_INFO = {"video.codec": "av1", "video.pix_fmt": "yuv420p", "video.g": 2, "video.crf": 30,
              "video.preset": 12, "video.fast_decode": 0, "video.video_backend": "pyav",
              "video.extra_options": {}, "video.channels": 3, "has_audio": False,
              "is_depth_map": False}
_FLAT = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


def video_key(camera: str) -> str:
    """'track:tips_arm' -> 'observation.images.track_tips_arm' (a feature key and a folder).

    >>> video_key("default")
    'observation.images.default'
    """
    return "observation.images." + camera.replace(":", "_").replace("/", "_")


def _unflattenable(space: Any, where: str) -> str | None:
    name = type(space).__name__
    if name in ("Dict", "Tuple"):
        items = space.spaces.items() if name == "Dict" else enumerate(space.spaces)
        for key, sub in items:
            found = _unflattenable(sub, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if name not in _FLAT:
        return f"{where} is a {name} space, which has no fixed-size float vector"
    if name == "Box" and len(space.shape) >= 3:
        return (f"{where} is an image (a Box of shape {tuple(space.shape)}), which "
                "LeRobot stores as a video: export the env's camera with --camera instead")
    return None


def state_names(space: Any) -> list[str]:
    """A name per element of the flattened observation: 'state_3', or 'KEY_3' for an
    element of a dict observation's KEY."""
    from gymnasium import spaces

    def names(sub: Any, prefix: str) -> list[str]:
        if isinstance(sub, spaces.Dict):
            return [n for k, s in sub.spaces.items() for n in names(s, f"{prefix}{k}.")]
        if isinstance(sub, spaces.Tuple):
            return [n for k, s in enumerate(sub.spaces) for n in names(s, f"{prefix}{k}.")]
        size = spaces.flatdim(sub)
        return [f"{prefix}{i}" for i in range(size)]

    out = names(space, "")
    return [f"state_{n}" if isinstance(space, spaces.Box) else n for n in out]


def check_spaces(env_of: dict[Any, tuple[Any, ...]], run: Any) -> None:
    """Refuse, before any replay, what a LeRobotDataset cannot hold: an observation that
    does not flatten into a float vector (say which part), Discrete actions (LeRobot's
    ``action`` is a float vector), tasks whose shapes differ."""
    from gymnasium import spaces

    shapes = {}
    for task, (obs_space, act_space, spec, _) in env_of.items():
        env_id = spec.id if spec is not None else run.results.env_id
        found = _unflattenable(obs_space, "observation_space")
        if found:
            raise UsageError(f"LeRobot cannot store the observations of {env_id}: its {found}.")
        if not isinstance(act_space, spaces.Box):
            how = ("integers 0..{}".format(act_space.n - 1)
                   if isinstance(act_space, spaces.Discrete) else type(act_space).__name__)
            raise UsageError(f"{env_id} has {type(act_space).__name__} actions ({how}) and "
                             "LeRobot's `action` feature is a float32 vector, so they cannot "
                             "be stored as its actions; export it with --to minari, which "
                             "stores them as they are (int64).")
        shapes[task] = (spaces.flatdim(obs_space), int(np.prod(act_space.shape)))
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{t[1] or run.results.env_id}: state {s[0]}, action {s[1]}"
                           for t, s in shapes.items())
        raise UsageError(f"One LeRobotDataset has one state and action shape, and this run's "
                         f"tasks differ ({listed}); export each task's run on its own.")


def built_folder(built: Path, dataset_id: str) -> Path:
    return built


def after_move(built: Path, final: Path, dataset_id: str) -> None:
    pass


def write(built: Path, *, dataset_id: str, run: Any, replayed: Sequence[Any], staging: Path,
          env_of: dict[Any, tuple[Any, ...]], provenance: dict[str, Any],
          cameras: list[str], fps: float) -> int:
    """Write the dataset into folder ``built``, one episode at a time; return its frames."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from gymnasium import spaces

    from rolltape.datasets.episodes import episode_file, frames_file
    from rolltape.pass2.cameras import separate_path
    from rolltape.pass2.export import feature_stats, nest

    kept = [r for r in replayed if r.verified]
    first_obs, first_act, _, _ = next(iter(env_of.values()))
    state_dim, action_dim = spaces.flatdim(first_obs), int(np.prod(first_act.shape))
    tasks: dict[str, int] = {}
    for r in kept:
        tasks.setdefault(_task(r, run), len(tasks))
    keys = [video_key(c) for c in cameras]
    sizes = {k: _video_size(separate_path(str(staging / "episodes" /
                                              f"{kept[0].chosen.stem}.mp4"), c))
             for k, c in zip(keys, cameras)}
    features = _features(first_obs, state_dim, action_dim, keys, sizes, fps,
                         provenance.get("renderer"))
    built.mkdir(parents=True)
    schema = _data_schema(state_dim, action_dim)
    data_path = built / DATA_PATH.format(chunk_index=0, file_index=0)
    data_path.parent.mkdir(parents=True)
    meta = built / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True)
    # Each episode's row and statistics are written and pooled as it comes, as LeRobot's
    # recorder does (save_episode): memory stays flat however many episodes there are.
    totals: dict[str, dict[str, np.ndarray]] = {}
    index = 0
    with pq.ParquetWriter(data_path, schema) as data, \
            _RowWriter(built / EPISODES_PATH) as episode_rows:
        for k, r in enumerate(kept):
            with np.load(episode_file(staging, r.chosen)) as npz:
                arrays = {name: npz[name] for name in npz.files}
            if frames_file(staging, r.chosen).is_file():  # drawn apart (--renderer mjwarp)
                with np.load(frames_file(staging, r.chosen)) as npz:
                    arrays.update({name: npz[name] for name in npz.files})
            obs_space = env_of[r.chosen.episode.key.task_key][0]
            observed = nest(arrays, obs_space)
            steps = int(arrays["rewards"].shape[0])
            state = _flat_states(obs_space, observed, steps)
            columns = {
                "observation.state": state,
                "action": arrays["actions"].reshape(steps, -1).astype(np.float32),
                "next.reward": arrays["rewards"].astype(np.float32),
                "next.done": arrays["terminated"] | arrays["truncated"],
                "next.success": arrays["success"][1:],
                "timestamp": (np.arange(steps) / fps).astype(np.float32),
                "frame_index": np.arange(steps, dtype=np.int64),
                "episode_index": np.full(steps, k, dtype=np.int64),
                "index": np.arange(index, index + steps, dtype=np.int64),
                "task_index": np.full(steps, tasks[_task(r, run)], dtype=np.int64),
            }
            data.write_table(pa.table({name: _arrow(values) for name, values in
                                       columns.items()}, schema=schema))
            row: dict[str, Any] = {
                "episode_index": k, "tasks": [_task(r, run)], "length": steps,
                "data/chunk_index": 0, "data/file_index": 0,
                "dataset_from_index": index, "dataset_to_index": index + steps}
            stats: dict[str, dict[str, np.ndarray]] = {}
            for j, (key, camera) in enumerate(zip(keys, cameras)):
                chunk, file = divmod(k, CHUNK_SIZE)
                target = built / VIDEO_PATH.format(video_key=key, chunk_index=chunk,
                                                   file_index=file)
                target.parent.mkdir(parents=True, exist_ok=True)
                _link(separate_path(str(staging / "episodes" / f"{r.chosen.stem}.mp4"),
                                    camera), target)
                row.update({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                            f"videos/{key}/from_timestamp": 0.0,
                            f"videos/{key}/to_timestamp": steps / fps})
                stats[key] = {name.rpartition("/")[2]: arrays[name] for name in arrays
                              if name.startswith(f"image_stats/{j}/")}
            for name, values in columns.items():
                stats[name] = feature_stats(values.reshape(steps, -1).astype(np.float64))
            for name, values in stats.items():
                row.update({f"stats/{name}/{stat}": value
                            for stat, value in _listed(values).items()})
                totals[name] = pool([totals[name], values]) if name in totals else values
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                        "rolltape/seed": r.chosen.episode.key.seed,
                        "rolltape/role": r.chosen.episode.key.role,
                        "rolltape/run_index": r.chosen.episode.key.index,
                        "rolltape/tape_sha256": r.tape_sha256, "rolltape/verified": True})
            episode_rows.write(row)
            index += steps
    _write_tasks(meta / "tasks.parquet", tasks)
    write_json(meta / "stats.json", {name: _listed(totals[name]) for name in features
                                     if name in totals})
    write_json(meta / "info.json", {
        "codebase_version": CODEBASE_VERSION, "robot_type": _robot_type(run),
        "total_episodes": len(kept), "total_frames": index, "total_tasks": len(tasks),
        "chunks_size": CHUNK_SIZE, "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200, "fps": int(fps), "splits": {"train": f"0:{len(kept)}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if keys else None,
        "features": features})
    write_json(meta / "rolltape.json", {**provenance, "dataset_id": dataset_id})
    return index


def _task(replayed: Any, run: Any) -> str:
    """An episode's task string: its suite task's name, else the env id."""
    return replayed.chosen.episode.key.task_name or run.results.env_id


def _robot_type(run: Any) -> str:
    return str(run.results.env_id).split(":")[-1]


def _flat_states(space: Any, observed: Any, steps: int) -> np.ndarray:
    """The first ``steps`` observations as float32 rows (Gymnasium's flatten order)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return np.asarray(observed[:steps]).reshape(steps, -1).astype(np.float32)

    def row(t: int) -> Any:
        def pick(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: pick(v) for k, v in value.items()}
            if isinstance(value, tuple):
                return tuple(pick(v) for v in value)
            return value[t]
        return pick(observed)

    return np.stack([np.asarray(spaces.flatten(space, row(t)))  # a Box's flat row
                     for t in range(steps)]).astype(np.float32)


def _features(obs_space: Any, state_dim: int, action_dim: int, keys: list[str],
              sizes: dict[str, tuple[int, int]], fps: float,
              renderer: dict[str, Any] | None = None) -> dict[str, Any]:
    scalar = {"shape": [1], "names": None}
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [state_dim],
                              "names": state_names(obs_space)},
        "action": {"dtype": "float32", "shape": [action_dim],
                   "names": [f"action_{i}" for i in range(action_dim)]},
        "next.reward": {"dtype": "float32", **scalar},
        "next.done": {"dtype": "bool", **scalar},
        "next.success": {"dtype": "bool", **scalar},
    }
    for key in keys:
        height, width = sizes[key]
        features[key] = {"dtype": "video", "shape": [height, width, 3],
                         "names": ["height", "width", "channels"],
                         "info": {"video.height": height, "video.width": width,
                                  "video.fps": int(fps), **VIDEO_INFO,
                                  **_camera_origin(renderer)}}
    features.update({"timestamp": {"dtype": "float32", **scalar},
                     "frame_index": {"dtype": "int64", **scalar},
                     "episode_index": {"dtype": "int64", **scalar},
                     "index": {"dtype": "int64", **scalar},
                     "task_index": {"dtype": "int64", **scalar}})
    return features


def _camera_origin(renderer: dict[str, Any] | None) -> dict[str, str]:
    """What a camera feature's info says drew its frames: ``rolltape.renderer``
    ('env.render()', or 'mujoco_warp': MuJoCo Warp's ray tracer) and, for the ray tracer,
    ``rolltape.images``, the sentence that says they are not env.render()'s."""
    if not renderer:
        return {}
    said = {"rolltape.renderer": str(renderer["name"])}
    if "images" in renderer:
        said["rolltape.images"] = str(renderer["images"])
    return said


def _data_schema(state_dim: int, action_dim: int) -> Any:
    """The data files' arrow schema, with the Hugging Face ``datasets`` features LeRobot's
    reader takes their types from (fixed-length float32 lists, scalars)."""
    import pyarrow as pa

    value = {"float32": pa.float32(), "bool": pa.bool_(), "int64": pa.int64()}
    columns = [("observation.state", "float32", state_dim), ("action", "float32", action_dim),
               ("next.reward", "float32", 0), ("next.done", "bool", 0),
               ("next.success", "bool", 0), ("timestamp", "float32", 0),
               ("frame_index", "int64", 0), ("episode_index", "int64", 0), ("index", "int64", 0),
               ("task_index", "int64", 0)]
    fields, hf = [], {}
    for name, dtype, length in columns:
        # A feature of shape (1,) is a scalar column to LeRobot (its
        # get_hf_features_from_features makes it a Value, not a list of one).
        if length > 1:
            fields.append(pa.field(name, pa.list_(value[dtype], length)))
            hf[name] = {"feature": {"dtype": dtype, "_type": "Value"}, "length": length,
                        "_type": "List"}
        else:
            fields.append(pa.field(name, value[dtype]))
            hf[name] = {"dtype": dtype, "_type": "Value"}
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": hf}})})


def _arrow(values: np.ndarray) -> Any:
    import pyarrow as pa

    if values.ndim == 2 and values.shape[1] > 1:
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
    return pa.array(values.reshape(-1))  # a scalar, or a vector of one (see _data_schema)


def pool(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One feature's statistics over several episodes from each one's, by LeRobot's rule
    (its ``aggregate_feature_stats``): counts weigh means, variances (about the pooled
    mean) and quantiles; min of minima, max of maxima.

    >>> a = {"min": np.array([0.]), "max": np.array([1.]), "mean": np.array([.5]),
    ...      "std": np.array([.5]), "count": np.array([2])}
    >>> b = {**a, "min": np.array([2.]), "max": np.array([2.]), "mean": np.array([2.]),
    ...      "std": np.array([0.]), "count": np.array([1])}
    >>> {k: v.tolist() for k, v in pool([a, b]).items()}  # of 0, 1 and 2
    {'min': [0.0], 'max': [2.0], 'mean': [1.0], 'std': [0.816496580927726], 'count': [3]}
    """
    get = {k: np.stack([np.asarray(s[k], dtype=np.float64) for s in stats]) for k in stats[0]
           if k != "count"}
    counts = np.stack([np.asarray(s["count"]) for s in stats])  # whole numbers, summed as such
    total = counts.sum(axis=0)
    weights = counts.reshape(len(stats), *([1] * (get["mean"].ndim - 1)))
    mean = (get["mean"] * weights).sum(axis=0) / total
    variance = ((get["std"] ** 2 + (get["mean"] - mean) ** 2) * weights).sum(axis=0) / total
    out = {"min": get["min"].min(axis=0), "max": get["max"].max(axis=0), "mean": mean,
           "std": np.sqrt(variance), "count": total}
    out.update({q: (get[q] * weights).sum(axis=0) / total for q in get
                if q.startswith("q") and q[1:].isdigit()})
    return out


def _listed(stats: dict[str, np.ndarray]) -> dict[str, Any]:
    """One feature's statistics as JSON and parquet hold them (nested lists)."""
    return {stat: np.asarray(value).tolist() for stat, value in stats.items()}


class _RowWriter:
    """``meta/episodes``: one parquet row per episode, written in batches as they come (the
    first batch's types are the file's schema)."""

    BATCH = 100

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.writer: Any = None

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.rows:
            return
        schema = self.writer.schema if self.writer is not None else None
        table = pa.Table.from_pylist(self.rows, schema=schema)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table)
        self.rows = []

    def __enter__(self) -> _RowWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            self._flush()
        if self.writer is not None:
            self.writer.close()


def _write_tasks(path: Path, tasks: dict[str, int]) -> None:
    """``meta/tasks.parquet``: task_index per task, the task string as the pandas index
    (LeRobot reads it with ``pandas.read_parquet`` and looks tasks up by it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {"index_columns": ["task"], "column_indexes": [
        {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
         "metadata": {"encoding": "UTF-8"}}], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
         "numpy_type": "int64", "metadata": None},
        {"name": "task", "field_name": "task", "pandas_type": "unicode",
         "numpy_type": "object", "metadata": None}], "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__}}
    table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()),
                      "task": pa.array(list(tasks), pa.string())})
    pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), path)


def _link(source: str, target: Path) -> None:
    """Put an episode's video into the dataset, keeping the staging copy (an export
    stopped while writing resumes from the staging folder): a hard link, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        import shutil

        shutil.copyfile(source, target)


def _video_size(path: str) -> tuple[int, int]:
    """(height, width) of a video's frames."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        return int(stream.height), int(stream.width)
