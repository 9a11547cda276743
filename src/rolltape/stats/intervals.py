"""Intervals of one evaluation: Wilson for success rates, IQM and the percentile bootstrap for
returns, one run's :class:`Summary`, LeRobot's per-task percentages and the unweighted mean
of task rates.

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rolltape.stats._core import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    as_finite_1d,
    check_confidence,
    count_outcomes,
    json_float,
    json_pair,
    parse_outcome,
    trim_mean_rows,
    z_for,
)


def success_fields(
    successes: int, known: int
) -> tuple[int | None, float | None, tuple[float, float] | None]:
    """(count, rate, Wilson 95% interval) of ``successes`` among ``known`` outcomes; all None
    when none is known, so a group without a reported outcome shows no rate."""
    if known == 0:
        return None, None, None
    return successes, successes / known, wilson_interval(successes, known)


# --------------------------------------------------------------------------- intervals


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``.

    The bounds are exactly 0.0 when ``successes == 0`` and exactly 1.0 when
    ``successes == n`` (the formula gives these in exact arithmetic; rounding could
    otherwise produce -1e-17), and always lie inside ``[0, 1]``.

    >>> lo, hi = wilson_interval(8, 10)
    >>> round(lo, 4), round(hi, 4)
    (0.4902, 0.9433)
    >>> wilson_interval(0, 10)[0]
    0.0
    >>> round(wilson_interval(10, 10, confidence=0.99)[0], 4)
    0.6011

    Raises:
        ValueError: if ``n`` is 0 (no outcomes, so no rate to bound), if ``successes`` is
            outside ``0..n``, if either is not an integer, or if ``confidence`` is not in (0, 1).
    """
    try:
        s = operator.index(successes)
        total = operator.index(n)
    except TypeError:
        raise ValueError(
            f"successes and n must be integers, got successes={successes!r}, n={n!r}."
        ) from None
    if total == 0:
        raise ValueError(
            "n is 0: a success rate needs at least one episode with a known outcome, "
            "so there is no interval to compute."
        )
    if total < 0 or not 0 <= s <= total:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got successes={s}, n={total}.")
    z = z_for(confidence)

    p = s / total
    z2 = z * z
    denom = 1.0 + z2 / total
    center = (p + z2 / (2.0 * total)) / denom
    half = z * math.sqrt(p * (1.0 - p) / total + z2 / (4.0 * total * total)) / denom
    lo = 0.0 if s == 0 else max(0.0, center - half)
    hi = 1.0 if s == total else min(1.0, center + half)
    return (lo, hi)


# --------------------------------------------------------------------------- point estimates


def iqm(values: ArrayLike) -> float:
    """Interquartile mean: the mean of the middle 50% of the values.

    Convention (rliable's, i.e. ``scipy.stats.trim_mean(values, 0.25)``): sort, drop
    ``k = floor(0.25 * n)`` values from each end, average the rest. When ``n`` is a multiple
    of 4 that is exactly the middle half; for other ``n`` slightly more than half is kept
    (n = 5 keeps 3, n = 10 keeps 6), and for ``n < 4`` nothing is dropped, so the IQM is the
    plain mean.

    >>> iqm([1, 2, 3, 4, 5, 6, 7, 100])   # drops 1, 2 and 7, 100
    4.5
    >>> iqm([0, 10, 20, 30, 1000])        # n=5: drops one from each end
    20.0

    Raises:
        ValueError: for empty input or non-finite values.
    """
    arr = as_finite_1d(values, "values")
    return float(trim_mean_rows(arr))


