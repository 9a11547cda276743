"""Finished runs, loaded and matched episode by episode for a comparison.

Episodes are matched by ``(suite, task, seed)``: a single-env run's rows have no suite or
task (both None), a suite run's rows carry both, so the same code pairs either. Runs are
comparable only when they share the env (or, for suites, the tasks of their resolved
manifests with the same env, kwargs, time limit, success key and episodes), the seeds and
the episode counts; the first difference found is refused in one sentence.

May import: stats, outputs, files, errors. Never: policies, pass 1, pass 2, executors.

Example (not run: it needs finished runs):
    >>> runs = load_runs(["runs/ab-old", "runs/ab-new"])
    >>> check_comparable(runs)
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rolltape.errors import UsageError
from rolltape.record import Episode, Run

Key = tuple[Any, Any, int]  # EpisodeKey.pairing: (suite, task, seed); None, None for one env
# What makes two runs' episodes of a task comparable (reward_atol and description do not).
_TASK_FIELDS = ("env", "kwargs", "max_episode_steps", "success_key", "success", "episodes")

__all__ = ["Key", "LoadedRun", "check_comparable", "load_runs", "row_key", "sweep_runs"]


def row_key(episode: Episode) -> Key:
    """The seed an episode was played on, within its suite and task when it has them."""
    return episode.key.pairing


@dataclass
class LoadedRun:
    """One run of a comparison: its record, label, and its episodes by key."""

    run: Run
    label: str
    steps: int | None = None  # training steps, for a checkpoint of a sweep
    baseline: bool = False  # the random baseline of a multi-policy run
    rows: dict[Key, Episode] = field(default_factory=dict)
    baseline_rows: dict[Key, Episode] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.run.path

    @classmethod
    def of(cls, run: Run, label: str | None = None, steps: int | None = None,
           baseline: bool = False) -> LoadedRun:
        loaded = cls(run, label or run.path.name, steps, baseline)
        loaded.rows = {row_key(e): e for e in run.results.episodes}
        loaded.baseline_rows = {row_key(e): e for e in run.results.baseline}
        return loaded

    @classmethod
    def load(cls, path: str | os.PathLike[str], label: str | None = None,
             steps: int | None = None, baseline: bool = False) -> LoadedRun:
        """The run in ``path``, its rows checked against its tapes (see :func:`check_tapes`)."""
        run = Run.load(path)
        check_tapes(run)
        return cls.of(run, label, steps, baseline)

    @property
    def manifest_tasks(self) -> dict[str, dict[str, Any]] | None:
        """A suite run's tasks by 'suite/task', each with what decides its episodes (env,
        kwargs, time limit, success key and rule, episode count); None for a single-env
        run."""
        manifest = self.run.results.manifest
        if not isinstance(manifest, dict):
            return None
        return {f"{t['suite']}/{t['name']}": {k: t.get(k) for k in _TASK_FIELDS}
                for t in manifest.get("tasks") or []}

    @property
    def identity(self) -> dict[str, Any]:
        """What must be equal for two runs to be compared: the suite's tasks when there
        are (:attr:`manifest_tasks` must match too), else the env id, its kwargs and its
        time limit."""
        tasks = self.manifest_tasks
        if tasks is not None:
            return {"suite": ", ".join(dict.fromkeys(k.split("/")[0] for k in tasks)),
                    "tasks": list(tasks)}
        r = self.run.results
        env = r.env or {}
        return {"env": r.env_id, "env kwargs": env.get("kwargs") or {},
                "max_episode_steps": env.get("max_episode_steps")}

    def tasks(self) -> dict[tuple[Any, Any], list[Key]]:
        """Keys grouped by (suite, task), in the manifest's order of tasks, each group
        sorted by seed."""
        order = {key: i for i, key in enumerate(self.manifest_tasks or {})}
        grouped: dict[tuple[Any, Any], list[Key]] = defaultdict(list)
        for key in sorted(self.rows, key=lambda k: (order.get(f"{k[0]}/{k[1]}", len(order)),
                                                    _sortable(k))):
            grouped[key[:2]].append(key)
        return dict(grouped)

    def returns(self, keys: list[Key]) -> list[float]:
        """The returns of ``keys``: episodes with a finite one (the callers keep those)."""
        out = [r for k in keys if (r := self.rows[k].ret) is not None]
        assert len(out) == len(keys), "returns() of an episode without a finite return"
        return out

    def successes(self, keys: list[Key]) -> list[bool | None]:
        """Each episode's success by the run's headline rule (its task's, for a suite)."""
        return [self.rows[k].success(self.run.results.rule_of(k[:2])) for k in keys]


def check_tapes(run: Run) -> None:
    """Refuse a run whose rows and tapes disagree (a hand-edited or damaged results.json):
    each episode's tape must exist, have its seed, and sum to its return. A cheap read:
    only the header of each tape is needed."""
    from rolltape.tape import Tape

    for e in run.results.all_episodes:
        where = f"'{run.path}': {e.key.role} {e.key.label}"
        try:
            tape = Tape.load(run.tape_path(e))
        except UsageError as exc:
            raise UsageError(f"{where}: its tape cannot be read ({str(exc)[:160]}); compare "
                             "runs whose tapes are in place.") from None
        total = tape.total_return if math.isfinite(tape.total_return) else None
        if tape.seed != e.key.seed or total != e.ret:
            raise UsageError(f"{where} says seed {e.key.seed}, return {e.ret} but its tape "
                             f"has seed {tape.seed}, return {total}: results.json does not "
                             "match the tapes; rerun the eval, or restore its results.json.")


def _sortable(key: Key) -> tuple[str, str, int]:
    return (str(key[0] or ""), str(key[1] or ""), key[2])


def sweep_runs(folder: Path) -> list[LoadedRun] | None:
    """The runs of a folder written by a multi-policy eval (its ``sweep.json``), or None."""
    manifest = folder / "sweep.json"
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())["entries"]
        return [LoadedRun.load(folder / e["folder"], e["label"], e.get("steps"),
                               bool(e.get("baseline"))) for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"'{folder}/sweep.json' cannot be read; rerun the eval that wrote "
                         "it, or compare its run folders one by one.") from None


