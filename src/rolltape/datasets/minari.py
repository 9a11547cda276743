"""Minari datasets, written by the ``minari`` package itself.

:func:`write` makes the dataset with ``minari.create_dataset_from_buffers`` (no episodes
yet: eval env spec, algorithm name, author, code permalink, description, requirements) in
the export's staging folder, records the env spec and reference scores in its metadata as
Minari does (given no env, Minari does not build one: the orchestrator never imports
MuJoCo), then streams the verified episodes into its storage one at a time
(``storage.update_episodes``), so memory stays flat however many episodes there are. The
orchestrator moves the finished dataset into place. It runs beside the replays
(:data:`STREAMS`): episodes are stored as they come, so writing costs no time after them.

Each episode's ``infos`` hold per-step arrays (``success``: the run's success key at each
step, False at the reset) and its metadata says which rolltape episode it is (seed, role,
index, tape sha256, verification).

May import: errors, the render side's episode reader (pass2.export.nest), numpy; minari
and gymnasium lazily. Never: policies, torch, mujoco.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Iterable

import numpy as np

from rolltape.errors import UsageError

#: What :func:`write` imports: Minari's arrow storage brings pyarrow.dataset and pandas
#: (~1 s, most of a short export's writing), imported ahead while the episodes replay.
IMPORTS = ("minari", "minari.dataset._storages.arrow_storage",
           "minari.data_collector.episode_buffer")

STREAMS = True  # write() takes the replays as a stream, in order, while they run

BATCH_STEPS = 20_000  # steps handed to Minari's storage at once (at most)
BATCH_EPISODES = 100

#: The spaces Minari can store (its ``serialize_space`` knows them).
STORABLE = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple", "Text")


def unstorable(space: Any, where: str) -> str | None:
    """The first part of ``space`` Minari cannot store, in words, or None."""
    name = type(space).__name__
    if name not in STORABLE:
        return f"{where} is a {name} space"
    subs: Any = getattr(space, "spaces", None)  # a Dict's or a Tuple's
    if name == "Dict":
        for key, sub in subs.items():
            found = unstorable(sub, f"{where}[{key!r}]")
            if found:
                return found
    if name == "Tuple":
        for k, sub in enumerate(subs):
            found = unstorable(sub, f"{where}[{k}]")
            if found:
                return found
    return None


def check_id(dataset_id: str) -> None:
    """Refuse a dataset id Minari would not accept (its own parser decides)."""
    import re

    from minari.dataset.minari_dataset import parse_dataset_id

    if not re.search(r"-v\d+$", dataset_id):  # minari's parser fails on it with a TypeError
        raise UsageError(f"--id {dataset_id[:100]!r} has no version; end it with -vN, like "
                         "rolltape/pusher-expert-v0.")
    try:
        parse_dataset_id(dataset_id)
    except (ValueError, AssertionError, TypeError) as exc:
        raise UsageError(f"--id {dataset_id!r} is not a Minari dataset id "
                         f"([NAMESPACE/]NAME-vVERSION, like rolltape/pusher-expert-v0): {exc}"
                         ) from None
    if ".." in dataset_id.split("/") or dataset_id.startswith("/"):
        raise UsageError(f"--id {dataset_id!r} must stay inside the datasets folder; give "
                         "NAMESPACE/NAME-vN.")


def _write(job: dict[str, Any]) -> int:
    """Make the dataset with minari and stream the episodes into its storage."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rolltape.pass2.export import nest

    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = job["root"]  # where Minari makes the dataset
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Minari's reminders about fields left None
            # No env given: Minari would build it (importing MuJoCo here, which the
            # orchestrator never does) only to read spaces rolltape already has; its spec
            # and the reference scores are then set as Minari itself records them.
            dataset = minari.create_dataset_from_buffers(
                job["dataset_id"], [], eval_env=job["env_spec"],
                algorithm_name=job["algorithm_name"], author=job["author"],
                code_permalink=job["code_permalink"], description=job["description"],
                observation_space=job["observation_space"],
                action_space=job["action_space"], requirements=job["requirements"],
                data_format="arrow",
                jpeg_encoding=False)  # observations exactly as the env returned them
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before
    storage = dataset.storage
    # Minari's storage walks every file of the dataset to update its size after each
    # episode it stores (time quadratic in the episodes: 30 s of 47 for 300 short ones);
    # the size is computed once, at the end, with the same method.
    real_size = storage.get_size
    storage.get_size = lambda: 0
    extra: dict[str, Any] = {"env_spec": job["env_spec"].to_json()}
    if job["ref_min_score"] is not None and job["ref_max_score"] is not None:
        extra.update(ref_min_score=job["ref_min_score"], ref_max_score=job["ref_max_score"],
                     num_episodes_average_score=job["scored_episodes"])
    storage.update_metadata(extra)
    steps = 0
    batch: list[Any] = []
    metas: list[dict[str, Any]] = []

    def flush() -> None:
        # Minari rewrites its metadata and walks the dataset's files after every call, so
        # episodes go in batches (of bounded size: memory stays flat), not one by one.
        if batch:
            storage.update_episodes(batch)
            storage.update_episode_metadata(metas, [b.id for b in batch])
            batch.clear()
            metas.clear()

    pending = 0
    for k, (path, seed, options, meta) in enumerate(job["episodes"]):
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
        batch.append(EpisodeBuffer(
            id=k, seed=seed, options=options,
            observations=nest(arrays, job["observation_space"]),
            actions=arrays["actions"], rewards=arrays["rewards"],
            terminations=arrays["terminated"], truncations=arrays["truncated"],
            # A list: Minari stores a per-step scalar from a list (an array of
            # scalars it stores with an empty shape it cannot read back).
            infos={"success": arrays["success"].tolist()}))
        metas.append({"rolltape": meta})
        steps += int(arrays["rewards"].shape[0])
        pending += int(arrays["rewards"].shape[0])
        if pending >= BATCH_STEPS or len(batch) >= BATCH_EPISODES:
            flush()
            pending = 0
    flush()
    storage.get_size = real_size
    storage.update_metadata({"rolltape": job["provenance"], "dataset_size": real_size()})
    return steps


