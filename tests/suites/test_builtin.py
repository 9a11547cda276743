"""Built-in suites (rolltape.suites.builtin): a missing benchmark package names the extra
to install, and real built-in suite envs (PointMaze, PushT, classic control) whose tapes
replay and verify."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from rolltape import RenderRequest, Tape, evaluate, render


def test_a_missing_benchmark_package_names_the_extra(tmp_path):
    """As on a plain install: gym_pusht cannot be found (sys.modules says so)."""
    code = ("import sys; sys.modules['gym_pusht'] = None\n"
            "from rolltape.cli import main\n"
            f"code = main(['eval', '--suite', 'pusht', '--out', {str(tmp_path / 'o')!r}])\n"
            "main(['suites']); sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "needs gym-pusht==0.1.8" in result.stderr and "rolltape[suites]" in result.stderr
    pusht = next(line for line in result.stdout.splitlines() if "gym-pusht" in line)
    assert "│ no" in pusht and "pip install 'rolltape[suites]'" in result.stdout
    assert not (tmp_path / "o").exists()


MAZES = """
mazes:
  success_key: success
  max_episode_steps: 30
  tasks:
    umaze: gymnasium_robotics:PointMaze_UMaze-v3
    open: gymnasium_robotics:PointMaze_Open-v3
"""


def test_real_maze_suite_tapes_are_the_same_for_1_and_2_workers_and_replay(tmp_path):
    (tmp_path / "mazes.yaml").write_text(MAZES)
    common = dict(suite=str(tmp_path / "mazes.yaml"), episodes=3, seed=1000)
    one = evaluate(workers=1, out=tmp_path / "one", report=False, **common)
    two = evaluate(workers=2, out=tmp_path / "two", video="best", width=64, height=48,
                   report=False, **common)
    assert [r["tape"] for r in one.results.to_json()["episodes_rows"]] == \
        [r["tape"] for r in two.results.to_json()["episodes_rows"]]
    for r in one.results.to_json()["episodes_rows"]:
        a, b = Tape.load(one.path / r["tape"]), Tape.load(two.path / r["tape"])
        for name in ("actions", "rewards", "obs_digest", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert a.meta == b.meta and a.success_once is not None  # PointMaze reports success
    assert [v["verified"] for v in two.results.to_json()["videos"]] == [True, True]
    assert two.results.to_json()["suite"]["per_task"][0]["n_unknown"] == 0


def test_builtin_pusht_and_classic_suites_verify(tmp_path):
    push = evaluate(suite="pusht", episodes=2, seed=0, max_episode_steps=20,
                    out=tmp_path / "push", report=False)
    requests = [RenderRequest(str(push.path / r["tape"]), (), atol=1e-9,
                              env_id="gym_pusht:gym_pusht/PushT-v0")
                for r in push.results.to_json()["episodes_rows"]]
    assert all(r.verified for r in render(requests))
    assert push.results.to_json()["suite"]["per_task"][0]["n_unknown"] == 0  # PushT says is_success
    classic = evaluate(suite="classic", tasks="cartpole,acrobot", episodes=2, seed=5,
                       max_episode_steps=20, workers=2, out=tmp_path / "classic", report=False)
    per_task = classic.results.to_json()["suite"]["per_task"]
    assert [t["task"] for t in per_task] == ["cartpole", "acrobot"]
    assert all(t["pc_success"] is None and t["n_unknown"] == 2 for t in per_task)
    assert not any("never reported" in w for w in classic.results.to_json()["warnings"])  # key: null
    tape = Tape.load(classic.path / classic.results.to_json()["episodes_rows"][0]["tape"])
    assert tape.actions.dtype.kind == "i"  # Discrete
