"""Seed 000's own code path (rolltape.bench.seed000), the baseline of ``small_job``: its
worker interpreters (request on stdin, last stdout line back as JSON, failures with their
stderr), its render program replaying actions into a video, and the promise that timing
the script costs what seed 000's costs: it imports nothing of rolltape. No benchmark runs
(the evaluation program needs a checkpoint: tests/test_bench.py runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape.bench import seed000
from rolltape.pass2.encode import read_frames


def test_a_child_reads_its_request_and_answers_its_last_line():
    program = ("import json\nreq = json.loads(input())\nprint('warming up')\n"
               "print(json.dumps({'doubled': req['x'] * 2}))")
    assert seed000._child(program, {"x": 21}, dict(os.environ), timeout=60) == {"doubled": 42}


def test_a_failed_child_raises_with_its_status_and_stderr():
    program = "import sys\nsys.stderr.write('the env would not build')\nsys.exit(3)"
    with pytest.raises(RuntimeError) as caught:
        seed000._child(program, {}, dict(os.environ), timeout=60)
    assert "seed-000 child exited with status 3" in str(caught.value)
    assert "the env would not build" in str(caught.value)


def test_the_render_program_replays_the_actions_and_earns_their_reward(tmp_path: Path):
    env_id, seed = "HalfCheetah-v5", 11
    actions = np.random.default_rng(0).uniform(-1, 1, size=(4, 6)).tolist()
    plain = gym.make(env_id)
    plain.reset(seed=seed)
    earned = sum(float(plain.step(np.asarray(a))[1]) for a in actions)
    plain.close()
    video = tmp_path / "replay.mp4"
    env = {**{k: v for k, v in os.environ.items() if k != "DISPLAY"}, "MUJOCO_GL": "egl",
           "PYOPENGL_PLATFORM": "egl"}
    drawn = seed000._child(seed000.RENDER, {
        "env_id": env_id, "replay_seed": seed, "actions": actions, "width": 64, "height": 48,
        "video": str(video)}, env, timeout=300)
    assert drawn["rendered_reward"] == pytest.approx(earned, rel=1e-12, abs=1e-12)
    assert (drawn["steps"], drawn["frames"], drawn["backend"]) == (4, 5, "egl")
    assert drawn["video_bytes"] == video.stat().st_size > 0
    decoded = list(read_frames(video))
    assert len(decoded) == 5 and decoded[0].shape == (48, 64, 3)


def test_the_script_imports_nothing_of_rolltape_or_numpy():
    code = ("import runpy, sys\n"
            f"runpy.run_path({seed000.__file__!r}, run_name='seed000')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rolltape', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items()
                                          if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().replace("'", '"')) == []
