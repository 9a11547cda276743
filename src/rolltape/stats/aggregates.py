"""Numbers over the tasks of a benchmark suite: success per group with a pooled total,
normalized scores and rliable's aggregates (IQM, mean, median, optimality gap) with a
stratified bootstrap, performance profiles, and P(A > B) averaged over tasks.

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rolltape.stats._core import (
    DEFAULT_RESAMPLES,
    as_finite_1d,
    check_confidence,
    count_outcomes,
    json_float,
    json_pair,
    trim_mean_rows,
)
from rolltape.stats.intervals import success_fields
from rolltape.stats.paired import improvement_resamples


def _group_entry(successes: int, known: int, unknown: int) -> dict[str, Any]:
    count, rate, ci = success_fields(successes, known)
    return {
        "success_count": count,
        "n": known,
        "n_unknown": unknown,
        "success_rate": json_float(rate),
        "success_ci": json_pair(ci),
    }


def aggregate(groups: Mapping[str, Sequence[bool | None]]) -> dict[str, Any]:
    """Success rates of a benchmark suite: one entry per group plus ``"overall"``.

    Each entry is ``{"success_count", "n", "n_unknown", "success_rate", "success_ci"}``
    where ``n`` counts episodes with a known outcome, ``n_unknown`` those reported as None,
    and ``success_ci`` is the 95% Wilson interval. A group with no known outcome has
    ``success_count``, ``success_rate`` and ``success_ci`` set to None.

    ``"overall"`` pools every known episode of every group (so larger groups weigh more)
    and adds ``"mean_group_rate"``, the unweighted mean of the group rates that exist, for
    suites where each task should count equally.

    >>> out = aggregate({"reach": [True, True, False], "push": [False, None]})
    >>> out["reach"]["success_count"], out["push"]["n"], out["overall"]["success_count"]
    (2, 1, 2)

    Raises:
        ValueError: if there are no groups, a group is itself called ``"overall"``, or a
            flag is not True/False/0/1/None.
    """
    if len(groups) == 0:
        raise ValueError("aggregate() got no groups; pass at least one group of success flags.")
    if "overall" in groups:
        raise ValueError(
            'a group is named "overall", which is reserved for the pooled entry; rename that group.'
        )
    result: dict[str, Any] = {}
    total_s = total_known = total_unknown = 0
    rates: list[float] = []
    for name, outcomes in groups.items():
        s, known, unknown = count_outcomes(outcomes, f"group {name!r}")
        result[str(name)] = _group_entry(s, known, unknown)
        total_s += s
        total_known += known
        total_unknown += unknown
        if known:
            rates.append(s / known)
    overall = _group_entry(total_s, total_known, total_unknown)
    overall["mean_group_rate"] = json_float(sum(rates) / len(rates)) if rates else None
    result["overall"] = overall
    return result






def suite_probability_of_improvement(
    x: Mapping[str, ArrayLike], y: Mapping[str, ArrayLike], *, paired: bool = True,
    confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> dict[str, Any]:
    """rliable's probability of improvement over a suite: P(X > Y) on each task (as
    :func:`probability_of_improvement`), averaged over tasks, with a stratified bootstrap
    interval (episodes resampled within each task).

    >>> round(suite_probability_of_improvement({"a": [2, 3], "b": [1, 1]},
    ...                                        {"a": [1, 4], "b": [1, 1]})["p"], 3)
    0.5

    Raises:
        ValueError: the two suites name different tasks, or a task's values are bad.
    """
    check_confidence(confidence)
    xt, yt = _task_arrays(x), _task_arrays(y)
    if set(xt) != set(yt):
        raise ValueError(f"both need the same tasks, got {sorted(xt)} and {sorted(yt)}.")
    rng = np.random.default_rng(seed)
    points, draws = [], []
    for task in xt:
        if paired and xt[task].size != yt[task].size:
            raise ValueError(f"task {task!r}: paired samples need one value per seed each, "
                             f"got {xt[task].size} and {yt[task].size}.")
        point, values = improvement_resamples(xt[task], yt[task], paired, n_resamples, rng)
        points.append(point)
        draws.append(values)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(np.mean(draws, axis=0), [alpha / 2.0, 1.0 - alpha / 2.0])
    return {"p": float(np.mean(points)), "ci": [float(lo), float(hi)], "tasks": len(xt),
            "paired": bool(paired)}



def normalize_scores(scores: ArrayLike, random_score: float,
                     reference_score: float) -> np.ndarray:
    """Scores rescaled so that the random policy is 0 and the reference is 1 (rliable's
    human- or expert-normalized score).

    >>> normalize_scores([0.0, 5.0, 10.0], random_score=0.0, reference_score=10.0).tolist()
    [0.0, 0.5, 1.0]

    Raises:
        ValueError: when the reference scores what random scores (nothing to scale by).
    """
    arr = as_finite_1d(scores, "scores")
    span = float(reference_score) - float(random_score)
    if not math.isfinite(span) or span == 0:
        raise ValueError(f"the reference scores {reference_score!r} and random "
                         f"{random_score!r}: normalizing needs two different finite scores.")
    return (arr - float(random_score)) / span


def _aggregates(blocks: list[np.ndarray], gamma: float) -> dict[str, np.ndarray]:
    """IQM, mean, median and optimality gap of (resamples, n_t) score blocks, one per task."""
    task_means = np.stack([blk.mean(axis=-1) for blk in blocks], axis=-1)
    pooled = np.concatenate(blocks, axis=-1)
    clipped = np.stack([np.minimum(blk, gamma).mean(axis=-1) for blk in blocks], axis=-1)
    return {"iqm": np.asarray(trim_mean_rows(pooled, axis=-1)),
            "mean": task_means.mean(axis=-1),
            "median": np.median(task_means, axis=-1),
            "optimality_gap": gamma - clipped.mean(axis=-1)}


def _task_arrays(per_task: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    if len(per_task) == 0:
        raise ValueError("no tasks given; pass at least one task's scores.")
    return {str(k): as_finite_1d(v, f"scores of task {k!r}") for k, v in per_task.items()}


def _stratified(tasks: dict[str, np.ndarray], rng: np.random.Generator,
                resamples: int) -> list[np.ndarray]:
    """Resample each task's episodes within that task (rliable's stratified bootstrap)."""
    return [v[rng.integers(0, v.size, size=(resamples, v.size))] for v in tasks.values()]


def aggregate_scores(per_task: Mapping[str, ArrayLike], *, gamma: float = 1.0,
                     confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = 0) -> dict[str, Any]:
    """rliable's aggregates of normalized scores over a suite, with stratified bootstrap CIs.

    ``per_task`` maps each task to its episodes' normalized scores. As rliable defines
    them: ``iqm`` is the interquartile mean of all episodes of all tasks pooled; ``mean``
    and ``median`` are the mean and median of the per-task means; ``optimality_gap`` is
    ``gamma`` minus the mean of ``min(score, gamma)`` (per task, then over tasks), i.e.
    how far below the reference the suite falls. Each interval resamples episodes within
    each task (never across tasks), so a task with few episodes cannot borrow others'.
    When every task has as many episodes, these equal rliable's ``aggregate_*`` on the
    ``(episodes, tasks)`` matrix.

    >>> out = aggregate_scores({"a": [0.0, 0.5, 1.0, 1.5], "b": [0.2, 0.4, 0.6, 0.8]})
    >>> out["mean"]["value"], out["optimality_gap"]["value"]
    (0.625, 0.4375)
    """
    check_confidence(confidence)
    tasks = _task_arrays(per_task)
    points = _aggregates([v[None, :] for v in tasks.values()], gamma)
    boot = _aggregates(_stratified(tasks, np.random.default_rng(seed), n_resamples), gamma)
    alpha = 1.0 - confidence
    out: dict[str, Any] = {}
    for name, value in points.items():
        lo, hi = np.quantile(boot[name], [alpha / 2.0, 1.0 - alpha / 2.0])
        out[name] = {"value": json_float(value[0]), "ci": [json_float(lo), json_float(hi)]}
    out["tasks"] = len(tasks)
    out["episodes"] = int(sum(v.size for v in tasks.values()))
    return out


def performance_profile(per_task: Mapping[str, ArrayLike], taus: ArrayLike, *,
                        confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                        seed: int = 0) -> dict[str, Any]:
    """rliable's score distribution: for each threshold tau, the fraction of episodes
    scoring above tau (per task, then averaged over tasks), with stratified bootstrap
    95% intervals. A curve that lies above another everywhere dominates it.

    >>> p = performance_profile({"a": [0.0, 1.0], "b": [0.5, 0.5]}, [0.25, 0.75])
    >>> p["fraction"]
    [0.75, 0.25]
    """
    check_confidence(confidence)
    tasks = _task_arrays(per_task)
    grid = np.asarray(taus, dtype=float).reshape(-1)

    def fractions(blocks: list[np.ndarray]) -> np.ndarray:  # (..., taus)
        return np.mean([(blk[..., None] > grid).mean(axis=-2) for blk in blocks], axis=0)

    point = fractions([v[None, :] for v in tasks.values()])[0]
    boot = fractions(_stratified(tasks, np.random.default_rng(seed), n_resamples))
    alpha = 1.0 - confidence
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    return {"taus": [float(t) for t in grid], "fraction": [float(f) for f in point],
            "ci_low": [float(v) for v in lo], "ci_high": [float(v) for v in hi]}
