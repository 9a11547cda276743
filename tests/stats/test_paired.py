"""rolltape.stats.paired: policies compared on the same seeds, checked on fixed data against
independent implementations installed for the tests only: scipy (Mann-Whitney U, the
binomial test), statsmodels (exact McNemar, Wilson intervals) and rliable (probability of
improvement)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint
from tests.conftest import assert_plain_json

from rolltape import stats
from rolltape.stats import paired_improvement

RNG = np.random.default_rng(12345)
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


# --------------------------------------------------------------------------- paired


def test_paired_improvement_sign_and_ci() -> None:
    rng = np.random.default_rng(11)
    # Seed difficulty varies a lot; the policy is uniformly ~1 better on each seed.
    baseline = rng.normal(50.0, 20.0, size=30)
    policy = baseline + 1.0 + rng.normal(0.0, 0.1, size=30)
    out = paired_improvement(policy, baseline)
    assert_plain_json(out)
    json.dumps(out, allow_nan=False)
    assert out["n_pairs"] == 30
    assert out["mean_diff"] == pytest.approx(float(np.mean(policy - baseline)))
    assert out["policy_mean"] == pytest.approx(float(np.mean(policy)))
    assert out["baseline_mean"] == pytest.approx(float(np.mean(baseline)))
    lo, hi = out["diff_ci"]
    # Pairing cancels the seed variation: the interval is tight and excludes zero.
    assert 0.0 < lo < out["mean_diff"] < hi
    assert hi - lo < 0.2
    assert out["ratio_of_means"] == pytest.approx(out["policy_mean"] / out["baseline_mean"])

    worse = paired_improvement(baseline, policy)
    assert worse["mean_diff"] == pytest.approx(-out["mean_diff"])
    assert worse["diff_ci"][1] < 0.0


def test_paired_improvement_is_deterministic_and_seeded() -> None:
    rng = np.random.default_rng(6)
    policy, baseline = rng.normal(1.0, 1.0, size=12), rng.normal(0.0, 1.0, size=12)
    a = paired_improvement(policy, baseline, seed=3)
    assert a == paired_improvement(policy.tolist(), baseline.tolist(), seed=3)
    b = paired_improvement(policy, baseline, seed=4)
    assert a["diff_ci"] != b["diff_ci"]
    assert a["mean_diff"] == b["mean_diff"]  # only the interval depends on the seed


def test_paired_improvement_ratio_only_when_meaningful() -> None:
    assert paired_improvement([-1.0, -2.0], [-3.0, -4.0])["ratio_of_means"] is None
    assert paired_improvement([1.0, 2.0], [0.0, 0.0])["ratio_of_means"] is None
    assert paired_improvement([-5.0, -5.0], [1.0, 1.0])["ratio_of_means"] is None
    assert paired_improvement([0.0, 0.0], [2.0, 2.0])["ratio_of_means"] == 0.0


def test_paired_improvement_single_pair() -> None:
    out = paired_improvement([3.0], [1.0])
    assert out["mean_diff"] == 2.0 and out["diff_ci"] == [2.0, 2.0] and out["n_pairs"] == 1
    json.dumps(out, allow_nan=False)


def test_paired_improvement_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="policy_returns has 3 episodes but baseline_returns has 2"):
        paired_improvement([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        paired_improvement([], [])
