"""Recipes: several training runs (training seeds) per recipe, each evaluated on the same
episode seeds. How good is a recipe, and is recipe A better than recipe B?

A recipe's scores are, per task, a ``(runs, episodes)`` matrix: row r is training run r,
column e is episode seed ``seed + e`` (the same seeds for every run of every recipe).

* :func:`recipe_summary` -- the mean over runs of each run's score with a bootstrap
  interval over runs, stratified over tasks (rliable's ``get_interval_estimates`` with
  ``aggregate_mean`` on the ``(runs, tasks)`` matrix of run scores); the IQM of runs x
  episodes pooled as rliable's ``aggregate_iqm`` computes it, its interval resampling runs
  (each with its episodes); and the spread between runs beside the spread within a run.
* :func:`recipe_comparison` -- rliable's probability of improvement over runs (run
  scores of A against run scores of B, per task, averaged over tasks), and the
  paired-by-seed episode difference averaged over run pairs with a two-level bootstrap.

Why two levels: a recipe's score varies with the training run (the variability that
decides whether the *recipe* is better) and with the episode (which a single checkpoint's
interval already shows). Resampling runs alone ignores that each run's score is itself an
estimate from a few episodes; resampling episodes alone (what one checkpoint's interval
does) ignores that another training run would have scored differently. Pairing by seed
removes what a seed does to both recipes alike (a hard start is hard for both).

With fewer than 3 runs the between-run part cannot be estimated (rliable recommends at
least 3); the results then say so in ``note``.

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rolltape.stats._core import (
    DEFAULT_RESAMPLES,
    check_confidence,
    json_float,
    trim_mean_rows,
)
from rolltape.stats.aggregates import aggregate_scores, suite_probability_of_improvement

__all__ = ["few_runs_note", "recipe_comparison", "recipe_summary"]

ONE_RUN = "one training run: this is the variability of episodes, not of the recipe"


def few_runs_note(runs: int) -> str | None:
    """What a recipe's interval means with this few runs, or None (3 or more)."""
    if runs == 1:
        return ONE_RUN
    if runs < 3:
        return (f"{runs} training runs: too few to estimate the spread between runs "
                "(rliable recommends at least 3); the interval over runs is not to be trusted")
    return None


FEW_RUNS = 5  # fewer runs than this per recipe: P(A > B)'s interval says how few


def _improvement(poi: Mapping[str, Any], runs: tuple[int, int]) -> dict[str, Any]:
    """P(A > B) over runs with its interval, which says how many runs it rests on. The
    bootstrap over runs collapses to a point when every run of A beats every run of B (3
    runs against 3 gave "1 [1, 1]", which reads as certainty): its interval is then not
    shown, and the note says why."""
    lo, hi = poi["ci"]
    few = f"{runs[0]} vs {runs[1]} runs"
    if lo == hi:
        return {"p": poi["p"], "ci": None, "runs": list(runs),
                "note": f"{few}: no interval (every bootstrap resample of so few runs gives "
                        f"{poi['p']:.3g}, which is not certainty)"}
    return {"p": poi["p"], "ci": poi["ci"], "runs": list(runs),
            "note": f"{few}: few, the interval is rough" if min(runs) < FEW_RUNS else few}


def _matrices(per_task: Mapping[str, ArrayLike], what: str) -> dict[str, np.ndarray]:
    if len(per_task) == 0:
        raise ValueError(f"{what}: no tasks; pass at least one task's (runs, episodes) scores.")
    out = {}
    for task, scores in per_task.items():
        arr = np.asarray(scores, dtype=float)
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(f"{what}, task {task!r}: scores must be a (runs, episodes) matrix "
                             f"with at least one of each, got shape {arr.shape}.")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{what}, task {task!r}: scores contain NaN or infinity.")
        out[str(task)] = arr
    runs = {m.shape[0] for m in out.values()}
    if len(runs) > 1:
        raise ValueError(f"{what}: tasks have different numbers of runs {sorted(runs)}; every "
                         "run is evaluated on every task.")
    return out


def _interval(draws: np.ndarray, confidence: float) -> list[float | None]:
    alpha = 1.0 - confidence
    lo, hi = np.quantile(draws, [alpha / 2.0, 1.0 - alpha / 2.0])
    return [json_float(lo), json_float(hi)]


