"""The env-id grammar (rolltape.envs.ids): a spec survives JSON with its tuples, an unknown
id is one sentence with a suggestion, a user's module or file is named or refused in one
sentence, and a tape's module is trusted only as an installed package of Gymnasium envs or
by its top-level name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import (
    decode_kwargs,
    encode_kwargs,
    env_package,
    env_spec,
    is_atari,
    trusted_env_id,
    user_env_file,
)
from rolltape.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.assets.toy_envs"


def test_kwargs_survive_json_with_tuples_kept_apart_from_lists() -> None:
    kwargs = {"size": (2, 3), "list": [1, (0.5, [True])], "nested": {"t": ()}, "x": None}
    stored = json.loads(json.dumps(encode_kwargs(kwargs)))
    assert decode_kwargs(stored) == kwargs
    assert isinstance(decode_kwargs(stored)["list"][1], tuple)
    assert decode_kwargs({"__tuple__": [1], "other": 2}) == {"__tuple__": [1], "other": 2}


def test_a_spec_records_the_id_kwargs_limit_and_versions() -> None:
    spec = env_spec("CartPole-v1", {"sutton_barto_reward": True}, 25)
    assert (spec["id"], spec["kwargs"], spec["max_episode_steps"]) == (
        "CartPole-v1", {"sutton_barto_reward": True}, 25)
    assert spec["versions"]["gymnasium"] and "source" not in spec
    assert json.loads(json.dumps(spec)) == spec  # a tape stores it as JSON


def test_an_unknown_env_id_suggests_close_ones() -> None:
    with pytest.raises(UsageError, match="^Unknown env id 'HalfCheeta-v5'; did you mean "
                                         "HalfCheetah-v5"):
        env_spec("HalfCheeta-v5")
    with pytest.raises(UsageError, match="gymnasium.pprint_registry"):
        env_spec("Zzzzzz-v9")


def test_the_user_s_own_env_code_is_named_or_refused_in_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Env file '.*nowhere.py' does not exist"):
        env_spec(f"{tmp_path}/nowhere.py:Walk")
    with pytest.raises(UsageError, match="Cannot import 'no_such_module_x' .* run from the "
                                         "folder that holds it"):
        env_spec("no_such_module_x:Walk-v0")


def test_a_module_env_records_its_source_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    spec = env_spec(f"{TOY}:SuccessToy-v0")
    assert spec["source"] == str(ROOT / "tests" / "assets" / "toy_envs.py")
    env = make_env(spec)
    assert env.reset(seed=0)[0].shape == (2,)
    env.close()


def test_user_env_file_is_only_a_py_file_and_an_attribute() -> None:
    assert user_env_file("envs/my.py:Walk") == (Path("envs/my.py"), "Walk")
    assert user_env_file("C:/x/my.py:make") == (Path("C:/x/my.py"), "make")
    for not_a_file in ("mod:Walk-v0", "my.py:", "HalfCheetah-v5", "my.pyc:Walk"):
        assert user_env_file(not_a_file) is None


@pytest.mark.parametrize(("env_id", "atari"), [
    ("ALE/Pong-v5", True), ("PongNoFrameskip-v4", True), ("BreakoutDeterministic-v4", True),
    ("HalfCheetah-v5", False), ("mine:Pong-v0", False)])
def test_atari_ids_are_told_by_their_names(env_id: str, atari: bool) -> None:
    assert is_atari(env_id) is atari


def test_a_tape_s_module_is_trusted_only_by_its_top_level_name() -> None:
    assert trusted_env_id("mine.envs:Toy-v0", ["mine"]) == "mine.envs:Toy-v0"
    assert trusted_env_id("mine.envs:Toy-v0", ["mine.envs", "other"]) is None
    assert trusted_env_id("Toy-v0", ["Toy-v0"]) is None and trusted_env_id("m:X", None) is None


@pytest.mark.parametrize(("top", "provides_envs"), [
    ("gymnasium", True), ("antigravity", False), ("json", False), ("numpy", False),
    ("no_such_package_x", False)])
def test_env_packages_are_judged_from_installed_metadata(top: str, provides_envs: bool) -> None:
    assert env_package(top) is provides_envs
