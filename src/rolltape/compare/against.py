"""``rolltape diff RUN --against DATASET``: a run against the episodes a Minari dataset or a
LeRobotDataset says happened (one rolltape exported, or another tool recorded with actions,
rewards and seeds).

Each dataset episode becomes a tape in memory: its actions, rewards, terminations and
truncations as stored, and its observations digested as pass 1 digests them (whole, per
key of a dict observation), so the walk and the classifier read it as they read a run's
tape. Episodes are paired by seed (Minari keeps each episode's seed); success is the
dataset's per-step ``success`` (rolltape's export) by the run's rule. Its card says what
the dataset records: the env id, kwargs and time limit of its env spec; the rest is
named as not compared.

A LeRobotDataset (:mod:`rolltape.datasets.lerobot`'s layout, read with pyarrow) keeps
less: actions and rewards as float32, ``next.done`` for either flag, and observations as
float32 vectors, which a run's tape (their digests only) cannot be checked against. Its
episodes are paired by the seed rolltape's export writes in ``meta/episodes``
(``rolltape/seed``; a dataset without it is refused), and both sides are compared as the
dataset stores them (:func:`as_stored`): the run's actions and rewards at float32, its
two flags as one, observations not compared, and the output says so.

May import: pass1.fields (the digests), outputs.protocol, tape, errors, numpy; minari
and pyarrow lazily. Never: policies, pass 2, executors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rolltape.errors import UsageError
from rolltape.outputs.protocol import SEED_SCHEME
from rolltape.pass1.fields import digest_all, kept_obs, key_digests
from rolltape.tape import Tape

_NOT_SAID = ("package versions", "success key and rule", "control rate", "observation keys, shapes and ranges", "action space",
             "env wrappers", "policy-side wrappers", "policy", "executor and batch size",
             "simulator (the env's own or MuJoCo Warp)")


def dataset_side(path: str | os.PathLike[str], card: dict[str, Any], order: list[Any],
                 reported: dict[Any, bool]) -> dict[str, Any]:
    """The fields of :class:`rolltape.compare.diff.Side` for the Minari dataset in ``path``
    (its folder, or the ``data`` folder in it) as the B side of a diff against a run with
    ``card``, its episodes' keys in ``order``, and ``reported``: whether each episode's env
    said success; one UsageError when it is not a dataset."""
    data = Path(path)
    if is_lerobot(data):
        return _lerobot_side(data, card, order, reported)
    if (data / "data" / "metadata.json").is_file():
        data = data / "data"
    if not (data / "metadata.json").is_file():
        raise UsageError(f"--against '{path}' is not a Minari dataset (no metadata.json in it "
                         "or its data folder); give the folder `rolltape export --to minari` "
                         "wrote, or a LeRobotDataset's (with meta/info.json).")
    try:
        import minari

        dataset = minari.MinariDataset(str(data))
        metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    except (ImportError, OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--against '{path}': the Minari dataset cannot be read "
                         f"({type(exc).__name__}: {str(exc)[:120]}); check it with minari "
                         "itself.") from None
    spec = _env_spec(data)
    rules = {label: env.get("success_rule", "at_end")
             for label, env in (card.get("envs") or {}).items()}
    suites = {k[:2] for k in order}
    where = next(iter(suites)) if len(suites) == 1 else (None, None)
    rule = rules.get("env" if where[0] is None else f"{where[0]}/{where[1]}", "at_end")
    episodes: dict[Any, Any] = {}
    walk = []
    for k, meta in enumerate(metas):
        seed = meta.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise UsageError(f"--against '{path}': episode {k} has no seed, so it cannot be "
                             "paired with the run's episodes; diff needs a dataset that "
                             "keeps each episode's seed.")
        key = (*where, seed)
        index = int((meta.get("rolltape") or {}).get("index", k))
        episodes[key] = (f"dataset episode {k} (seed {seed})", index, None, None,
                         _loader(dataset, k, seed, spec))
        walk.append(key)
    # Success and return need the episode's arrays: read them once here (small).
    for key in walk:
        label, index, _, _, load = episodes[key]
        tape = load()
        success = tape.success_at_end if rule == "at_end" else tape.success_once
        if not reported.get(key, True):
            success = None  # the run's env never said: the export's False is a filler
        episodes[key] = (label, index, success, tape.total_return, lambda t=tape: t)
    said = {"envs": {"env" if where[0] is None else f"{where[0]}/{where[1]}": {
                "id": spec.get("id"), "kwargs": spec.get("kwargs") or {},
                "max_episode_steps": spec.get("max_episode_steps")}},
            "seeds": {"scheme": SEED_SCHEME, "base": min((k[2] for k in walk), default=None)}}
    unknown = [f"{what} (a dataset does not record it)" for what in _NOT_SAID]
    task = "env" if where[0] is None else f"{where[0]}/{where[1]}"
    return {"path": str(path), "card": said, "unknown": unknown, "episodes": episodes,
            "order": walk, "silent": ("policy", "execution", "simulator",
                                      f"envs.{task}.versions",
                                      f"envs.{task}.success_key", f"envs.{task}.success_rule")}


def _env_spec(data: Path) -> dict[str, Any]:
    """The dataset's env spec (id, kwargs, time limit) from its metadata, as data."""
    try:
        meta = json.loads((data / "metadata.json").read_text())
        spec = json.loads(meta.get("env_spec") or "{}")
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
    return spec if isinstance(spec, dict) else {}


