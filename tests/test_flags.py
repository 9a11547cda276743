"""Config fields that are flags (rolltape.flags): a field declares its default and help
once, and ``--env-kwargs``-style KEY=VALUE text becomes values a tape's JSON can hold,
never a guessed string. (How the verbs' options are built from these fields:
test_cli_options.py.)"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pytest

from rolltape.errors import UsageError
from rolltape.flags import EPISODES, PANELS, SAME, VIDEO, Flag, flag, parse_kwargs


@dataclass(frozen=True)
class Example:
    episodes: int = flag(10, "Number of episodes.", panel=EPISODES, names=("-n",))
    video: str = flag(0, "Episodes to render.", panel=VIDEO, cli_type=str, cli_default="0")
    kwargs: dict[str, Any] = flag(None, "KEY=VALUE, repeatable.", panel=EPISODES,
                                  factory=dict, parse=parse_kwargs)
    plain: int = 3


def test_a_flag_field_keeps_its_default_and_describes_its_option() -> None:
    spec = {f.name: f.metadata.get("flag") for f in fields(Example)}
    assert Example().episodes == 10 and Example(episodes=4).episodes == 4
    assert spec["episodes"] == Flag("Number of episodes.", EPISODES, ("-n",))
    assert spec["episodes"].cli_default is SAME and spec["video"].cli_default == "0"
    assert spec["plain"] is None  # a field without flag() is no option


def test_a_factory_default_is_a_new_value_for_every_instance() -> None:
    a, b = Example(), Example()
    assert a.kwargs == {} and a.kwargs is not b.kwargs
    assert fields(Example)[2].metadata["flag"].parse is parse_kwargs


def test_every_panel_is_listed_once_in_help_order() -> None:
    assert len(set(PANELS)) == len(PANELS) and PANELS[0] == "Policy"


def test_env_kwargs_are_literals_or_json() -> None:
    assert parse_kwargs(["a=False", "b=(0.5, 2.0)", "c=None", "d=3", "e=1e-3", "f=true",
                         "g=[1, 2]", "h='abc'", 'i="x y"', 'j={"k": null}']) == {
        "a": False, "b": (0.5, 2.0), "c": None, "d": 3, "e": 1e-3, "f": True, "g": [1, 2],
        "h": "abc", "i": "x y", "j": {"k": None}}
    with pytest.raises(UsageError, match="name='abc'"):
        parse_kwargs(["name=abc"])


def test_no_pairs_are_no_kwargs_and_a_later_key_wins() -> None:
    assert parse_kwargs(None) == {} and parse_kwargs([]) == {}
    assert parse_kwargs(["x=1", " x = 2 "]) == {"x": 2}


@pytest.mark.parametrize("pair", ["x=1e999", "x={1, 2}", "x={1: 2}", "x=1+2j", "x=b'raw'",
                                  "x=[1, NaN]", 'x={"a": -Infinity}'])
def test_a_value_must_be_one_a_tape_can_store(pair: str) -> None:
    with pytest.raises(UsageError, match="the value must be a number, string, True/False/None, "
                                         "or a list, tuple or dict of those"):
        parse_kwargs([pair])


@pytest.mark.parametrize("pair", ["x=nan", "x=float('inf')", "x=abc", "x=[1,", "x="])
def test_text_that_is_no_literal_is_refused_not_guessed_to_be_a_string(pair: str) -> None:
    with pytest.raises(UsageError, match="is neither a Python literal nor JSON; quote a string"):
        parse_kwargs([pair])


@pytest.mark.parametrize("pair", ["fault", "=3", "1x=3", "a-b=3", "a b=3"])
def test_a_pair_without_a_python_name_before_the_equals_sign_is_refused(pair: str) -> None:
    with pytest.raises(UsageError, match=f"'{pair}' must look like KEY=VALUE"):
        parse_kwargs([pair])


def test_the_refusal_names_the_flag_that_gave_the_pair() -> None:
    with pytest.raises(UsageError, match="^--wrapper 'size=big' is neither a Python literal "
                                         "nor JSON; quote a string: --wrapper \"size='big'\""):
        parse_kwargs(["size=big"], "--wrapper")
    with pytest.raises(UsageError, match="^--wrapper 'k' must look like KEY=VALUE"):
        parse_kwargs(["k"], "--wrapper")


def test_nested_values_keep_tuples_apart_from_lists() -> None:
    value = parse_kwargs(["x=[(1, 2), {'a': [True, None]}]"])["x"]
    assert value == [(1, 2), {"a": [True, None]}] and isinstance(value[0], tuple)
