"""rolltape.stats.aggregates: success over groups, and suite aggregates (IQM, optimality gap,
performance profiles, probability of improvement) against rliable: point estimates equal,
stratified bootstrap intervals within Monte Carlo tolerance, since the two draw different
resamples."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import assert_plain_json

from rolltape import stats
from rolltape.stats import aggregate, wilson_interval

RNG = np.random.default_rng(12345)
RNG.normal(size=80)  # the draws the paired tests' data took from this generator before
SCORES = RNG.gamma(2.0, 0.4, size=(12, 5))  # 12 episodes x 5 tasks, normalized scores
PER_TASK = {f"task{t}": SCORES[:, t] for t in range(SCORES.shape[1])}


@pytest.fixture
def rliable_library():
    """rliable's bootstrap CIs (rliable 1.2 with arch 7: see the test extra's pins)."""
    from rliable import library

    return library


def test_aggregate_point_estimates_equal_rliable():
    from rliable import metrics

    got = stats.aggregate_scores(PER_TASK, n_resamples=10)
    assert got["iqm"]["value"] == pytest.approx(metrics.aggregate_iqm(SCORES))
    assert got["mean"]["value"] == pytest.approx(metrics.aggregate_mean(SCORES))
    assert got["median"]["value"] == pytest.approx(metrics.aggregate_median(SCORES))
    assert got["optimality_gap"]["value"] == pytest.approx(
        metrics.aggregate_optimality_gap(SCORES))


def test_stratified_bootstrap_intervals_agree_with_rliable_within_monte_carlo_error(
        rliable_library):
    from rliable import metrics

    library = rliable_library

    def all_four(x):
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x),
                         metrics.aggregate_median(x), metrics.aggregate_optimality_gap(x)])

    reps = 3000
    np.random.seed(7)  # rliable draws its resamples from numpy's global generator
    _, ci = library.get_interval_estimates({"p": SCORES}, all_four, reps=reps)
    ours = stats.aggregate_scores(PER_TASK, n_resamples=reps, seed=7)
    for k, name in enumerate(("iqm", "mean", "median", "optimality_gap")):
        # Monte Carlo error of a 2.5% quantile from 3000 resamples is well under 10% of
        # the interval's width; both bootstraps must land there.
        width = ci["p"][1, k] - ci["p"][0, k]
        assert ours[name]["ci"] == pytest.approx([ci["p"][0, k], ci["p"][1, k]],
                                                 abs=0.12 * width), name


def test_performance_profile_matches_rliable(rliable_library):
    library = rliable_library

    taus = np.linspace(0.0, 2.0, 9)
    np.random.seed(11)
    profiles, cis = library.create_performance_profile({"p": SCORES}, taus, reps=2000)
    ours = stats.performance_profile(PER_TASK, taus, n_resamples=2000)
    assert ours["fraction"] == pytest.approx(profiles["p"])
    width = np.maximum(cis["p"][1] - cis["p"][0], 0.05)
    assert np.all(np.abs(np.array(ours["ci_low"]) - cis["p"][0]) <= 0.25 * width + 1e-9)
    assert np.all(np.abs(np.array(ours["ci_high"]) - cis["p"][1]) <= 0.25 * width + 1e-9)


def test_unequal_task_sizes_resample_within_each_task():
    per_task = {"long": np.linspace(0, 1, 30), "short": np.array([5.0, 5.0])}
    got = stats.aggregate_scores(per_task, n_resamples=500)
    # "short" never varies, so the mean of task means varies only through "long".
    assert got["mean"]["ci"][1] - got["mean"]["ci"][0] < 0.25
    assert got["median"]["value"] == pytest.approx((0.5 + 5.0) / 2)


def test_normalize_scores_and_refusals():
    assert stats.normalize_scores([1.0, 3.0], 1.0, 3.0).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="two different"):
        stats.normalize_scores([1.0], 2.0, 2.0)
    with pytest.raises(ValueError, match="one return per seed"):
        stats.paired_comparison([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="paired samples"):
        stats.probability_of_improvement([1.0, 2.0], [1.0])


def test_suite_probability_of_improvement_matches_rliable(rliable_library):
    from rliable import metrics

    x, y = SCORES[:, :3], SCORES[:, 1:4]
    ours = stats.suite_probability_of_improvement(
        {f"t{k}": x[:, k] for k in range(3)}, {f"t{k}": y[:, k] for k in range(3)},
        paired=False, n_resamples=2000, seed=2)
    assert ours["p"] == pytest.approx(metrics.probability_of_improvement(x, y))
    np.random.seed(5)
    _, ci = rliable_library.get_interval_estimates(
        {"xy": [x, y]}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
        reps=800)
    width = ci["xy"][1, 0] - ci["xy"][0, 0]
    assert ours["ci"] == pytest.approx([ci["xy"][0, 0], ci["xy"][1, 0]], abs=0.15 * width)


# --------------------------------------------------------------------------- aggregate


def test_aggregate_per_group_and_pooled() -> None:
    out = aggregate(
        {
            "reach": [True, True, True, False],
            "push": [False, None, False, True, None],
            "sensorless": [None, None],
        }
    )
    assert_plain_json(out)
    json.dumps(out, allow_nan=False)
    assert list(out) == ["reach", "push", "sensorless", "overall"]

    assert out["reach"] == {
        "success_count": 3,
        "n": 4,
        "n_unknown": 0,
        "success_rate": 0.75,
        "success_ci": list(wilson_interval(3, 4)),
    }
    assert out["push"]["success_count"] == 1
    assert out["push"]["n"] == 3
    assert out["push"]["n_unknown"] == 2
    assert out["push"]["success_ci"] == list(wilson_interval(1, 3))
    assert out["sensorless"] == {
        "success_count": None,
        "n": 0,
        "n_unknown": 2,
        "success_rate": None,
        "success_ci": None,
    }

    overall = out["overall"]
    assert overall["success_count"] == 4
    assert overall["n"] == 7
    assert overall["n_unknown"] == 4
    assert overall["success_rate"] == pytest.approx(4 / 7)
    assert overall["success_ci"] == list(wilson_interval(4, 7))
    assert overall["mean_group_rate"] == pytest.approx((0.75 + 1 / 3) / 2)


def test_aggregate_all_unknown_is_json_safe() -> None:
    out = aggregate({"a": [None], "b": []})
    assert out["overall"]["success_rate"] is None
    assert out["overall"]["mean_group_rate"] is None
    json.dumps(out, allow_nan=False)


def test_aggregate_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no groups"):
        aggregate({})
    with pytest.raises(ValueError, match="reserved"):
        aggregate({"overall": [True]})
    with pytest.raises(ValueError, match="position 1"):
        aggregate({"a": [True, 2]})  # type: ignore[list-item]
