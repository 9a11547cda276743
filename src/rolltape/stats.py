"""Statistics for evaluation results: the numbers rolltape reports and how sure it is of them.

Everything here depends on numpy and the standard library only (no scipy), so the
statistics can be imported in any process, including the light renderer workers.

What is computed, and by which convention:

* :func:`wilson_interval` -- the Wilson score interval for a success rate. Unlike the
  normal ("Wald") interval it stays inside ``[0, 1]`` and is not degenerate at 0/n or n/n,
  which are exactly the cases an evaluation of 10 episodes hits most often.
* :func:`iqm` -- the interquartile mean of rliable (Agarwal et al., 2021), computed like
  ``scipy.stats.trim_mean(values, 0.25)``: ``k = floor(0.25 * n)`` values are cut from each
  end of the sorted data and the rest are averaged.
* :func:`bootstrap_ci` -- a percentile bootstrap, vectorised and deterministic per seed.
* :func:`summarize` / :class:`Summary` -- one evaluation run. ``std`` is the population
  standard deviation (``ddof=0``), the ``np.std`` default that Stable-Baselines3's
  ``evaluate_policy`` and Gymnasium's wrappers report, so numbers line up with theirs.
* :func:`paired_improvement` -- policy versus baseline evaluated on the same seeds.
* :func:`aggregate` -- success rates per group of a benchmark suite plus a pooled total.
* :func:`success_percent` -- LeRobot's per-task numbers: counts, ``pc_success`` and its
  Wilson 95% interval in percent; :func:`mean_of_rates` -- the unweighted mean of task
  rates with a stratified bootstrap interval (each task counts equally).

Every result that leaves this module as a dict is JSON-safe: plain ``int``/``float``/
``list``/``None``, never numpy scalars, never NaN or infinity (those become ``None``), so
``json.dumps(result, allow_nan=False)`` always works.

May import: numpy only.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "Summary",
    "aggregate",
    "bootstrap_ci",
    "iqm",
    "mean_of_rates",
    "paired_improvement",
    "success_percent",
    "summarize",
    "wilson_interval",
]

# z for a two-sided 95% interval, to full double precision. NormalDist().inv_cdf(0.975)
# lands one ulp away (1.9599639845400536); the common level gets the exact constant so
# the published reference values are reproduced digit for digit.
_Z_95 = 1.959963984540054

_DEFAULT_CONFIDENCE = 0.95
_DEFAULT_RESAMPLES = 2000


# --------------------------------------------------------------------------- helpers


def _z_for(confidence: float) -> float:
    """Two-sided standard-normal critical value for ``confidence`` (e.g. 0.95 -> 1.96)."""
    _check_confidence(confidence)
    if confidence == 0.95:
        return _Z_95
    # The stdlib's inverse CDF (Wichura's AS241) is accurate to ~1e-16; no scipy needed.
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _check_confidence(confidence: float) -> None:
    # numbers.Real admits numpy floats; bool is excluded because True/False is surely a typo.
    if isinstance(confidence, bool) or not (
        isinstance(confidence, numbers.Real) and 0.0 < float(confidence) < 1.0
    ):
        raise ValueError(
            f"confidence must be a number strictly between 0 and 1 (e.g. 0.95), got {confidence!r}."
        )


def _as_finite_1d(values: ArrayLike, what: str) -> np.ndarray:
    """``values`` as a non-empty 1-D float array of finite numbers, or a clear ValueError.

    NaN or infinite returns mean the environment or the evaluation loop is broken; averaging
    them would either poison every statistic or silently hide the problem, so refuse.
    """
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be a sequence of numbers ({exc}).") from None
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got an array of shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{what} is empty; at least one value is needed.")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{what} contains {bad} NaN or infinite value(s); every value must be finite.")
    return arr


def _json_float(x: Any) -> float | None:
    """A plain Python float, or None where JSON has no number for it (NaN, +-inf)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _json_pair(pair: tuple[float, float] | None) -> list[float | None] | None:
    if pair is None:
        return None
    return [_json_float(pair[0]), _json_float(pair[1])]


