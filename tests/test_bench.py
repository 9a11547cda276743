"""`rolltape bench --quick`: every benchmark runs and reports a ratio and a target.

Not a timed test: the ratios themselves are never asserted (they depend on the machine
and its load); only that each benchmark ran and wrote what the report promises.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import run_cli
from rolltape import bench
from rolltape.errors import UsageError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HAS_RAY = importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class QuickBench:
    """`rolltape bench --quick` over every benchmark, as two commands at once (halves of
    the list). The suite's longest test took about 4 minutes alone; most of it is
    interpreters and torch starting in bench children, which leave a core idle."""

    outs: list[Path]
    procs: list[subprocess.CompletedProcess[str]]
    halves: list[list[str]]

    @property
    def benchmarks(self) -> dict[str, dict]:
        merged: dict[str, dict] = {}
        for out in self.outs:
            merged.update(json.loads((out / "bench.json").read_text())["benchmarks"])
        return merged


def _halves() -> list[list[str]]:
    names = list(bench.BENCHMARKS)
    first = [n for i, n in enumerate(names) if i % 2 == 0]
    return [first, [n for n in names if n not in first]]


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory: pytest.TempPathFactory, warp_kernels: Path) -> QuickBench:
    halves = _halves()
    root = tmp_path_factory.mktemp("bench")
    outs = [root / f"out{i}" for i in range(len(halves))]
    running = [subprocess.Popen([sys.executable, "-m", "rolltape.cli", "bench", "--quick",
                                 "--only", ",".join(half), "--out", str(out)], cwd=root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "COLUMNS": "200"})
               for half, out in zip(halves, outs)]
    procs = []
    for proc in running:
        stdout, stderr = proc.communicate(timeout=1200)
        procs.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return QuickBench(outs, procs, halves)


def test_quick_bench_reports_every_benchmark(quick_bench: QuickBench) -> None:
    for out, proc, half in zip(quick_bench.outs, quick_bench.procs, quick_bench.halves):
        ray_missing = "ray_vs_local" in half and not HAS_RAY
        assert proc.returncode == (1 if ray_missing else 0), proc.stdout + proc.stderr
        report = json.loads((out / "bench.json").read_text())
        assert report["quick"] is True
        assert list(report["benchmarks"]) == half  # in the standard order
        for name in half:
            assert name in proc.stdout  # the table names every benchmark
    results = quick_bench.benchmarks
    assert sorted(results) == sorted(bench.BENCHMARKS)
    for name, result in results.items():
        if name == "ray_vs_local" and not HAS_RAY:  # an optional extra
            assert "ray" in result["error"].lower()
            continue
        assert "error" not in result, f"{name}: {result.get('error')}"
        for key in ("ratio", "value", "target"):
            assert isinstance(result[key], float) and math.isfinite(result[key]), (name, key)
        assert result["op"] in ("<=", ">=")
        assert isinstance(result["passed"], bool)
        assert result["raw"], name


def test_quick_bench_new_benchmarks_report_what_they_promise(quick_bench: QuickBench) -> None:
    """Shapes and correctness checks only; the ratios are never asserted."""
    b = quick_bench.benchmarks
    quick = bench.QUICK

    atari = b["atari_pass1"]["raw"]
    assert atari["same_episodes"] is True  # rl-zoo3's enjoy loop played the same episodes
    assert len(atari["episodes_rolltape"]) == atari["episodes"]
    assert b["atari_pass2"]["raw"]["fps"] > 0 and b["atari_pass2"]["target"] == 1.0

    presets = b["render_quality"]["raw"]["presets"]
    assert list(presets) == ["full", "balanced", "fast"]
    for preset in presets.values():
        assert preset["fps"] > 0 and math.isfinite(preset["ratio_to_bare_full"])
    assert b["render_quality"]["raw"]["bare_fps"] > 0
    assert b["render_quality"]["raw"]["frames"] == quick.quality_steps + 1
    assert b["render_quality"]["target"] == 6.0

    workers = b["pass1_workers"]["raw"]
    assert workers["tapes_identical"] is True  # bitwise, every array of every tape
    assert workers["tapes_compared"] == quick.workers_episodes
    assert len(workers["pass1_s_workers1"]) == len(workers["pass1_s_workers2"]) == \
        quick.workers_reps

    k = b["pass2_workers"]["raw"]
    assert k["k1"] and k["k2"] and k["k1"][0]["frames"] == 2 * (quick.p2_workers_steps + 1)

    seg = b["pass2_segments"]["raw"]
    assert seg["segments"] == 2
    assert seg["joined_frames_counted"] == quick.segments_steps + 1
    assert seg["joined_has_steps_plus_1_frames"] is True

    if HAS_RAY:
        ray = b["ray_vs_local"]
        assert ray["gating"] is False  # Ray's start-up dominates a tiny run
        assert ray["raw"]["same_returns_and_lengths"] is True
        assert ray["raw"]["ray"]["wall_s"] > 0 and ray["raw"]["local"]["wall_s"] > 0

    batch = b["batch_render"]  # MuJoCo Warp vs OpenGL workers, the same tapes and size
    assert batch["raw"]["size"] == [128, 128] and batch["target"] == 10.0
    assert batch["gating"] is (batch["raw"]["device"] != "cpu")  # informational on a CPU
    assert batch["raw"]["fps"] > 0 and batch["raw"]["classic_fps"] > 0
    assert batch["raw"]["batch"][0]["frames"] == batch["raw"]["classic"][0]["frames"] == \
        bench.pass2.BATCH_WORK[True][0] * (bench.pass2.BATCH_WORK[True][1] + 1)

    warp = b["mjwarp_pass1"]  # pass 1 on MuJoCo Warp vs CPU workers, same policy and seeds
    episodes, steps = bench.pass1.MJWARP_WORK["quick"]
    assert (warp["raw"]["episodes"], warp["raw"]["steps"]) == (episodes, steps)
    assert warp["target"] == 20.0 and warp["gating"] is False  # --quick: informational
    assert warp["ratio"] == pytest.approx(warp["raw"]["pass1_s_cpu"][0]
                                          / warp["raw"]["pass1_s_mjwarp"][0])
    assert warp["raw"]["flip_tapes"] == episodes and 0 <= warp["raw"]["flipped"] <= episodes

    gif = b["gif_vs_mp4"]
    assert gif["raw"]["frames"] == quick.gif_frames
    assert gif["raw"]["bytes"]["gif"] > 0 and gif["raw"]["bytes"]["mp4"] > 0

    rep = b["report_build"]  # an absolute budget in seconds, not a ratio
    assert (rep["unit"], rep["op"], rep["target"]) == ("s", "<=", 10.0)
    assert rep["value"] == pytest.approx(rep["raw"]["import_s"] + rep["raw"]["first_s"])
    assert rep["raw"]["videos"] == 3

    suite = b["suite_workers"]["raw"]  # 4 tasks x 2 episodes in --quick
    assert suite["tapes_identical"] is True and suite["tapes_compared"] == 4 * 2
    assert b["suite_aggregation"]["raw"]["episodes"] == 4 * 2
    assert b["suite_aggregation"]["target"] == 0.01

    step = b["served_step_overhead"]["raw"]  # judged: served - a minimal pyzmq server
    assert step["minimal_server_step_us"] > 0 and math.isfinite(step["server_code_in_process_us"])
    assert b["served_step_overhead"]["value"] == pytest.approx(
        step["served_step_us"] - step["minimal_server_step_us"])
    assert step["overhead_us"] == pytest.approx(step["served_step_us"] - step["local_step_us"])
    assert b["served_eval_pass1"]["raw"]["tapes_identical"] is True
    assert b["served_concurrent_clients"]["value"] == 0.0  # no episode differs
    policy = b["served_policy_pass1"]["raw"]  # a served policy: its per-call cost, split
    assert policy["tapes_identical"] is True  # several episodes at once, and one at a time
    assert set(policy["pass1_s"]) == {"local", "served", "served_one_at_a_time"}
    assert policy["one_at_a_time_ratio"] > 0
    assert policy["served_call_us"] > policy["bare_websocket_round_trip_us"] > 0
    assert policy["beyond_bare_round_trip_us"] == pytest.approx(
        policy["served_call_us"] - policy["server_infer_us"]
        - policy["bare_websocket_round_trip_us"])

    camera = b["export_camera"]  # judged against render + converting its videos to AV1
    raw = camera["raw"]  # every frame render drew was converted (render draws steps + 1)
    assert raw["converted_frames"] == raw["episodes"] * (raw["steps"] + 1)
    assert camera["value"] > raw["render_alone_ratio"] > 0

    small = b["small_job"]["raw"]  # seed 000's workload: rolltape eval vs seed 000's script
    assert small["env"] == "Pusher-v5" and len(small["wall_s"]["rolltape"]) == 1
    assert small["seed000"]["replay_verified"] is True  # its own check: reward and frames
    assert small["seed000"]["frames"] == quick.e2e_steps + 1 == small["rolltape_video"]["frames"]
    assert small["rolltape_video"]["verified"] is True
    assert b["end_to_end"]["raw"]["rolltape_render_workers"] == 0  # rolltape's default
    assert b["end_to_end"]["raw"]["render_early_same_returns"] is True


def test_headroom_puts_every_target_at_one() -> None:
    def r(value: float, target: float, op: str) -> dict[str, object]:
        return {"value": value, "target": target, "op": op}

    assert bench._headroom(r(3.0, 6.0, ">=")) == pytest.approx(0.5)
    assert bench._headroom(r(0.5, 1.0, "<=")) == pytest.approx(2.0)
    assert bench._headroom(r(-3.0, 50.0, "<=")) == 100.0  # a negative MB difference: clipped
    assert bench._headroom(r(0.0, 1.7, ">=")) == 0.01


def test_quick_bench_draws_a_png(quick_bench: QuickBench) -> None:
    from PIL import Image

    for out in quick_bench.outs:
        png = out / "bench.png"
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) > 100


def test_only_rejects_unknown_names_before_any_work(tmp_path: Path) -> None:
    proc = run_cli("bench", "--only", "pass1_overhead,nope", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "pass1_overhead" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_select_keeps_the_standard_order() -> None:
    assert bench.select(None) == list(bench.BENCHMARKS)
    assert bench.select("end_to_end, pass1_overhead") == ["pass1_overhead", "end_to_end"]
    with pytest.raises(UsageError):
        bench.select("")
