"""A hosted suite's pass 2: Meta-World's videos are drawn and verified by render workers
started from its benchmark venv (rolltape's own env has MuJoCo 4 and no metaworld), show
Meta-World's scene, and metadata.json records that venv's versions; its eval_info.json is
what LeRobot's own aggregation (lerobot_eval.eval_policy_all, in LeRobot's venv) makes of
the same episodes, with rolltape's intervals beside it; tapes of another env are not drawn
beside them, nor on Ray."""

from __future__ import annotations

import json
import os
import subprocess

import av
import numpy as np
import pytest
from tests.suites.test_metaworld import LEROBOT_PYTHON, _servers

import rolltape
from rolltape.errors import UsageError
from rolltape.suites import benchmarks
from rolltape.suites.builtin import METAWORLD_ENV
from rolltape.suites.hosted import render_python

EPISODES = 2

# Meta-World's own picture of each episode's first state, drawn in the benchmark venv by
# the suite's env (LeRobot's corner2 camera), to compare with the video's first frame.
_RESET_FRAMES = """\
import sys
from rolltape.suites.metaworld import MetaWorldEnv
env = MetaWorldEnv(task="reach-v3")
for seed in range(int(sys.argv[1])):
    env.reset(seed=seed)
    sys.stdout.buffer.write(env.render().tobytes())
"""

# LeRobot's eval_policy_all itself, with its per-task rollout (run_one) answering the
# per-task metrics rolltape recorded: what LeRobot aggregates from the same episodes.
_LEROBOT_AGGREGATE = """\
import json, sys
import lerobot.scripts.lerobot_eval as lerobot_eval
tasks = json.loads(sys.stdin.read())
def run_one(task_group, task_id, env, **_):
    return task_group, task_id, dict(tasks[f"{task_group}/{task_id}"])
lerobot_eval.run_one = run_one
class Env:
    def close(self):
        pass
class Policy:
    training = False
    def eval(self):
        pass
    def train(self, mode):
        pass
envs = {}
for key in tasks:
    group, task_id = key.split("/")
    envs.setdefault(group, {})[task_id] = Env()
info = lerobot_eval.eval_policy_all(envs, Policy(), None, None, None, None, n_episodes=0,
                                    max_episodes_rendered=1)
print(json.dumps(info))
"""


def test_a_metaworld_video_is_drawn_in_its_venv_and_eval_info_is_lerobots(tmp_path):
    bench = benchmarks.METAWORLD
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    # Both children start now and do their imports while the run plays.
    lerobot = subprocess.Popen([str(LEROBOT_PYTHON), "-c", _LEROBOT_AGGREGATE],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    frames = subprocess.Popen([str(benchmarks.venv_python(bench)), "-c", _RESET_FRAMES,
                               str(EPISODES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"})
    try:
        run = rolltape.evaluate(suite="metaworld_mt10", tasks="reach", policy="metaworld-expert",
                                episodes=EPISODES, video="worst", out=tmp_path / "run")
        own, _ = frames.communicate(timeout=120)
        info = json.loads((run.path / "eval_info.json").read_text())
        [task] = info["per_task"]
        theirs_out, err = lerobot.communicate(json.dumps({
            f"{task['task_group']}/{task['task_id']}": task["metrics"]}), timeout=180)
    finally:
        lerobot.kill()  # no-ops once they have exited
        frames.kill()
    assert _servers() == []  # the server, the expert and the render workers ended with it

    [video] = run.results.videos
    assert video.verified is True and video.get("backend") == "egl"
    episode = next(e for e in run.results.episodes if e.key == video.key)
    with av.open(str(run.path / video.paths[0])) as container:
        first = next(container.decode(video=0)).to_ndarray(format="rgb24").astype(int)
        drawn = 1 + sum(1 for _ in container.decode(video=0))
    assert drawn == episode.length + 1  # the reset frame and one per step
    size = 480 * 480 * 3
    assert len(own) == EPISODES * size
    expected = np.frombuffer(own[episode.key.seed * size:][:size], np.uint8).reshape(480, 480, 3)
    # The scene itself (a lossy video of it): Meta-World's table, arm and goal, not a blank.
    assert first.std() > 30 and np.abs(first - expected).mean() < 4

    versions = run.metadata["benchmark_env"]["versions"]
    assert (versions["metaworld"], versions["mujoco"]) == ("3.0.0", "3.3.7")
    assert versions["python"].count(".") == 2 and run.metadata["versions"]["mujoco"] != "3.3.7"

    theirs = json.loads(theirs_out.strip().splitlines()[-1]) if lerobot.returncode == 0 else err
    assert isinstance(theirs, dict), theirs[-2000:]
    assert [{k: t[k] for k in ("task_group", "task_id", "metrics")}
            for t in info["per_task"]] == theirs["per_task"]
    assert list(info["per_group"]) == list(theirs["per_group"]) == ["metaworld_mt10"]
    # Every key LeRobot writes, spelled as it spells it and with its values; rolltape's
    # success count and Wilson interval beside them.
    for ours, lerobots in ((info["per_group"]["metaworld_mt10"],
                            theirs["per_group"]["metaworld_mt10"]),
                           (info["overall"], theirs["overall"])):
        assert set(ours) - set(lerobots) == {"n_success", "pc_success_ci95"}
        timing = {"eval_s", "eval_ep_s"}
        assert {k: ours[k] for k in set(lerobots) - timing} == \
            {k: lerobots[k] for k in set(lerobots) - timing}
    assert info["overall"]["pc_success"] == 100.0 and info["overall"]["n_success"] == EPISODES
    assert info["overall"]["video_paths"] == list(video.paths)


def test_a_hosted_suites_tapes_are_drawn_by_its_venv_alone():
    """Its tapes get the venv's interpreter, mixed with tapes of this env they are refused in
    one sentence, and Ray (whose workers are not started from the venv) refuses them."""
    from rolltape.executors.ray import RayExecutor
    from rolltape.rendering import _render_work

    venv = str(benchmarks.venv_python(benchmarks.METAWORLD))
    assert render_python([METAWORLD_ENV, METAWORLD_ENV]) == venv
    assert render_python(["CartPole-v1"]) is None
    with pytest.raises(UsageError, match=r"render each benchmark's tapes on their own\.$"):
        render_python([METAWORLD_ENV, "CartPole-v1"])
    work = _render_work((0, 0), [METAWORLD_ENV], python=venv)
    with pytest.raises(UsageError, match=r"drop --executor ray \(or ask for no video"):
        RayExecutor().render_pool(work, [], ["egl"], 1, 10.0, on_progress=print,
                                  on_done=print)


def test_a_camera_the_venvs_env_lacks_is_refused_before_any_episode(tmp_path):
    """--camera is checked against Meta-World's own model, built in its venv (rolltape's env
    only has the wrapper's shell), before pass 1: one sentence, nothing written."""
    assert benchmarks.installed(benchmarks.METAWORLD)
    with pytest.raises(UsageError, match=r"has no camera 'nosuch'; its cameras are: topview, "):
        rolltape.evaluate(suite="metaworld_mt10", tasks="reach", policy="metaworld-expert",
                          episodes=1, video=1, cameras=("nosuch",), out=tmp_path / "run")
    assert not (tmp_path / "run").exists() and _servers() == []
