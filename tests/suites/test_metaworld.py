"""The Meta-World suites, in the benchmark's own venv (`rolltape suites install metaworld`,
built by scripts/setup.sh --test): a suite run serves its tasks from that venv and stops the
server at the end; Meta-World's scripted expert, played by rolltape, earns per episode what
Meta-World's own loop gives it on the same task variations (LeRobot's rule), and what
LeRobot's own Meta-World wrapper gives it (success, length, every reward)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import rolltape
from rolltape.outputs.artifacts import read_jsonl
from rolltape.suites import benchmarks
from rolltape.suites.builtin import HOSTED, builtin_manifest
from rolltape.tape import Tape

TASKS = ("reach", "door-open")  # two MT10 tasks; door-open's expert writes into its obs
EPISODES = 3

# Meta-World's own loop, written from its API and LeRobot's wrapper's rule (not rolltape's
# env): MT1(task, seed=42) and its first train task, random vector unfrozen and seeded,
# seed(s) then reset(seed=s); the expert until success, Meta-World's end, or 500 steps.
_OWN_LOOP = """\
import json, sys
import metaworld
from metaworld.policies import ENV_POLICY_MAP
out = {}
for task in sys.argv[2].split(","):
    name = task + "-v3"
    mt1 = metaworld.MT1(name, seed=42)
    env = mt1.train_classes[name](render_mode="rgb_array", camera_name="corner2")
    env.set_task(mt1.train_tasks[0])
    env.reset()
    env._freeze_rand_vec, env.seeded_rand_vec = False, True
    expert = ENV_POLICY_MAP[name]()
    rows = []
    for seed in range(int(sys.argv[1])):
        env.seed(seed)
        obs, _ = env.reset(seed=seed)
        rewards = []
        while True:
            obs, reward, done, truncated, info = env.step(expert.get_action(obs))
            rewards.append(float(reward))
            success = bool(info["success"])
            if success or done or truncated:
                break
        rows.append([success, len(rewards), rewards])
    out[task] = rows
print(json.dumps(out))
"""


# LeRobot's own wrapper (lerobot.envs.metaworld.MetaworldEnv, in the LeRobot venv, where
# setup.sh adds its `metaworld` extra's packages), as its eval builds it for a task, with the
# same expert reading Meta-World's state under the wrapper (which gives the policy pixels).
_LEROBOT_LOOP = """\
import json, sys
from lerobot.envs.metaworld import MetaworldEnv
from metaworld.policies import ENV_POLICY_MAP
task, episodes = sys.argv[1] + "-v3", int(sys.argv[2])
env = MetaworldEnv(task=task, obs_type="pixels_agent_pos")
expert = ENV_POLICY_MAP[task]()
rows = []
for seed in range(episodes):
    env.reset(seed=seed)
    rewards = []
    for _ in range(env._max_episode_steps):  # lerobot_eval's rollout cap
        _, reward, terminated, truncated, info = env.step(expert.get_action(env._env._get_obs()))
        rewards.append(float(reward))
        if terminated or truncated:
            break
    rows.append([bool(info["is_success"]), len(rewards), rewards])
env.close()
print(json.dumps(rows))
"""
LEROBOT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-lerobot" / "bin" / "python"


def _servers() -> list[int]:
    """Processes of the benchmark venv still alive (its server, the expert's child)."""
    venv = str(benchmarks.home() / "metaworld")
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith(venv):
            alive.append(int(pid))
    return alive


def test_the_expert_earns_what_metaworlds_own_loop_gives_it(tmp_path):
    bench = benchmarks.METAWORLD
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    own = subprocess.run([str(benchmarks.venv_python(bench)), "-c", _OWN_LOOP, str(EPISODES),
                          ",".join(TASKS)], capture_output=True, text=True, timeout=300,
                         check=True, env={**os.environ, "MUJOCO_GL": "egl"})
    expected = json.loads(own.stdout)

    run = rolltape.evaluate(suite="metaworld_mt10", tasks=",".join(TASKS),
                            policy="metaworld-expert", episodes=EPISODES, out=tmp_path / "run")
    assert _servers() == []  # the run's server and the expert's child ended with it
    rows = read_jsonl(run.path / "episodes.jsonl")
    got = {task: [[r["success_at_end"], r["length"],
                   [float(x) for x in Tape.load(run.path / r["tape"]).rewards]]
                  for r in sorted(rows, key=lambda r: r["index"]) if r["task"] == task]
           for task in TASKS}
    assert got == expected  # success, length and every step's reward, bit for bit, 6 episodes
    assert all(ok for task in TASKS for ok, _, _ in got[task])  # the expert succeeds
    # LeRobot's wrapper agrees on reach's first 2 episodes (it draws a 480x480 frame per
    # step for its pixel observation: ~0.1 s a step here, so 2 episodes).
    lerobot = subprocess.run([str(LEROBOT_PYTHON), "-c", _LEROBOT_LOOP, "reach", "2"],
                             capture_output=True, text=True, timeout=300, check=True,
                             env={**os.environ, "MUJOCO_GL": "egl"})
    assert json.loads(lerobot.stdout.splitlines()[-1]) == got["reach"][:2]
    config = json.loads((run.path / "config.json").read_text())
    assert config["env_versions"]["metaworld"] == "3.0.0"  # the venv's, recorded


def test_lerobots_difficulty_groups_split_mt50_and_are_hosted_suites():
    groups = [builtin_manifest(f"metaworld_{g}") for g in ("easy", "medium", "hard", "very_hard")]
    names = [t.kwargs["task"] for m in groups for t in m.tasks]
    mt50 = [t.kwargs["task"] for t in builtin_manifest("metaworld_mt50").tasks]
    assert sorted(names) == sorted(mt50) and len(set(mt50)) == 50
    assert [len(m.tasks) for m in groups] == [28, 11, 6, 5]
    assert {HOSTED[f"metaworld_{g}"] for g in ("mt10", "easy", "very_hard")} == {"metaworld"}
