"""A suite run's numbers per task, per suite and overall, and LeRobot's ``eval_info.json``.

Pure functions of the episode rows (as ``episodes.jsonl`` holds them: ``suite``, ``task``,
``return``, ``max_reward``, ``success`` at any step, ``success_at_end``, ``metrics``). The
statistics themselves are :mod:`rolltape.stats`'s. Suite and overall success rates pool
episodes (LeRobot's ``pc_success``) and also give the unweighted mean of task rates,
labelled as such. Everything returned is JSON-safe with no NaN (an empty denominator
gives None).

May import: stats, suites.manifest. Never: gymnasium, policies, pass 1, pass 2, executors,
outputs.

Example:
    >>> rows = [{"suite": "s", "task": "a", "return": 1.0, "max_reward": 1.0, "length": 3,
    ...          "success": True, "success_at_end": False, "metrics": None}]
    >>> out = suite_summary({"policy": rows}, [("s", "a")])
    >>> out["per_task"][0]["pc_success"], out["per_task"][0]["success_at_end"]["pc_success"]
    (100.0, 0.0)
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Sequence

from rolltape import stats

Rows = list[dict[str, Any]]


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def metric_means(rows: Rows) -> dict[str, float]:
    """The mean of each numeric scalar of the episodes' terminal ``info["metrics"]`` (over
    the episodes that report it; booleans count as 0/1, anything else is left out)."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        for key, value in (row.get("metrics") or {}).items():
            if isinstance(value, numbers.Real):  # None (a NaN) and nested values are skipped
                sums.setdefault(key, []).append(float(value))
    return {key: sum(v) / len(v) for key, v in sums.items()}


def group_numbers(rows: Rows) -> dict[str, Any]:
    """Success (at any step, and at the end), rewards, returns and lengths of some episodes."""
    finite = [r["return"] for r in rows if r.get("return") is not None]
    entry: dict[str, Any] = stats.success_percent([r.get("success") for r in rows])
    end = stats.success_percent([r.get("success_at_end") for r in rows])
    entry["success_at_end"] = {k: end[k] for k in ("n_success", "n_unknown", "pc_success",
                                                    "pc_success_ci95")}
    entry["avg_sum_reward"] = _mean(finite)
    entry["avg_max_reward"] = _mean(r.get("max_reward") for r in rows)
    entry["returns"] = stats.summarize(finite).to_dict() if finite else None
    entry["nonfinite_returns"] = len(rows) - len(finite)
    entry["mean_length"] = _mean(r.get("length") for r in rows)
    entry["metrics"] = metric_means(rows)
    return entry


def _by_task(rows: Rows) -> dict[tuple[str, str], Rows]:
    out: dict[tuple[str, str], Rows] = {}
    for row in rows:
        out.setdefault((row["suite"], row["task"]), []).append(row)
    return out


def _improvement(policy: Rows, baseline: Rows) -> dict[str, Any] | None:
    """Policy minus random baseline, paired by task and seed (every task uses the same
    seeds); None when no pair is finite."""
    def key(r: dict[str, Any]) -> tuple[Any, Any, Any]:
        return (r["suite"], r["task"], r["seed"])

    base = {key(r): r["return"] for r in baseline if r.get("return") is not None}
    pairs = [(r["return"], base[key(r)]) for r in policy
             if r.get("return") is not None and key(r) in base]
    if not pairs:
        return None
    return stats.paired_improvement([p for p, _ in pairs], [b for _, b in pairs])


def suite_summary(rows: Mapping[str, Rows], tasks: Sequence[tuple[str, str]],
                  success_keys: Mapping[tuple[str, str], str | None] | None = None
                  ) -> dict[str, Any]:
    """``per_task`` (a list in the manifest's order), ``per_suite`` and ``overall`` for the
    policy's rows, with the improvement over the baseline's when ``rows`` has them, and
    ``warnings`` for success keys that no episode of a task reported."""
    policy = _by_task(rows["policy"])
    baseline = _by_task(rows.get("baseline", []))
    keys = success_keys or {}
    per_task, warnings = [], []
    for suite, task in tasks:
        mine = policy.get((suite, task), [])
        entry = {"suite": suite, "task": task, "success_key": keys.get((suite, task)),
                 **group_numbers(mine)}
        if "baseline" in rows:
            entry["improvement_over_baseline"] = _improvement(mine, baseline.get((suite, task), []))
        per_task.append(entry)
        key = keys.get((suite, task), "is_success")
        if key is not None and mine and entry["n_unknown"] == entry["n_episodes"]:
            warnings.append(f"Task '{suite}/{task}' never reported info['{key}'] in its "
                            f"{len(mine)} episode(s): its success is unknown (n_unknown) and "
                            "left out of every success rate; set success_key in the manifest "
                            "(null for an env without one).")
    suites = list(dict.fromkeys(s for s, _ in tasks))
    per_suite = {}
    for suite in suites:
        mine = [r for (s, _), rs in policy.items() if s == suite for r in rs]
        if "baseline" in rows:
            extra = {"improvement_over_baseline": _improvement(
                mine, [r for r in rows["baseline"] if r["suite"] == suite])}
        else:
            extra = {}
        per_suite[suite] = {**group_numbers(mine), **extra,
                            "n_tasks": sum(1 for s, _ in tasks if s == suite),
                            "mean_of_task_rates": stats.mean_of_rates(
                                [[r.get("success") for r in policy.get((suite, t), [])]
                                 for s, t in tasks if s == suite])}
    overall = {**group_numbers(rows["policy"]), "n_tasks": len(tasks),
               "mean_of_task_rates": stats.mean_of_rates(
                   [[r.get("success") for r in policy.get(key, [])] for key in tasks])}
    if "baseline" in rows:
        overall["improvement_over_baseline"] = _improvement(rows["policy"], rows["baseline"])
    return {"per_task": per_task, "per_suite": per_suite, "overall": overall,
            "warnings": warnings}


def _lerobot_group(entry: Mapping[str, Any], videos: list[str]) -> dict[str, Any]:
    return {"avg_sum_reward": entry["avg_sum_reward"],
            "avg_max_reward": entry["avg_max_reward"], "pc_success": entry["pc_success"],
            "n_episodes": entry["n_episodes"], "n_success": entry["n_success"],
            "pc_success_ci95": entry["pc_success_ci95"], "video_paths": videos}


def eval_info(summary: Mapping[str, Any], rows: Rows, videos: Sequence[Mapping[str, Any]],
              eval_s: float) -> dict[str, Any]:
    """``eval_info.json`` in LeRobot's layout: exactly ``per_task`` (a list), ``per_group``
    (by suite) and ``overall``; per-episode lists in episode order; ``video_paths`` relative
    to the run folder."""
    policy = _by_task(rows)
    paths: dict[tuple[str, str], list[str]] = {}
    for v in videos:
        if v.get("path"):
            paths.setdefault((v["suite"], v["task"]), []).append(v["path"])
    per_task = []
    for entry in summary["per_task"]:
        key = (entry["suite"], entry["task"])
        mine = sorted(policy.get(key, []), key=lambda r: r["index"])
        per_task.append({
            "task_group": entry["suite"], "task_id": entry["task"],
            "metrics": {"sum_rewards": [r.get("return") for r in mine],
                        "max_rewards": [r.get("max_reward") for r in mine],
                        "successes": [r.get("success") for r in mine],
                        "video_paths": paths.get(key, [])},
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
