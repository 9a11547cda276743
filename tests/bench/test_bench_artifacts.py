"""The artifact benchmarks (rolltape.bench.artifacts): gif vs mp4 on a tiny config (six
real 64x48 frames, two repetitions), whose row follows from its own timings and whose two
files hold every frame; and the report build timed twice, in this process and in the
fresh interpreter the bench uses, on a tiny toy run. The timings are never asserted."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rolltape import evaluate
from rolltape.bench.artifacts import (
    REPORT_BUDGET_S,
    _build_report_twice,
    _time_report_build,
    bench_gif_vs_mp4,
)
from rolltape.bench.common import QUICK, Context
from rolltape.pass2.encode import count_frames

TOY = "tests.assets.toy_envs:SuccessToy-v0"
FRAMES, REPS = 6, 2


@pytest.fixture(scope="module")
def gif(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    config = replace(QUICK, gif_frames=FRAMES, gif_reps=REPS, width=64, height=48)
    work = tmp_path_factory.mktemp("bench")
    return bench_gif_vs_mp4(Context(config, work, lambda line: None)), work


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evaluate(TOY, "random", episodes=3, seed=0, baseline="random",
                    out=tmp_path_factory.mktemp("run") / "run", report=False,
                    viewer=False).path


def test_the_gif_row_is_the_ratio_of_median_write_times(gif):
    result, _ = gif
    raw = result["raw"]
    assert len(raw["mp4_s"]) == len(raw["gif_s"]) == REPS
    assert result["ratio"] == pytest.approx(statistics.median(raw["gif_s"])
                                            / statistics.median(raw["mp4_s"]), rel=1e-12)
    assert (result["op"], result["target"]) == ("<=", 2.0)
    assert result["passed"] is (result["ratio"] <= 2.0)


def test_both_files_hold_every_frame_drawn(gif):
    result, work = gif
    raw = result["raw"]
    assert raw["frames"] == FRAMES and raw["size"] == [64, 48]
    [folder] = [p for p in work.iterdir() if p.name.endswith("gif-vs-mp4")]
    for fmt in ("mp4", "gif"):
        path = folder / f"episode.{fmt}"
        assert path.stat().st_size == raw["bytes"][fmt]
        assert count_frames(path) == FRAMES, fmt


def test_the_report_is_built_twice_into_the_run_folder(toy_run: Path):
    timed = _build_report_twice(str(toy_run))
    assert timed["html_bytes"] == (toy_run / "report.html").stat().st_size > 0
    assert all(timed[k] >= 0 for k in ("import_s", "first_s", "second_s"))


def test_the_report_build_in_a_fresh_interpreter_fits_in_its_process(toy_run: Path,
                                                                     tmp_path: Path):
    timed = _time_report_build(toy_run, tmp_path)
    inside = timed["import_s"] + timed["first_s"] + timed["second_s"]
    assert 0 < inside < timed["process_wall_s"]
    assert timed["html_bytes"] == (toy_run / "report.html").stat().st_size
    assert REPORT_BUDGET_S == 10.0  # the absolute budget
