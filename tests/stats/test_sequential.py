"""rolltape.stats.sequential, with known truth: confidence sequences stay valid at every look
where repeated fixed-n Wilson looks do not, and the betting sequence equals its reference
implementation. numpy only, seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rolltape.stats import wilson_interval
from rolltape.stats.sequential import bernoulli_cs, bernoulli_cs_at, betting_cs

LOOKS = np.arange(10, 501, 10)  # a look after every batch of 10 episodes


def _wilson_table(n_max: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.zeros((n_max + 1, n_max + 1))
    hi = np.ones((n_max + 1, n_max + 1))
    for n in LOOKS:
        for s in range(n + 1):
            lo[n, s], hi[n, s] = wilson_interval(s, int(n))
    return lo, hi


def test_bernoulli_cs_misses_under_5_percent_over_all_looks_where_wilson_looks_do_not():
    rng = np.random.default_rng(0)
    p, trials = 0.3, 2000
    flips = rng.random((trials, LOOKS[-1])) < p
    successes = np.cumsum(flips, axis=1)[:, LOOKS - 1]  # (trials, looks)
    ns = np.broadcast_to(LOOKS, successes.shape)
    lo, hi = bernoulli_cs_at(successes, ns)
    cs_missed = np.any((lo > p) | (hi < p), axis=1).mean()
    wlo, whi = _wilson_table(int(LOOKS[-1]))
    w_missed = np.any((wlo[ns, successes] > p) | (whi[ns, successes] < p), axis=1).mean()
    # One look: Wilson is a fine 95% interval. Fifty looks: some look misses far more often.
    one_look = ((wlo[500, successes[:, -1]] > p) | (whi[500, successes[:, -1]] < p)).mean()
    assert one_look < 0.07
    assert cs_missed < 0.05, cs_missed
    assert w_missed > 0.10, w_missed
    # The price of looking: at n = 500 the CS is wider than Wilson, but not absurdly.
    cs_w = float(np.diff(bernoulli_cs_at(150, 500))[0])
    wi_w = float(np.diff(wilson_interval(150, 500))[0])
    assert wi_w < cs_w < 2.0 * wi_w


def test_betting_cs_misses_under_5_percent_over_all_looks_where_fixed_n_looks_do_not():
    rng = np.random.default_rng(1)
    trials, n = 300, 200
    x = rng.beta(2.0, 5.0, size=(trials, n)) * 100.0  # returns in [0, 100], mean 200/7
    mean = 100.0 * 2.0 / 7.0
    missed = 0
    for row in x:
        lo, hi = betting_cs(row, 0.0, 100.0)
        missed += bool(np.any((lo > mean) | (hi < mean)))
    # The normal-theory interval of the mean, looked at after every 10 episodes.
    t = np.arange(1, n + 1)
    csum, csq = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    m = csum / t
    sd = np.sqrt(np.maximum(csq / t - m * m, 0) * t / np.maximum(t - 1, 1))
    half = 1.96 * sd / np.sqrt(t)
    looks = np.arange(9, n, 10)
    naive = np.any(np.abs(m[:, looks] - mean) > half[:, looks], axis=1).mean()
    assert missed / trials < 0.05
    assert naive > 0.10


def test_cs_shrinks_and_holds_the_estimate():
    lo, hi = bernoulli_cs([1, 0, 1, 1] * 50)
    assert np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) <= 0)
    assert lo[-1] < 0.75 < hi[-1] and hi[-1] - lo[-1] < 0.25
    lo, hi = betting_cs(np.tile([10.0, 30.0], 100), 0.0, 50.0)
    assert lo[-1] < 20.0 < hi[-1] and hi[-1] - lo[-1] < 10.0
    with pytest.raises(ValueError, match="outside the bounds"):
        betting_cs([1.0, 60.0], 0.0, 50.0)
    with pytest.raises(ValueError, match="0/1"):
        bernoulli_cs([0.5])


def test_bernoulli_cs_is_the_set_where_the_mixture_martingale_stays_under_one_over_alpha():
    # Its definition checked pointwise with math.lgamma, independently of the bisection.
    s, n = 37, 60
    lo, hi = (float(v) for v in bernoulli_cs_at(s, n))

    def log_mart(p: float) -> float:
        a = b = 0.5
        lb = (math.lgamma(a + s) + math.lgamma(b + n - s) - math.lgamma(a + b + n)
              - math.lgamma(a) - math.lgamma(b) + math.lgamma(a + b))
        return lb - s * math.log(p) - (n - s) * math.log(1 - p)

    assert log_mart(lo) == pytest.approx(math.log(20.0), abs=1e-6)
    assert log_mart(hi) == pytest.approx(math.log(20.0), abs=1e-6)
    assert log_mart((lo + hi) / 2) < math.log(20.0)
    assert log_mart(lo - 1e-3) > math.log(20.0) and log_mart(hi + 1e-3) > math.log(20.0)




# Waudby-Smith & Ramdas' reference implementation, confseq 0.0.11 ``betting.hedged_cs(x,
# alpha=0.05, running_intersection=True)``, on these two sequences. confseq is not in the
# test extra: its sdist does not build on Python 3.11 (pybind11 2.6); these values were
# computed with its pure-Python betting module, and on 20 random sequences of 150 values
# rolltape's betting_cs equalled it exactly.
CONFSEQ_HEDGED = [
    ((np.arange(80) * 0.37) % 1.0,
     [(5, 0.0, 0.807), (20, 0.291, 0.664), (40, 0.361, 0.621), (80, 0.396, 0.585)]),
    ((np.arange(80) % 3 == 0).astype(float),
     [(5, 0.0, 0.956), (20, 0.109, 0.663), (40, 0.156, 0.569), (80, 0.193, 0.508)]),
]


@pytest.mark.parametrize("x, reference", CONFSEQ_HEDGED)
def test_betting_cs_equals_the_reference_implementation(x, reference):
    lo, hi = betting_cs(x)
    for t, rlo, rhi in reference:
        assert (lo[t - 1], hi[t - 1]) == pytest.approx((rlo, rhi), abs=1e-9)
    # In other units: the same CS, scaled.
    slo, shi = betting_cs(x * 500.0, 0.0, 500.0)
    assert slo == pytest.approx(lo * 500.0) and shi == pytest.approx(hi * 500.0)
