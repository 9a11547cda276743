"""Shared parts of rolltape.stats: input checks, JSON-safe numbers, the z of an interval.
Its names are public because the other stats modules use them; the module itself is not part
of rolltape.stats' API (hence ``_core``).

May import: numpy, the standard library, and the other modules of rolltape.stats.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

# the published reference values are reproduced digit for digit.
_Z_95 = 1.959963984540054

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000


# --------------------------------------------------------------------------- helpers


def z_for(confidence: float) -> float:
    """Two-sided standard-normal critical value for ``confidence`` (e.g. 0.95 -> 1.96)."""
    check_confidence(confidence)
    if confidence == 0.95:
        return _Z_95
    # The stdlib's inverse CDF (Wichura's AS241) is accurate to ~1e-16; no scipy needed.
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def check_confidence(confidence: float) -> None:
    """Refuse, in one sentence, a confidence that is not a number strictly between 0 and 1."""
    # numbers.Real admits numpy floats; bool is excluded because True/False is surely a typo.
    if isinstance(confidence, bool) or not (
        isinstance(confidence, numbers.Real) and 0.0 < float(confidence) < 1.0
    ):
        raise ValueError(
            f"confidence must be a number strictly between 0 and 1 (e.g. 0.95), got {confidence!r}."
        )


def as_finite_1d(values: ArrayLike, what: str) -> np.ndarray:
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


def json_float(x: Any) -> float | None:
    """A plain Python float, or None where JSON has no number for it (NaN, +-inf)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def json_pair(pair: tuple[float, float] | None) -> list[float | None] | None:
    """An interval as a JSON-safe ``[low, high]`` (see :func:`json_float`), None for none."""
    if pair is None:
        return None
    return [json_float(pair[0]), json_float(pair[1])]


def parse_outcome(value: Any, index: int) -> bool | None:
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


def count_outcomes(outcomes: Sequence[Any], what: str) -> tuple[int, int, int]:
    """(successes, known, unknown) for a sequence of success flags."""
    if isinstance(outcomes, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of True/False/None, not a string.")
    successes = known = unknown = 0
    for i, value in enumerate(outcomes):
        flag = parse_outcome(value, i)
        if flag is None:
            unknown += 1
        else:
            known += 1
            successes += int(flag)
    return successes, known, unknown


def trim_mean_rows(values: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean along ``axis`` (vectorised form of :func:`iqm`)."""
    arr = np.sort(np.asarray(values, dtype=float), axis=axis)
    n = arr.shape[axis]
    # Same cut as scipy.stats.trim_mean(…, 0.25): int() floors, so n = 5 cuts one from each
    # end (keeps 3) and n < 4 cuts nothing. rliable computes its IQM exactly this way.
    k = int(0.25 * n)
    kept = np.take(arr, np.arange(k, n - k), axis=axis)
    return np.mean(kept, axis=axis)