def _loader(dataset: Any, k: int, seed: int, spec: dict[str, Any]) -> Callable[[], Tape]:
    def load() -> Tape:
        ep = dataset[k]
        obs = ep.observations
        n = len(ep.rewards)
        if isinstance(obs, dict):
            rows = [kept_obs({name: np.asarray(v[t]) for name, v in obs.items()})
                    for t in range(n + 1)]
        else:
            rows = [np.asarray(obs[t]) for t in range(n + 1)]
        keys, by_key = key_digests(rows)
        success = np.asarray((ep.infos or {}).get("success", []), dtype=bool).ravel()
        said = success.size == n + 1 or success.size == n
        return Tape(env={"id": str(spec.get("id") or "dataset")}, seed=seed,
                    actions=np.asarray(ep.actions),
                    rewards=np.asarray(ep.rewards, dtype=np.float64),
                    terminated=np.asarray(ep.terminations, dtype=bool),
                    truncated=np.asarray(ep.truncations, dtype=bool),
                    obs_digest=digest_all(rows),
                    obs_keys=tuple(keys) if keys is not None else None, obs_key_digest=by_key,
                    success_at_end=bool(success[-1]) if said and n else None,
                    success_once=bool(success.any()) if said else None)
    return load


# --------------------------------------------------------------------------------------
# LeRobotDataset
# --------------------------------------------------------------------------------------

_LEROBOT_NOT_SAID = ("observations (LeRobot keeps them as float32 vectors, a run's tape "
                     "only their digests)", "actions and rewards beyond float32 (LeRobot "
                     "stores float32; both sides are compared at it)", "terminated vs "
                     "truncated (LeRobot's next.done is either)", "env kwargs and time limit (a "
                     "LeRobotDataset does not record them)")


def is_lerobot(path: Path) -> bool:
    """Whether ``path`` is a LeRobotDataset's folder (its ``meta/info.json``)."""
    return (path / "meta" / "info.json").is_file()


def as_stored(tape: Tape) -> Tape:
    """``tape`` as a LeRobotDataset stores its episode: actions and rewards at float32, one
    done flag (in ``terminated``), no observation digests."""
    n = tape.length
    return Tape(env=tape.env, seed=tape.seed,
                actions=np.asarray(tape.actions).reshape(n, -1).astype(np.float32),
                rewards=np.asarray(tape.rewards).astype(np.float32).astype(np.float64),
                terminated=np.asarray(tape.terminated | tape.truncated, dtype=bool),
                truncated=np.zeros(n, dtype=bool),
                success_at_end=tape.success_at_end, success_once=tape.success_once)


