"""Anytime-valid intervals: confidence sequences that hold at every look at the data.

An evaluation that stops once its interval is narrow enough (or once a comparison is
decided) looks at its numbers after every batch. A fixed-n interval (Wilson, the bootstrap)
covers with 95% at one pre-chosen n; checked after every batch, the chance that *some* look
excludes the truth grows with the number of looks (a test shows it passing 5%). A
confidence sequence (CS) is a sequence of intervals that contains the truth at *every* n at
once with probability 95%, so stopping on any look keeps its guarantee.

* :func:`bernoulli_cs` -- success rates: the beta-binomial conjugate-mixture CS (Robbins
  1970, "Statistical methods related to the law of the iterated logarithm"; Howard,
  Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence
  sequences", Ann. Statist. 49(2), section 3.2 on conjugate mixtures): the likelihood
  ratio of a Beta(a, b) mixture against the point rate p is a nonnegative martingale under
  p, so by Ville's inequality it passes 1/alpha with probability at most alpha; the CS is
  every p whose ratio has not.
* :func:`betting_cs` -- means of bounded values (returns within known bounds, paired
  differences): the hedged-capital betting CS of Waudby-Smith & Ramdas 2023, "Estimating
  means of bounded random variables by betting", JRSS-B 86(1), Theorem 3, with the
  predictable plug-in bets of their eq. (26) truncated at 1/2 of the largest allowed bet,
  on a grid of 1000 candidate means, as their reference implementation
  (the ``confseq`` package's ``betting.hedged_cs``) computes it; the tests compare the two.

Both return the running intersection over looks (an intersection of a CS is a CS), so
an interval never widens when more episodes come in.

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rolltape.stats._core import as_finite_1d, check_confidence

__all__ = ["betting_cs", "bernoulli_cs", "bernoulli_cs_at"]

_BREAKS = 1000  # candidate means of the betting CS: 0, 1/1000, ..., 1 (the paper's grid)
_TRUNCATION = 0.5  # bets at most half the largest one that keeps capital nonnegative


def _log_beta(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    lgamma = np.vectorize(math.lgamma, otypes=[float])
    return lgamma(a) + lgamma(b) - lgamma(np.asarray(a) + np.asarray(b))


def bernoulli_cs_at(successes: ArrayLike, n: ArrayLike, confidence: float = 0.95,
                    prior: tuple[float, float] = (0.5, 0.5)) -> tuple[np.ndarray, np.ndarray]:
    """The beta-binomial mixture CS at one look: every p in ``[lo, hi]`` has a mixture
    likelihood ratio ``B(a+S, b+F) / B(a, b) / (p^S (1-p)^F)`` below ``1/alpha``.

    Vectorised over ``successes`` and ``n`` (same shape). ``prior`` is the mixing
    Beta(a, b); Jeffreys' (1/2, 1/2) spreads its weight toward rates near 0 and 1, where
    evaluations of good policies land.

    >>> lo, hi = bernoulli_cs_at(40, 50)
    >>> round(float(lo), 3), round(float(hi), 3)
    (0.586, 0.937)
    """
    check_confidence(confidence)
    s = np.asarray(successes, dtype=float)
    total = np.asarray(n, dtype=float)
    if np.any(total < 1) or np.any(s < 0) or np.any(s > total):
        raise ValueError("need 0 <= successes <= n and n >= 1 at every look.")
    a, b = prior
    f = total - s
    # p is in the CS when S log p + F log(1-p) > log B(a+S, b+F) - log B(a, b) - log(1/alpha).
    # The left side is concave with its maximum at S/n, where it always passes (the maximum
    # likelihood is above the mixture's), so each bound is one bisection.
    level = _log_beta(a + s, b + f) - _log_beta(a, b) - math.log(1.0 / (1.0 - confidence))
    mid = s / total

    def inside(p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            ll = np.where(s > 0, s * np.log(p), 0.0) + np.where(f > 0, f * np.log1p(-p), 0.0)
        return ll > level

    def bound(outer: np.ndarray) -> np.ndarray:
        good, bad = mid.copy(), outer.astype(float).copy()  # good inside, bad outside (or edge)
        edge_inside = inside(bad)
        for _ in range(60):  # 2^-60: far below any digit reported
            half = (good + bad) / 2.0
            ok = inside(half)
            good = np.where(ok, half, good)
            bad = np.where(ok, bad, half)
        return np.where(edge_inside, outer, good)

    lo = bound(np.zeros_like(mid))
    hi = bound(np.ones_like(mid))
    return lo, hi


def bernoulli_cs(outcomes: ArrayLike, confidence: float = 0.95,
                 prior: tuple[float, float] = (0.5, 0.5)) -> tuple[np.ndarray, np.ndarray]:
    """The success-rate CS after each of ``len(outcomes)`` episodes (0/1 or bools), as
    ``(lower, upper)`` arrays: entry t holds after episodes 0..t, at every t at once, with
    probability ``confidence``. Running intersection of :func:`bernoulli_cs_at`.

    >>> lo, hi = bernoulli_cs([1, 1, 0, 1])
    >>> bool(np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) <= 0))
    True
    """
    x = as_finite_1d(outcomes, "outcomes")
    if not np.all((x == 0) | (x == 1)):
        raise ValueError("outcomes must be 0/1 (False/True); a success rate needs flags.")
    n = np.arange(1, x.size + 1)
    lo, hi = bernoulli_cs_at(np.cumsum(x), n, confidence, prior)
    return np.maximum.accumulate(lo), np.minimum.accumulate(hi)


def _predictable_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """Waudby-Smith & Ramdas' predictable plug-in bets (their eq. 26): sqrt(2 log(1/alpha)
    / (t log(1+t) var_{t-1})), with the mean and variance regularised by one prior
    observation of mean 1/2 and variance 1/4."""
    t = np.arange(1, x.size + 1)
    mu = np.minimum((0.5 + np.cumsum(x)) / (t + 1), 1.0)
    var = (0.25 + np.cumsum((x - mu) ** 2)) / (t + 1)
    var_before = np.append(0.25, var[:-1])
    return np.sqrt(2.0 * math.log(1.0 / alpha) / (t * np.log1p(t) * var_before))


def betting_cs(values: ArrayLike, low: float = 0.0, high: float = 1.0,
               confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The hedged-capital betting CS for the mean of values known to lie in ``[low,
    high]``, after each value: ``(lower, upper)`` arrays in the values' units.

    For each candidate mean m on a grid, two gamblers bet that the mean is above m and
    below m; the candidate leaves the CS once the larger of their half-capitals reaches
    ``1/alpha`` (Ville's inequality bounds that chance by alpha when m is the mean).

    >>> lo, hi = betting_cs([0.2, 0.9, 0.5, 0.7] * 25)
    >>> bool(lo[-1] < 0.575 < hi[-1]) and bool(hi[-1] - lo[-1] < hi[9] - lo[9])
    True

    Raises:
        ValueError: a value outside ``[low, high]``, or bounds that are not low < high.
    """
    check_confidence(confidence)
    raw = as_finite_1d(values, "values")
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"bounds must be finite with low < high, got [{low}, {high}].")
    if raw.min() < low or raw.max() > high:
        raise ValueError(f"a value lies outside the bounds [{low:g}, {high:g}] "
                         f"(seen {raw.min():g} to {raw.max():g}); widen the bounds.")
    x = (raw - low) / (high - low)
    alpha = 1.0 - confidence
    theta = 0.5
    grid = np.arange(0, 1 + 1 / _BREAKS, step=1 / _BREAKS)[:, None]  # the reference's grid
    bets = _predictable_bets(x, alpha * theta)[None, :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        up = np.cumprod(1 + np.minimum(bets, _TRUNCATION / grid) * (x - grid), axis=1)
        down = np.cumprod(1 - np.minimum(bets, _TRUNCATION / (1 - grid)) * (x - grid), axis=1)
    capital = np.maximum(theta * np.nan_to_num(up), (1 - theta) * np.nan_to_num(down))
    inside = capital <= 1.0 / alpha
    anyin = inside.any(axis=0)
    first = np.argmax(inside, axis=0)
    last = inside.shape[0] - 1 - np.argmax(inside[::-1], axis=0)
    g = grid[:, 0]
    lo = np.where(anyin, np.maximum(0.0, g[first] - 1 / _BREAKS), 0.0)
    hi = np.where(anyin, np.minimum(1.0, g[last] + 1 / _BREAKS), 1.0)
    lo, hi = np.maximum.accumulate(lo), np.minimum.accumulate(hi)
    return low + (high - low) * lo, low + (high - low) * hi


def cs_summary(lower: np.ndarray, upper: np.ndarray, confidence: float = 0.95
               ) -> dict[str, Any]:
    """The last look of a CS as JSON: ``{"ci", "width", "kind"}``."""
    lo, hi = float(lower[-1]), float(upper[-1])
    return {"ci": [lo, hi], "width": hi - lo,
            "kind": f"{round(confidence * 100)}% anytime-valid"}
