"""rolltape.stats.intervals: Wilson intervals, IQM, the percentile bootstrap and an
episode summary, against published values, hand computations and plain-JSON output."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
from tests.conftest import assert_plain_json

from rolltape.stats import (
    Summary,
    bootstrap_ci,
    iqm,
    mean_of_rates,
    success_percent,
    summarize,
    wilson_interval,
)

# --------------------------------------------------------------------------- helpers


def reference_trim_mean_25(values: list[float]) -> float:
    """scipy.stats.trim_mean(values, 0.25) written out in pure Python (no numpy, no scipy)."""
    ordered = sorted(values)
    k = int(0.25 * len(ordered))
    return statistics.fmean(ordered[k : len(ordered) - k])


# --------------------------------------------------------------------------- wilson


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # Values quoted in the brief / textbooks.
        (8, 10, (0.4902, 0.9433)),
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        # Newcombe (1998), Stat. Med. 17:857-872, Table I, method 3 (score, no correction).
        (81, 263, (0.2553, 0.3662)),
        (15, 148, (0.0624, 0.1605)),
        (0, 20, (0.0, 0.1611)),
        (1, 29, (0.0061, 0.1718)),
    ],
)
def test_wilson_matches_published_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(expected[0], abs=5e-5)
    assert hi == pytest.approx(expected[1], abs=5e-5)


def test_wilson_is_exact_at_the_edges() -> None:
    for n in (1, 2, 7, 10, 1000):
        assert wilson_interval(0, n)[0] == 0.0
        assert wilson_interval(n, n)[1] == 1.0
        # Closed forms at the edges: upper(0/n) = z^2/(n+z^2), lower(n/n) = n/(n+z^2).
        for confidence, z in ((0.95, 1.959963984540054), (0.99, 2.5758293035489004)):
            assert wilson_interval(0, n, confidence)[1] == pytest.approx(z * z / (n + z * z), rel=1e-12)
            assert wilson_interval(n, n, confidence)[0] == pytest.approx(n / (n + z * z), rel=1e-12)


def test_wilson_bounds_are_ordered_and_inside_unit_interval() -> None:
    for n in range(1, 40):
        for s in range(n + 1):
            lo, hi = wilson_interval(s, n)
            assert 0.0 <= lo <= s / n <= hi <= 1.0


def test_wilson_other_confidences_use_inverse_normal() -> None:
    # Wider for higher confidence; 0.6827 is ~one sigma.
    w90 = wilson_interval(30, 100, 0.90)
    w95 = wilson_interval(30, 100, 0.95)
    w99 = wilson_interval(30, 100, 0.99)
    assert w99[0] < w95[0] < w90[0] < 0.3 < w90[1] < w95[1] < w99[1]
    lo, hi = wilson_interval(50, 100, 0.6826894921370859)  # z = 1 exactly
    p, n, z = 0.5, 100, 1.0
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert lo == pytest.approx(0.5 - half, abs=1e-12)
    assert hi == pytest.approx(0.5 + half, abs=1e-12)


def test_wilson_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="n is 0"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(-1, 10)
    with pytest.raises(ValueError, match="integers"):
        wilson_interval(2.5, 10)  # type: ignore[arg-type]
    for bad in (0.0, 1.0, 95, float("nan"), True):
        with pytest.raises(ValueError, match="confidence"):
            wilson_interval(5, 10, bad)  # type: ignore[arg-type]


def test_wilson_accepts_numpy_integers() -> None:
    assert wilson_interval(np.int64(8), np.int32(10)) == wilson_interval(8, 10)


# --------------------------------------------------------------------------- iqm


def test_iqm_hand_computed() -> None:
    # n = 8: drop 2 from each end -> mean(3, 4, 5, 6) = 4.5; the outlier 100 is ignored.
    assert iqm([7, 100, 3, 1, 5, 2, 6, 4]) == 4.5
    # n = 5: floor(1.25) = 1 dropped from each end -> mean(10, 20, 30) = 20.
    assert iqm([1000, 0, 20, 30, 10]) == 20.0
    # n = 0..19: drop 5 from each end -> mean(5..14) = 9.5 (scipy.stats.trim_mean gives 9.5).
    assert iqm(list(range(20))) == 9.5
    # n < 4: nothing dropped, plain mean.
    assert iqm([1.0, 2.0, 6.0]) == 3.0
    assert iqm([4.0]) == 4.0


def test_iqm_matches_pure_python_reference() -> None:
    rng = np.random.default_rng(123)
    for n in range(1, 41):
        values = rng.standard_cauchy(n).tolist()  # heavy tails: trimming matters
        assert iqm(values) == pytest.approx(reference_trim_mean_25(values), rel=1e-12, abs=1e-12)


def test_iqm_rejects_empty_and_non_finite() -> None:
    with pytest.raises(ValueError, match="empty"):
        iqm([])
    with pytest.raises(ValueError, match="finite"):
        iqm([1.0, float("nan")])
    with pytest.raises(ValueError, match="finite"):
        iqm([1.0, float("inf")])


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_deterministic_per_seed() -> None:
    values = np.random.default_rng(0).normal(10.0, 3.0, size=50)
    a = bootstrap_ci(values, np.mean, seed=7)
    b = bootstrap_ci(values, np.mean, seed=7)
    c = bootstrap_ci(values, np.mean, seed=8)
    assert a == b
    assert a != c


def test_bootstrap_matches_explicit_percentile_bootstrap() -> None:
    values = np.random.default_rng(1).exponential(2.0, size=23)
    n_resamples = 500
    idx = np.random.default_rng(3).integers(0, values.size, size=(n_resamples, values.size))
    means = np.array([values[row].mean() for row in idx])
    expected = np.quantile(means, [0.05, 0.95])
    lo, hi = bootstrap_ci(values, np.mean, confidence=0.90, n_resamples=n_resamples, seed=3)
    assert lo == pytest.approx(expected[0], rel=1e-12)
    assert hi == pytest.approx(expected[1], rel=1e-12)


def test_bootstrap_contains_point_estimate_for_well_behaved_data() -> None:
    values = np.random.default_rng(2).normal(5.0, 1.0, size=40)
    for statistic in (np.mean, np.median, iqm):
        lo, hi = bootstrap_ci(values, statistic)
        point = float(statistic(values))
        assert lo < point < hi
        assert hi - lo < 2.0  # ~4 standard errors of the mean at most


def test_bootstrap_single_value_gives_degenerate_interval() -> None:
    assert bootstrap_ci([3.25], np.mean) == (3.25, 3.25)
    assert bootstrap_ci([3.25], iqm) == (3.25, 3.25)
    assert bootstrap_ci(np.array([-1.5]), lambda x: float(np.max(x))) == (-1.5, -1.5)


def test_bootstrap_statistic_without_axis_falls_back_to_rows() -> None:
    values = np.random.default_rng(4).normal(size=15)
    vectorised = bootstrap_ci(values, np.mean, seed=5)
    row_by_row = bootstrap_ci(values, lambda x: float(np.mean(x)), seed=5)
    assert row_by_row == pytest.approx(vectorised, rel=1e-12)
    # iqm is routed to its vectorised twin; the row-by-row result must agree with it.
    via_iqm = bootstrap_ci(values, iqm, seed=5)
    via_lambda = bootstrap_ci(values, lambda x: iqm(x), seed=5)
    assert via_iqm == pytest.approx(via_lambda, rel=1e-12)


def test_bootstrap_coverage_is_roughly_nominal() -> None:
    # Percentile bootstrap of the mean of n=30 normals: coverage close to 95% (a bit under).
    rng = np.random.default_rng(99)
    hits = 0
    trials = 300
    for t in range(trials):
        sample = rng.normal(0.0, 1.0, size=30)
        lo, hi = bootstrap_ci(sample, np.mean, n_resamples=1000, seed=t)
        hits += lo <= 0.0 <= hi
    assert 0.88 <= hits / trials <= 0.99


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="empty"):
        bootstrap_ci([], np.mean)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([1.0, 2.0], np.mean, n_resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], np.mean, confidence=1.5)
    with pytest.raises(ValueError, match="non-finite|NaN"):
        bootstrap_ci([1.0, 2.0], lambda x: float("nan"))


# --------------------------------------------------------------------------- summarize


def test_summarize_basic_fields() -> None:
    returns = [1.0, 2.0, 3.0, 4.0, 100.0]
    s = summarize(returns)
    assert s.n == 5
    assert s.mean == 22.0
    assert s.std == pytest.approx(float(np.std(returns)))  # ddof=0, like SB3 / Gymnasium
    assert s.std != pytest.approx(float(np.std(returns, ddof=1)))
    assert (s.min, s.max, s.median) == (1.0, 100.0, 3.0)
    assert s.iqm == 3.0  # drops 1 and 100
    assert s.mean_ci[0] <= s.mean <= s.mean_ci[1]
    assert s.iqm_ci[0] <= s.iqm <= s.iqm_ci[1]
    assert s.mean_ci == bootstrap_ci(returns, np.mean, seed=0)
    assert s.iqm_ci == bootstrap_ci(returns, iqm, seed=0)
    assert (s.success_count, s.success_rate, s.success_ci) == (None, None, None)


def test_summarize_is_frozen() -> None:
    s = summarize([1.0, 2.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.mean = 0.0  # type: ignore[misc]


def test_summarize_successes_all_known() -> None:
    s = summarize([0.0] * 10, successes=[True] * 8 + [False] * 2)
    assert s.success_count == 8
    assert s.success_rate == 0.8
    assert s.success_ci == wilson_interval(8, 10)


def test_summarize_successes_partially_unknown_counts_known_only() -> None:
    flags = [True, None, False, True, None, np.bool_(True), 1.0, 0]
    s = summarize(list(range(8)), successes=flags)
    # known: True, False, True, True, 1.0, 0 -> 4 of 6
    assert s.success_count == 4
    assert s.success_rate == pytest.approx(4 / 6)
    assert s.success_ci == wilson_interval(4, 6)


def test_summarize_all_none_successes_means_not_reported() -> None:
    s = summarize([1.0, 2.0, 3.0], successes=[None, None, None])
    assert (s.success_count, s.success_rate, s.success_ci) == (None, None, None)
    d = s.to_dict()
    assert d["success_rate"] is None and d["success_ci"] is None and d["success_count"] is None
    json.dumps(d, allow_nan=False)


def test_summarize_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="3 entries but returns has 2"):
        summarize([1.0, 2.0], successes=[True, False, True])
    with pytest.raises(ValueError, match="position 1"):
        summarize([1.0, 2.0], successes=[True, "yes"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="position 0"):
        summarize([1.0], successes=[0.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="empty"):
        summarize([])
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("nan")])


def test_to_dict_is_plain_json_for_single_episode() -> None:
    s = summarize(np.array([np.float32(2.5)]), successes=[np.bool_(True)])
    d = s.to_dict()
    assert_plain_json(d)
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back == d
    assert d["n"] == 1 and d["std"] == 0.0
    assert d["mean_ci"] == [2.5, 2.5] and d["iqm_ci"] == [2.5, 2.5]
    assert d["success_count"] == 1 and d["success_rate"] == 1.0
    assert d["success_ci"][1] == 1.0
    assert set(d) == {f.name for f in dataclasses.fields(Summary)}


def test_to_dict_replaces_non_finite_with_none() -> None:
    # summarize() never produces these, but Summary is public: to_dict() must hold its promise.
    nan, inf = float("nan"), float("inf")
    s = Summary(
        n=np.int64(2),  # type: ignore[arg-type]
        mean=nan,
        std=inf,
        min=-inf,
        max=np.float64(1.0),  # type: ignore[arg-type]
        median=np.float32(0.5),  # type: ignore[arg-type]
        iqm=nan,
        iqm_ci=(nan, 1.0),
        mean_ci=(-inf, inf),
        success_count=np.int64(1),  # type: ignore[arg-type]
        success_rate=nan,
        success_ci=(0.0, nan),
    )
    d = s.to_dict()
    assert_plain_json(d)
    json.dumps(d, allow_nan=False)
    assert d["mean"] is None and d["std"] is None and d["min"] is None and d["iqm"] is None
    assert d["max"] == 1.0 and d["median"] == 0.5 and d["n"] == 2 and d["success_count"] == 1
    assert d["iqm_ci"] == [None, 1.0] and d["mean_ci"] == [None, None]
    assert d["success_rate"] is None and d["success_ci"] == [0.0, None]


def test_to_dict_plain_types_for_numpy_inputs() -> None:
    rng = np.random.default_rng(5)
    s = summarize(rng.normal(size=17).astype(np.float32), successes=list(rng.random(17) > 0.5))
    assert_plain_json(s.to_dict())


# --------------------------------------------------------------------------- LeRobot's success numbers


def test_wilson_matches_the_formula_and_lerobots_example():
    z = 1.959963984540054
    for s, n in [(0, 5), (3, 7), (9, 10), (2, 4), (25, 25)]:
        p = s / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        lo, hi = wilson_interval(s, n)
        assert lo == pytest.approx(max(0.0, centre - half), abs=1e-15)
        assert hi == pytest.approx(min(1.0, centre + half), abs=1e-15)
    out = success_percent([True] * 9 + [False])
    assert (out["n_episodes"], out["n_success"], out["pc_success"]) == (10, 9, 90.0)
    assert [round(b, 2) for b in out["pc_success_ci95"]] == [59.58, 98.21]
    assert success_percent([None, None])["pc_success_ci95"] is None


def test_mean_of_task_rates_weighs_each_task_once():
    big, small = [True] * 90 + [False] * 10, [False] * 2
    out = mean_of_rates([big, small, [None]])
    assert out["n_tasks"] == 2 and out["pc_mean_task_success"] == pytest.approx(45.0)
    lo, hi = out["pc_mean_task_success_ci95"]
    assert lo <= 45.0 <= hi and out == mean_of_rates([big, small, [None]])  # deterministic
    assert success_percent(big + small)["pc_success"] == pytest.approx(90 / 102 * 100)
