"""A session on a policy server, as pass 1 uses it, against real `rolltape serve-policy`
processes: a slow server times out naming the flag, Ctrl-C closes every session, and a
server that dies mid-run fails its episode naming the server while --resume continues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from conftest import run_cli
from policy_servers import PolicyServer, write_policies
from rolltape.policies import load_policy


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    return write_policies(tmp_path)


def test_server_death_fails_the_episode_naming_it_and_resume_continues(
        policies: Path, tmp_path: Path):
    env = {"SLOW_S": "0.01"}  # 30 steps: ~0.3 s an episode, time to kill it mid-run
    server = PolicyServer("pols.py:slow", cwd=policies, env=env)
    port = server.address.rpartition(":")[2]
    out = tmp_path / "run"
    args = ["eval", "Pendulum-v1", "--policy", server.address, "-n", "5",
            "--max-episode-steps", "30", "--no-report", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    rows = out.with_name(f".{out.name}.partial") / "episodes.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if rows.exists() and rows.read_text().count("\n") >= 2:
            break
        time.sleep(0.02)
    server.stop(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert f"policy server at ws://127.0.0.1:{port}" in err and "--resume" in err, err
    kept = rows.read_text().count("\n")
    assert 2 <= kept < 5
    again = PolicyServer("pols.py:slow", cwd=policies, env=env, bind=f"127.0.0.1:{port}")
    try:
        resumed = run_cli(*args, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert len(json.loads((out / "results.json").read_text())["episodes_rows"]) == 5
    finally:
        again.stop()


def test_a_slow_server_times_out_naming_the_flag_and_ctrl_c_closes_sessions(
        policies: Path, tmp_path: Path):
    server = PolicyServer("pols.py:slow", cwd=policies, env={"SLOW_S": "1.0"})
    try:
        # eval's --policy-timeout 0.3 is this source (policy_server.wire.with_options)
        env = gym.make("Pendulum-v1")
        policy = load_policy(f"{server.address}?timeout=0.3", env)
        policy.reset(0)
        with pytest.raises(RuntimeError) as exc:
            policy.act(env.reset(seed=0)[0])
        assert str(exc.value) == (f"the policy server at {server.address} sent no answer to "
                                  "the observation of step 0 within 0.3 s (--policy-timeout)")
        env.close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.cli", "eval", "Pendulum-v1", "--policy",
             server.address, "-n", "4", "--workers", "2", "--no-report", "--out",
             str(tmp_path / "b")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.sessions() < 2:
            time.sleep(0.1)
        assert server.sessions() == 2  # one per worker
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and server.sessions():
            time.sleep(0.1)
        assert server.sessions() == 0
    finally:
        server.stop()