def load_runs(paths: Sequence[str | os.PathLike[str]]) -> list[LoadedRun]:
    """Each path as a run; a folder written by a multi-policy eval gives all of its runs
    (its random baseline flagged ``baseline``)."""
    runs: list[LoadedRun] = []
    for p in paths:
        swept = sweep_runs(Path(p))
        runs.extend(swept if swept is not None else [LoadedRun.load(p)])
    labels: dict[str, int] = {}
    for run in runs:  # two folders named alike (a/run, b/run) get told apart
        labels[run.label] = labels.get(run.label, 0) + 1
        if labels[run.label] > 1:
            run.label = f"{run.label}-{labels[run.label]}"
    return runs


def _describe(identity: dict[str, Any]) -> str:
    return ", ".join(f"{k} {json.dumps(v) if not isinstance(v, str) else v}"
                     for k, v in identity.items())


def check_comparable(runs: list[LoadedRun]) -> None:
    """Refuse, in one sentence naming the difference, runs that cannot be paired: fewer
    than two, one run given twice, other envs (or suites), other episode counts or other
    seeds."""
    if len(runs) < 2:
        raise UsageError("a comparison needs at least two runs; give two or more run folders.")
    first = runs[0]
    seen: dict[Path, LoadedRun] = {}
    for run in runs:
        where = run.path.resolve()
        if where in seen:
            raise UsageError(f"'{run.path}' is given twice; a run compared with itself shows "
                             "no difference, so give two different runs.")
        seen[where] = run
    for run in runs:  # an episode that failed is missing from its run: say so, not 'seeds'
        failed = run.run.results.failed
        if failed:
            f = failed[0]
            task = f"{f['suite']}/{f['task']} " if f.get("suite") else ""
            raise UsageError(f"'{run.path}' has {len(failed)} failed episode(s) (the first: "
                             f"{f.get('role')} {task}episode {f.get('index')}, seed "
                             f"{f.get('seed')}); play them again with that eval's command and "
                             "--resume, then compare.")
    for run in runs[1:]:
        _check_same_envs(first, run)
        if len(run.rows) != len(first.rows):
            raise UsageError(f"'{first.path}' has {len(first.rows)} episodes and "
                             f"'{run.path}' {len(run.rows)}; compare runs with the same "
                             "--episodes and --seed.")
        if set(run.rows) != set(first.rows):
            only = sorted(set(first.rows) - set(run.rows), key=_sortable)[0]
            raise UsageError(f"'{first.path}' and '{run.path}' were played on different seeds "
                             f"(seed {only[2]} is in the first only); compare runs made with "
                             "the same --seed.")


def _check_same_envs(first: LoadedRun, run: LoadedRun) -> None:
    """Refuse two runs of other envs, or of suites with other tasks or other task settings."""
    a, b = first.manifest_tasks, run.manifest_tasks
    if (a is None) != (b is None):
        suite, env = (first, run) if a is not None else (run, first)
        raise UsageError(f"'{suite.path}' is a run of suite {suite.identity['suite']} and "
                         f"'{env.path}' of env {env.identity['env']}; compare runs of the same "
                         "suite (or env).")
    if a is not None and b is not None:
        if list(a) != list(b):
            only_a, only_b = [k for k in a if k not in b], [k for k in b if k not in a]
            what = "; ".join(part for part in (
                f"{', '.join(only_a)} only in the first" if only_a else "",
                f"{', '.join(only_b)} only in the second" if only_b else "") if part) \
                or "the same tasks in another order"
            raise UsageError(f"'{first.path}' and '{run.path}' were run on different suite "
                             f"tasks ({what}); compare runs of the same --suite and --tasks.")
        for key in a:
            changed = [f for f in _TASK_FIELDS if a[key][f] != b[key][f]]
            if changed:
                f = changed[0]
                raise UsageError(f"Task {key} was run with {f} {json.dumps(a[key][f])} in "
                                 f"'{first.path}' and {json.dumps(b[key][f])} in '{run.path}'; "
                                 "compare runs of the same suite manifest and options.")
        return
    ia, ib = first.identity, run.identity
    if ia != ib:
        changed = [k for k in ia if ia.get(k) != ib.get(k)]
        raise UsageError(f"'{first.path}' and '{run.path}' were run on different envs "
                         f"({_describe({k: ia.get(k) for k in changed})} vs "
                         f"{_describe({k: ib.get(k) for k in changed})}); compare runs of "
                         "the same env.")
