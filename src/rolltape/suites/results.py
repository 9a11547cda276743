"""A suite run's numbers per task, per suite and overall, and LeRobot's ``eval_info.json``.

Pure functions of the run's :class:`rolltape.record.Episode` records. Each task's headline
success is counted by its rule (``at_end``, LeRobot's own: the success key on the terminal
step; or ``once``: at some step), and both rules are always reported beside it, named.
Suite and overall success rates pool episodes (LeRobot's ``pc_success``) and also give the
unweighted mean of task rates, labelled as such. Everything returned is JSON-safe with no
NaN or infinity (an empty denominator, or a mean that overflows, gives None).

May import: stats, record, suites.manifest. Never: gymnasium, policies, pass 1, pass 2,
executors, outputs.

Example:
    >>> from rolltape.record import Episode, EpisodeKey
    >>> ep = Episode(EpisodeKey("policy", "s", "a", 0, 0), ret=1.0, length=3,
    ...              success_at_end=False, success_once=True, max_reward=1.0)
    >>> out = suite_summary([ep], [], [("s", "a")])
    >>> task = out["per_task"][0]
    >>> task["pc_success"], task["success_rule"], task["success_once"]["pc_success"]
    (0.0, 'at_end', 100.0)
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Mapping, Sequence

from rolltape import stats
from rolltape.record import Episode, Video, group_by, return_stats

TaskKey = tuple[str | None, str | None]  # EpisodeKey.task_key: (None, None) for one env


def _mean(values: Iterable[float | None]) -> float | None:
    """The mean of the known values; None when there are none or it is not finite (rewards
    near the float limit: dividing first keeps a sum of huge values from overflowing)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    mean = math.fsum(v / len(kept) for v in kept)
    return mean if math.isfinite(mean) else None


def metric_means(episodes: Sequence[Episode]) -> dict[str, float]:
    """The mean of each numeric scalar of the episodes' terminal ``info["metrics"]`` (over
    the episodes that report it; booleans count as 0/1, anything else is left out)."""
    sums: dict[str, list[float]] = {}
    for e in episodes:
        for key, value in (e.metrics or {}).items():
            if isinstance(value, numbers.Real):  # None (a NaN) and nested values are skipped
                sums.setdefault(key, []).append(float(value))
    return {key: m for key, v in sums.items() if (m := _mean(v)) is not None}


def _rate(flags: Sequence[bool | None]) -> dict[str, Any]:
    out = stats.success_percent(flags)
    return {k: out[k] for k in ("n_success", "n_unknown", "pc_success", "pc_success_ci95")}


def group_numbers(episodes: Sequence[Episode], rules: Mapping[TaskKey, str]) -> dict[str, Any]:
    """Success (by each task's rule, and by both rules named), rewards, returns and lengths
    of some episodes."""
    headline = [e.success(rules.get(e.key.task_key, "at_end")) for e in episodes]
    entry: dict[str, Any] = stats.success_percent(headline)
    used = {rules.get(e.key.task_key, "at_end") for e in episodes} or {"at_end"}
    entry["success_rule"] = used.pop() if len(used) == 1 else "per task"
    entry["success_at_end"] = _rate([e.success_at_end for e in episodes])
    entry["success_once"] = _rate([e.success_once for e in episodes])
    finite = [e.ret for e in episodes if e.ret is not None]
    entry["avg_sum_reward"] = _mean(finite)
    entry["avg_max_reward"] = _mean(e.max_reward for e in episodes)
    entry["returns"] = return_stats(finite) if finite else None
    entry["nonfinite_returns"] = len(episodes) - len(finite)
    entry["mean_length"] = _mean(e.length for e in episodes)
    entry["metrics"] = metric_means(episodes)
    return entry


def _improvement(policy: Sequence[Episode], baseline: Sequence[Episode]) -> dict[str, Any] | None:
    """Policy minus random baseline, paired by task and seed (every task uses the same
    seeds); None when no pair is finite."""
    base = {e.key.pairing: e.ret for e in baseline if e.ret is not None}
    pairs = [(e.ret, base[e.key.pairing]) for e in policy
             if e.ret is not None and e.key.pairing in base]
    if not pairs:
        return None
    return stats.paired_improvement([p for p, _ in pairs], [b for _, b in pairs])


