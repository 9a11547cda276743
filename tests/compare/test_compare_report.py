"""The comparison itself (rolltape.compare.report): which pairs are compared, their per-seed
differences, the random baseline as an entry of its own, normalized aggregates against a
named reference, a learning curve over checkpoints, the two files written together, and
the lines the command prints. The runs are real and tiny: two constant policies and a
random baseline on the 5-step toy env of ``tests/assets/toy_envs.py`` (success on even
seeds). A sweep over trained checkpoints: tests/cli/test_cli_compare.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from rolltape import evaluate
from rolltape.compare.report import (
    _g,
    _gi,
    _json_safe,
    baseline_entry,
    comparison,
    summary_lines,
    write_comparison,
)
from rolltape.compare.runs import LoadedRun
from rolltape.errors import UsageError

TOY = "tests.assets.toy_envs:SuccessToy-v0"
EPISODES, SEED = 6, 3
POLICIES = """
import numpy as np

def still(obs):
    return np.zeros(1, np.float32)

def push(obs):
    return np.full(1, 0.5, np.float32)
"""


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """still (with a random baseline) and push: the same seeds; alone: still, no baseline."""
    root = tmp_path_factory.mktemp("runs")
    policies = root / "policies.py"
    policies.write_text(POLICIES)
    common: dict[str, Any] = dict(episodes=EPISODES, seed=SEED, report=False, viewer=False)
    return {"still": evaluate(TOY, f"{policies}:still", baseline="random",
                              out=root / "still", **common).path,
            "push": evaluate(TOY, f"{policies}:push", out=root / "push", **common).path,
            "alone": evaluate(TOY, f"{policies}:still", out=root / "alone", **common).path}


def load(paths: dict[str, Path], *names: str, steps: tuple[int, ...] = ()) -> list[LoadedRun]:
    return [LoadedRun.load(paths[n], n, steps[k] if steps else None)
            for k, n in enumerate(names)]


def returns(run: LoadedRun) -> dict[int, float]:
    return {k[2]: e.ret for k, e in run.rows.items()}


def test_each_run_is_paired_with_the_one_before_it_and_with_the_baseline(paths):
    result = comparison(load(paths, "still", "push"))
    assert [(p["a"], p["b"]) for p in result["pairs"]] == [
        ("push", "still"), ("still", "random"), ("push", "random")]
    assert result["seeds"] == list(range(SEED, SEED + EPISODES))
    assert result["episodes"] == EPISODES and result["tasks"] == [None]


def test_three_runs_also_pair_the_last_with_the_first(paths):
    runs = load(paths, "alone", "still", "push")
    result = comparison(runs, baseline=None)
    pairs = [(p["a"], p["b"]) for p in result["pairs"]]
    assert pairs[:3] == [("still", "alone"), ("push", "still"), ("push", "alone")]


def test_per_seed_differences_are_the_paired_returns(paths):
    still, push = load(paths, "still", "push")
    result = comparison([still, push])
    pair = result["pairs"][0]
    a, b = returns(push), returns(still)
    assert [r["seed"] for r in pair["per_seed"]] == sorted(a)
    assert [r["diff"] for r in pair["per_seed"]] == pytest.approx([a[s] - b[s] for s in sorted(a)])
    assert pair["returns"]["mean_diff"] == pytest.approx(
        sum(a[s] - b[s] for s in a) / EPISODES)
    assert "push" in pair["returns"]["sentence"] and "still" in pair["returns"]["sentence"]


def test_the_baseline_is_an_entry_of_its_own_with_the_random_returns(paths):
    [still] = load(paths, "still")
    baseline = baseline_entry([still])
    assert baseline is not None and baseline.label == "random"
    result = comparison(load(paths, "still", "push"))
    entry = next(e for e in result["entries"] if e["baseline"])
    assert entry["label"] == "random" and entry["policy"] == "random policy"
    assert sorted(entry["returns"]) == sorted(e.ret for e in still.baseline_rows.values())
    assert entry["summary"]["n"] == EPISODES
    assert [e["baseline"] for e in result["entries"]] == [False, False, True]


def test_a_run_without_a_baseline_has_no_baseline_entry(paths):
    assert baseline_entry(load(paths, "alone")) is None
    result = comparison(load(paths, "alone", "push"))
    assert not any(e["baseline"] for e in result["entries"])
    assert [(p["a"], p["b"]) for p in result["pairs"]] == [("push", "alone")]


def test_a_reference_not_compared_is_refused_naming_the_runs(paths):
    with pytest.raises(UsageError, match=r"--reference 'other' is not one of the compared "
                                         r"runs \(still, push\)"):
        comparison(load(paths, "still", "push"), reference="other")


def test_the_reference_scores_one_and_random_zero_when_normalized(paths):
    result = comparison(load(paths, "still", "push"), reference="push")
    assert result["aggregates"]["push"]["mean"]["value"] == pytest.approx(1.0)
    still, push = load(paths, "still", "push")
    rand = [e.ret for e in still.baseline_rows.values()]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    expected = (mean(list(returns(still).values())) - mean(rand)) / (
        mean(list(returns(push).values())) - mean(rand))
    assert result["aggregates"]["still"]["mean"]["value"] == pytest.approx(expected)
    assert set(result["profiles"]) == {"still", "push"} and result["warnings"] == []


def test_a_reference_without_a_baseline_is_warned_and_not_normalized(paths):
    result = comparison(load(paths, "alone", "push"), reference="push")
    assert result["aggregates"] is None and result["profiles"] is None
    assert any("--baseline random" in w for w in result["warnings"])


def test_checkpoints_make_a_learning_curve_ordered_by_steps(paths):
    result = comparison(load(paths, "still", "push", steps=(200, 100)))
    curve = result["learning_curve"]
    assert [(p["label"], p["steps"]) for p in curve["points"]] == [("push", 100),
                                                                   ("still", 200)]
    means = {e["label"]: e["summary"]["mean"] for e in result["entries"]}
    assert [p["mean"] for p in curve["points"]] == [means["push"], means["still"]]
    assert curve["baseline_mean"] == means["random"] and curve["scale"] == "return"


def test_write_comparison_writes_both_files_with_relative_folders(paths, tmp_path):
    out = tmp_path / "cmp"
    result = write_comparison(load(paths, "still", "push"), out)
    saved = json.loads((out / "comparison.json").read_text())
    assert saved["pairs"] == json.loads(json.dumps(result["pairs"]))
    for entry in saved["entries"]:
        assert not Path(entry["folder"]).is_absolute()
        assert (out / entry["folder"] / "results.json").is_file()
    html = (out / "comparison.html").read_text()
    assert "Per-seed paired differences" in html and "Return distributions" in html
    assert "<script" not in html


def test_write_comparison_to_a_file_is_refused_in_one_sentence(paths, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    with pytest.raises(UsageError, match="is a file; give a folder"):
        write_comparison(load(paths, "still", "push"), taken)
    assert taken.read_text() == "x"


def test_the_printed_lines_are_one_per_entry_then_one_per_verdict(paths):
    result = comparison(load(paths, "still", "push"))
    lines = summary_lines(result)
    assert [line.split()[0] for line in lines[:3]] == ["still", "push", "random"]
    assert all("mean" in line and "IQM" in line and "success" in line for line in lines[:3])
    sentences = [s for p in result["pairs"] for s in (p["returns"]["sentence"],
                                                      p["success"]["sentence"])]
    assert lines[3:] == sentences


def test_non_finite_numbers_become_null_at_any_depth():
    value = {"a": [1.0, math.nan, (math.inf, -math.inf)], "b": {"c": math.nan, "d": "x"}}
    assert _json_safe(value) == {"a": [1.0, None, [None, None]], "b": {"c": None, "d": "x"}}


@pytest.mark.parametrize(("x", "sign", "text"), [
    (None, False, "n/a"), (0.012345, False, "0.0123"), (0.012345, True, "+0.0123"),
    (12345.6, False, "12,346"), (-12345.6, True, "-12,346"), (2.0, False, "2"),
    (999.94, False, "1,000"), (-999.96, True, "-1,000"), (999.4, False, "999"),
])
def test_numbers_on_the_page_have_three_significant_digits(x: float | None, sign: bool,
                                                           text: str):
    assert _g(x, sign) == text


def test_an_interval_with_a_missing_end_is_not_available():
    assert _gi((1.0, 2.5)) == "[1, 2.5]" and _gi((None, 2.0)) == "n/a" and _gi(None) == "n/a"
