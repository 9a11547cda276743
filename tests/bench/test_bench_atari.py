"""The cheap parts of the Atari benchmarks (rolltape.bench.atari): the workload's sizes,
the env and wrapper it names, and the bare render loop pass 2 is measured against, which
draws every frame of a tape (ALE's screen, no GL) into an mp4. No benchmark runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape import Tape, evaluate
from rolltape.bench.atari import ATARI_ID, WRAPPER, atari_sizes, bare_atari_render_child
from rolltape.bench.common import FULL, QUICK, Context
from rolltape.pass1.wrappers import wrapper_entries
from rolltape.pass2.encode import read_frames

STEPS = 8


def test_the_workload_is_smaller_in_quick_runs_and_alternates_in_real_ones(tmp_path: Path):
    quick = atari_sizes(Context(QUICK, tmp_path, print))
    full = atari_sizes(Context(FULL, tmp_path, print))
    assert all(0 < q <= f for q, f in zip(quick, full)) and quick != full
    assert full[2] >= 2  # a real run alternates A B B A


def test_the_enjoy_loop_wraps_the_env_as_rolltapes_atari_preset():
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    assert gym.spec(ATARI_ID).id == ATARI_ID
    [atari, stack] = wrapper_entries(("atari",), frame_stack=4)
    module, _, name = WRAPPER.rpartition(".")  # as rl-zoo3 reads its env_wrapper
    assert atari["target"] == f"{module}:{name}" and stack["kwargs"] == {"n_stack": 4}


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = evaluate(ATARI_ID, "random", episodes=1, seed=4, max_episode_steps=STEPS,
                   out=tmp_path_factory.mktemp("atari") / "run", report=False, viewer=False)
    return run.tape_path(run.results.episodes[0])


def test_the_bare_loop_draws_every_frame_of_the_tape(tape: Path, tmp_path: Path):
    out = tmp_path / "bare.mp4"
    result = bare_atari_render_child(str(tape), str(out))
    frames = len(Tape.load(tape).actions) + 1
    assert frames == STEPS + 1 and result["frames"] == frames and result["loop_s"] > 0
    decoded = list(read_frames(out))
    assert len(decoded) == frames and decoded[0].shape == (210, 160, 3)  # ALE's screen