def bootstrap_ci(
    values: ArrayLike,
    statistic: Callable[..., Any],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval for ``statistic(values)``.

    All resample indices are drawn at once as an ``(n_resamples, n)`` array from
    ``numpy.random.default_rng(seed)``, so the result is identical for identical inputs and
    seed. ``statistic`` is first called as ``statistic(resamples, axis=-1)`` (numpy
    reductions such as ``np.mean`` and ``np.median`` handle the whole array in one call);
    if it does not take ``axis`` or returns the wrong shape it is applied row by row.
    :func:`iqm` is recognised and run vectorised. Memory is ``8 * n_resamples * n`` bytes
    for the indices (32 MB for 2000 resamples of 2000 episodes).

    A single value has no sampling variability to estimate, so it gives ``(s, s)`` with
    ``s = statistic(values)``.

    >>> bootstrap_ci([5.0], np.mean)
    (5.0, 5.0)
    >>> lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0], np.mean, seed=1)
    >>> lo < 3.0 < hi
    True

    Raises:
        ValueError: for empty or non-finite values, ``n_resamples < 1``, a confidence
            outside (0, 1), or a statistic that returns non-finite numbers.
    """
    arr = as_finite_1d(values, "values")
    check_confidence(confidence)
    try:
        resamples_count = operator.index(n_resamples)
    except TypeError:
        raise ValueError(f"n_resamples must be an integer, got {n_resamples!r}.") from None
    if resamples_count < 1:
        raise ValueError(f"n_resamples must be at least 1, got {resamples_count}.")

    # Route the public iqm to its vectorised twin: same numbers as summarize() gives, and
    # one sort of the whole resample matrix instead of 2000 Python calls.
    vectorised: Callable[..., Any] = trim_mean_rows if statistic is iqm else statistic

    n = arr.size
    if n == 1:
        point = float(np.asarray(vectorised(arr)).reshape(-1)[0])
        if not math.isfinite(point):
            raise ValueError(f"statistic returned {point!r} for the single value {arr[0]!r}.")
        return (point, point)

    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n, size=(resamples_count, n))
    resamples = arr[indices]

    stats: np.ndarray | None = None
    try:
        candidate = np.asarray(vectorised(resamples, axis=-1), dtype=float)
        if candidate.shape == (resamples_count,):
            stats = candidate
    except TypeError:
        # The statistic has no axis keyword (e.g. a lambda over a 1-D array); fall back.
        stats = None
    if stats is None:
        stats = np.array([float(vectorised(row)) for row in resamples], dtype=float)

    if not np.all(np.isfinite(stats)):
        raise ValueError("statistic returned NaN or infinity on some bootstrap resamples.")
    alpha = 1.0 - confidence
    lo, hi = np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (float(lo), float(hi))


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Summary:
    """Statistics of one evaluation run (one policy, one environment, ``n`` episodes).

    ``std`` is the population standard deviation (``ddof=0``), matching what
    Stable-Baselines3's ``evaluate_policy`` and Gymnasium report. ``mean_ci`` and
    ``iqm_ci`` are 95% percentile-bootstrap intervals (2000 resamples, seed 0).
    The ``success_*`` fields are None when the environment never reported success;
    otherwise they count only episodes whose outcome is known, and ``success_ci`` is the
    95% Wilson interval over those.
    """

    n: int
    mean: float
    std: float
    min: float
    max: float
    median: float
    iqm: float
    iqm_ci: tuple[float, float]
    mean_ci: tuple[float, float]
    success_count: int | None
    success_rate: float | None
    success_ci: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict: ints, floats, two-element lists, None; never NaN or inf.

        >>> import json
        >>> json.dumps(summarize([1.0]).to_dict(), allow_nan=False)[:30]
        '{"n": 1, "mean": 1.0, "std": 0'
        """
        return {
            "n": int(self.n),
            "mean": json_float(self.mean),
            "std": json_float(self.std),
            "min": json_float(self.min),
            "max": json_float(self.max),
            "median": json_float(self.median),
            "iqm": json_float(self.iqm),
            "iqm_ci": json_pair(self.iqm_ci),
            "mean_ci": json_pair(self.mean_ci),
            "success_count": None if self.success_count is None else int(self.success_count),
            "success_rate": json_float(self.success_rate),
            "success_ci": json_pair(self.success_ci),
        }


