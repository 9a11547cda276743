"""The parts of the served-env benchmarks (rolltape.bench.served) that stand between the
timings and the row: the loopback ``rolltape serve`` the bench starts (and the sentence
when it cannot), the minimal pyzmq server it is measured against (it must step the very
env a local one steps), the step-timing loops, and the per-env overhead computed from its
own medians. Each server here is a real process on loopback, stepped a few times."""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from rolltape.bench.common import ENV_ID, QUICK, SEED, Context
from rolltape.bench.served import (
    _paired_step_times,
    _step_times,
    in_process_handling,
    loopback_server,
    minimal_server,
    per_env_overhead,
)
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.envs.state import physics_spec
from rolltape.server.client import RemoteEnv

STEPS = 6


def actions(n: int) -> np.ndarray:
    return np.random.default_rng(SEED).uniform(-1, 1, size=(n, 6))


def local(max_steps: int = STEPS):
    return make_env(env_spec(ENV_ID, max_episode_steps=max_steps))


def test_an_episode_is_timed_step_by_step_until_it_ends():
    env = local()
    try:
        times = _step_times(env, actions(STEPS + 4), SEED)
    finally:
        env.close()
    assert len(times) == STEPS and all(t > 0 for t in times)


def test_paired_steps_stop_when_either_env_ends():
    short, long = local(3), local(STEPS)
    try:
        a, b = _paired_step_times((short, long), actions(STEPS), SEED)
    finally:
        short.close()
        long.close()
    assert len(a) == len(b) == 3


def test_the_minimal_server_steps_the_same_env_as_a_local_one(tmp_path: Path):
    env = local()
    base, spec = env.unwrapped, physics_spec()
    row = np.empty(mujoco.mj_stateSize(base.model, spec))
    try:
        with minimal_server(tmp_path, STEPS) as served:
            obs, _ = served.reset(seed=SEED)
            assert np.array_equal(obs, env.reset(seed=SEED)[0])
            for action in actions(STEPS):
                got = served.step(action)
                want = env.step(action)
                mujoco.mj_getState(base.model, base.data, row, spec)
                assert np.array_equal(got[0], want[0]) and got[1:4] == want[1:4]
                assert np.array_equal(served.last_physics, row)
            assert got[3] is True  # truncated at the time limit, as the local env
    finally:
        env.close()


def test_the_loopback_server_serves_the_bench_env(tmp_path: Path):
    env = local()
    try:
        with loopback_server(tmp_path, STEPS) as address:
            assert address.startswith("tcp://127.0.0.1:")
            remote = RemoteEnv.connect(env_spec(f"{address}/{ENV_ID}", max_episode_steps=STEPS))
            try:
                assert np.array_equal(remote.reset(seed=SEED)[0], env.reset(seed=SEED)[0])
                for action in actions(STEPS):
                    got, want = remote.step(action), env.step(action)
                    assert np.array_equal(got[0], want[0]) and got[1:4] == want[1:4]
            finally:
                remote.close()
    finally:
        env.close()


def test_a_server_that_cannot_start_is_one_sentence_with_its_reason(tmp_path: Path):
    with pytest.raises(RuntimeError, match="the bench server did not start: .*"
                                           "--max-episode-steps must be at least 1"):
        with loopback_server(tmp_path, 0):
            pass


def test_the_per_env_overhead_follows_from_its_medians(tmp_path: Path):
    ctx = Context(QUICK, tmp_path, lambda line: None)
    out = per_env_overhead(ctx, (1, 2), 5)
    assert sorted(out) == [1, 2]
    for n, v in out.items():
        assert v["served_us"] > 0 and v["local_us"] > 0
        assert v["overhead_us"] == pytest.approx((v["served_us"] - v["local_us"]) / n)


def test_the_servers_own_code_is_timed_in_this_process():
    extra = in_process_handling(20, actions(20))
    assert math.isfinite(extra) and abs(extra) < 0.01  # seconds; a step takes ~50 us
