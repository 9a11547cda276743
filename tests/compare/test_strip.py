"""One video across checkpoints (rolltape.compare.strip): the same seed replayed by each
checkpoint in turn (each part verified by pass 2), joined into strip.mp4 with a label per
checkpoint; the seed is the last checkpoint's median episode; a replay that cannot be made
is reported, not raised. Real runs of the 5-step toy env of ``tests/assets/toy_envs.py``,
whose 16x16 frames cost nothing to draw."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rolltape import Run, Tape, evaluate
from rolltape.compare.runs import LoadedRun
from rolltape.compare.strip import STRIP, make_strip, pick_seed
from rolltape.pass2.encode import read_frames

TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Random actions, 5 episodes on seeds 0..4."""
    return evaluate(TOY, "random", episodes=5, seed=0, out=tmp_path_factory.mktemp("run") / "a",
                    report=False, viewer=False)


def checkpoints(early: Run, final: Run) -> list[LoadedRun]:
    """Two 'checkpoints' of a sweep: one numbered, one not (the strip reads only their
    rows and tapes, so one run may stand for both)."""
    return [LoadedRun.of(early, "steps-100", 100), LoadedRun.of(final, "final", None)]


@pytest.fixture(scope="module")
def made(run: Run, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Path, list[LoadedRun], dict[str, Any]]:
    out = tmp_path_factory.mktemp("strip")
    runs = checkpoints(run, run)
    return out, runs, make_strip(out, runs, TOY, options={})


def test_the_seed_is_the_last_checkpoints_median_episode(made):
    _, runs, _ = made
    key = pick_seed(runs)
    returns = {k: e.ret for k, e in runs[-1].rows.items()}
    below = [k for k, r in returns.items() if r < returns[key]]
    above = [k for k, r in returns.items() if r > returns[key]]
    assert len(below) == len(above) == 2  # 5 distinct returns: the middle one


def test_the_strip_is_every_checkpoints_verified_replay_in_order(made):
    out, runs, strip = made
    key = pick_seed(runs)
    assert strip["path"] == STRIP and strip["seed"] == key[2] and strip["task"] is None
    assert strip["verified"] is True and strip["problems"] == []
    assert strip["labels"] == ["100 steps", "final"]  # steps when numbered, else the label
    frames = len(Tape.load(runs[0].run.tape_path(runs[0].rows[key])).actions) + 1
    assert [p["frames"] for p in strip["parts"]] == [frames, frames]
    assert all(p["verified"] for p in strip["parts"])
    decoded = list(read_frames(out / STRIP))
    assert len(decoded) == 2 * frames and decoded[0].shape == (16, 16, 3)


def test_the_parts_folder_goes_when_the_strip_is_done(made):
    out, _, _ = made
    assert not list(out.glob(".strip-parts-*"))


def test_a_replay_that_cannot_be_made_is_reported_not_raised(run, tmp_path):
    runs = checkpoints(run, Run.load(shutil.copytree(run.path, tmp_path / "copy")))
    key = pick_seed(runs)
    tape = runs[1].run.tape_path(runs[1].rows[key])
    tape.unlink()
    strip = make_strip(tmp_path, runs, TOY, options={})
    assert strip["path"] is None and strip["verified"] is False and strip["seed"] == key[2]
    [problem] = strip["problems"]
    assert f"Tape '{tape}' does not exist" in problem
    assert not (tmp_path / STRIP).exists() and not list(tmp_path.glob(".strip-parts-*"))
