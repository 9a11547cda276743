"""The one API function behind ``rolltape eval`` (rolltape.drivers.run_eval): it picks one
policy, several on the same seeds, or refuses a plan whose choices contradict each other,
in one sentence before any work. Real runs of the 5-step toy env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rolltape.drivers import EvalPlan, run_eval
from rolltape.errors import UsageError

TOY = "tests.assets.toy_envs:SuccessToy-v0"


def _run(plan: EvalPlan, **values: Any) -> dict[str, list[Any]]:
    shown: dict[str, list[Any]] = {"said": [], "runs": [], "comparisons": []}
    run_eval(plan, {"episodes": 2, "report": False, "viewer": False, **values}, {}, ["test"],
             shown["said"].append, shown["runs"].append,
             lambda result, path: shown["comparisons"].append(path))
    return shown


def test_one_policy_is_one_run(tmp_path: Path) -> None:
    shown = _run(EvalPlan(env=TOY, out=str(tmp_path / "one"), quiet=True))
    [run] = shown["runs"]
    assert run.path == tmp_path / "one" and len(run.results.episodes) == 2
    assert shown["comparisons"] == []


def test_two_policies_are_a_comparison_on_the_same_seeds(tmp_path: Path) -> None:
    shown = _run(EvalPlan(env=TOY, policy=("random", "random"), out=str(tmp_path / "two"),
                          quiet=True))
    assert shown["runs"] == [] and shown["comparisons"] == [tmp_path / "two"]
    assert (tmp_path / "two" / "comparison.json").is_file()


@pytest.mark.parametrize(("plan", "values", "words"), [
    (EvalPlan(env=TOY, reference="x"), {}, "names one of several policies"),
    (EvalPlan(env=TOY, checkpoint="best"), {}, "--checkpoint picks a model"),
    (EvalPlan(env=TOY, branch=True, policy=("random", "random")), {}, "--branch branches"),
    (EvalPlan(env=TOY), {"algo": "ppo"}, "--algo names the algorithm"),
])
def test_contradicting_choices_are_refused_before_any_work(
        plan: EvalPlan, values: dict[str, Any], words: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=words):
        _run(plan, **values)
    assert list(tmp_path.iterdir()) == []  # nothing written
