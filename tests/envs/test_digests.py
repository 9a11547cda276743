"""Observation digests (rolltape.envs.digests): one changed word changes an array's digest,
a dict's ignores key order but not values, and a nested dict is digested by its contents."""

from __future__ import annotations

import hashlib

import numpy as np

from rolltape.envs.digests import obs_digest, obs_digests


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