def _parse_outcome(value: Any, index: int) -> bool | None:
    """One success flag: True/False (Python or numpy), 0/1, or None for "not reported".

    0/1 numbers are accepted because several Gymnasium environments (e.g. the robotics
    suite) report ``info["is_success"]`` as a float 0.0/1.0 rather than a bool.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if value == 1:
            return True
        if value == 0:
            return False
    raise ValueError(
        f"success flag at position {index} is {value!r}; each flag must be True, False, 0, 1 or None."
    )


def _count_outcomes(outcomes: Sequence[Any], what: str) -> tuple[int, int, int]:
    """(successes, known, unknown) for a sequence of success flags."""
    if isinstance(outcomes, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of True/False/None, not a string.")
    successes = known = unknown = 0
    for i, value in enumerate(outcomes):
        flag = _parse_outcome(value, i)
        if flag is None:
            unknown += 1
        else:
            known += 1
            successes += int(flag)
    return successes, known, unknown


def _trim_mean_rows(values: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean along ``axis`` (vectorised form of :func:`iqm`)."""
    arr = np.sort(np.asarray(values, dtype=float), axis=axis)
    n = arr.shape[axis]
    # Same cut as scipy.stats.trim_mean(…, 0.25): int() floors, so n = 5 cuts one from each
    # end (keeps 3) and n < 4 cuts nothing. rliable computes its IQM exactly this way.
    k = int(0.25 * n)
    kept = np.take(arr, np.arange(k, n - k), axis=axis)
    return np.mean(kept, axis=axis)


def _success_fields(
    successes: int, known: int
) -> tuple[int | None, float | None, tuple[float, float] | None]:
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
    z = _z_for(confidence)

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
    arr = _as_finite_1d(values, "values")
    return float(_trim_mean_rows(arr))


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
    arr = _as_finite_1d(values, "values")
    _check_confidence(confidence)
    try:
        resamples_count = operator.index(n_resamples)
    except TypeError:
        raise ValueError(f"n_resamples must be an integer, got {n_resamples!r}.") from None
    if resamples_count < 1:
        raise ValueError(f"n_resamples must be at least 1, got {resamples_count}.")

    # Route the public iqm to its vectorised twin: same numbers as summarize() gives, and
    # one sort of the whole resample matrix instead of 2000 Python calls.
    vectorised: Callable[..., Any] = _trim_mean_rows if statistic is iqm else statistic

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
            "mean": _json_float(self.mean),
            "std": _json_float(self.std),
            "min": _json_float(self.min),
            "max": _json_float(self.max),
            "median": _json_float(self.median),
            "iqm": _json_float(self.iqm),
            "iqm_ci": _json_pair(self.iqm_ci),
            "mean_ci": _json_pair(self.mean_ci),
            "success_count": None if self.success_count is None else int(self.success_count),
            "success_rate": _json_float(self.success_rate),
            "success_ci": _json_pair(self.success_ci),
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
    arr = _as_finite_1d(returns, "returns")
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
        count, known, _unknown = _count_outcomes(flags, "successes")
        success_count, success_rate, success_ci = _success_fields(count, known)

    return Summary(
        n=n,
        mean=float(np.mean(arr)),
        std=float(np.std(arr, ddof=0)),  # ddof=0: same convention as SB3 / Gymnasium
        min=float(np.min(arr)),
        max=float(np.max(arr)),
        median=float(np.median(arr)),
        iqm=float(_trim_mean_rows(arr)),
        iqm_ci=bootstrap_ci(arr, iqm, _DEFAULT_CONFIDENCE, _DEFAULT_RESAMPLES, seed=0),
        mean_ci=bootstrap_ci(arr, np.mean, _DEFAULT_CONFIDENCE, _DEFAULT_RESAMPLES, seed=0),
        success_count=success_count,
        success_rate=success_rate,
        success_ci=success_ci,
    )


