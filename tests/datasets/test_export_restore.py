"""`rolltape export --mode restore`: each step is simulated from the MuJoCo state pass 1
recorded before it and camera frames are drawn from the recorded states themselves (what
`rolltape render --mode restore` draws); the observations stored are still checked against
pass 1's digests, so a step whose recorded state does not give pass 1's observation leaves
its episode out, named."""

from __future__ import annotations

import dataclasses
import json
import shutil

import minari
import numpy as np
import pyarrow.parquet as pq
from PIL import Image
from test_lerobot import read_with_lerobot
from test_minari import _fresh_replay

from conftest import ENV_ID, run_cli
from rolltape import RenderRequest, Run, Tape, evaluate, export, render

STEPS = 25


def _run(tmp_path) -> Run:
    out = tmp_path / "run"
    evaluate(ENV_ID, "random", episodes=2, seed=31, max_episode_steps=STEPS, out=out)
    return Run.load(out)


def test_restore_exports_pass_1s_observations_and_uses_the_recorded_states(tmp_path,
                                                                          monkeypatch):
    run = _run(tmp_path)
    outcome = export(run, to="minari", dataset_id="cheetah-restore-v0", out=tmp_path / "ds",
                     mode="restore")
    assert outcome.episodes == 2 and not outcome.left_out
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    data = minari.load_dataset("cheetah-restore-v0")
    assert data.storage.metadata["rolltape"]["mode"] == "restore"
    for episode, row in zip(data.iterate_episodes(), run.results.episodes):
        tape = Tape.load(run.tape_path(row))
        fresh = np.stack(_fresh_replay(ENV_ID, STEPS, tape))
        assert np.array_equal(episode.observations, fresh)
        assert np.array_equal(episode.rewards, tape.rewards)
    # The states are what restore steps from: one altered state (resim never reads it)
    # makes the step after it give another observation, and the episode is left out.
    copy = tmp_path / "altered"
    shutil.copytree(run.path, copy)
    altered = Run.load(copy)
    path = altered.tape_path(altered.results.episodes[1])
    tape = Tape.load(path)
    physics = tape.physics.copy()
    physics[9, 1 + 1] += 1e-3  # mjSTATE_INTEGRATION: time, then qpos; this is qpos[1]
    dataclasses.replace(tape, physics=physics).save(path)
    kept = export(altered, to="minari", dataset_id="a-v0", out=tmp_path / "a", mode="restore")
    assert kept.episodes == 1
    [(label, why)] = kept.left_out
    assert "episode 1" in label and why.startswith("step 9: "), why
    resim = export(altered, to="minari", dataset_id="b-v0", out=tmp_path / "b")
    assert resim.episodes == 2 and not resim.left_out


def test_restore_frames_are_renders_restore_frames(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "ds"
    export(run, to="lerobot", out=out, cameras=("default",), width=96, height=64,
           mode="restore", pick=[0])
    frames = [0, 12, STEPS - 1]
    read = read_with_lerobot(out, "rolltape/ds", frames, tmp_path / "read.npz")
    tape = run.tape_path(run.results.episodes[0])
    pngs = str(tmp_path / "png") + "/"
    render([RenderRequest(str(tape), (pngs,), width=96, height=64, mode="restore")])
    drawn = [np.asarray(Image.open(tmp_path / "png" / f"frame_{f:06d}.png"), dtype=np.int16)
             for f in range(STEPS + 1)]
    for index in frames:
        decoded = read[f"image_{index}_observation.images.default"].astype(np.int16)
        errors = [np.abs(decoded - d).mean() for d in drawn]
        assert errors[index] < 8, (index, errors[index])  # AV1 at crf 30
        assert errors[index] <= min(errors) + 1.0, (index, errors)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_frames"] == STEPS
    episodes = pq.read_table(next((out / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    assert [e["rolltape/seed"] for e in episodes] == [31]


def test_restore_needs_recorded_states(tmp_path):
    evaluate("CartPole-v1", "random", episodes=1, seed=0, out=tmp_path / "run")
    result = run_cli("export", str(tmp_path / "run"), "--to", "minari", "--id", "c-v0",
                     "--out", str(tmp_path / "ds"), "--mode", "restore")
    assert result.returncode == 2, result.stderr
    assert "holds no MuJoCo or ALE states" in result.stderr and "--mode resim" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").rglob("*c-v0*"))
