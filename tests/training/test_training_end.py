"""Issue 34, item 16: a training script that follows the README's TapeCallback snippet (it
never closes its env) ends with every recorded episode's video rendered, or with the
`rolltape render` command of each one left, which makes it; ``RecordTape.close`` returns in
about its ``close_timeout`` however many videos wait; ``training.json`` holds paths
relative to itself, so the folder can move.

Real parts throughout: SB3 PPO in a fresh interpreter, MuJoCo, render processes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from rolltape.training.background import RecordingWarning
from rolltape.training.record_tape import RecordTape

SMALL = {"width": 64, "height": 48}
_SCRIPT = """
import sys, torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
import rolltape.sb3

torch.set_num_threads(1)
venv = make_vec_env("InvertedPendulum-v5", n_envs=2, seed=0,
                    env_kwargs={"max_episode_steps": 20})
model = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu",
            policy_kwargs={"net_arch": [8]})
model.learn(96, callback=rolltape.sb3.TapeCallback(
    record_every=2, out=sys.argv[1], video_timeout=float(sys.argv[2]),
    record_options={"width": 64, "height": 48}))
"""  # as the README's snippet: the env is never closed


def _train(out: Path, video_timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(out), str(video_timeout)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MUJOCO_GL": "egl"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_training_ends_with_its_videos_rendered_or_their_commands_named(
        tmp_path: Path) -> None:
    """video_timeout=0: what is not rendered when training ends is named, each with the
    command that makes it (run here for the last one); the rest are rendered."""
    out = tmp_path / "train"
    done = _train(out, 0)
    said = " ".join(done.stderr.split())
    commands = re.findall(r"`(rolltape render [^`]+)`", said)
    assert "not rendered within video_timeout=0 s" in said and commands, said[-2000:]
    tapes = sorted((out / "videos").glob("*.npz"))
    assert len(tapes) >= 2
    for tape in tapes:  # the last recorded episode's included: rendered, or its command
        video = tape.with_name(f"{tape.stem.split('-part')[0]}.mp4")
        assert video.is_file() or any(str(tape) in c for c in commands), (tape, said)
    last = shlex.split(commands[-1])
    target = Path(last[last.index("--out") + 1])
    run = subprocess.run([sys.executable, "-m", "rolltape.cli", *last[1:], "--width", "64",
                          "--height", "48"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MUJOCO_GL": "egl"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert target.is_file() and target.stat().st_size > 0
    moved = tmp_path / "moved"  # training.json's paths are relative: the folder moves
    shutil.move(out, moved)
    record = json.loads((moved / "training.json").read_text())
    paths = [row[k] for row in record["recorded"] for k in ("tape", "video") if row.get(k)]
    assert paths and all(not Path(p).is_absolute() and (moved / p).is_file() for p in paths)


def test_close_returns_in_about_its_timeout_with_videos_waiting(tmp_path: Path) -> None:
    env = RecordTape(gym.make("InvertedPendulum-v5", max_episode_steps=200), tmp_path,
                     episode_trigger=lambda e: True, close_timeout=0.5, on_full="block",
                     **SMALL)
    for episode in range(6):
        env.reset(seed=episode)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    assert len(env.renderer.pending()) >= 3
    started = time.monotonic()
    with pytest.warns(RecordingWarning, match="rolltape render .* --out"):
        env.close()
    assert time.monotonic() - started < 0.5 + 5 + 2  # the timeout, the workers stopping