def check_spaces(env_of: dict[Any, tuple[Any, ...]], run: Any) -> None:
    """Refuse, before any replay, what one Minari dataset cannot hold: several envs (a
    suite) or a space it cannot store."""
    if len(env_of) > 1:
        raise UsageError(f"Run '{run.path}' plays {len(env_of)} tasks and a Minari dataset "
                         "holds one env; export it with --to lerobot (one dataset, a task "
                         "string per episode).")
    obs_space, act_space, _, _ = next(iter(env_of.values()))
    for space, where in ((obs_space, "observation_space"), (act_space, "action_space")):
        found = unstorable(space, where)
        if found:
            raise UsageError(f"Minari cannot store this env's data: its {found} (Minari "
                             f"stores {', '.join(STORABLE)} spaces).")
    spec = next(iter(env_of.values()))[2]
    if spec is not None and spec.id.startswith("rolltape-file/"):
        raise UsageError(f"Minari stores the env as an id that recover_environment rebuilds, "
                         f"and env '{run.results.env_id}' comes from a file; export it with "
                         "--to lerobot, or make the file a module that registers the env.")
    if spec is not None and callable(spec.entry_point):
        # Minari keeps the env's spec as Gymnasium's JSON (recover_environment rebuilds
        # the env from it), and Gymnasium cannot write a Python object into JSON.
        raise UsageError(f"Minari stores the env's spec as JSON, and env '{spec.id}' is "
                         "registered with a Python class as its entry_point, which Gymnasium "
                         "cannot write there; register it with a 'module:Class' string.")


def built_folder(built: Any, dataset_id: str) -> Any:
    """Where in the staging folder ``write`` put the dataset."""
    return built / dataset_id


def write(built: Any, *, dataset_id: str, run: Any, replayed: Iterable[Any], staging: Any,
          env_of: dict[Any, tuple[Any, ...]], provenance: dict[str, Any],
          cameras: list[str], fps: float, chosen: int) -> int:
    """Write the dataset under ``built`` (a datasets folder); return its number of steps.

    ``replayed`` may be a stream (episodes stored as their replays finish, in the dataset's
    order, while later ones still replay), so ``provenance`` is the run's without the
    episodes' rows (each episode's metadata holds its own); ``chosen``: how many episodes
    were chosen (the description says so)."""
    from rolltape.datasets.episodes import episode_file

    obs_space, act_space, env_spec, _ = next(iter(env_of.values()))
    summary = run.results.summary
    policy = run.results.policy or {}
    facts = run.metadata or {}
    git = facts.get("policy_git") if isinstance(facts.get("policy_git"), dict) else None
    job = {
        "root": str(built.resolve()), "dataset_id": dataset_id, "env_spec": env_spec,
        "observation_space": obs_space, "action_space": act_space,
        "algorithm_name": str(policy.get("algo") or policy.get("kind") or "unknown"),
        "author": str(facts.get("user") or _user()),
        "code_permalink": (f"git commit {git['commit']}" if git and git.get("commit")
                           else f"rolltape {provenance['rolltape_version']}"),
        "description": (f"{chosen} episodes of {run.results.env_id} played by "
                        f"{policy.get('source') or policy.get('kind') or 'a policy'}, "
                        "exported by rolltape from verified replays of its tapes."),
        "requirements": [f"{name}=={v}" for name, v in provenance["versions"].items()
                         if name in ("gymnasium", "mujoco") and v],
        # Minari's reference scores: a random policy's mean return and an expert's; the
        # run's random baseline and the policy, on the same seeds.
        "ref_min_score": summary["baseline"].mean if "baseline" in summary else None,
        "ref_max_score": summary["policy"].mean if "baseline" in summary else None,
        "scored_episodes": summary["policy"].n,
        "provenance": {k: v for k, v in provenance.items() if k != "episodes"},
        "episodes": ((str(episode_file(staging, r.chosen).resolve()), r.chosen.episode.key.seed,
                      None, r.row()) for r in replayed if r.verified),
    }
    built.mkdir(parents=True, exist_ok=True)
    return _write(job)


def after_move(built: Any, final: Any, dataset_id: str) -> None:
    """Give the dataset's namespace its metadata file where it has none (Minari lists
    namespaces by it)."""
    import shutil

    if "/" not in dataset_id:
        return
    namespace = dataset_id.rsplit("/", 1)[0]
    made = built / namespace / "namespace_metadata.json"
    target = final.parent / "namespace_metadata.json"
    if made.is_file() and not target.exists():
        shutil.copyfile(made, target)


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"
