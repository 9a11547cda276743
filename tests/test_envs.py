"""Env specs and what a replay needs from an env (rolltape.envs): a spec survives JSON
with its tuples, an unknown id is one sentence with a suggestion, digests tell observations
apart, and the RNG, time limit and MuJoCo state a tape records put an env back exactly."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from rolltape.envs import (
    PhysicsLog,
    continue_from,
    decode_kwargs,
    encode_kwargs,
    env_package,
    env_spec,
    is_atari,
    json_safe,
    make_env,
    obs_digest,
    obs_digests,
    rng_state,
    set_elapsed_steps,
    set_rng_state,
    split_physics,
    trusted_env_id,
    user_env_file,
)
from rolltape.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
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


def test_rejected_kwargs_name_the_flag_to_check() -> None:
    with pytest.raises(UsageError, match=r"^Env 'CartPole-v1' cannot be built with kwargs "
                                         r"\{'no_such_kwarg': 1\} .*fix them \(--env-kwargs"):
        make_env(env_spec("CartPole-v1", {"no_such_kwarg": 1}))


def test_an_env_without_rgb_array_cannot_make_a_video(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(UsageError, match="cannot render 'rgb_array' frames.*drop --video"):
        make_env(env_spec(f"{TOY}:NoRender-v0"), render_mode="rgb_array")


def test_a_size_for_an_env_that_draws_at_its_own_is_refused() -> None:
    with pytest.raises(UsageError, match="^Env 'CartPole-v1' draws its frames at its own size"):
        make_env(env_spec("CartPole-v1"), render_mode="rgb_array", width=64)


def test_one_changed_word_changes_the_digest_and_equal_rows_agree() -> None:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(4, 3)).astype(np.float32)  # 12 bytes a row: padded to 16
    rows[2] = rows[0]
    rows[3] = rows[0]
    rows[3, 2] = np.nextafter(rows[3, 2], np.float32(np.inf))  # one bit
    digests = obs_digests(rows)
    assert digests.dtype == np.uint64 and digests.shape == (4,)
    assert digests[0] == digests[2] and len({int(d) for d in digests}) == 3
    assert obs_digest(rows[1]) == int(digests[1])
    assert obs_digest(np.float64(-0.0)) != obs_digest(np.float64(0.0))


def test_a_dict_observation_s_digest_ignores_key_order_but_not_values() -> None:
    a = {"x": np.arange(3), "y": np.ones(2)}
    assert obs_digest(a) == obs_digest({"y": np.ones(2), "x": np.arange(3)})
    assert obs_digest(a) != obs_digest({"x": np.arange(3), "y": np.zeros(2)})


def test_a_nested_dict_observation_is_digested_by_its_contents() -> None:
    """gym-aloha's own {"pixels": {"top": image}, "agent_pos": ...}: a dict's bytes were
    its address, so two equal observations got different digests (a false divergence)."""
    def frame(value: int) -> dict:
        return {"pixels": {"top": np.full((4, 4, 3), value, np.uint8)}, "agent_pos": np.zeros(3)}

    assert obs_digest(frame(0)) == obs_digest(frame(0))
    assert obs_digest(frame(0)) != obs_digest(frame(1))
    flat = {"x": np.arange(3), "y": np.ones(2)}  # a flat dict's digest is what it was
    blake = hashlib.blake2b(digest_size=8)
    for key in ("x", "y"):
        blake.update(key.encode())
        blake.update(flat[key].tobytes())
    assert obs_digest(flat) == int.from_bytes(blake.digest(), "little")


def test_json_safe_makes_plain_json_and_nan_null() -> None:
    value = {1: np.float32(0.5), "a": (np.int64(3), np.bool_(True)), "n": float("nan"),
             "arr": np.array([[1.0, np.inf]]), "s": "x", "o": Path("p")}
    safe = json_safe(value)
    assert safe == {"1": 0.5, "a": [3, True], "n": None, "arr": [[1.0, None]], "s": "x",
                    "o": "p"}
    assert json.loads(json.dumps(safe, allow_nan=False)) == safe


def test_a_recorded_rng_state_makes_an_unseeded_reset_draw_the_same() -> None:
    env = make_env(env_spec("CartPole-v1"))
    env.reset(seed=11)
    state = rng_state(env)
    first = env.reset()[0]
    set_rng_state(env, json.loads(json.dumps(state)))  # as a tape stores it
    assert np.array_equal(env.reset()[0], first)
    with pytest.raises(UsageError, match="names the bit generator 'Evil'"):
        set_rng_state(env, {**state, "bit_generator": "Evil"})
    with pytest.raises(UsageError, match="is not a valid PCG64 state"):
        set_rng_state(env, {"bit_generator": "PCG64", "state": "garbage"})
    env.close()


def test_elapsed_steps_truncate_a_replay_where_the_episode_did() -> None:
    env = make_env(env_spec("CartPole-v1", max_episode_steps=10))
    env.reset(seed=0)
    set_elapsed_steps(env, 9)
    *_, truncated, _ = env.step(0)
    assert truncated
    env.close()


def test_physics_rows_continue_a_mujoco_episode_bit_for_bit() -> None:
    env = make_env(env_spec("HalfCheetah-v5", max_episode_steps=20))
    env.reset(seed=1)
    log = PhysicsLog(env, expected_frames=2)  # grows past its first buffer
    actions = np.random.default_rng(2).uniform(-1, 1, size=(6, 6))
    log.record()
    observations = []
    for action in actions:
        observations.append(env.step(action)[0])
        log.record()
    physics, qpos, qvel = log.arrays()
    assert log.frames == len(physics) == 7
    assert np.array_equal(qpos[-1], env.unwrapped.data.qpos)
    assert np.array_equal(qvel[-1], env.unwrapped.data.qvel)
    continue_from(env, physics[3])  # back to frame 3, then the same actions again
    again = [env.step(action)[0] for action in actions[3:]]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(again, observations[3:]))
    env.close()


def test_split_physics_reads_qpos_and_qvel_after_the_time() -> None:
    rows = np.arange(2 * 7, dtype=float).reshape(2, 7)  # time, 2 qpos, 3 qvel, 1 more
    physics, qpos, qvel = split_physics(rows, 2, 3)
    assert physics is rows and qpos.tolist() == [[1, 2], [8, 9]]
    assert qvel.tolist() == [[3, 4, 5], [10, 11, 12]]