def paired_improvement(
    policy_returns: ArrayLike, baseline_returns: ArrayLike, seed: int = 0
) -> dict[str, Any]:
    """Improvement of a policy over a baseline evaluated on the same episode seeds.

    Because episode ``i`` of both runs used the same seed, the per-seed differences
    ``policy[i] - baseline[i]`` cancel the seed-to-seed variation the two runs share;
    bootstrapping those differences gives a much tighter (and honest) interval than
    comparing two independent means.

    Returns a JSON-safe dict:

    * ``mean_diff`` -- mean of the per-seed differences (policy minus baseline);
    * ``diff_ci`` -- 95% percentile-bootstrap interval of that mean, ``[lo, hi]``;
    * ``policy_mean``, ``baseline_mean``, ``n_pairs``;
    * ``ratio_of_means`` -- ``policy_mean / baseline_mean`` when that reads as "x times the
      baseline", i.e. when ``baseline_mean > 0`` and ``policy_mean >= 0``; otherwise None
      (with a zero or negative baseline the ratio's size and sign carry no meaning).

    >>> d = paired_improvement([3.0, 4.0, 5.0], [1.0, 2.0, 3.0])
    >>> d["mean_diff"], d["n_pairs"], d["ratio_of_means"]
    (2.0, 3, 2.0)

    Raises:
        ValueError: if the two sequences differ in length, are empty, or hold non-finite values.
    """
    policy = _as_finite_1d(policy_returns, "policy_returns")
    baseline = _as_finite_1d(baseline_returns, "baseline_returns")
    if policy.size != baseline.size:
        raise ValueError(
            f"policy_returns has {policy.size} episodes but baseline_returns has {baseline.size}; "
            "a paired comparison needs both evaluated on the same seeds, one return per seed."
        )
    diffs = policy - baseline
    policy_mean = float(np.mean(policy))
    baseline_mean = float(np.mean(baseline))
    ratio = policy_mean / baseline_mean if baseline_mean > 0 and policy_mean >= 0 else None
    return {
        "mean_diff": _json_float(np.mean(diffs)),
        "diff_ci": _json_pair(
            bootstrap_ci(diffs, np.mean, _DEFAULT_CONFIDENCE, _DEFAULT_RESAMPLES, seed=seed)
        ),
        "policy_mean": _json_float(policy_mean),
        "baseline_mean": _json_float(baseline_mean),
        "n_pairs": int(policy.size),
        "ratio_of_means": _json_float(ratio),
    }


