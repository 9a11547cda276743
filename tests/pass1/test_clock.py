"""The simulated clock (rolltape.pass1.clock): which action each step plays under latency.

The executed actions are checked against a reference loop written the other way round:
sequentially, chunk after chunk, as a person would write "observe, wait D steps playing
what is left, then play the new chunk", on PushT (pymunk) and a MuJoCo env.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from policy_servers import PolicyServer, write_policies
from rolltape.errors import UsageError
from rolltape.pass1.clock import Clock, ClockedPolicy, control_period, latency_steps
from rolltape.pass1.rollout import record_episode
from rolltape.policies import Policy

H = 8  # the chunk's horizon


def push_chunk(obs: np.ndarray) -> np.ndarray:
    """H targets from the agent towards the block, a deterministic function of obs."""
    agent, block = obs[:2].astype(np.float64), obs[2:4].astype(np.float64)
    steps = np.arange(1, H + 1)[:, None] / H
    return (agent + (block - agent) * steps).astype(np.float32)


class Chunky(Policy):
    description = {"kind": "test-chunks"}

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def chunk(self, obs: Any) -> np.ndarray:
        return self.fn(obs)


def reference(env: gym.Env, fn: Any, seed: int, d: int, k: int, mode: str) -> list[Any]:
    """The executed actions of one episode, written sequentially."""
    obs, _ = env.reset(seed=seed)
    out: list[Any] = []
    done = False
    last = np.zeros(env.action_space.shape, env.action_space.dtype)

    def step(action: Any) -> None:
        nonlocal obs, done, last
        out.append(action)
        last = action
        obs, _, term, trunc, _ = env.step(action)
        done = term or trunc

    play: list[Any] = []  # what the chunk in charge has left to play
    chunk = fn(obs)
    while not done:
        for _ in range(d):  # while `chunk` is computed: the old tail, then the hold
            if done:
                break
            step(play.pop(0) if play else last)
        if done:
            break
        play = list(chunk[d:] if mode == "async" else chunk)
        n = min(k, len(play))
        lead = max(n - d, 0) if mode == "async" else n
        for _ in range(lead):
            if done:
                break
            step(play.pop(0))
        if not done:
            chunk = fn(obs)
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_executed_actions_equal_the_reference_loop_on_pusht(mode: str) -> None:
    pytest.importorskip("gym_pusht")
    env = gym.make("gym_pusht/PushT-v0", max_episode_steps=40)
    for seed in range(20):
        d, k = 3, 5
        policy = ClockedPolicy(Chunky(push_chunk), Clock(d, mode), env.action_space, k)
        fields = record_episode(env, policy, seed)
        want = reference(env, push_chunk, seed, d, k, mode)
        assert len(fields["actions"]) == len(want) == 40
        np.testing.assert_array_equal(fields["actions"], np.asarray(want))
        index = policy.tape_fields()["chunk_index"]
        assert (index[:d] == -1).all() and index[d] == 0  # the hold before the first chunk


@pytest.mark.parametrize("d,k", [(0, 3), (2, 8), (5, 2), (7, 8)])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_schedule_on_mujoco_for_other_latencies(mode: str, d: int, k: int) -> None:
    env = gym.make("InvertedPendulum-v5", max_episode_steps=30)

    def fn(obs: np.ndarray) -> np.ndarray:
        return np.clip(np.outer(np.linspace(1, 0.2, H), obs[:1] + obs[1:2]), -3, 3
                       ).astype(np.float32)

    policy = ClockedPolicy(Chunky(fn), Clock(d, mode), env.action_space, k)
    fields = record_episode(env, policy, 4)
    np.testing.assert_array_equal(fields["actions"], np.asarray(reference(env, fn, 4, d, k, mode)))


def test_latency_zero_plays_each_chunk_as_without_the_clock() -> None:
    env = gym.make("InvertedPendulum-v5", max_episode_steps=20)
    policy = ClockedPolicy(Chunky(lambda o: np.full((4, 1), o[1], np.float32)), Clock(0),
                           env.action_space, 4)
    record_episode(env, policy, 1)
    starts = policy.chunk_starts()
    assert starts is not None and starts.tolist() == [0, 4, 8, 12, 16]
    assert policy.tape_fields()["chunk_offset"].tolist() == [0, 1, 2, 3] * 5


def test_blend_mixes_the_overlap_linearly() -> None:
    space = gym.spaces.Box(-100, 100, (1,))
    calls = iter([np.zeros((6, 1)), np.full((6, 1), 30.0), np.full((6, 1), 60.0)])
    policy = ClockedPolicy(Chunky(lambda o: next(calls)),
                           Clock(1, "async", blend="linear"), space, 3)
    played = [float(policy.act(None)[0]) for t in range(6)]
    # chunk 0 takes over at 1 (index 1), asked again at 3 (3 - 1), chunk 1 at 4 (index 1):
    # its overlap with chunk 0's 2 remaining actions is 2 steps, weighted 1/3 and 2/3
    assert played == [0.0, 0.0, 0.0, 0.0, 10.0, 20.0]


def test_hold_zero_and_last() -> None:
    space = gym.spaces.Box(-10, 10, (1,))
    # a chunk of one action, asked for every 3 steps (1 played + 2 waited): held meanwhile
    for hold, want in (("last", [0.0, 0.0, 5.0, 5.0, 5.0, 5.0]),
                       ("zero", [0.0, 0.0, 5.0, 0.0, 0.0, 5.0])):
        policy = ClockedPolicy(Chunky(lambda o: np.full((1, 1), 5.0)), Clock(2, hold=hold),
                               space, 1)
        assert [float(policy.act(None)[0]) for _ in range(6)] == want


def test_latency_in_milliseconds_and_bad_values() -> None:
    assert latency_steps("40ms", 0.02) == 2 and latency_steps("41ms", 0.02) == 3
    assert latency_steps("0", None) == 0
    pusht = pytest.importorskip("gym_pusht") and gym.make("gym_pusht/PushT-v0")
    assert control_period(pusht) == pytest.approx(0.1)  # 10 Hz control, not its 0.01 s substep
    assert control_period(gym.make("HalfCheetah-v5")) == pytest.approx(0.05)
    for bad in ("x", "-1ms", "nanms", "1e400ms"):
        with pytest.raises(UsageError, match="--latency"):
            latency_steps(bad, 0.05)
    with pytest.raises(UsageError, match="control period"):
        latency_steps("30ms", None)
    with pytest.raises(UsageError, match="--latency must be"):
        Clock(-1)
    with pytest.raises(UsageError, match="--blend"):
        Clock(2, "sync", blend="linear")
    with pytest.raises(UsageError, match="--execution"):
        Clock(2, "later")


def test_async_latency_beyond_the_chunk_is_refused() -> None:
    space = gym.spaces.Box(-1, 1, (1,))
    policy = ClockedPolicy(Chunky(lambda o: np.zeros((4, 1))), Clock(4, "async"), space)
    with pytest.raises(UsageError, match="chunks longer than 4 actions"):
        for _ in range(6):
            policy.act(None)


def _tape(run: Path, i: int) -> tuple[dict[str, bytes], dict[str, Any]]:
    with np.load(run / "tapes" / f"policy-{i:04d}.npz") as npz:
        header = json.loads(npz["header"].tobytes())
        return {k: npz[k].tobytes() for k in npz.files if k != "header"}, header


def test_a_served_policy_on_the_clock_gives_the_local_tapes_which_verify(tmp_path: Path) -> None:
    policies = write_policies(tmp_path)
    server = PolicyServer("pols.py:Chunky", cwd=policies)
    try:
        common = ["eval", "Pendulum-v1", "-n", "2", "--max-episode-steps", "20", "--no-report",
                  "--latency", "2", "--execution", "async", "--hold", "zero"]
        served = run_cli(*common, "--policy", server.address, "--out", str(tmp_path / "s"))
        assert served.returncode == 0, served.stderr
        local = run_cli(*common, "--policy", f"{policies}/pols.py:Chunky",
                        "--out", str(tmp_path / "l"))
        assert local.returncode == 0, local.stderr
    finally:
        server.stop()
    for i in range(2):
        arrays, header = _tape(tmp_path / "s", i)
        assert arrays == _tape(tmp_path / "l", i)[0]
        assert header["policy"]["clock"] == {"latency_steps": 2, "execution": "async",
                                             "hold": "zero", "blend": "none"}
        index = np.frombuffer(arrays["chunk_index"], np.int32)
        assert (index[:2] == -1).all() and index[2] == 0  # held until the first chunk
    verified = run_cli("verify", *map(str, sorted((tmp_path / "s" / "tapes").glob("*.npz"))))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_latency_zero_sync_tapes_equal_a_run_without_the_flags(tmp_path: Path) -> None:
    policies = write_policies(tmp_path)
    common = ["eval", "Pendulum-v1", "-n", "2", "--max-episode-steps", "15", "--no-report",
              "--policy", f"{policies}/pols.py:Chunky"]
    for name, extra in (("plain", []), ("zero", ["--latency", "0", "--execution", "sync"])):
        done = run_cli(*common, *extra, "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
    for i in range(2):
        (a, ha), (b, hb) = _tape(tmp_path / "plain", i), _tape(tmp_path / "zero", i)
        assert a == b
        ha.pop("wall_s"), hb.pop("wall_s")
        assert ha == hb
    bad = run_cli(*common, "--latency", "4ms", "--out", str(tmp_path / "ms"))
    assert bad.returncode == 0, bad.stderr  # Pendulum's 20 ms steps: 4 ms is one step
    assert _tape(tmp_path / "ms", 0)[1]["policy"]["clock"]["latency_steps"] == 1
    refused = run_cli(*common, "--latency", "soon", "--out", str(tmp_path / "no"))
    assert refused.returncode == 2 and "--latency 'soon'" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "no").exists()


def test_async_beyond_a_declared_chunk_is_refused_before_any_episode(tmp_path: Path) -> None:
    done = run_cli("eval", "Pendulum-v1", "-n", "2", "--latency", "2", "--execution", "async",
                   "--out", str(tmp_path / "r"))  # the random policy: a chunk of one
    assert done.returncode == 2 and "needs chunks longer than 2 actions" in done.stderr
    assert "returns 1" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()


def test_measured_latency_is_the_server_s_inference_time_in_steps(tmp_path: Path) -> None:
    policies = write_policies(tmp_path)
    server = PolicyServer("pols.py:slow", cwd=policies, env={"SLOW_S": "0.12"})
    try:  # 120 ms a call at Pendulum's 50 ms a step: 3 steps
        done = run_cli("eval", "Pendulum-v1", "-n", "1", "--max-episode-steps", "10",
                       "--no-report", "--latency", "measured", "--policy", server.address,
                       "--out", str(tmp_path / "m"))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "--latency measured: the server's median inference time" in done.stdout + done.stderr
    header = _tape(tmp_path / "m", 0)[1]
    assert header["policy"]["clock"]["latency_steps"] == 3
    local = run_cli("eval", "Pendulum-v1", "--latency", "measured", "--out", str(tmp_path / "x"))
    assert local.returncode == 2 and "give --policy ws://" in local.stderr


def test_blend_is_refused_for_actions_that_do_not_mix(tmp_path: Path) -> None:
    done = run_cli("eval", "CartPole-v1", "-n", "1", "--latency", "0", "--execution", "async",
                   "--blend", "linear", "--out", str(tmp_path / "b"))
    assert done.returncode == 2 and "--blend linear mixes actions" in done.stderr, done.stderr
    assert "Discrete(2)" in done.stderr and not (tmp_path / "b").exists()
