"""What every benchmark shares (rolltape.bench.common): the result dict and its verdict,
the sizes of a run, the scratch folders, a child's environment, children run in a fresh
interpreter, worker tracking, and tapes compared bit for bit. No benchmark is run."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from rolltape import evaluate
from rolltape.bench.common import (
    FULL,
    QUICK,
    Config,
    Context,
    child_env,
    compare_tapes,
    cpu_seconds,
    interleaved,
    median,
    median_rate,
    peak_rss_kb,
    result,
    run_child,
    run_seconds,
    track_workers,
)


def judged(ratio: float, target: float, op: str, **extra) -> dict:
    return result(title="t", ratio=ratio, target=target, op=op, ratio_of="a / b",
                  baseline="b", measured="a", raw={"x": 1}, **extra)


@pytest.mark.parametrize(("value", "target", "op", "passed"), [
    (2.0, 1.7, ">=", True), (1.7, 1.7, ">=", True), (1.69, 1.7, ">=", False),
    (1.0, 1.05, "<=", True), (1.05, 1.05, "<=", True), (1.06, 1.05, "<=", False),
])
def test_a_result_passes_when_its_value_meets_the_target(value, target, op, passed):
    assert judged(value, target, op)["passed"] is passed


def test_a_result_judges_its_value_when_given_instead_of_the_ratio():
    r = judged(3.0, 50.0, "<=", value=12.5, unit="MB", gating=False, notes=("n",))
    assert (r["ratio"], r["value"], r["unit"], r["passed"]) == (3.0, 12.5, "MB", True)
    assert r["gating"] is False and r["notes"] == ["n"]
    assert judged(3.0, 50.0, "<=", value=60)["passed"] is False


def test_a_result_holds_plain_floats_for_json():
    r = judged(np.float32(1.5), np.int64(2), ">=")  # type: ignore[arg-type]
    assert all(type(r[k]) is float for k in ("ratio", "value", "target"))
    assert type(r["passed"]) is bool and r["raw"] == {"x": 1}


def test_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5 and median([7]) == 7.0


def test_a_median_rate_is_frames_over_the_named_seconds():
    runs = [{"frames": 100, "wall_s": 2.0, "cpu_s": 4.0}, {"frames": 100, "wall_s": 1.0,
                                                           "cpu_s": 5.0},
            {"frames": 90, "wall_s": 3.0, "cpu_s": 3.0}]
    assert median_rate(runs) == 50.0 and median_rate(runs, "cpu_s") == 25.0


def test_repetitions_interleave_a_b_b_a():
    assert list(interleaved(3, ("a", "b"))) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"),
                                                (2, "a"), (2, "b")]
    assert [arm for _, arm in interleaved(2, [1, 2, 3])] == [1, 2, 3, 3, 2, 1]
    assert list(interleaved(0, ("a", "b"))) == []


def test_quick_sizes_are_no_larger_than_full_ones():
    assert (FULL.quick, QUICK.quick) == (False, True)
    for f in fields(Config):
        full, quick = getattr(FULL, f.name), getattr(QUICK, f.name)
        if isinstance(full, int) and not isinstance(full, bool):
            assert 0 < quick <= full, f.name
    assert QUICK.video_size == FULL.video_size  # pass 1's time cannot depend on it


def test_each_scratch_folder_is_new_and_numbered(tmp_path: Path):
    ctx = Context(QUICK, tmp_path / "work", log=lambda line: None)
    first, second, third = ctx.dir("a"), ctx.dir("a"), ctx.dir("b")
    assert [p.name for p in (first, second, third)] == ["01-a", "02-a", "03-b"]
    assert all(p.is_dir() and not any(p.iterdir()) for p in (first, second, third))


def test_the_bench_backend_falls_back_to_osmesa(tmp_path: Path):
    assert Context(QUICK, tmp_path, print, backend="egl").backends() == ("egl", "osmesa")
    assert Context(QUICK, tmp_path, print, backend="osmesa").backends() == ("osmesa",)


def test_a_child_gets_no_gl_backend_unless_named_and_an_absolute_pythonpath(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "glx")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", "/abs/lib"]))
    env = child_env()
    assert "MUJOCO_GL" not in env and "PYOPENGL_PLATFORM" not in env
    assert env["PYTHONPATH"].split(os.pathsep) == [os.path.abspath("src"), "/abs/lib"]
    assert child_env("osmesa")["MUJOCO_GL"] == "osmesa"


def test_proc_readings_of_this_process_and_of_none():
    kb, cpu = peak_rss_kb(os.getpid()), cpu_seconds(os.getpid())
    assert kb is not None and kb > 1000  # a Python with numpy holds megabytes
    assert cpu is not None and cpu > 0
    assert peak_rss_kb(2**22 + 1) is None and cpu_seconds(2**22 + 1) is None  # above pid_max


def _tape(folder: Path, name: str, **arrays: np.ndarray) -> Path:
    path = folder / f"{name}.npz"
    np.savez(path, header=np.frombuffer(name.encode(), np.uint8), **arrays)
    return path


def test_compare_tapes_is_bitwise(tmp_path: Path) -> None:
    a = np.array([0.1, 0.2])
    for name, arrays in (("a", {"x": a}), ("b", {"x": a.copy()}), ("c", {"x": np.nextafter(a, 1.0)}),
                         ("d", {"x": a.astype(np.float32)}), ("e", {"x": a, "y": a})):
        np.savez(tmp_path / f"{name}.npz", header=np.frombuffer(name.encode(), np.uint8),
                 **arrays)
    tapes = {n: tmp_path / f"{n}.npz" for n in "abcde"}
    assert compare_tapes([tapes["a"]], [tapes["b"]]) == []  # headers differ: ignored
    assert compare_tapes([tapes["a"]], [tapes["d"]]) == ["a.npz: x differs"]
    assert compare_tapes([tapes["a"]], [tapes["e"]])
    assert compare_tapes([tapes["a"]], [])
    assert compare_tapes([tapes["a"]], [tapes["c"]]) == ["a.npz: x differs"]  # 1 ulp


def test_a_child_runs_in_its_folder_and_returns_its_result(tmp_path: Path) -> None:
    _tape(tmp_path, "x", x=np.arange(3.0))
    _tape(tmp_path, "y", x=np.arange(3.0) + 1)
    # Relative paths: found only from the folder the child runs in.
    found, wall = run_child(compare_tapes, {"a": [Path("x.npz")], "b": [Path("y.npz")]},
                            tmp_path)
    assert found == ["x.npz: x differs"] and wall > 0


def test_a_failed_child_names_its_function_and_its_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as caught:
        run_child(compare_tapes, {"a": [Path("gone.npz")], "b": [Path("gone.npz")]}, tmp_path)
    message = str(caught.value)
    assert message.startswith("bench child compare_tapes failed") and "gone.npz" in message


def test_track_workers_records_each_worker_and_puts_everything_back(tmp_path: Path) -> None:
    from rolltape.executors import local

    original = local.spawn_worker
    with track_workers() as workers:
        run = evaluate("tests.assets.toy_envs:SuccessToy-v0", "random", episodes=1,
                       out=tmp_path / "run", report=False, viewer=False)
        assert local.spawn_worker is not original
    assert local.spawn_worker is original
    [worker] = [w for w in workers if w["target"] == "policy_worker"]
    assert worker["alive"] is False  # read a last time as it was stopped
    assert worker["peak_rss_kb"] > 1000 and worker["cpu_s"] > 0
    assert run_seconds(run, "pass1_s") == run.metadata["timings"]["pass1_s"] > 0

