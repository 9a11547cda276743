"""Each rule of the classifier on tapes that differ in one way (tests/compare/test_diff.py
checks them on real runs): a time shift, rounding, a sign or a scale on one dimension, an
observation flipped or its channels reversed at the reset, and what no rule explains,
shown as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rolltape.compare.classify import classify, first_divergence
from rolltape.pass1.fields import reset_forms
from rolltape.tape import Tape

sys.path.insert(0, str(Path(__file__).resolve().parent))  # diff_knobs: a user's own env
RNG = np.random.default_rng(3)
ACTIONS = RNG.uniform(-1, 1, (12, 3)).astype(np.float32)
IMAGE = RNG.integers(0, 255, (6, 5, 3), dtype=np.uint8)


def tape(actions: np.ndarray = ACTIONS, rewards: np.ndarray | None = None,
         obs: np.ndarray = IMAGE, digests: np.ndarray | None = None, **extra) -> Tape:
    n = len(actions)
    return Tape(env={"id": "X-v0"}, seed=0, actions=actions,
                rewards=np.ones(n) if rewards is None else rewards,
                terminated=np.zeros(n, bool), truncated=np.r_[np.zeros(n - 1, bool), True],
                obs_digest=np.arange(n + 1, dtype=np.uint64) if digests is None else digests,
                obs_reset=reset_forms({"pixels": obs}), **extra)


def judged(a: Tape, b: Tape, card: dict | None = None):
    d = first_divergence(a, b)
    assert d is not None
    return classify(d, a, b, card or {})


def test_equal_tapes_do_not_part():
    assert first_divergence(tape(), tape()) is None


def test_actions_k_steps_late_are_a_time_shift():
    late = np.concatenate([np.zeros((2, 3), np.float32), ACTIONS[:-2]])
    d = judged(tape(), tape(late))
    assert (d.kind, d.step, d.detail["shift"], d.detail["later"]) == ("time_shift", 0, 2, "B")


def test_a_closed_loop_policy_one_step_late_is_a_time_shift_at_its_first_action():
    late = RNG.uniform(-1, 1, (12, 3)).astype(np.float32)  # then it sees other observations
    late[0], late[1] = 0.0, ACTIONS[0]
    d = judged(tape(), tape(late), {"policy.latency": (None, "1")})
    assert (d.kind, d.step, d.detail["shift"], d.detail["later"]) == ("time_shift", 0, 1, "B")
    assert "acts 1 step(s) late" in d.sentence and "policy.latency" in d.sentence


def test_tapes_of_another_simulator_part_by_it_whatever_else_differs():
    """A MuJoCo Warp tape (its meta says so) against the env's own: named by that, even
    where the first difference would pass for rounding or another reset."""
    nudged = ACTIONS.copy()
    nudged[4, 1] = np.nextafter(nudged[4, 1], np.float32(2))
    d = judged(tape(), tape(nudged, meta={"backend": "mjwarp", "device": "cpu"}))
    assert (d.kind, d.step, d.field) == ("simulator", 4, "action")
    assert d.sentence.startswith("A was simulated by the env's own simulator, B by MuJoCo Warp")
    assert d.detail["simulators"] == ["the env's own simulator", "MuJoCo Warp"]


def test_float_epsilon_differences_are_rounding():
    nudged = ACTIONS.copy()
    nudged[4, 1] = np.nextafter(nudged[4, 1], np.float32(2))
    d = judged(tape(), tape(nudged))
    assert (d.kind, d.step, d.field) == ("rounding", 4, "action")


@pytest.mark.parametrize("factor,kind", [(-1.0, "action_sign"), (0.5, "action_scale")])
def test_one_dimension_times_a_constant_is_a_sign_or_a_scale(factor, kind):
    changed = ACTIONS.copy()
    changed[:, 2] *= np.float32(factor)
    d = judged(tape(), tape(changed))
    assert (d.kind, d.step, d.detail["dims"], d.detail["ratio"]) == (kind, 0, [2], factor)


def test_another_action_without_a_pattern_is_shown_as_it_is():
    changed = ACTIONS.copy()
    changed[3] = [0.1, 0.2, 0.3]
    d = judged(tape(), tape(changed))
    assert d.kind == "unclassified" and d.step == 3
    assert d.sentence.startswith("differs from step 3 on action: A [")
    assert "0.1" in d.b and repr(float(ACTIONS[3, 0])) in d.a  # both values, in full


def test_actions_of_another_dtype_say_so():
    d = judged(tape(), tape(ACTIONS.astype(np.float64)))
    assert d.kind == "unclassified" and "float32[3] in A, float64[3] in B" in d.sentence


@pytest.mark.parametrize("form,array", [("flip_vertical", IMAGE[::-1]),
                                        ("channels_reversed", IMAGE[..., ::-1]),
                                        ("transpose", IMAGE.swapaxes(0, 1))])
def test_a_reset_observation_that_is_a_form_of_the_other_is_named(form, array):
    other = np.arange(13, dtype=np.uint64)
    other[0] = 99
    d = judged(tape(), tape(obs=np.ascontiguousarray(array), digests=other))
    assert (d.kind, d.step, d.detail["form"]) == ("obs_transform", None, form)


def test_another_reset_observation_without_a_form_is_shown_as_it_is():
    other = np.arange(13, dtype=np.uint64)
    other[0] = 99
    d = judged(tape(), tape(obs=IMAGE // 2, digests=other))
    assert d.kind == "unclassified" and d.sentence.startswith("differs from the reset on obs")


def test_same_actions_then_another_observation_quotes_the_card():
    other = np.arange(13, dtype=np.uint64)
    other[5] = 99
    d = judged(tape(), tape(digests=other), {"envs.env.kwargs.gravity": (None, -3.0)})
    assert (d.kind, d.step, d.field) == ("dynamics", 4, "obs")
    assert "envs.env.kwargs.gravity" in d.sentence


def test_another_reward_for_the_same_everything_is_the_reward_function():
    rewards = np.ones(12)
    rewards[7] = 0.5
    d = judged(tape(), tape(rewards=rewards))
    assert (d.kind, d.step, d.field) == ("reward", 7, "reward")


def test_a_camera_mounted_upside_down_is_named_on_its_key_in_real_episodes():
    """Dot-v0 (tests/compare/diff_knobs.py) played here by pass 1's own loop: the env's
    upside_down kwarg flips the picture, and the diff names the key and the flip."""
    import diff_knobs  # registers Dot-v0
    import gymnasium as gym

    from rolltape.pass1.rollout import record_episode
    from rolltape.policies import CallablePolicy

    tapes = []
    for kwargs in ({}, {"upside_down": True}):
        env = gym.make("Dot-v0", **kwargs)
        try:
            fields = record_episode(env, CallablePolicy(diff_knobs.look, {}), seed=4)
        finally:
            env.close()
        tapes.append(Tape(env={"id": "Dot-v0"}, **fields))
    a, b = tapes
    assert a.obs_keys == ("pixels", "state")
    d = judged(a, b, {"envs.env.kwargs.upside_down": (None, True)})
    assert (d.kind, d.step, d.field, d.detail["form"]) == (
        "obs_transform", None, "obs['pixels']", "flip_vertical")
