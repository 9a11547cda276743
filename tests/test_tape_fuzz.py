"""A tape is untrusted data: whatever is wrong with the file, loading it returns a tape or
raises UsageError with one line naming the tape, never another exception, and never
expands more than the caps allow. scripts/fuzz_tapes.py runs the same strategies longer."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tape_strategies import (
    BASES,
    array_edits,
    flipped,
    header_edits,
    load_outcome,
    lying_sizes,
    npy_edits,
    npz_bytes,
    truncated,
)

DAMAGE = {"truncated": truncated(), "flipped": flipped(), "lying_sizes": lying_sizes(),
          "header_edits": header_edits(), "array_edits": array_edits(),
          "npy_edits": npy_edits()}


@pytest.mark.parametrize("damage", list(DAMAGE))
@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_tape_loads_or_is_refused_in_one_line(damage, data, tmp_path):
    message = load_outcome(data.draw(DAMAGE[damage]), tmp_path)
    if message is not None:
        assert "fuzzed.npz" in message and "\n" not in message, message


def test_every_base_tape_loads(tmp_path):
    """The strategies damage tapes that load when undamaged."""
    for data, _, _ in BASES:
        assert load_outcome(data, tmp_path) is None


def _edited(edit) -> bytes:
    _, arrays, header = BASES[0]
    arrays, header = dict(arrays), json.loads(json.dumps(header))
    edit(arrays, header)
    if not isinstance(arrays.get("header"), np.ndarray):
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    return npz_bytes(arrays)


@pytest.mark.parametrize("edit, says", [
    # Each of these raised something other than UsageError before the loader was hardened.
    (lambda a, h: a.update(actions=np.array(1.0)), "actions must be numbers, one row per step"),
    (lambda a, h: a.update(obs_digest=np.array(7, np.uint64)), "obs_digest must be 6 uint64"),
    (lambda a, h: a.update(obs_digest=np.zeros(6)), "obs_digest must be 6 uint64"),
    (lambda a, h: a.update(actions=np.array([None] * 5, dtype=object)), "not plain numbers"),
    (lambda a, h: a.update(qpos=np.zeros((6, 9), np.float32)), "qpos must have 6 rows of float64"),
    (lambda a, h: a.update(header=np.frombuffer(b"[1, 2]", np.uint8)), "corrupt header"),
    (lambda a, h: a.update(header=np.frombuffer(b"[" * 50_000, np.uint8)), "corrupt header"),
    (lambda a, h: h.update(wall_s=float("nan")), "corrupt header"),
    (lambda a, h: h.update(env=["HalfCheetah-v5"]), "field env must be an object"),
    (lambda a, h: h["env"].update(id=5), "field env.id must be a non-empty string"),
    (lambda a, h: h["env"].update(kwargs=[1]), "field env.kwargs must be null or an object"),
    (lambda a, h: h["env"].update(max_episode_steps=1.5), "env.max_episode_steps must be"),
    (lambda a, h: h.update(seed="3"), "field seed must be null or a non-negative integer"),
    (lambda a, h: h.update(seed=True), "field seed must be null or a non-negative integer"),
    (lambda a, h: h.update(policy=None), "field policy must be an object"),
    (lambda a, h: h.update(meta=[]), "field meta must be an object"),
    (lambda a, h: h.pop("seed"), "header lacks 'seed'"),
])
def test_malformed_fields_are_named(edit, says, tmp_path):
    message = load_outcome(_edited(edit), tmp_path)
    assert message is not None and says in message, message
    assert "fuzzed.npz" in message and "re-record it with `rolltape eval`" in message


def test_a_decompression_bomb_is_refused_before_it_expands(tmp_path):
    """200 MiB of zeros in a 0.2 MB file: refused from the zip directory, nothing expanded."""
    _, arrays, header = BASES[0]
    path = tmp_path / "bomb.npz"
    rows = 200 * 1024**2 // 8
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in {**arrays, "header": np.frombuffer(json.dumps(header).encode(),
                                                              np.uint8)}.items():
            if name != "physics":
                with archive.open(f"{name}.npy", "w") as f:
                    np.lib.format.write_array(f, array)
        with archive.open("physics.npy", "w") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f8", "fortran_order": False, "shape": (rows, 1)})
            chunk = bytes(1024**2)
            for _ in range(200):
                f.write(chunk)
    assert path.stat().st_size < 1024**2
    tracemalloc.start()
    start = time.perf_counter()
    try:
        message = load_outcome(path.read_bytes(), tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message is not None and "would expand" in message, message
    assert peak < 16 * 1024**2, f"loading took {peak / 1024**2:.0f} MiB"
    assert time.perf_counter() - start < 5


def test_a_zip_directory_claiming_gigabytes_is_refused(tmp_path):
    """A size field says 4 GiB: past the absolute cap, whatever the file's size."""
    data = bytearray(BASES[0][0])
    entry = data.find(b"PK\x01\x02")  # the first central directory entry
    data[entry + 24:entry + 28] = struct.pack("<I", 2**32 - 1)
    message = load_outcome(bytes(data), tmp_path)
    assert message is not None and "would expand" in message, message