def summarize(
    returns: ArrayLike, successes: Sequence[bool | None] | None = None
) -> Summary:
    """Summarise the episode returns (and optional success flags) of one evaluation.

    ``successes`` holds one flag per episode: True/False, or None where the environment
    did not report an outcome. If it is omitted or every flag is None, the success fields
    are None (an unreported rate is not a 0% rate). If only some are None, the rate and
    its Wilson interval use the known episodes only.

    >>> s = summarize([1.0, 2.0, 3.0, 4.0], successes=[True, False, None, True])
    >>> s.mean, s.success_count, s.success_rate
    (2.5, 2, 0.6666666666666666)
    >>> summarize([1.0, 2.0]).success_rate is None
    True

    Raises:
        ValueError: for empty or non-finite returns, bad success flags, or a ``successes``
            sequence whose length differs from ``returns``.
    """
    arr = as_finite_1d(returns, "returns")
    n = int(arr.size)

    success_count: int | None = None
    success_rate: float | None = None
    success_ci: tuple[float, float] | None = None
    if successes is not None:
        if isinstance(successes, (str, bytes)):
            raise ValueError("successes must be a sequence of True/False/None, not a string.")
        flags = list(successes)
        if len(flags) != n:
            raise ValueError(
                f"successes has {len(flags)} entries but returns has {n}; "
                "give one success flag (or None) per episode."
            )
        count, known, _unknown = count_outcomes(flags, "successes")
        success_count, success_rate, success_ci = success_fields(count, known)

    return Summary(
        n=n,
        mean=float(np.mean(arr)),
        std=float(np.std(arr, ddof=0)),  # ddof=0: same convention as SB3 / Gymnasium
        min=float(np.min(arr)),
        max=float(np.max(arr)),
        median=float(np.median(arr)),
        iqm=float(trim_mean_rows(arr)),
        iqm_ci=bootstrap_ci(arr, iqm, DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, seed=0),
        mean_ci=bootstrap_ci(arr, np.mean, DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, seed=0),
        success_count=success_count,
        success_rate=success_rate,
        success_ci=success_ci,
    )



def success_percent(outcomes: Sequence[bool | None]) -> dict[str, Any]:
    """Success of a group of episodes as LeRobot reports it, in percent.

    ``n_episodes`` counts every episode, ``n_unknown`` those whose env never reported the
    success key (None); ``pc_success`` and ``pc_success_ci95`` (the 95% Wilson interval,
    no continuity correction) are over the known ones, and None when none is known.

    >>> out = success_percent([True] * 9 + [False])
    >>> out["pc_success"], [round(b, 2) for b in out["pc_success_ci95"]]
    (90.0, [59.58, 98.21])
    """
    s, known, unknown = count_outcomes(outcomes, "outcomes")
    count, rate, ci = success_fields(s, known)
    return {
        "n_episodes": known + unknown,
        "n_success": count,
        "n_unknown": unknown,
        "pc_success": None if rate is None else json_float(100.0 * rate),
        "pc_success_ci95": None if ci is None else [json_float(100.0 * ci[0]),
                                                   json_float(100.0 * ci[1])],
    }


def mean_of_rates(groups: Sequence[Sequence[bool | None]], n_resamples: int = 2000,
                  seed: int = 0) -> dict[str, Any]:
    """The unweighted mean of the groups' success rates, in percent, with a 95% interval.

    Each group (task) with a known outcome counts once, whatever its episode count, unlike
    the pooled rate of :func:`success_percent`. The interval is a stratified percentile
    bootstrap (rliable's way for aggregates over tasks): the episodes of each task are
    resampled within that task, and the mean of task rates taken per resample. Groups
    without a known outcome are left out; with none left, every field is None.

    >>> mean_of_rates([[True, True], [False, False]])["pc_mean_task_success"]
    50.0
    """
    flags = []
    for i, outcomes in enumerate(groups):
        known = [f for f in (parse_outcome(v, k) for k, v in enumerate(outcomes))
                 if f is not None]
        if known:
            flags.append(np.asarray(known, dtype=float))
    if not flags:
        return {"n_tasks": 0, "pc_mean_task_success": None, "pc_mean_task_success_ci95": None}
    mean = float(np.mean([f.mean() for f in flags]))
    rng = np.random.default_rng(seed)
    rates = np.zeros(n_resamples)
    for f in flags:  # one draw per task: (n_resamples, n_task) indices at once
        rates += f[rng.integers(0, f.size, size=(n_resamples, f.size))].mean(axis=1)
    rates /= len(flags)
    lo, hi = np.quantile(rates, [0.025, 0.975])
    return {"n_tasks": len(flags), "pc_mean_task_success": json_float(100.0 * mean),
            "pc_mean_task_success_ci95": [json_float(100.0 * lo), json_float(100.0 * hi)]}
