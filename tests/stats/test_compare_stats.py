"""Paired statistics and suite aggregates of rolltape.stats, checked on fixed data against
independent implementations installed for the tests only: scipy (Mann-Whitney U, the
binomial test), statsmodels (exact McNemar, Wilson intervals) and rliable (aggregates,
stratified bootstrap, performance profiles; bootstrap intervals within Monte Carlo
tolerance, since the two draw different resamples)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from rolltape import stats

RNG = np.random.default_rng(12345)
A = RNG.normal(10.0, 3.0, size=40).round(1)  # rounded: ties happen, as with real returns
B = (A - RNG.normal(1.0, 2.0, size=40)).round(1)


@pytest.mark.parametrize("x, y", [(A, B), (B, A), (A, A), ([1, 2, 2, 3], [2, 2, 2, 2]),
                                  (np.arange(7.0), np.arange(5.0) + 0.5)])
def test_probability_of_improvement_is_mann_whitney_u_over_nm(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    u = sps.mannwhitneyu(x, y, alternative="greater").statistic
    got = stats.probability_of_improvement(x, y, paired=x.size == y.size)
    assert got["p"] == pytest.approx(u / (x.size * y.size), abs=1e-12)
    lo, hi = got["ci"]
    assert lo <= got["p"] <= hi


def test_probability_of_improvement_matches_rliable_and_its_interval_is_a_bootstrap():
    from rliable import metrics

    got = stats.probability_of_improvement(A, B, paired=False, n_resamples=4000, seed=3)
    assert got["p"] == pytest.approx(metrics.probability_of_improvement(A[:, None], B[:, None]))
    # The same bootstrap written the slow way: resample, then scipy's U on each resample.
    rng = np.random.default_rng(0)
    slow = [sps.mannwhitneyu(A[rng.integers(0, 40, 40)], B[rng.integers(0, 40, 40)],
                             alternative="greater").statistic / 1600 for _ in range(600)]
    assert got["ci"] == pytest.approx(np.quantile(slow, [0.025, 0.975]), abs=0.03)
    paired = stats.probability_of_improvement(A, B, paired=True, n_resamples=4000, seed=3)
    rng = np.random.default_rng(1)
    slow = []
    for _ in range(600):
        i = rng.integers(0, 40, 40)
        slow.append(sps.mannwhitneyu(A[i], B[i], alternative="greater").statistic / 1600)
    assert paired["ci"] == pytest.approx(np.quantile(slow, [0.025, 0.975]), abs=0.03)


OUTCOMES = [
    ([1] * 12 + [0] * 3 + [1] * 20 + [0] * 5, [0] * 12 + [1] * 3 + [1] * 20 + [0] * 5),
    ([1, 0, 1, 1, 0, 1, 0, 0, 1, 1], [1, 0, 0, 1, 0, 1, 1, 0, 0, 0]),
    ([1] * 10, [1] * 10),  # no discordant pair
    ([1] * 7 + [0], [0] * 7 + [0]),
]


@pytest.mark.parametrize("a, b", OUTCOMES)
def test_mcnemar_exact_matches_statsmodels_and_scipy_binomtest(a, b):
    got = stats.mcnemar_exact(a, b)
    table = [[got["both"], got["only_a"]], [got["only_b"], got["neither"]]]
    assert got["pvalue"] == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
    k = got["only_a"] + got["only_b"]
    if k:
        assert got["pvalue"] == pytest.approx(
            sps.binomtest(got["only_a"], k, 0.5).pvalue, rel=1e-12)
    assert got["n_pairs"] == len(a)


def test_mcnemar_leaves_unknown_outcomes_out():
    got = stats.mcnemar_exact([True, None, False, True], [False, True, None, True])
    assert (got["n_pairs"], got["dropped"], got["only_a"], got["both"]) == (2, 2, 1, 1)


def _newcombe_from_statsmodels(a, b, c, d):
    """Method 10 written from statsmodels' Wilson intervals (Newcombe 1998, eq. for
    delta and epsilon, phi corrected as the method says)."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = proportion_confint(a + b, n, method="wilson")
    l2, u2 = proportion_confint(a + c, n, method="wilson")
    cross = a * d - b * c
    cross = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0)
    den = (a + b) * (c + d) * (a + c) * (b + d)
    phi = cross / math.sqrt(den) if den else 0.0
    lo = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    hi = p1 - p2 + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    return lo, hi


@pytest.mark.parametrize("table", [(59, 6, 16, 80), (1, 1, 7, 12), (20, 12, 3, 5),
                                   (10, 0, 0, 0), (0, 3, 0, 7), (4, 4, 4, 4)])
def test_newcombe_method_10(table):
    got = stats.newcombe_paired_interval(*table)
    assert got == pytest.approx(_newcombe_from_statsmodels(*table), abs=1e-9)
    diff = (table[1] - table[2]) / sum(table)
    assert -1 <= got[0] <= diff <= got[1] <= 1


def test_newcombe_reproduces_the_published_example():
    # Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables", ch. 8:
    # a = 59, b = 6, c = 16, d = 80 -> -0.0621 (95% CI -0.1186 to -0.0046).
    lo, hi = stats.newcombe_paired_interval(59, 6, 16, 80)
    assert (round(lo, 4), round(hi, 4)) == (-0.1186, -0.0046)


def test_verdicts_say_better_worse_or_underpowered():
    better = stats.paired_comparison(A, B, a_name="new", b_name="old")
    assert better["returns"]["verdict"] == "better"
    assert better["returns"]["sentence"].startswith("new is better than old")
    worse = stats.paired_comparison(B, A, a_name="old", b_name="new")
    assert worse["returns"]["verdict"] == "worse"
    noise = RNG.normal(0, 5, size=8)
    same = stats.paired_comparison(noise + 0.1, noise[::-1], a_name="x", b_name="y")
    r = same["returns"]
    assert r["verdict"] == "no detectable difference"
    assert "Underpowered: 8 paired episodes" in r["sentence"]
    # The detectable difference is the planning formula on the spread of the differences.
    spread = np.std((noise + 0.1) - noise[::-1], ddof=1)
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    assert r["minimum_detectable_difference"] == pytest.approx(z * spread / math.sqrt(8))
    json.dumps(same, allow_nan=False)
    # Identical returns on every seed (random against the random baseline): said plainly,
    # not as an underpowered test that "detects differences of about 0".
    tie = stats.paired_comparison(noise, noise, a_name="x", b_name="y")["returns"]
    assert tie["verdict"] == "no detectable difference"
    assert tie["sentence"] == "No difference between x and y: the same return on each of the 8 " \
        "paired seeds."


def test_success_verdict_uses_mcnemar_and_newcombe():
    a, b = OUTCOMES[0]
    got = stats.paired_comparison(A, B, a, b)["success"]
    assert got["only_a"] == 12 and got["only_b"] == 3
    assert got["verdict"] == "better" and got["pvalue"] < 0.05
    assert got["diff_ci"] == list(stats.newcombe_paired_interval(20, 12, 3, 5))
    flat = stats.paired_comparison(A, B, *OUTCOMES[2])["success"]
    assert flat["verdict"] == "no detectable difference" and "Underpowered" in flat["sentence"]
    assert flat["minimum_detectable_difference"] > 0
    assert stats.paired_comparison(A, B, [None] * 40, [None] * 40)["success"] is None


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
