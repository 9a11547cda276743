"""The Meta-World pixel suites (``metaworld_*_pixels``), in the benchmark's own venv: LeRobot's
own Meta-World wrapper (``lerobot.envs.metaworld.MetaworldEnv``, obs_type pixels_agent_pos,
in the LeRobot venv) and rolltape's suite give Meta-World's expert the same episodes (every
reward, success, length) and the same images (each step's digest), on the same seeds; the
policy reads LeRobot's keys; the tape digests each key per step; pass 2 verifies the video in
the venv's render workers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

import rolltape
from rolltape.outputs.artifacts import read_jsonl
from rolltape.pass1.fields import array_digest
from rolltape.suites import benchmarks
from rolltape.suites.builtin import HOSTED, builtin_manifest
from rolltape.tape import Tape

STEPS = 8  # of Meta-World's 500: its 480x480 camera is drawn every step (~0.15 s here)
EPISODES = 2
LEROBOT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-lerobot" / "bin" / "python"
KEYS = ("observation.environment_state", "observation.image", "observation.state", "task")

# LeRobot's own wrapper as its eval builds it (obs_type pixels_agent_pos), the expert reading
# Meta-World's state under it; each step's image (as the wrapper gives it) saved for the test.
_LEROBOT_LOOP = """\
import json, sys
import numpy as np
from lerobot.envs.metaworld import MetaworldEnv
from metaworld.policies import ENV_POLICY_MAP
task, steps, seeds, out = sys.argv[1] + "-v3", int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
env = MetaworldEnv(task=task, obs_type="pixels_agent_pos")
expert = ENV_POLICY_MAP[task]()
rows, images = [], []
for seed in seeds:
    obs, _ = env.reset(seed=seed)
    images.append(obs["pixels"]); states = [obs["agent_pos"].tolist()]
    rewards = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(expert.get_action(env._env._get_obs()))
        images.append(obs["pixels"]); states.append(obs["agent_pos"].tolist())
        rewards.append(float(reward))
        if terminated or truncated:
            break
    rows.append([bool(info["is_success"]), len(rewards), rewards, states])
np.save(out, np.stack(images))
env.close()
print(json.dumps([rows, env.task_description]))
"""


def test_lerobots_wrapper_and_the_pixel_suite_give_the_same_episodes_and_images(tmp_path):
    bench = benchmarks.METAWORLD
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    run = rolltape.evaluate(suite="metaworld_mt10_pixels", tasks="reach",
                            policy="metaworld-expert", episodes=EPISODES,
                            max_episode_steps=STEPS, video="worst", out=tmp_path / "run")
    rows = sorted(read_jsonl(run.path / "episodes.jsonl"), key=lambda r: r["index"])
    tapes = [Tape.load(run.path / r["tape"]) for r in rows]
    assert [t.obs_keys for t in tapes] == [KEYS] * EPISODES  # the tape digests each key

    images = tmp_path / "lerobot.npy"
    said = subprocess.run([str(LEROBOT_PYTHON), "-c", _LEROBOT_LOOP, "reach", str(STEPS),
                           json.dumps([t.seed for t in tapes]), str(images)],
                          capture_output=True, text=True, timeout=300, check=True,
                          env={**os.environ, "MUJOCO_GL": "egl"})
    expected, text = json.loads(said.stdout.splitlines()[-1])
    got = [[r["success_at_end"], r["length"], [float(x) for x in t.rewards]]
           for r, t in zip(rows, tapes)]
    assert got == [e[:3] for e in expected]  # 2 episodes: success, length, every reward
    assert [r["length"] for r in rows] == [STEPS] * EPISODES

    # The images the policy was given are LeRobot's, step for step (both drawn with EGL).
    drawn = np.load(images)
    column = KEYS.index("observation.image")
    assert drawn.shape == (EPISODES * (STEPS + 1), 480, 480, 3)
    assert [array_digest(i) for i in drawn] == [
        int(d) for t in tapes for d in t.obs_key_digest[:, column]]
    states = [np.asarray(s, np.float64) for e in expected for s in e[3]]
    column = KEYS.index("observation.state")
    assert [array_digest(s) for s in states] == [
        int(d) for t in tapes for d in t.obs_key_digest[:, column]]
    assert text == "Reach a goal position"  # lerobot-eval's task, as the policy read it
    # corner2, upright (looked at: the Sawyer arm from the front-left corner, the table below)
    Image.fromarray(drawn[0]).save(tmp_path / "reset.png")
    assert drawn[0].std() > 30 and not np.array_equal(drawn[0], drawn[STEPS])

    [video] = run.results.videos  # pass 2, in the venv's render workers: every key verified
    assert video.verified is True and video.get("backend") == "egl"


def test_the_pixel_suites_are_hosted_with_lerobots_obs_type():
    manifest = builtin_manifest("metaworld_very_hard_pixels")
    assert [t.kwargs for t in manifest.tasks][0] == {"task": "shelf-place-v3",
                                                      "obs_type": "pixels_agent_pos"}
    assert len(builtin_manifest("metaworld_mt50_pixels").tasks) == 50
    assert HOSTED["metaworld_mt10_pixels"] == "metaworld"