def recipe_summary(per_task: Mapping[str, ArrayLike], *, confidence: float = 0.95,
                   n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """One recipe over its training runs.

    ``mean``: the mean over tasks of the mean over runs of each run's mean score, with a
    percentile bootstrap over runs stratified over tasks. ``iqm``: rliable's IQM of every
    episode of every run and task pooled; its interval resamples runs within each task and
    keeps each drawn run's episodes. ``spread`` per task: ``between_runs`` (std of run
    scores, ddof=1) and ``within_run`` (the root mean of each run's episode variance).

    >>> s = recipe_summary({"t": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}, n_resamples=200)
    >>> s["mean"]["value"], s["runs"], s["spread"]["t"]["between_runs"]
    (3.5, 3, 2.0)
    """
    check_confidence(confidence)
    tasks = _matrices(per_task, "recipe")
    runs = next(iter(tasks.values())).shape[0]
    run_scores = {t: m.mean(axis=1) for t, m in tasks.items()}
    means = aggregate_scores(run_scores, confidence=confidence, n_resamples=n_resamples,
                             seed=seed)["mean"]
    rng = np.random.default_rng(seed + 1)
    picks = {t: rng.integers(0, runs, size=(n_resamples, runs)) for t in tasks}
    pooled = np.concatenate([m.reshape(-1) for m in tasks.values()])
    boot = np.concatenate([m[picks[t]].reshape(n_resamples, -1) for t, m in tasks.items()],
                          axis=1)
    spread = {}
    for t, m in tasks.items():
        within = np.sqrt(np.mean(m.var(axis=1, ddof=1))) if m.shape[1] > 1 else None
        between = float(np.std(m.mean(axis=1), ddof=1)) if runs > 1 else None
        spread[t] = {"between_runs": json_float(between), "within_run": json_float(within)}
    return {
        "runs": runs, "tasks": len(tasks),
        "episodes": {t: int(m.shape[1]) for t, m in tasks.items()},
        "run_scores": {t: [float(v) for v in s] for t, s in run_scores.items()},
        "mean": means,
        "iqm": {"value": json_float(trim_mean_rows(pooled)),
                "ci": _interval(np.asarray(trim_mean_rows(boot, axis=1)), confidence)},
        "spread": spread,
        "note": few_runs_note(runs),
    }


def _two_level(a: np.ndarray, b: np.ndarray, n_resamples: int,
               rng: np.random.Generator) -> np.ndarray:
    """Two-level bootstrap draws of the run-pair-averaged paired difference on one task:
    runs of A and of B resampled (level 1), then, for each drawn pair of runs, the seeds
    of their paired episode differences (level 2)."""
    ra, rb, e = a.shape[0], b.shape[0], a.shape[1]
    out = np.empty(n_resamples)
    block = max(1, 2_000_000 // (ra * rb * e))  # bounds memory
    for start in range(0, n_resamples, block):
        k = min(block, n_resamples - start)
        ia = rng.integers(0, ra, size=(k, ra))
        ib = rng.integers(0, rb, size=(k, rb))
        diff = a[ia][:, :, None, :] - b[ib][:, None, :, :]  # (k, ra, rb, e)
        seeds = rng.integers(0, e, size=(k, ra, rb, e))
        drawn = np.take_along_axis(diff, seeds, axis=3)
        out[start:start + k] = drawn.mean(axis=(1, 2, 3))
    return out


def recipe_comparison(a: Mapping[str, ArrayLike], b: Mapping[str, ArrayLike], *,
                      confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = 0) -> dict[str, Any]:
    """Recipe A against recipe B, both evaluated on the same tasks and episode seeds.

    ``probability_of_improvement``: rliable's P(A > B) over run scores (each run of A
    against each run of B, per task, averaged over tasks) with its stratified bootstrap.
    ``difference``: the mean over tasks of the paired-by-seed difference averaged over
    every pair of runs (run i of A, run j of B: the mean over seeds of A_ie - B_je), with
    the two-level bootstrap (runs, then seeds within each pair of runs; tasks stratified).

    >>> c = recipe_comparison({"t": [[2.0, 3.0], [2.5, 3.5], [3.0, 4.0]]},
    ...                       {"t": [[1.0, 2.0], [1.0, 2.5], [1.5, 2.0]]}, n_resamples=200)
    >>> round(c["difference"]["value"], 3), c["probability_of_improvement"]["p"]
    (1.333, 1.0)

    Raises:
        ValueError: different tasks, or a task whose episode seeds differ in number.
    """
    check_confidence(confidence)
    xa, xb = _matrices(a, "recipe A"), _matrices(b, "recipe B")
    if set(xa) != set(xb):
        raise ValueError(f"both recipes need the same tasks, got {sorted(xa)} and {sorted(xb)}.")
    for t in xa:
        if xa[t].shape[1] != xb[t].shape[1]:
            raise ValueError(f"task {t!r}: recipes were evaluated on {xa[t].shape[1]} and "
                             f"{xb[t].shape[1]} seeds; pairing by seed needs the same seeds.")
    poi = suite_probability_of_improvement(
        {t: m.mean(axis=1) for t, m in xa.items()}, {t: m.mean(axis=1) for t, m in xb.items()},
        paired=False, confidence=confidence, n_resamples=n_resamples, seed=seed)
    rng = np.random.default_rng(seed + 2)
    point = float(np.mean([xa[t].mean() - xb[t].mean() for t in xa]))
    draws = np.mean([_two_level(xa[t], xb[t], n_resamples, rng) for t in xa], axis=0)
    ci = _interval(draws, confidence)
    runs = (xa[next(iter(xa))].shape[0], xb[next(iter(xb))].shape[0])
    verdict = ("A better" if ci[0] is not None and ci[0] > 0 else
               "B better" if ci[1] is not None and ci[1] < 0 else "not decided")
    return {
        "probability_of_improvement": _improvement(poi, runs),
        "difference": {"value": point, "ci": ci, "method": "two-level bootstrap (runs, then "
                       "seeds within each pair of runs), paired by seed"},
        "verdict": verdict, "runs": list(runs),
        "note": few_runs_note(min(runs)),
    }
