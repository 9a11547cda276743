"""Latency sweeps (rolltape.drivers.latency): runs per latency, measures, the page."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import run_cli
from rolltape.drivers.latency import folder_name, smoothness


def test_smoothness_counts_jerk_and_jumps_at_chunk_boundaries() -> None:
    actions = np.array([[0.0], [0.0], [0.0], [1.0], [1.0], [1.0], [0.9]])
    chunks = np.array([0, 0, 0, 1, 1, 1, 2])
    jerk, jumps = smoothness(actions, chunks, np.array([0.5]))
    # third differences: [1, -2, 1, 0.1]
    assert jerk == np.mean([1.0, 2.0, 1.0, 0.1])
    assert jumps == 1  # 0 -> 1 at a boundary counts; 1 -> 0.9 at a boundary is small
    assert smoothness(actions, None, np.array([0.5]))[1] == 0
    assert smoothness(actions[:3], chunks[:3], np.array([0.5]))[0] is None


def test_async_at_zero_latency_is_the_sync_run() -> None:
    assert folder_name("async", 0) == folder_name("sync", 0) == "sync-d0"
    assert folder_name("async", 4) == "async-d4"


MAZE_PD = '''
import numpy as np

class ChunkedPD:
    """A PD controller to a PointMaze goal, planned open loop for 20 steps."""
    action_horizon = 20
    execute_steps = 5

    def __call__(self, obs):
        o = obs["observation"].astype(np.float64)
        pos, vel, goal = o[:2].copy(), o[2:4].copy(), obs["desired_goal"].astype(np.float64)
        out = []
        for _ in range(self.action_horizon):  # a point mass, rolled forward
            a = np.clip(10.0 * (goal - pos) - 2.0 * vel, -1, 1)
            out.append(a)
            vel, pos = vel + 0.1 * a, pos + 0.1 * (vel + 0.1 * a)
        return np.asarray(out, np.float32)
'''


def test_a_sweep_over_latency_charts_success_falling_and_every_tape_verifies(
        tmp_path: Path) -> None:
    (tmp_path / "maze_pd.py").write_text(MAZE_PD)
    out = tmp_path / "sweep"
    done = run_cli("eval", "--suite", "mazes", "--tasks", "open", "--policy",
                   f"{tmp_path}/maze_pd.py:ChunkedPD", "-n", "4", "--success", "once",
                   "--no-report", "--latency", "0,16", "--execution", "sync,async",
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "async-d16", "sync-d0", "sync-d16"]
    result = json.loads((out / "latency.json").read_text())
    (task,) = result["tasks"]
    rates = {ex: [r["success"]["pc_success"] for r in task[ex]] for ex in ("sync", "async")}
    assert rates["sync"][0] == rates["async"][0] == 100.0  # D = 0: one run for both
    assert rates["sync"][1] < 100.0 and rates["async"][1] < 100.0, rates
    assert "mazes/open [sync] D=0: 100%" in done.stdout
    page = (out / "latency.html").read_text()
    assert page.count("<svg") == 2 and "success vs latency" in page
    tapes = sorted(map(str, out.glob("*/tapes/**/*.npz")))
    assert len(tapes) == 12
    verified = run_cli("verify", *tapes)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_sweep_refuses_bad_values_before_any_run(tmp_path: Path) -> None:
    for flags, words in ((["--latency", "0,2ms"], "whole numbers of control steps"),
                         (["--latency", "0,2", "--execution", "sync,soon"], "--execution"),
                         (["--latency", "0,2,2"], "each value once")):
        done = run_cli("eval", "Pendulum-v1", *flags, "--out", str(tmp_path / "no"))
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "no").exists()