def _group_entry(successes: int, known: int, unknown: int) -> dict[str, Any]:
    count, rate, ci = _success_fields(successes, known)
    return {
        "success_count": count,
        "n": known,
        "n_unknown": unknown,
        "success_rate": _json_float(rate),
        "success_ci": _json_pair(ci),
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
        s, known, unknown = _count_outcomes(outcomes, f"group {name!r}")
        result[str(name)] = _group_entry(s, known, unknown)
        total_s += s
        total_known += known
        total_unknown += unknown
        if known:
            rates.append(s / known)
    overall = _group_entry(total_s, total_known, total_unknown)
    overall["mean_group_rate"] = _json_float(sum(rates) / len(rates)) if rates else None
    result["overall"] = overall
    return result


# --------------------------------------------------------------------------- comparisons
#
# Two policies evaluated on the same seeds give *paired* episodes: episode i of both
# started from the same state. Everything below works on such pairs (or, for suites, on
# normalized scores per task) and follows rliable's conventions where it has one.

__all__ += [
    "aggregate_scores",
    "mcnemar_exact",
    "minimum_detectable_difference",
    "newcombe_paired_interval",
    "normalize_scores",
    "paired_comparison",
    "performance_profile",
    "probability_of_improvement",
    "suite_probability_of_improvement",
]

_POWER = 0.8  # the power at which the smallest detectable difference is quoted
_Z_POWER = NormalDist().inv_cdf(_POWER)


def _resample_counts(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """(resamples, n) counts: how often each of the n items is drawn in each resample."""
    draws = rng.integers(0, n, size=(resamples, n))
    flat = draws + n * np.arange(resamples)[:, None]
    return np.bincount(flat.ravel(), minlength=resamples * n).reshape(resamples, n)


def probability_of_improvement(
    x: ArrayLike, y: ArrayLike, *, paired: bool = True, confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES, seed: int = 0,
) -> dict[str, Any]:
    """P(X > Y): the chance that an episode of X beats an episode of Y, ties counting half.

    This is rliable's probability of improvement on one task: the Mann-Whitney statistic
    ``U`` of X against Y divided by ``n * m`` (every episode of X compared with every
    episode of Y). 0.5 means neither tends to do better.

    The interval is a percentile bootstrap. With ``paired`` (the default; episodes matched
    by seed, so ``len(x) == len(y)``) the same seeds are drawn for both, which keeps what
    the pairs share; otherwise X and Y are resampled independently, as rliable does.
    Each resample's U is computed exactly from how often each episode was drawn: Y is
    sorted once, and an X episode's wins are the drawn Y episodes below it (a cumulative
    count) plus half those equal to it, so a resample costs ``n + m`` operations, not
    ``n * m``.

    >>> p = probability_of_improvement([3.0, 4.0, 5.0], [1.0, 2.0, 5.0])
    >>> p["p"], p["n_x"], p["n_y"]
    (0.7222222222222222, 3, 3)

    Raises:
        ValueError: empty or non-finite values, or paired samples of different lengths.
    """
    xs = _as_finite_1d(x, "x")
    ys = _as_finite_1d(y, "y")
    _check_confidence(confidence)
    if paired and xs.size != ys.size:
        raise ValueError(f"paired samples need one value per seed each, got {xs.size} and "
                         f"{ys.size}; pass paired=False for unmatched samples.")
    point, values = _improvement_resamples(xs, ys, paired, n_resamples,
                                           np.random.default_rng(seed))
    alpha = 1.0 - confidence
    lo, hi = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return {"p": point, "ci": [float(lo), float(hi)], "n_x": int(xs.size),
            "n_y": int(ys.size), "paired": bool(paired)}


def _improvement_resamples(xs: np.ndarray, ys: np.ndarray, paired: bool, resamples: int,
                           rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """P(X > Y) and its value on each of ``resamples`` bootstrap resamples."""
    n, m = xs.size, ys.size
    order = np.argsort(ys, kind="stable")
    below = np.searchsorted(ys[order], xs, side="left")  # Y episodes under each X episode
    upto = np.searchsorted(ys[order], xs, side="right")  # ... and those equal to it

    def u_over_nm(cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
        """U / (n m) for each row of counts (how often each X and Y episode is drawn)."""
        cum = np.zeros((cy.shape[0], m + 1))
        np.cumsum(cy[:, order], axis=1, out=cum[:, 1:])
        wins = cum[:, below] + 0.5 * (cum[:, upto] - cum[:, below])
        return np.einsum("ri,ri->r", cx, wins) / (n * m)

    point = float(u_over_nm(np.ones((1, n)), np.ones((1, m)))[0])
    values = np.empty(resamples)
    block = max(1, 4_000_000 // (n + m))  # bounds memory for big samples
    for start in range(0, resamples, block):
        count = min(block, resamples - start)
        cx = _resample_counts(rng, n, count)
        cy = cx if paired else _resample_counts(rng, m, count)
        values[start:start + count] = u_over_nm(cx, cy)
    return point, values


def suite_probability_of_improvement(
    x: Mapping[str, ArrayLike], y: Mapping[str, ArrayLike], *, paired: bool = True,
    confidence: float = 0.95, n_resamples: int = _DEFAULT_RESAMPLES, seed: int = 0,
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
    _check_confidence(confidence)
    xt, yt = _task_arrays(x), _task_arrays(y)
    if set(xt) != set(yt):
        raise ValueError(f"both need the same tasks, got {sorted(xt)} and {sorted(yt)}.")
    rng = np.random.default_rng(seed)
    points, draws = [], []
    for task in xt:
        if paired and xt[task].size != yt[task].size:
            raise ValueError(f"task {task!r}: paired samples need one value per seed each, "
                             f"got {xt[task].size} and {yt[task].size}.")
        point, values = _improvement_resamples(xt[task], yt[task], paired, n_resamples, rng)
        points.append(point)
        draws.append(values)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(np.mean(draws, axis=0), [alpha / 2.0, 1.0 - alpha / 2.0])
    return {"p": float(np.mean(points)), "ci": [float(lo), float(hi)], "tasks": len(xt),
            "paired": bool(paired)}


def _binom_half_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k), exactly (integer arithmetic, then one division)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def _paired_table(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int, int, int, int]:
    """(both, only a, only b, neither, dropped) over pairs whose outcomes are both known."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need one flag per seed each, got {len(a)} and "
                         f"{len(b)}.")
    both = only_a = only_b = neither = dropped = 0
    for i, (fa, fb) in enumerate(zip(a, b)):
        sa, sb = _parse_outcome(fa, i), _parse_outcome(fb, i)
        if sa is None or sb is None:
            dropped += 1
        elif sa and sb:
            both += 1
        elif sa:
            only_a += 1
        elif sb:
            only_b += 1
        else:
            neither += 1
    return both, only_a, only_b, neither, dropped


def mcnemar_exact(a: Sequence[Any], b: Sequence[Any]) -> dict[str, Any]:
    """Exact McNemar test: do A and B succeed on different seeds more often than chance?

    Only the discordant pairs count: ``only_a`` seeds where A succeeded and B failed,
    ``only_b`` the reverse. Under "no difference" each discordant pair is a fair coin, so
    the two-sided p-value is ``min(1, 2 * P(Binomial(only_a + only_b, 1/2) <= min))``, as
    statsmodels' ``mcnemar(exact=True)`` computes it. Pairs with an unknown outcome (None)
    are left out and counted in ``dropped``.

    >>> r = mcnemar_exact([1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0])
    >>> r["only_a"], r["only_b"], r["pvalue"]
    (5, 0, 0.0625)
    """
    both, only_a, only_b, neither, dropped = _paired_table(a, b)
    discordant = only_a + only_b
    p = 1.0 if discordant == 0 else min(1.0, 2.0 * _binom_half_cdf(min(only_a, only_b),
                                                                   discordant))
    return {"both": both, "only_a": only_a, "only_b": only_b, "neither": neither,
            "n_pairs": both + only_a + only_b + neither, "dropped": dropped,
            "pvalue": float(p)}


def newcombe_paired_interval(both: int, only_a: int, only_b: int, neither: int,
                             confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's (1998) method 10 interval for ``rate(A) - rate(B)`` on paired outcomes.

    Wilson intervals for each rate, combined by "square and add" with the correlation of
    the pairs (phi, continuity-corrected as the method specifies). It stays inside
    [-1, 1] and behaves at 0 and n, where the Wald interval does not. Reproduces the
    published example (59, 6, 16, 80) -> (-0.1186, -0.0046) of Fagerland et al.

    >>> [round(v, 4) for v in newcombe_paired_interval(59, 6, 16, 80)]
    [-0.1186, -0.0046]

    Raises:
        ValueError: negative counts or no pairs at all.
    """
    counts = (both, only_a, only_b, neither)
    if any(operator.index(c) < 0 for c in counts):
        raise ValueError(f"counts must be 0 or more, got {counts}.")
    n = sum(counts)
    if n == 0:
        raise ValueError("no pairs with known outcomes; there is no difference to bound.")
    a, b, c, d = counts
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, confidence)
    l2, u2 = wilson_interval(a + c, n, confidence)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins > 0 else 0.0
    diff = p1 - p2
    lower = diff - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2)
                                 + (u2 - p2) ** 2))
    upper = diff + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1)
                                 + (u1 - p1) ** 2))
    return (max(-1.0, lower), min(1.0, upper))


