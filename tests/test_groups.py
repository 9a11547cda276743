"""The shared option groups (rolltape.groups): each rule is written once on its field and
holds in every record composed from the group, with the same sentence; a verb's record is
the groups it inherits."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from rolltape.config import EvalConfig
from rolltape.errors import UsageError
from rolltape.flags import check_flags
from rolltape.groups import EnvOptions, Episodes, Listener, PolicyFiles, RunFolder


@dataclass(frozen=True, kw_only=True)
class _Verb(Episodes, EnvOptions, PolicyFiles, Listener, RunFolder):
    def __post_init__(self) -> None:
        check_flags(self)


@pytest.mark.parametrize(("given", "sentence"), [
    ({"episodes": 0}, "--episodes must be at least 1, got 0."),
    ({"seed": -1}, "--seed must be 0 or more (Gymnasium seeds are unsigned), got -1."),
    ({"max_episode_steps": 0}, "--max-episode-steps must be at least 1, got 0."),
    ({"execute_steps": 0}, "--execute-steps must be at least 1, got 0."),
    ({"max_sessions": 0}, "--max-sessions must be at least 1, got 0."),
    ({"max_payload": 10}, "--max-payload must be at least 1024 bytes, got 10."),
])
def test_a_rule_is_one_sentence_naming_the_flag_in_every_record(given, sentence):
    with pytest.raises(UsageError) as composed:
        _Verb(**given)
    assert str(composed.value) == sentence
    if set(given) <= {f.name for f in fields(EvalConfig)}:  # eval's record: the same rule
        with pytest.raises(UsageError) as evaluated:
            EvalConfig(env="CartPole-v1", **given).check()
        assert str(evaluated.value) == sentence


def test_a_composed_record_has_each_group_s_fields_and_defaults_once():
    names = [f.name for f in fields(_Verb)]
    assert len(names) == len(set(names))
    made = _Verb()
    assert (made.episodes, made.seed, made.out, made.quiet, made.max_sessions) == (
        10, 0, None, False, 8)
    assert EvalConfig(env="CartPole-v1").episodes == _Verb().episodes  # one default