def suite_summary(policy: Sequence[Episode], baseline: Sequence[Episode],
                  tasks: Sequence[TaskKey],
                  success_keys: Mapping[TaskKey, str | None] | None = None,
                  rules: Mapping[TaskKey, str] | None = None) -> dict[str, Any]:
    """``per_task`` (a list in the manifest's order), ``per_suite`` and ``overall`` for the
    policy's episodes, with the improvement over the baseline's when there is one, and
    ``warnings`` for success keys that no episode of a task reported. ``rules`` gives each
    task's headline success rule (default ``at_end``)."""
    by_task = group_by(policy, lambda e: e.key.task_key)
    base_by_task = group_by(baseline, lambda e: e.key.task_key)
    keys, rules = success_keys or {}, rules or {}

    def headline(group: Sequence[TaskKey]) -> list[list[bool | None]]:
        return [[e.success(rules.get(t, "at_end")) for e in by_task.get(t, [])] for t in group]

    per_task, warnings = [], []
    for suite, task in tasks:
        mine = by_task.get((suite, task), [])
        entry = {"suite": suite, "task": task, "success_key": keys.get((suite, task)),
                 **group_numbers(mine, rules)}
        if baseline:
            entry["improvement_over_baseline"] = _improvement(
                mine, base_by_task.get((suite, task), []))
        per_task.append(entry)
        key = keys.get((suite, task), "is_success")
        if key is not None and mine and entry["n_unknown"] == entry["n_episodes"]:
            warnings.append(f"Task '{suite}/{task}' never reported info['{key}'] in its "
                            f"{len(mine)} episode(s): its success is unknown (n_unknown) and "
                            "left out of every success rate; set success_key in the manifest "
                            "(null for an env without one).")
    per_suite = {}
    for suite in dict.fromkeys(s for s, _ in tasks):
        group = [t for t in tasks if t[0] == suite]
        mine = [e for t in group for e in by_task.get(t, [])]
        extra = {"improvement_over_baseline": _improvement(
            mine, [e for e in baseline if e.key.suite == suite])} if baseline else {}
        per_suite[suite] = {**group_numbers(mine, rules), **extra, "n_tasks": len(group),
                            "mean_of_task_rates": stats.mean_of_rates(headline(group))}
    overall = {**group_numbers(policy, rules), "n_tasks": len(tasks),
               "mean_of_task_rates": stats.mean_of_rates(headline(tasks))}
    if baseline:
        overall["improvement_over_baseline"] = _improvement(policy, baseline)
    return {"per_task": per_task, "per_suite": per_suite, "overall": overall,
            "warnings": warnings}


def _lerobot_group(entry: Mapping[str, Any], videos: list[str]) -> dict[str, Any]:
    """A per_group / overall entry: LeRobot's keys (``lerobot_eval.eval_policy_all``), then
    rolltape's success count and Wilson interval beside them."""
    return {"avg_sum_reward": entry["avg_sum_reward"],
            "avg_max_reward": entry["avg_max_reward"], "pc_success": entry["pc_success"],
            "n_episodes": entry["n_episodes"], "video_paths": videos,
            "predicted_video_paths": [],  # a world model's videos: rolltape draws none
            "n_success": entry["n_success"], "pc_success_ci95": entry["pc_success_ci95"]}


def eval_info(summary: Mapping[str, Any], episodes: Sequence[Episode],
              videos: Sequence[Video], eval_s: float,
              rules: Mapping[TaskKey, str] | None = None) -> dict[str, Any]:
    """``eval_info.json`` in LeRobot's layout, its keys as ``lerobot_eval.eval_policy_all``
    (LeRobot 0.6) spells them: exactly ``per_task`` (a list), ``per_group`` (by suite) and
    ``overall``; per-episode lists in episode order (``successes`` by each task's headline
    rule, as ``pc_success``); ``video_paths`` relative to the run folder. A task's
    ``task_group`` and ``task_id`` are its suite's and its own name (LeRobot's are its env
    group and an index in it). Rolltape's success counts and Wilson intervals sit beside."""
    rules = rules or {}
    by_task = group_by(episodes, lambda e: e.key.task_key)
    paths: dict[Any, list[str]] = {}
    for v in videos:
        if v.path:
            paths.setdefault(v.key.task_key, []).append(v.path)
    per_task = []
    for entry in summary["per_task"]:
        key = (entry["suite"], entry["task"])
        mine = sorted(by_task.get(key, []), key=lambda e: e.key.index)
        rule = rules.get(key, "at_end")
        per_task.append({
            "task_group": entry["suite"], "task_id": entry["task"],
            "metrics": {"sum_rewards": [e.ret for e in mine],
                        "max_rewards": [e.max_reward for e in mine],
                        "successes": [e.success(rule) for e in mine],
                        "video_paths": paths.get(key, []), "predicted_video_paths": []},
            "n_episodes": entry["n_episodes"], "n_success": entry["n_success"],
            "pc_success": entry["pc_success"], "pc_success_ci95": entry["pc_success_ci95"],
        })
    per_group = {suite: _lerobot_group(entry, [p for (s, _), ps in paths.items() if s == suite
                                               for p in ps])
                 for suite, entry in summary["per_suite"].items()}
    n = summary["overall"]["n_episodes"]
    overall = {**_lerobot_group(summary["overall"], [p for ps in paths.values() for p in ps]),
               "eval_s": eval_s, "eval_ep_s": eval_s / n if n else None}
    return {"per_task": per_task, "per_group": per_group, "overall": overall}
