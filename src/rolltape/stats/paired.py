"""Two policies on the same seeds: the paired improvement, the probability of improvement,
the exact McNemar test and Newcombe's interval for success, the smallest detectable
difference, and the comparison verdict that puts them together.

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rolltape.stats._core import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    as_finite_1d,
    check_confidence,
    json_float,
    json_pair,
    parse_outcome,
    z_for,
)
from rolltape.stats.intervals import bootstrap_ci, wilson_interval

# --------------------------------------------------------------------------- comparisons
#
# Two policies evaluated on the same seeds give *paired* episodes: episode i of both
# started from the same state. Everything below works on such pairs (or, for suites, on
# normalized scores per task) and follows rliable's conventions where it has one.

_POWER = 0.8  # the power at which the smallest detectable difference is quoted
_Z_POWER = NormalDist().inv_cdf(_POWER)


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
    policy = as_finite_1d(policy_returns, "policy_returns")
    baseline = as_finite_1d(baseline_returns, "baseline_returns")
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
        "mean_diff": json_float(np.mean(diffs)),
        "diff_ci": json_pair(
            bootstrap_ci(diffs, np.mean, DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, seed=seed)
        ),
        "policy_mean": json_float(policy_mean),
        "baseline_mean": json_float(baseline_mean),
        "n_pairs": int(policy.size),
        "ratio_of_means": json_float(ratio),
    }



def _resample_counts(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """(resamples, n) counts: how often each of the n items is drawn in each resample."""
    draws = rng.integers(0, n, size=(resamples, n))
    flat = draws + n * np.arange(resamples)[:, None]
    return np.bincount(flat.ravel(), minlength=resamples * n).reshape(resamples, n)


def probability_of_improvement(
    x: ArrayLike, y: ArrayLike, *, paired: bool = True, confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
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
    xs = as_finite_1d(x, "x")
    ys = as_finite_1d(y, "y")
    check_confidence(confidence)
    if paired and xs.size != ys.size:
        raise ValueError(f"paired samples need one value per seed each, got {xs.size} and "
                         f"{ys.size}; pass paired=False for unmatched samples.")
    point, values = improvement_resamples(xs, ys, paired, n_resamples,
                                          np.random.default_rng(seed))
    alpha = 1.0 - confidence
    lo, hi = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return {"p": point, "ci": [float(lo), float(hi)], "n_x": int(xs.size),
            "n_y": int(ys.size), "paired": bool(paired)}


def improvement_resamples(xs: np.ndarray, ys: np.ndarray, paired: bool, resamples: int,
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
        sa, sb = parse_outcome(fa, i), parse_outcome(fb, i)
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
    z = z_for(confidence) + (_Z_POWER if power == _POWER else NormalDist().inv_cdf(power))
    return float(z * spread / math.sqrt(n))


def _episodes_needed(spread: float, effect: float, confidence: float) -> int | None:
    """Paired episodes needed to detect ``effect`` with 80% power (None: no effect seen)."""
    if effect == 0 or spread == 0:
        return None
    z = z_for(confidence) + _Z_POWER
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
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
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
    a = as_finite_1d(a_returns, "a_returns")
    b = as_finite_1d(b_returns, "b_returns")
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
        "mean_diff": mean, "diff_ci": [lo, hi], "diff_std": json_float(spread),
        "probability_of_improvement": probability_of_improvement(
            a, b, paired=True, confidence=confidence, n_resamples=n_resamples, seed=seed),
        "minimum_detectable_difference": json_float(mde),
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
            "minimum_detectable_difference": json_float(mde), "verdict": verdict,
            "sentence": sentence}


# ----------------------------------------------------------------------- suite aggregates