def minimum_detectable_difference(spread: float, n: int, confidence: float = 0.95,
                                  power: float = _POWER) -> float:
    """The smallest true difference that ``n`` paired episodes detect with ``power``.

    The usual planning formula ``(z_{1-alpha/2} + z_power) * spread / sqrt(n)`` for a
    two-sided test at level ``1 - confidence``; ``spread`` is the standard deviation of
    one pair's difference. Below it, "no detectable difference" means "too few episodes
    to tell", not "the same".

    >>> round(minimum_detectable_difference(10.0, 25), 2)
    5.6
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}.")
    z = _z_for(confidence) + (_Z_POWER if power == _POWER else NormalDist().inv_cdf(power))
    return float(z * spread / math.sqrt(n))


def _episodes_needed(spread: float, effect: float, confidence: float) -> int | None:
    """Paired episodes needed to detect ``effect`` with 80% power (None: no effect seen)."""
    if effect == 0 or spread == 0:
        return None
    z = _z_for(confidence) + _Z_POWER
    return int(math.ceil((z * spread / abs(effect)) ** 2))


def _verdict(lo: float | None, hi: float | None) -> str:
    if lo is not None and lo > 0:
        return "better"
    if hi is not None and hi < 0:
        return "worse"
    return "no detectable difference"


def _num(x: float) -> str:
    return f"{x:+.3g}" if abs(x) < 1000 else f"{x:+,.0f}"


def paired_comparison(
    a_returns: ArrayLike, b_returns: ArrayLike,
    a_success: Sequence[Any] | None = None, b_success: Sequence[Any] | None = None, *,
    a_name: str = "A", b_name: str = "B", confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES, seed: int = 0,
) -> dict[str, Any]:
    """Is A better than B? Every number on episodes matched by seed (index i = seed i).

    ``returns``: the mean paired difference A - B with its paired bootstrap interval
    (:func:`paired_improvement`), P(A > B) with its interval
    (:func:`probability_of_improvement`), the smallest difference this many episodes could
    detect (:func:`minimum_detectable_difference`, from the spread of the differences),
    the verdict ("better" when the interval lies above 0, "worse" below, else "no
    detectable difference") and a sentence saying it, with "underpowered" and the episodes
    needed when nothing was detected.

    ``success`` (None when neither reports success): the rates, the exact McNemar test,
    Newcombe's interval for the difference of rates, the detectable difference, the
    verdict (McNemar's p below ``1 - confidence``) and its sentence.

    >>> c = paired_comparison([2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 2.5, 4.5], a_name="new", b_name="old")
    >>> c["returns"]["verdict"]
    'better'
    """
    a = _as_finite_1d(a_returns, "a_returns")
    b = _as_finite_1d(b_returns, "b_returns")
    diff = paired_improvement(a, b, seed=seed) if a.size == b.size else None
    if diff is None:
        raise ValueError(f"a_returns has {a.size} episodes and b_returns {b.size}; a paired "
                         "comparison needs one return per seed for both.")
    n = int(a.size)
    lo, hi = diff["diff_ci"]
    spread = float(np.std(a - b, ddof=1)) if n > 1 else 0.0
    mde = minimum_detectable_difference(spread, n, confidence)
    verdict = _verdict(lo, hi)
    mean = diff["mean_diff"]
    ci_text = f"{_num(mean)} return per episode (95% CI {_num(lo)} to {_num(hi)})"
    if verdict != "no detectable difference":
        sentence = f"{a_name} is {verdict} than {b_name}: {ci_text} on {n} paired seeds."
    elif spread == 0 and mean == 0:  # e.g. a policy that ignores what it sees, both times
        sentence = (f"No difference between {a_name} and {b_name}: the same return on each "
                    f"of the {n} paired seeds.")
    else:
        need = _episodes_needed(spread, mean, confidence)
        sentence = (f"No detectable difference between {a_name} and {b_name}: {ci_text}. "
                    f"Underpowered: {n} paired episodes detect only differences of about "
                    f"{mde:.3g} or more (80% power)"
                    + (f"; about {need} would be needed to detect one of {abs(mean):.3g}."
                       if need and need > n else "."))
    returns = {
        "n_pairs": n, "a_mean": diff["policy_mean"], "b_mean": diff["baseline_mean"],
        "mean_diff": mean, "diff_ci": [lo, hi], "diff_std": _json_float(spread),
        "probability_of_improvement": probability_of_improvement(
            a, b, paired=True, confidence=confidence, n_resamples=n_resamples, seed=seed),
        "minimum_detectable_difference": _json_float(mde),
        "verdict": verdict, "sentence": sentence,
    }
    return {"a": a_name, "b": b_name, "returns": returns,
            "success": _success_comparison(a_success, b_success, a_name, b_name, confidence)}


def _success_comparison(a: Sequence[Any] | None, b: Sequence[Any] | None, a_name: str,
                        b_name: str, confidence: float) -> dict[str, Any] | None:
    if a is None or b is None:
        return None
    test = mcnemar_exact(a, b)
    n = test["n_pairs"]
    if n == 0:
        return None  # neither reported success on a shared seed
    both, only_a, only_b = test["both"], test["only_a"], test["only_b"]
    lo, hi = newcombe_paired_interval(both, only_a, only_b, test["neither"], confidence)
    diff = (only_a - only_b) / n
    # Spread of one pair's difference (+1, 0, -1); with no discordant pair seen, plan for
    # one in n so that the detectable difference is never a misleading 0.
    discordant = max(only_a + only_b, 1) / n
    mde = minimum_detectable_difference(math.sqrt(max(discordant - diff ** 2, 1e-12)), n,
                                        confidence)
    significant = test["pvalue"] < 1.0 - confidence
    verdict = ("better" if diff > 0 else "worse") if significant else \
        "no detectable difference"
    rates = f"{(both + only_a) / n:.0%} vs {(both + only_b) / n:.0%}"
    text = (f"success {rates} ({_num(diff * 100)} points, 95% CI {_num(lo * 100)} to "
            f"{_num(hi * 100)}; McNemar p = {test['pvalue']:.3g})")
    if significant:
        sentence = f"{a_name} succeeds more often than {b_name}: {text}." if diff > 0 else \
            f"{a_name} succeeds less often than {b_name}: {text}."
    else:
        sentence = (f"No detectable difference in success: {text}. Underpowered: {n} paired "
                    f"episodes detect only differences of about {mde * 100:.0f} points or "
                    "more (80% power).")
    return {**test, "a_rate": (both + only_a) / n, "b_rate": (both + only_b) / n,
            "diff": diff, "diff_ci": [lo, hi],
            "minimum_detectable_difference": _json_float(mde), "verdict": verdict,
            "sentence": sentence}


# ----------------------------------------------------------------------- suite aggregates


def normalize_scores(scores: ArrayLike, random_score: float,
                     reference_score: float) -> np.ndarray:
    """Scores rescaled so that the random policy is 0 and the reference is 1 (rliable's
    human- or expert-normalized score).

    >>> normalize_scores([0.0, 5.0, 10.0], random_score=0.0, reference_score=10.0).tolist()
    [0.0, 0.5, 1.0]

    Raises:
        ValueError: when the reference scores what random scores (nothing to scale by).
    """
    arr = _as_finite_1d(scores, "scores")
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
    return {"iqm": np.asarray(_trim_mean_rows(pooled, axis=-1)),
            "mean": task_means.mean(axis=-1),
            "median": np.median(task_means, axis=-1),
            "optimality_gap": gamma - clipped.mean(axis=-1)}


def _task_arrays(per_task: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    if len(per_task) == 0:
        raise ValueError("no tasks given; pass at least one task's scores.")
    return {str(k): _as_finite_1d(v, f"scores of task {k!r}") for k, v in per_task.items()}


def _stratified(tasks: dict[str, np.ndarray], rng: np.random.Generator,
                resamples: int) -> list[np.ndarray]:
    """Resample each task's episodes within that task (rliable's stratified bootstrap)."""
    return [v[rng.integers(0, v.size, size=(resamples, v.size))] for v in tasks.values()]


def aggregate_scores(per_task: Mapping[str, ArrayLike], *, gamma: float = 1.0,
                     confidence: float = 0.95, n_resamples: int = _DEFAULT_RESAMPLES,
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
    _check_confidence(confidence)
    tasks = _task_arrays(per_task)
    points = _aggregates([v[None, :] for v in tasks.values()], gamma)
    boot = _aggregates(_stratified(tasks, np.random.default_rng(seed), n_resamples), gamma)
    alpha = 1.0 - confidence
    out: dict[str, Any] = {}
    for name, value in points.items():
        lo, hi = np.quantile(boot[name], [alpha / 2.0, 1.0 - alpha / 2.0])
        out[name] = {"value": _json_float(value[0]), "ci": [_json_float(lo), _json_float(hi)]}
    out["tasks"] = len(tasks)
    out["episodes"] = int(sum(v.size for v in tasks.values()))
    return out


def performance_profile(per_task: Mapping[str, ArrayLike], taus: ArrayLike, *,
                        confidence: float = 0.95, n_resamples: int = _DEFAULT_RESAMPLES,
                        seed: int = 0) -> dict[str, Any]:
    """rliable's score distribution: for each threshold tau, the fraction of episodes
    scoring above tau (per task, then averaged over tasks), with stratified bootstrap
    95% intervals. A curve that lies above another everywhere dominates it.

    >>> p = performance_profile({"a": [0.0, 1.0], "b": [0.5, 0.5]}, [0.25, 0.75])
    >>> p["fraction"]
    [0.75, 0.25]
    """
    _check_confidence(confidence)
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
def success_percent(outcomes: Sequence[bool | None]) -> dict[str, Any]:
    """Success of a group of episodes as LeRobot reports it, in percent.

    ``n_episodes`` counts every episode, ``n_unknown`` those whose env never reported the
    success key (None); ``pc_success`` and ``pc_success_ci95`` (the 95% Wilson interval,
    no continuity correction) are over the known ones, and None when none is known.

    >>> out = success_percent([True] * 9 + [False])
    >>> out["pc_success"], [round(b, 2) for b in out["pc_success_ci95"]]
    (90.0, [59.58, 98.21])
    """
    s, known, unknown = _count_outcomes(outcomes, "outcomes")
    count, rate, ci = _success_fields(s, known)
    return {
        "n_episodes": known + unknown,
        "n_success": count,
        "n_unknown": unknown,
        "pc_success": None if rate is None else _json_float(100.0 * rate),
        "pc_success_ci95": None if ci is None else [_json_float(100.0 * ci[0]),
                                                   _json_float(100.0 * ci[1])],
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
        known = [f for f in (_parse_outcome(v, k) for k, v in enumerate(outcomes))
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
    return {"n_tasks": len(flags), "pc_mean_task_success": _json_float(100.0 * mean),
            "pc_mean_task_success_ci95": [_json_float(100.0 * lo), _json_float(100.0 * hi)]}
