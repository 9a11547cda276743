"""The shared parts of rolltape.stats (rolltape.stats._core): the z of an interval, the
checks every statistic runs on its input (one sentence naming what is wrong), JSON-safe
numbers, success flags, and the interquartile mean of rliable."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats as sps

from rolltape.stats._core import (
    as_finite_1d,
    check_confidence,
    count_outcomes,
    json_float,
    json_pair,
    parse_outcome,
    trim_mean_rows,
    z_for,
)


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.99, 0.999])
def test_z_is_the_two_sided_normal_critical_value(confidence: float) -> None:
    z = z_for(confidence)
    covered = NormalDist().cdf(z) - NormalDist().cdf(-z)
    assert covered == pytest.approx(confidence, abs=1e-12)
    assert z == pytest.approx(float(sps.norm.ppf(0.5 + confidence / 2)), rel=1e-12)


def test_z_of_95_percent_is_the_published_constant() -> None:
    assert z_for(0.95) == 1.959963984540054


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 95, float("nan"), True, "0.95", None])
def test_a_confidence_outside_zero_one_is_refused_with_an_example(confidence: object) -> None:
    with pytest.raises(ValueError, match=r"strictly between 0 and 1 \(e\.g\. 0\.95\)"):
        check_confidence(confidence)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        z_for(confidence)  # type: ignore[arg-type]


def test_a_numpy_confidence_is_accepted() -> None:
    check_confidence(np.float32(0.9))
    assert z_for(np.float64(0.9)) == pytest.approx(1.6448536269514722)  # type: ignore[arg-type]


def test_finite_values_come_back_as_a_float_array() -> None:
    arr = as_finite_1d([1, 2.5, np.int64(3)], "returns")
    assert arr.dtype == np.float64 and arr.tolist() == [1.0, 2.5, 3.0]


@pytest.mark.parametrize(("values", "words"), [
    ([], "returns is empty; at least one value is needed."),
    ([[1.0, 2.0], [3.0, 4.0]], "returns must be one-dimensional, got an array of shape (2, 2)."),
    ([1.0, float("nan"), float("inf"), 2.0], "returns contains 2 NaN or infinite value(s)"),
    (["a", "b"], "returns must be a sequence of numbers"),
])
def test_bad_values_are_one_sentence_naming_the_input(values: object, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        as_finite_1d(values, "returns")  # type: ignore[arg-type]
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_json_numbers_have_no_nan_or_infinity() -> None:
    assert json_float(np.float32(0.5)) == 0.5 and type(json_float(np.float32(0.5))) is float
    assert json_float(np.int64(3)) == 3.0
    assert [json_float(x) for x in (None, math.nan, math.inf, -math.inf)] == [None] * 4
    assert json_pair(None) is None
    pair = json_pair((np.float64(-1.5), math.inf))
    assert pair == [-1.5, None]
    json.dumps(pair, allow_nan=False)  # would raise on NaN or infinity


@pytest.mark.parametrize(("value", "flag"), [
    (True, True), (False, False), (np.bool_(True), True), (np.bool_(False), False),
    (1, True), (0, False), (1.0, True), (0.0, False), (np.float32(1.0), True),
    (np.int8(0), False), (None, None),
])
def test_success_flags_accept_bools_zero_one_and_none(value: object, flag: bool | None) -> None:
    assert parse_outcome(value, 0) is flag


@pytest.mark.parametrize("value", [0.5, 2, -1, "yes", "True", [1], float("nan")])
def test_other_success_flags_are_refused_with_their_position(value: object) -> None:
    with pytest.raises(ValueError, match=r"success flag at position 4 is .*True, False, 0, 1 or None"):
        parse_outcome(value, 4)


def test_outcomes_are_counted_as_successes_known_and_unknown() -> None:
    flags = [True, False, None, 1, 0.0, np.bool_(True), None]
    assert count_outcomes(flags, "successes") == (3, 5, 2)
    assert count_outcomes([], "successes") == (0, 0, 0)
    with pytest.raises(ValueError, match="position 1"):
        count_outcomes([True, "no"], "successes")


def test_a_string_of_outcomes_is_refused_not_read_letter_by_letter() -> None:
    for text in ("1010", b"10"):
        with pytest.raises(ValueError, match="successes must be a sequence of True/False/None, "
                                             "not a string"):
            count_outcomes(text, "successes")  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 10, 101])
def test_the_interquartile_mean_is_scipys_trim_mean(n: int) -> None:
    values = np.random.default_rng(n).normal(size=n) * 10
    assert float(trim_mean_rows(values)) == pytest.approx(float(sps.trim_mean(values, 0.25)),
                                                          rel=1e-12)


def test_the_interquartile_mean_of_rows_is_each_rows_own() -> None:
    rows = np.random.default_rng(0).exponential(size=(6, 9))
    out = trim_mean_rows(rows, axis=1)
    assert np.allclose(out, [sps.trim_mean(r, 0.25) for r in rows], rtol=1e-12)
    cols = trim_mean_rows(rows.T, axis=0)
    assert np.allclose(cols, out, rtol=1e-12)


def test_the_interquartile_mean_ignores_the_outer_quarters() -> None:
    # 8 values: 2 cut from each end, so the extremes cannot move it.
    assert float(trim_mean_rows(np.array([-1e9, -1e6, 1, 2, 3, 4, 1e6, 1e9]))) == 2.5
