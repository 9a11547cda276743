"""`rolltape export --to lerobot`: the LeRobotDataset v3 folders rolltape writes (pyarrow +
PyAV) are loaded by `lerobot` itself, offline, in its own virtual environment
(.venv-lerobot, made by scripts/setup.sh --test: lerobot needs Python 3.12), and what it
reads is compared with the tapes, a fresh gym.make and rolltape's own render."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

from conftest import ENV_ID, ROOT, run_cli
from rolltape import RenderRequest, Run, Tape, UsageError, evaluate, export, render

LEROBOT_PYTHON = Path(os.environ.get("LEROBOT_VENV", ROOT / ".venv-lerobot")) / "bin" / "python"
READER = ROOT / "tests" / "assets" / "lerobot_reader.py"
STEPS = 30


def read_with_lerobot(root: Path, repo_id: str, frames: list[int], out: Path) -> dict:
    """What `LeRobotDataset(repo_id, root=root)` gives, read in lerobot's own venv."""
    assert LEROBOT_PYTHON.is_file(), "run `bash scripts/setup.sh --test` (it makes .venv-lerobot)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(out.parent / "hf-home")}  # nothing fetched, nothing cached elsewhere
    done = subprocess.run([str(LEROBOT_PYTHON), str(READER), str(root), repo_id, str(out),
                           *map(str, frames)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def cheetah_run(ppo_checkpoint, tmp_path_factory):
    model, stats = ppo_checkpoint
    out = tmp_path_factory.mktemp("lerobot") / "cheetah"
    evaluate(ENV_ID, f"sb3:{model}", vecnormalize=str(stats), episodes=2, seed=21,
             max_episode_steps=STEPS, out=out)
    return Run.load(out)


@pytest.fixture(scope="module")
def exported(cheetah_run, tmp_path_factory):
    """The run exported with two cameras, and what lerobot reads of it."""
    out = tmp_path_factory.mktemp("lerobot") / "cheetah-ds"
    outcome = export(cheetah_run, to="lerobot", out=out, cameras=("default", "track:torso"),
                     width=96, height=64, workers=2)
    frames = [0, 7, STEPS + 4]  # two frames of episode 0, one of episode 1
    read = read_with_lerobot(out, "rolltape/cheetah-ds", frames, out.parent / "read.npz")
    return outcome, out, read, frames


def test_lerobot_reads_what_the_tapes_hold(cheetah_run, exported):
    outcome, out, read, _ = exported
    assert outcome.episodes == 2 and not outcome.left_out
    assert str(read["codebase_version"]) == "v3.0"
    assert int(read["len"]) == 2 * STEPS and int(read["episodes"]) == 2
    fps = int(read["fps"])
    assert fps == 20  # HalfCheetah's render_fps
    features = json.loads(str(read["features"]))
    assert features["observation.state"]["shape"] == [17]
    assert features["action"]["shape"] == [6]
    assert features["observation.images.default"]["shape"] == [64, 96, 3]
    assert features["observation.images.track_torso"]["info"]["video.codec"] == "av1"
    assert {"next.reward", "next.done", "next.success", "timestamp", "frame_index",
            "episode_index", "index", "task_index"} <= set(features)
    assert json.loads(str(read["tasks"])) == [ENV_ID]
    np.testing.assert_array_equal(read["index"], np.arange(2 * STEPS))
    same_stats_as_lerobots_recorder(read)
    # timestamp = frame_index / fps, frame for frame
    np.testing.assert_allclose(read["timestamp"], read["frame_index"] / fps, rtol=0,
                               atol=1e-6)
    for k, episode in enumerate(cheetah_run.results.episodes):
        rows = read["episode_index"] == k
        tape = Tape.load(cheetah_run.tape_path(episode))
        np.testing.assert_array_equal(read["frame_index"][rows], np.arange(tape.length))
        # Every frame's state is what a fresh gym.make gives for the tape's seed and actions.
        env = gym.make(ENV_ID, max_episode_steps=STEPS)
        obs, _ = env.reset(seed=tape.seed)
        states = [obs]
        for action in tape.actions[:-1]:
            obs, *_ = env.step(action)
            states.append(obs)
        np.testing.assert_array_equal(read["observation_state"][rows],
                                      np.asarray(states, dtype=np.float32))
        np.testing.assert_array_equal(read["action"][rows], tape.actions.astype(np.float32))
        np.testing.assert_array_equal(read["next_reward"][rows],
                                      tape.rewards.astype(np.float32))
        np.testing.assert_array_equal(read["next_done"][rows],
                                      tape.terminated | tape.truncated)
        assert read["next_done"][rows][-1] and not read["next_done"][rows][:-1].any()


def same_stats_as_lerobots_recorder(read: dict) -> None:
    """meta/stats.json holds what lerobot's own recorder pools from the episodes'
    statistics (its aggregate_stats, one episode after another), number for number."""
    pooled = [k for k in read if k.startswith("pooled__")]
    assert {k.split("__")[1] for k in pooled} >= {"observation.state", "action", "next.reward"}
    for key in pooled:
        np.testing.assert_array_equal(read[key.replace("pooled__", "stats__", 1)], read[key],
                                      err_msg=key)


def test_decoded_frames_are_rolltapes_render_frames(cheetah_run, exported, tmp_path):
    _, _, read, frames = exported
    for k, episode in enumerate(cheetah_run.results.episodes):
        pngs = str(tmp_path / f"ep{k}") + "/"
        render([RenderRequest(str(cheetah_run.tape_path(episode)), (pngs,), width=96,
                              height=64, cameras=("default", "track:torso"),
                              layout="separate")])
        for index in frames:
            if index // STEPS != k:
                continue
            step = index % STEPS
            assert float(read[f"timestamp_{index}"]) == pytest.approx(step / 20, abs=1e-6)
            for camera, folder in (("default", "default"), ("track_torso", "track-torso")):
                drawn = [np.asarray(Image.open(tmp_path / f"ep{k}-{folder}" /
                                               f"frame_{f:06d}.png"), dtype=np.int16)
                         for f in range(STEPS + 1)]
                decoded = read[f"image_{index}_observation.images.{camera}"].astype(np.int16)
                errors = [np.abs(decoded - d).mean() for d in drawn]
                assert errors[step] < 8, (camera, index, errors[step])  # AV1 at crf 30
                # Among the episode's frames, this step's is one of the closest (within the
                # codec's noise: where the robot barely moves, neighbours look alike).
                assert errors[step] <= min(errors) + 1.0, (camera, index, errors)


def test_a_suite_run_is_one_dataset_with_a_task_per_episode(tmp_path, monkeypatch):
    manifest = tmp_path / "suite.yaml"
    manifest.write_text(
        "cheetahs:\n"
        "  episodes: 2\n"
        f"  max_episode_steps: {STEPS}\n"
        "  tasks:\n"
        f"    forward: {ENV_ID}\n"
        "    backward:\n"
        f"      env: {ENV_ID}\n"
        "      kwargs: {forward_reward_weight: -1.0}\n")
    evaluate(suite=str(manifest), seed=5, out=tmp_path / "run")
    run = Run.load(tmp_path / "run")
    # Episode rows are written as they come, in batches: 3 and 1 here.
    monkeypatch.setattr("rolltape.datasets.lerobot._RowWriter.BATCH", 3)
    outcome = export(run, to="lerobot", out=tmp_path / "ds", dataset_id="me/cheetahs")
    assert outcome.episodes == 4
    read = read_with_lerobot(tmp_path / "ds", "me/cheetahs", [0, 2 * STEPS + 1],
                             tmp_path / "read.npz")
    tasks = json.loads(str(read["tasks"]))
    assert sorted(tasks) == ["cheetahs/backward", "cheetahs/forward"]
    assert int(read["len"]) == 4 * STEPS
    for k, episode in enumerate(run.results.episodes):
        rows = read["episode_index"] == k
        assert {tasks[i] for i in read["task_index"][rows]} == {episode.key.task_name}
        tape = Tape.load(run.tape_path(episode))
        np.testing.assert_array_equal(read["next_reward"][rows], tape.rewards.astype(np.float32))
    assert str(read["task_of_0"]) == run.results.episodes[0].key.task_name
    same_stats_as_lerobots_recorder(read)  # pooled over 4 episodes of two tasks
    assert str(read[f"task_of_{2 * STEPS + 1}"]) == run.results.episodes[2].key.task_name


def test_a_classic_control_run_reads_back_with_lerobots_own_statistics(tmp_path):
    """Not MuJoCo: Pendulum (pygame's frames), its camera and its statistics as lerobot
    itself reads and pools them."""
    evaluate("Pendulum-v1", "random", episodes=3, seed=4, max_episode_steps=STEPS,
             out=tmp_path / "run", report=False)
    run = Run.load(tmp_path / "run")
    outcome = export(run, to="lerobot", out=tmp_path / "ds", cameras=("default",))
    assert outcome.episodes == 3 and not outcome.left_out
    read = read_with_lerobot(tmp_path / "ds", "rolltape/ds", [STEPS + 2], tmp_path / "r.npz")
    assert int(read["len"]) == 3 * STEPS and read["observation_state"].shape == (3 * STEPS, 3)
    for k, episode in enumerate(run.results.episodes):
        tape = Tape.load(run.tape_path(episode))
        # A one-number action is a scalar column, as lerobot reads a feature of shape (1,).
        np.testing.assert_array_equal(read["action"][read["episode_index"] == k],
                                      tape.actions.reshape(-1).astype(np.float32))
    assert read[f"image_{STEPS + 2}_observation.images.default"].shape == (500, 500, 3)
    same_stats_as_lerobots_recorder(read)


def test_what_lerobot_cannot_hold_is_refused_in_one_line(cheetah_run, tmp_path):
    discrete = tmp_path / "cartpole"
    evaluate("CartPole-v1", "random", episodes=1, seed=0, out=discrete)
    result = run_cli("export", str(discrete), "--to", "lerobot", "--out", str(tmp_path / "d"))
    assert result.returncode == 2, result.stderr
    assert "Discrete actions (integers 0..1)" in result.stderr
    assert "stores them as they are (int64)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
    result = run_cli("export", str(cheetah_run.path), "--to", "lerobot", "--out",
                     str(tmp_path / "d"), "--camera", "nope")
    assert result.returncode == 2 and "has no camera 'nope'" in result.stderr, result.stderr
    assert not (tmp_path / "d").exists() and not list(tmp_path.glob(".d.*"))
    result = run_cli("export", str(cheetah_run.path), "--to", "lerobot")
    assert result.returncode == 2 and "needs --out" in result.stderr
    with pytest.raises(UsageError, match=r"image \(a Box of shape \(64, 64, 3\)\)"):
        from rolltape.datasets.lerobot import check_spaces

        check_spaces({(None, None): (gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
                                     gym.spaces.Box(-1, 1, (2,)), None, 30)}, cheetah_run)
