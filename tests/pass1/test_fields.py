"""The fields of a tape from one episode (rolltape.pass1.fields): arrays of the right
dtypes, digests of every observation whatever its kind, success read as a flag, and large
screens digested as they come."""

from __future__ import annotations

import time

import numpy as np

from rolltape.envs.digests import BIG_OBS, DIGEST_BATCH, obs_digest, obs_digests
from rolltape.pass1.fields import (
    compact,
    digest_all,
    kept_obs,
    success_flag,
    tape_fields,
)


def _steps(n: int) -> list[tuple]:
    return [(np.array([k, -k], dtype=np.float32), float(k) / 2, k == n - 1, False,
             np.full(3, k + 1.0)) for k in range(n)]


def test_tape_fields_stack_each_step_with_the_tape_s_dtypes():
    steps = _steps(4)
    fields = tape_fields(7, {"a": 1}, np.zeros(3), steps, (None, None, None), 1.0,
                         {"dist": np.float32(0.5)}, time.perf_counter())
    assert fields["seed"] == 7 and fields["options"] == {"a": 1}
    assert fields["actions"].shape == (4, 2) and fields["actions"].dtype == np.float32
    assert fields["rewards"].dtype == np.float64 and fields["rewards"].tolist() == [0, .5, 1, 1.5]
    assert fields["terminated"].tolist() == [False, False, False, True]
    assert fields["truncated"].dtype == bool and not fields["truncated"].any()
    assert fields["success_at_end"] is True
    assert fields["metrics"] == {"dist": 0.5} and type(fields["metrics"]["dist"]) is float
    assert fields["wall_s"] >= 0


def test_there_is_one_digest_per_frame_the_first_observation_included():
    steps = _steps(3)
    fields = tape_fields(None, None, np.zeros(3), steps, (None, None, None), None, None,
                         time.perf_counter())
    expected = [obs_digest(np.zeros(3))] + [obs_digest(s[-1]) for s in steps]
    assert fields["obs_digest"].dtype == np.uint64
    assert fields["obs_digest"].tolist() == expected
    assert fields["success_at_end"] is None and fields["metrics"] is None


def test_physics_rows_are_kept_as_given():
    state, qpos, qvel = np.ones((3, 5)), np.ones((3, 2)), np.zeros((3, 2))
    fields = tape_fields(0, None, np.zeros(3), _steps(2), (state, qpos, qvel), None, None,
                         time.perf_counter())
    assert fields["physics"] is state and fields["qpos"] is qpos and fields["qvel"] is qvel


def test_success_is_a_flag_and_an_undefined_one_is_no_success():
    assert success_flag(None) is None
    assert success_flag(float("nan")) is False
    assert success_flag(np.float32("nan")) is False
    assert success_flag(np.bool_(True)) is True
    assert success_flag(0.0) is False and success_flag(1) is True
    assert success_flag("yes") is True  # not a number: its truth


def test_a_kept_array_is_a_copy_and_anything_else_its_digest_now():
    obs = np.arange(4.0)
    kept = kept_obs(obs)
    obs[0] = 99.0  # an env that reuses its buffer
    assert kept[0] == 0.0
    as_dict = {"a": np.arange(2), "b": np.ones(1)}
    assert kept_obs(as_dict) == obs_digest(as_dict)


def test_digests_of_mixed_observations_equal_each_one_s_own():
    observations = [np.arange(3.0), {"x": np.ones(2)}, np.arange(4, dtype=np.int8),
                    np.arange(3.0) + 1, 12345]
    got = digest_all(observations)
    assert got.tolist() == [obs_digest(observations[0]), obs_digest(observations[1]),
                            obs_digest(observations[2]), obs_digest(observations[3]), 12345]


def test_observations_differing_in_one_value_get_different_digests():
    a = np.zeros((5, 8))
    b = a.copy()
    b[3, 7] = np.nextafter(0.0, 1.0)
    assert len(set(digest_all([a, b]).tolist())) == 2


def test_small_observations_are_left_for_the_end():
    steps = [(0, 0.0, False, False, np.zeros(4)) for _ in range(DIGEST_BATCH)]
    compact(steps)
    assert all(isinstance(s[-1], np.ndarray) for s in steps)
    big = np.zeros(BIG_OBS // 8 + 1)
    steps = [(0, 0.0, False, False, big + k) for k in range(DIGEST_BATCH)]
    compact(steps)
    expected = obs_digests(np.stack([big + k for k in range(DIGEST_BATCH)]))
    assert [s[-1] for s in steps] == expected.tolist()


def test_screens_are_digested_as_they_come() -> None:
    """Pass 1 does not hold a screen per step: every DIGEST_BATCH steps the kept screens
    become their digests, and the tape's digests are those of the screens all at once."""
    rng = np.random.default_rng(0)
    screens = [rng.integers(0, 255, (210, 160, 3), dtype=np.uint8)
               for _ in range(2 * DIGEST_BATCH + 22)]
    steps: list[tuple] = []
    for screen in screens:
        steps.append((0, 0.0, False, False, screen.copy()))
        if not len(steps) % DIGEST_BATCH:
            compact(steps)
    assert sum(isinstance(s[-1], int) for s in steps) == 2 * DIGEST_BATCH
    assert np.array_equal(digest_all([s[-1] for s in steps]), obs_digests(np.stack(screens)))


def test_a_nested_dict_observation_keeps_a_digest_per_leaf():
    """Each camera of LeRobot's {"pixels": {cam: image}} gets its own digest, named as
    LeRobot names it ("pixels/top"), equal for equal images."""
    def frame(top: int) -> dict:
        return {"pixels": {"top": np.full((4, 4, 3), top, np.uint8),
                           "wrist": np.zeros((2, 2, 3), np.uint8)}, "agent_pos": np.zeros(3)}

    a, b, c = kept_obs(frame(0)), kept_obs(frame(0)), kept_obs(frame(1))
    assert sorted(a.per_key) == ["agent_pos", "pixels/top", "pixels/wrist"]
    assert a.per_key == b.per_key and a == b
    assert [n for n in a.per_key if a.per_key[n] != c.per_key[n]] == ["pixels/top"]
