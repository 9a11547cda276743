"""The cheap parts of the pass-2 benchmarks (rolltape.bench.pass2): the presets measured
are rolltape's own, and the bare render loop they are measured against (run as the bench
runs it: a fresh interpreter with a GL backend) draws every frame of a tape into an mp4.
No benchmark runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape import Tape, evaluate
from rolltape.bench.common import ENV_ID, run_child
from rolltape.bench.pass2 import PRESETS, bare_render_child
from rolltape.pass2.encode import read_frames
from rolltape.pass2.replay import QUALITY

STEPS = 6


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = evaluate(ENV_ID, "random", episodes=1, seed=2, max_episode_steps=STEPS,
                   out=tmp_path_factory.mktemp("tape") / "run", report=False, viewer=False)
    return run.tape_path(run.results.episodes[0])


def test_the_presets_measured_are_rolltapes_from_best_to_fastest():
    assert set(PRESETS) == set(QUALITY)
    assert PRESETS[0] == "full" and PRESETS[-1] == "fast"


def test_the_bare_loop_draws_every_frame_of_the_tape(tape: Path, tmp_path: Path):
    out = tmp_path / "bare.mp4"
    result, wall = run_child(bare_render_child, {"tape": str(tape), "width": 64, "height": 48,
                                                 "out": str(out)}, tmp_path, gl="egl")
    frames = len(Tape.load(tape).actions) + 1
    assert frames == STEPS + 1
    assert result["frames"] == frames
    decoded = list(read_frames(out))
    assert len(decoded) == frames and decoded[0].shape == (48, 64, 3)
    assert 0 < result["loop_s"] < wall and result["cpu_s"] > 0
