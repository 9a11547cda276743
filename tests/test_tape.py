"""The tape file: a round trip keeps every bit; anything wrong is refused with one sentence."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rolltape import Tape, UsageError
from rolltape.tape import json_safe


def make_tape(steps: int = 5, **overrides) -> Tape:
    rng = np.random.default_rng(0)
    fields = dict(
        env={"id": "HalfCheetah-v5", "kwargs": {}, "max_episode_steps": None, "versions": {}},
        seed=3, actions=rng.standard_normal((steps, 6)).astype(np.float32),
        rewards=rng.standard_normal(steps), terminated=np.zeros(steps, bool),
        truncated=np.r_[np.zeros(steps - 1, bool), True],
        obs_digest=rng.integers(0, 2**63, steps + 1, dtype=np.uint64),
        qpos=rng.standard_normal((steps + 1, 9)), qvel=rng.standard_normal((steps + 1, 9)),
        policy={"kind": "random"}, wall_s=0.5, metrics={"dist": 0.25}, success_at_end=True,
    )
    fields.update(overrides)
    return Tape(**fields)


def test_round_trip_is_bit_exact(tmp_path):
    tape = make_tape()
    loaded = Tape.load(tape.save(tmp_path / "t.npz"))
    for name in ("actions", "rewards", "terminated", "truncated", "obs_digest", "qpos", "qvel"):
        a, b = getattr(tape, name), getattr(loaded, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert loaded.seed == 3 and loaded.success_at_end is True and loaded.metrics == {"dist": 0.25}
    assert loaded.total_return == tape.total_return and loaded.length == 5
    assert loaded.has_state


def test_discrete_actions_stay_ints(tmp_path):
    tape = make_tape(actions=np.array([0, 1, 1, 0, 1]), qpos=None, qvel=None)
    loaded = Tape.load(tape.save(tmp_path / "d.npz"))
    assert loaded.actions.dtype.kind == "i" and not loaded.has_state


def test_save_is_atomic_and_needs_npz_suffix(tmp_path):
    with pytest.raises(UsageError, match=r"\.npz"):
        make_tape().save(tmp_path / "t.bin")
    make_tape().save(tmp_path / "t.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]  # no temporary left behind


def test_arrays_that_disagree_in_length_are_refused():
    with pytest.raises(UsageError, match="agree in length"):
        make_tape(actions=np.zeros((4, 6), np.float32))
    with pytest.raises(UsageError, match="qpos must have 6 rows"):
        make_tape(qpos=np.zeros((5, 9)))
    with pytest.raises(UsageError, match="float64"):
        make_tape(rewards=np.zeros(5, np.float32))


def test_truncated_file_is_refused(tmp_path):
    path = make_tape().save(tmp_path / "t.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match="corrupt or truncated"):
        Tape.load(path)


def test_garbage_and_foreign_npz_are_refused(tmp_path):
    (tmp_path / "g.npz").write_bytes(b"not a zip at all" * 10)
    with pytest.raises(UsageError, match="corrupt or truncated"):
        Tape.load(tmp_path / "g.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(UsageError, match="not a rolltape tape"):
        Tape.load(tmp_path / "other.npz")
    with pytest.raises(UsageError, match="does not exist"):
        Tape.load(tmp_path / "missing.npz")


def test_unknown_schema_version_is_refused(tmp_path):
    path = make_tape().save(tmp_path / "t.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    header = json.loads(arrays["header"].tobytes())
    header["schema_version"] = 99
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match="schema version 99"):
        Tape.load(path)


def test_missing_array_is_refused(tmp_path):
    path = make_tape().save(tmp_path / "t.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "rewards"}
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match="lacks the arrays"):
        Tape.load(path)
    assert zipfile.is_zipfile(path)


def test_json_safe_makes_plain_json_and_nan_null() -> None:
    value = {1: np.float32(0.5), "a": (np.int64(3), np.bool_(True)), "n": float("nan"),
             "arr": np.array([[1.0, np.inf]]), "s": "x", "o": Path("p")}
    safe = json_safe(value)
    assert safe == {"1": 0.5, "a": [3, True], "n": None, "arr": [[1.0, None]], "s": "x",
                    "o": "p"}
    assert json.loads(json.dumps(safe, allow_nan=False)) == safe
