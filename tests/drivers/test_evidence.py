"""``rolltape eval --until / --recipe`` (rolltape.drivers.evidence): the flags are checked
together, each refusal one sentence naming the fix, before anything is evaluated or
written; the flags then reach the --until or --recipe evaluation as given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rolltape.drivers.evidence import eval_evidence
from rolltape.errors import UsageError


def call(tmp_path: Path, policies: list[str] | None = None, recipes: list[str] | None = None,
         **flags: Any) -> list[str]:
    given: dict[str, Any] = {"until": None, "margin": 0.0, "max_episodes": None, "batch": 10,
                             "episodes": 10, "return_bounds": None, "reference": None,
                             "out": str(tmp_path / "out")}
    given.update(flags)
    return eval_evidence("CartPole-v1", policies or [], recipes or [], **given)


def refusal(tmp_path: Path, **kwargs: Any) -> str:
    with pytest.raises(UsageError) as caught:
        call(tmp_path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and not (tmp_path / "out").exists()
    return message


@pytest.mark.parametrize(("flags", "named"), [
    ({"max_episodes": 50}, "--max-episodes shape(s) an --until evaluation"),
    ({"margin": 0.5}, "--margin shape(s)"),
    ({"return_bounds": "0,1"}, "--return-bounds shape(s)"),
    ({"max_episodes": 50, "return_bounds": "0,1"}, "--max-episodes and --return-bounds"),
])
def test_until_flags_without_until_say_to_add_it_or_drop_them(tmp_path: Path, flags: dict,
                                                              named: str) -> None:
    message = refusal(tmp_path, **flags)
    assert named in message and "add --until 'width<W' or --until decided" in message


def test_until_and_recipe_together_are_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, until="decided", recipes=["A=sb3:a/*.zip"], max_episodes=20)
    assert "--until and --recipe cannot be combined yet" in message


@pytest.mark.parametrize("flags", [
    {"until": "decided", "max_episodes": 20}, {"recipes": ["A=sb3:a/*.zip"]},
])
def test_reference_is_refused_with_until_or_recipe(tmp_path: Path, flags: dict) -> None:
    message = refusal(tmp_path, reference="ppo", policies=["random", "sb3:ppo.zip"], **flags)
    assert "--reference applies to several --policy without --until/--recipe; drop it" in message


def test_a_recipe_run_names_every_policy_itself(tmp_path: Path) -> None:
    message = refusal(tmp_path, recipes=["A=sb3:a/*.zip"], policies=["random"])
    assert "--recipe names every policy of the run; drop --policy" in message


def test_the_recipe_options_reach_the_recipe_evaluation(tmp_path: Path) -> None:
    message = refusal(tmp_path, recipes=["A=sb3:a/*.zip"], baseline="random")
    assert "--baseline is not part of a recipe comparison" in message


def test_the_until_text_reaches_its_parser(tmp_path: Path) -> None:
    message = refusal(tmp_path, until="soon", max_episodes=20)
    assert "--until 'soon' is not a stopping rule" in message


def test_until_without_a_policy_judges_the_random_one(tmp_path: Path) -> None:
    # decided needs two policies: the one it got is the default, random.
    message = refusal(tmp_path, until="decided", max_episodes=20)
    assert "--until decided compares two policies; got 1" in message