def _lerobot_side(data: Path, card: dict[str, Any], order: list[Any],
                  reported: dict[Any, bool]) -> dict[str, Any]:
    """:func:`dataset_side` for a LeRobotDataset folder."""
    import pyarrow.parquet as pq

    try:
        info = json.loads((data / "meta" / "info.json").read_text())
        metas = _rows(pq, sorted((data / "meta" / "episodes").glob("*/*.parquet")))
        frames = _rows(pq, sorted((data / "data").glob("*/*.parquet")))
        provenance = json.loads((data / "meta" / "rolltape.json").read_text()) \
            if (data / "meta" / "rolltape.json").is_file() else {}
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"--against '{data}': the LeRobotDataset cannot be read "
                         f"({type(exc).__name__}: {str(exc)[:120]}); check it with lerobot "
                         "itself.") from None
    missing = [c for c in ("episode_index", "action", "next.reward", "next.done")
               if c not in frames]
    if missing or "episode_index" not in metas:
        raise UsageError(f"--against '{data}': the LeRobotDataset has no "
                         f"{', '.join(missing) or 'episode_index in meta/episodes'}, so its "
                         "episodes cannot be walked; diff needs each frame's action, "
                         "next.reward and next.done.")
    if "rolltape/seed" not in metas:
        raise UsageError(f"--against '{data}': this LeRobotDataset keeps no episode's seed "
                         "(rolltape's export writes it in meta/episodes as rolltape/seed), "
                         "so its episodes cannot be paired with the run's.")
    suites = {k[:2] for k in order}
    where = next(iter(suites)) if len(suites) == 1 else (None, None)
    task = "env" if where[0] is None else f"{where[0]}/{where[1]}"
    rule = ((card.get("envs") or {}).get(task) or {}).get("success_rule", "at_end")
    env_id = ((provenance.get("run") or {}).get("env_id")) or info.get("robot_type")
    of_episode = np.asarray(frames["episode_index"])
    episodes: dict[Any, Any] = {}
    walk = []
    for k, (number, seed) in enumerate(zip(metas["episode_index"], metas["rolltape/seed"])):
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise UsageError(f"--against '{data}': episode {k} has no seed, so it cannot be "
                             "paired with the run's episodes.")
        rows = np.flatnonzero(of_episode == number)
        done = np.asarray(frames["next.done"], dtype=bool)[rows]
        said = np.asarray(frames["next.success"], dtype=bool)[rows] \
            if "next.success" in frames else None
        tape = Tape(env={"id": str(env_id)}, seed=seed,
                    actions=np.asarray([frames["action"][i] for i in rows],
                                       dtype=np.float32).reshape(len(rows), -1),
                    rewards=np.asarray(frames["next.reward"], dtype=np.float32)[rows]
                    .astype(np.float64),
                    terminated=done, truncated=np.zeros(len(rows), dtype=bool),
                    success_at_end=bool(said[-1]) if said is not None and len(rows) else None,
                    success_once=bool(said.any()) if said is not None else None)
        key = (*where, seed)
        success = tape.success_at_end if rule == "at_end" else tape.success_once
        if not reported.get(key, True):
            success = None  # the run's env never said: the export's False is a filler
        index = metas["rolltape/run_index"][k] if "rolltape/run_index" in metas else k
        episodes[key] = (f"dataset episode {number} (seed {seed})", int(index), success,
                         tape.total_return, lambda t=tape: t)
        walk.append(key)
    said_card = {"envs": {task: {"id": env_id}},
                 "seeds": {"scheme": SEED_SCHEME, "base": min((k[2] for k in walk),
                                                              default=None)}}
    return {"path": str(data), "card": said_card,
            "unknown": [f"{what} (a LeRobotDataset does not record it)" for what in _NOT_SAID]
            + list(_LEROBOT_NOT_SAID), "episodes": episodes, "order": walk,
            "silent": ("policy", "execution", "simulator", *(f"envs.{task}.{f}" for f in (
                "versions", "success_key", "success_rule", "kwargs", "max_episode_steps")))}


def _rows(pq: Any, files: list[Path]) -> dict[str, list[Any]]:
    """The columns of ``files`` (parquet) joined, as Python lists."""
    if not files:
        raise ValueError("no parquet files")
    out: dict[str, list[Any]] = {}
    for path in files:
        for name, values in pq.read_table(path).to_pydict().items():
            out.setdefault(name, []).extend(values)
    return out
