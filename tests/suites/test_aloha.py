"""The ALOHA suite, in the benchmark's own venv (`rolltape suites install aloha`, built by
scripts/setup.sh --test): gym-aloha's own env, made as LeRobot makes it, and rolltape's suite
give a fixed-action policy the same episodes (every reward, success, length) on the same
seeds; the policy reads LeRobot's keys; the tape keeps each key's digest per step; pass 2
verifies its video in the venv, and a replay there draws the same images (the digests), also
continued from a recorded state, and the video's first frame."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import av
import numpy as np
from PIL import Image

import rolltape
from rolltape.outputs.artifacts import read_jsonl
from rolltape.suites import benchmarks
from rolltape.suites.builtin import HOSTED, builtin_manifest
from rolltape.tape import Tape

STEPS = 12  # of LeRobot's 400: a drawn 480x640 camera is ~0.15 s a step here
EPISODES = 2
POLICY = str(Path(__file__).resolve().parents[1] / "assets" / "aloha_policy.py")

# gym-aloha's own env, as LeRobot's AlohaEnv config makes it (gym.make of gym_aloha/TASK with
# obs_type pixels_agent_pos and its time limit), the same fixed action from each seeded reset.
_OWN_LOOP = """\
import importlib.util, json, sys
import gymnasium as gym, gym_aloha
spec = importlib.util.spec_from_file_location("aloha_policy", sys.argv[1])
policy = importlib.util.module_from_spec(spec); spec.loader.exec_module(policy)
env = gym.make("gym_aloha/AlohaTransferCube-v0", obs_type="pixels_agent_pos",
               render_mode="rgb_array", max_episode_steps=int(sys.argv[2]),
               disable_env_checker=True)
rows = []
for seed in json.loads(sys.argv[3]):
    env.reset(seed=seed)
    rewards = []
    while True:
        _, reward, terminated, truncated, info = env.step(policy.ACTION)
        rewards.append(float(reward))
        if terminated or truncated:
            break
    rows.append([bool(info["is_success"]), len(rewards), rewards])
print(json.dumps(rows))
"""

# rolltape's env replayed in the venv from the tape's seed and actions: each key's digest per
# step (the tape's own function), and the reset frame of the policy's camera as a PNG; then
# continued from the recorded physics state half-way (as pass 2's segments and branches
# continue), its steps' digests again.
_REPLAY = """\
import json, sys
from PIL import Image
from rolltape.envs.state import continue_from
from rolltape.pass1.fields import array_digest
from rolltape.suites import aloha
from rolltape.tape import Tape
tape = Tape.load(sys.argv[1])
env = aloha.AlohaEnv(task="transfer_cube")
obs, _ = env.reset(seed=tape.seed)
Image.fromarray(obs["observation.images.top"]).save(sys.argv[2])
digests = lambda obs: [str(array_digest(obs[k])) for k in tape.obs_keys]
rows = [digests(obs)]
for action in tape.actions:
    rows.append(digests(env.step(action)[0]))
half = len(tape.actions) // 2
continue_from(env, tape.physics[half - 1])
continued = [digests(env.step(a)[0]) for a in tape.actions[half - 1:]]
print(json.dumps([rows, continued]))
"""


def _venv(script: str, *args: str) -> str:
    bench = benchmarks.ALOHA
    # EGL, as the suite's env server picks it (its --backend default), so images are alike.
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
    env["MUJOCO_GL"] = "egl"
    return subprocess.run([str(benchmarks.venv_python(bench)), "-c", script, *args],
                          capture_output=True, text=True, timeout=300, check=True,
                          env=env).stdout.splitlines()[-1]


def test_gym_alohas_own_env_and_the_suite_give_the_same_episodes(tmp_path):
    bench = benchmarks.ALOHA
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    run = rolltape.evaluate(suite="aloha", tasks="transfer_cube", policy=f"{POLICY}:reach",
                            episodes=EPISODES, max_episode_steps=STEPS, video="worst",
                            out=tmp_path / "run")
    rows = sorted(read_jsonl(run.path / "episodes.jsonl"), key=lambda r: r["index"])
    assert [r["status"] if "status" in r else "ok" for r in rows] == ["ok"] * EPISODES
    tapes = [Tape.load(run.path / r["tape"]) for r in rows]
    got = [[r["success_at_end"], r["length"], [float(x) for x in t.rewards]]
           for r, t in zip(rows, tapes)]
    seeds = [t.seed for t in tapes]
    expected = json.loads(_venv(_OWN_LOOP, POLICY, str(STEPS), json.dumps(seeds)))
    assert got == expected  # 2 episodes: success, length and every reward, bit for bit
    assert [sum(r) for _, _, r in got] == [r["return"] for r in rows]
    assert any(sum(r) > 0 for _, _, r in got)  # the arm touches the cube: rewards to compare

    # The policy read LeRobot's keys (else it raised); the tape digests each key per step.
    [video] = run.results.videos  # pass 2, in the venv's render workers: every key verified
    assert video.verified is True and video.get("backend") == "egl"
    [row] = [r for r in rows if r["seed"] == video.key.seed]
    tape = Tape.load(run.path / row["tape"])
    assert tape.obs_keys == ("observation.images.top", "observation.state", "task")
    assert tape.obs_key_digest is not None and tape.obs_key_digest.shape == (STEPS + 1, 3)
    assert tape.physics is not None  # MuJoCo's physics rows, through dm_control's model
    png = tmp_path / "top.png"
    replayed, continued = json.loads(_venv(_REPLAY, str(run.path / row["tape"]), str(png)))
    assert np.array_equal(np.array(replayed, dtype=np.uint64), tape.obs_key_digest)
    # dm_control's step needs mj_step1 redone after a state is set (AlohaEnv.after_set_state):
    # without it a 400-step episode's pass-2 segment diverged at its first step.
    assert np.array_equal(np.array(continued, dtype=np.uint64), tape.obs_key_digest[STEPS // 2:])
    # The video's first frame is the policy's reset image (a lossy copy): the ALOHA scene
    # (looked at: two arms at their start pose over the table, the red cube between them).
    with av.open(str(run.path / video.paths[0])) as container:
        frames = [f.to_ndarray(format="rgb24").astype(int) for f in container.decode(video=0)]
    assert len(frames) == STEPS + 1
    drawn = np.asarray(Image.open(png), dtype=int)
    assert frames[0].std() > 30 and np.abs(frames[0] - drawn).mean() < 4


def test_the_suite_is_hosted_in_alohas_venv_with_lerobots_length():
    manifest = builtin_manifest("aloha")
    assert [(t.name, t.kwargs) for t in manifest.tasks] == [
        ("insertion", {"task": "insertion"}), ("transfer_cube", {"task": "transfer_cube"})]
    assert {t.max_episode_steps for t in manifest.tasks} == {400}
    assert HOSTED["aloha"] == "aloha"
