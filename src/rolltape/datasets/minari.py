"""Minari datasets, written by the ``minari`` package itself.

:func:`write_worker` runs in a process of its own (it builds the env, as Minari does to
check its spaces and reference scores, and the orchestrator never imports MuJoCo): it makes
the dataset with ``minari.create_dataset_from_buffers`` (no episodes yet: its env spec,
eval env spec, algorithm name, author, code permalink and reference scores) in the
export's staging folder, then streams the verified episodes into its storage one at a time
(``storage.update_episodes``), so memory stays flat however many episodes there are. The
orchestrator moves the finished dataset into place.

Each episode's ``infos`` hold per-step arrays (``success``: the run's success key at each
step, False at the reset) and its metadata says which rolltape episode it is (seed, role,
index, tape sha256, verification).

May import: errors, the render side's episode reader (pass2.export.nest), numpy; minari,
gymnasium and pyarrow inside the worker only. Never: policies, torch.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from rolltape.errors import UsageError

#: The spaces Minari can store (its ``serialize_space`` knows them).
STORABLE = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple", "Text")


def unstorable(space: Any, where: str) -> str | None:
    """The first part of ``space`` Minari cannot store, in words, or None."""
    name = type(space).__name__
    if name not in STORABLE:
        return f"{where} is a {name} space"
    subs = getattr(space, "spaces", None)
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
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except (ValueError, AssertionError) as exc:
        raise UsageError(f"--id {dataset_id!r} is not a Minari dataset id "
                         f"([NAMESPACE/]NAME-vVERSION, like rolltape/pusher-expert-v0): {exc}"
                         ) from None
    if ".." in dataset_id.split("/") or dataset_id.startswith("/"):
        raise UsageError(f"--id {dataset_id!r} must stay inside the datasets folder; give "
                         "NAMESPACE/NAME-vN.")


def write_worker(conn: Any) -> None:
    """Entry point of a spawned process, started while the tapes replay: import Minari, then
    write the Minari dataset of the job it is sent under ``job["root"]`` (a datasets folder
    in the export's staging), streaming its episodes. Sends ("done", total steps) or
    ("error", text)."""
    try:
        import minari  # noqa: F401  (imported while the replays run)

        from rolltape.envs import _collect_mujoco_warnings

        # Minari builds the env itself: MuJoCo's XML warnings are kept (as every rolltape
        # process keeps them), not printed nor written to MUJOCO_LOG.TXT in the user's folder.
        _collect_mujoco_warnings()

        job = conn.recv()
        if job is None:
            return  # the export stopped before it had a dataset to write
        conn.send(("done", _write(job)))
    except Exception as exc:
        import traceback

        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        conn.close()


def _write(job: dict[str, Any]) -> int:
    os.environ["MINARI_DATASETS_PATH"] = job["root"]  # this process only: where Minari writes
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rolltape.pass2.export import nest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari's reminders about fields left None
        scores = {}
        if job["ref_min_score"] is not None and job["ref_max_score"] is not None:
            scores = {"ref_min_score": job["ref_min_score"],
                      "ref_max_score": job["ref_max_score"]}
        dataset = minari.create_dataset_from_buffers(
            job["dataset_id"], [], env=job["env_spec"], eval_env=job["env_spec"],
            algorithm_name=job["algorithm_name"], author=job["author"],
            code_permalink=job["code_permalink"], description=job["description"],
            observation_space=job["observation_space"], action_space=job["action_space"],
            requirements=job["requirements"], data_format="arrow",
            jpeg_encoding=False,  # observations exactly as the env returned them
            **scores)
    storage = dataset.storage
    steps = 0
    for k, (path, seed, options, meta) in enumerate(job["episodes"]):
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
        storage.update_episodes([EpisodeBuffer(
            id=k, seed=seed, options=options,
            observations=nest(arrays, job["observation_space"]),
            actions=arrays["actions"], rewards=arrays["rewards"],
            terminations=arrays["terminated"], truncations=arrays["truncated"],
            # A list: Minari stores a per-step scalar from a list (an array of
            # scalars it stores with an empty shape it cannot read back).
            infos={"success": arrays["success"].tolist()})])
        storage.update_episode_metadata([{"rolltape": meta}], [k])
        steps += int(arrays["rewards"].shape[0])
    storage.update_metadata({"rolltape": job["provenance"]})
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


def built_folder(built: Any, dataset_id: str) -> Any:
    """Where in the staging folder ``write`` put the dataset."""
    return built / dataset_id


def start() -> Any:
    """The process that will write the dataset, started now so that its imports (Minari,
    Gymnasium, MuJoCo) overlap the replays; :func:`write` gives it its job."""
    from rolltape.executors.launch import spawn_worker
    from rolltape.interpreter import NO_GL

    return spawn_worker(write_worker, env=NO_GL, cwd_on_path=False)


def write(built: Any, *, dataset_id: str, run: Any, replayed: list[Any], staging: Any,
          env_of: dict[Any, tuple[Any, ...]], provenance: dict[str, Any],
          cameras: list[str], fps: float, worker: Any) -> int:
    """Write the dataset under ``built`` (a datasets folder) in ``worker`` (:func:`start`);
    return its number of steps."""
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
        "description": (f"{len(replayed)} episodes of {run.results.env_id} played by "
                        f"{policy.get('source') or policy.get('kind') or 'a policy'}, "
                        "exported by rolltape from verified replays of its tapes."),
        "requirements": [f"{name}=={v}" for name, v in provenance["versions"].items()
                         if name in ("gymnasium", "mujoco") and v],
        # Minari's reference scores: a random policy's mean return and an expert's; the
        # run's random baseline and the policy, on the same seeds.
        "ref_min_score": summary["baseline"].mean if "baseline" in summary else None,
        "ref_max_score": summary["policy"].mean if "baseline" in summary else None,
        "provenance": {k: v for k, v in provenance.items() if k != "episodes"},
        "episodes": [(str(episode_file(staging, r.chosen).resolve()), r.chosen.episode.key.seed, None,
                      r.row()) for r in replayed if r.verified],
    }
    built.mkdir(parents=True, exist_ok=True)
    try:
        worker.conn.send(job)
        kind, payload = worker.conn.recv()
    except (EOFError, OSError):
        kind, payload = "error", "the process writing the Minari dataset died"
    if kind != "done":
        raise RuntimeError(f"Writing the Minari dataset failed: {payload}")
    return int(payload)


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
