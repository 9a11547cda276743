"""Restoring a recorded state to *continue* an episode (:mod:`rolltape.pass1.branches`).

With noise 0 a deterministic policy's branch from any step t replays the rest of the
episode bit for bit (HalfCheetah, Pusher, PointMaze's and Adroit's suite tasks, Pong:
actions, rewards, flags and physics states), each branch is a tape that re-simulates (``verify``), and an env
whose state is more than MuJoCo's is refused in one sentence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rolltape import RenderRequest, evaluate, render
from rolltape.branching import branch, same_as_source
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.pass1.branches import BranchJob, BranchUnit
from rolltape.pass1.rollout import run_policy_job
from rolltape.tape import Tape

ASSETS = Path(__file__).parent.parent / "assets"
HALF_CHEETAH = f"{ASSETS / 'policies.py'}:function"
PUSHER = f"{ASSETS / 'ledge.py'}:pusher"


@pytest.mark.parametrize("env_id, policy", [("HalfCheetah-v5", HALF_CHEETAH),
                                            ("Pusher-v5", PUSHER)])
def test_a_branch_without_noise_replays_the_episode_bit_for_bit(tmp_path, env_id, policy):
    run = evaluate(env_id, policy, episodes=1, seed=3, max_episode_steps=30, video=0,
                   baseline=None, out=tmp_path / "run")
    result = branch(str(run.path), pick="all", branches=1, every=7, noise=0.0,
                    policy=policy, workers=1)
    [record] = result.episodes
    assert record["grid"] == [0, 7, 14, 21, 28]
    assert record["replays_source"] is True
    source = Tape.load(run.path / "tapes" / "policy-0000.npz")
    tapes = sorted((result.out / "policy-0000" / "tapes").glob("*.npz"))
    assert len(tapes) == 5
    for t, path in zip(record["grid"], tapes):
        tape = Tape.load(path)
        assert same_as_source(tape, source, t)  # actions, rewards, both flags
        assert tape.start_step == max(0, t - 1) and tape.meta["step"] == t
        # the physics states too: the branch continued from exactly the recorded state
        assert np.array_equal(tape.physics, source.physics[max(0, t - 1):])
    # Each branch is a tape: it re-simulates and verifies like any other.
    assert all(r.verified for r in render([RenderRequest(str(p)) for p in tapes[1:3]]))
    # Without a success signal the estimate is the expected return from t; noise 0 gives
    # the recorded one.
    for point in record["points"]:
        assert point["p"] == pytest.approx(point["recorded"], rel=1e-12, abs=1e-12)


def test_a_maze_suite_branch_replays_the_episode_bit_for_bit(tmp_path):
    """A suite task (PointMaze's open maze, Gymnasium-Robotics): a dict observation (its
    digests per key too), the goal drawn at the seeded reset, success from the env's info.
    The episode reaches its goal at step 40, so the branches before and after it both
    replay rewards and success exactly."""
    policy = f"{ASSETS / 'ledge.py'}:maze"
    run = evaluate(None, policy, suite="mazes", tasks=["open"], episodes=1, seed=3,
                   max_episode_steps=60, video=0, baseline=None, out=tmp_path / "run")
    result = branch(str(run.path), pick="all", branches=1, every=20, noise=0.0,
                    policy=policy, workers=1)
    [record] = result.episodes
    assert record["grid"] == [0, 20, 40] and record["replays_source"] is True
    source = Tape.load(run.path / "tapes" / "mazes" / "open" / "policy-0000.npz")
    assert source.success_once and source.rewards[:40].sum() == 0 < source.rewards.sum()
    assert record["episode"]["success"] is True
    assert [p["p"] for p in record["points"]] == [1.0, 1.0, 1.0]  # every branch succeeds
    for t in record["grid"]:
        tape = Tape.load(result.out / "mazes-open-policy-0000" / "tapes" / f"t{t:05d}-k000.npz")
        assert same_as_source(tape, source, t)
        assert np.array_equal(tape.physics, source.physics[max(0, t - 1):])
        assert np.array_equal(tape.obs_key_digest, source.obs_key_digest[max(0, t - 1):])


def test_an_adroit_suite_branch_replays_the_episode_bit_for_bit(tmp_path):
    """An Adroit task (the door, Gymnasium-Robotics): the door's position is drawn at the
    seeded reset into the *model* (``body_pos``), not the state, so the restore's reset with
    the tape's seed rebuilds it; from there MuJoCo's state continues the episode exactly:
    actions, dense rewards, flags and physics states."""
    policy = f"{ASSETS / 'ledge.py'}:adroit_door"
    run = evaluate(None, policy, suite="adroit", tasks=["door"], episodes=1, seed=3,
                   max_episode_steps=30, video=0, baseline=None, out=tmp_path / "run")
    result = branch(str(run.path), pick="all", branches=1, every=10, noise=0.0,
                    policy=policy, workers=1)
    [record] = result.episodes
    assert record["grid"] == [0, 10, 20] and record["replays_source"] is True
    source = Tape.load(run.path / "tapes" / "adroit" / "door" / "policy-0000.npz")
    assert len(set(source.rewards.tolist())) > 10  # a dense reward: every step's differs
    for t in record["grid"]:
        tape = Tape.load(result.out / "adroit-door-policy-0000" / "tapes" / f"t{t:05d}-k000.npz")
        assert same_as_source(tape, source, t)
        assert np.array_equal(tape.physics, source.physics[max(0, t - 1):])
    assert all(r.verified for r in render([RenderRequest(
        str(result.out / "adroit-door-policy-0000" / "tapes" / "t00010-k000.npz"))]))


def test_an_env_whose_state_is_more_than_mujoco_s_is_refused(tmp_path):
    """NoisyLedge draws from its generator at every step: restored at step 5 from MuJoCo's
    state alone, its step differs from pass 1's, and the branch says so."""
    env_id = f"{ASSETS / 'ledge.py'}:NoisyLedge-v0"
    run = evaluate(env_id, "random", episodes=1, max_episode_steps=10, video=0,
                   baseline=None, out=tmp_path / "run")
    source = str(run.path / "tapes" / "policy-0000.npz")
    job = BranchJob(env=env_spec(env_id, max_episode_steps=10), policy="random",
                    deterministic=False, episodes=[
                        BranchUnit("branch", i, 7, str(tmp_path / f"{t}.npz"), source=source,
                                   step=t) for i, t in enumerate((1, 5))])
    sent: list = []
    with pytest.raises(UsageError, match="cannot be restored faithfully at step 5: "
                                         "continuing from its recorded state gives another "
                                         "physics state than pass 1"):
        run_policy_job(job, sent.append)
    # Step 1 still restores (the generator is where the seeded reset left it).
    assert [kind for kind, _ in sent].count("episode") == 1


def test_an_observation_that_is_more_than_the_state_is_refused(tmp_path):
    """CountingLedge's observation counts the steps since the reset outside MuJoCo's state:
    restored at step 5, the physics, reward and flags agree with pass 1 but the first
    observation does not (checked from the branch's own digests), and the branch says so."""
    env_id = f"{ASSETS / 'ledge.py'}:CountingLedge-v0"
    run = evaluate(env_id, "random", episodes=1, max_episode_steps=10, video=0,
                   baseline=None, out=tmp_path / "run")
    source = str(run.path / "tapes" / "policy-0000.npz")
    job = BranchJob(env=env_spec(env_id, max_episode_steps=10), policy="random",
                    deterministic=False, episodes=[
                        BranchUnit("branch", i, 7, str(tmp_path / f"{t}.npz"), source=source,
                                   step=t) for i, t in enumerate((0, 5))])
    sent: list = []
    with pytest.raises(UsageError, match="cannot be restored faithfully at step 5: "
                                         "continuing from its recorded state gives another "
                                         "observation than pass 1"):
        run_policy_job(job, sent.append)
    assert [kind for kind, _ in sent].count("episode") == 1  # step 0 is a plain reset


def test_an_atari_branch_continues_from_the_emulator_state_bit_for_bit(tmp_path):
    """ALE's recorded states (RNG included: sticky actions) continue an Atari game exactly;
    the branch tape begins at the reset with the source's steps and verifies."""
    policy = f"{ASSETS / 'ledge.py'}:pong"
    run = evaluate("ALE/Pong-v5", policy, episodes=1, seed=5, max_episode_steps=50, video=0,
                   baseline=None, out=tmp_path / "run")
    result = branch(str(run.path), pick="all", branches=1, every=20, noise=0.0,
                    policy=policy, workers=1)
    [record] = result.episodes
    assert record["grid"] == [0, 20, 40] and record["replays_source"] is True
    source = Tape.load(run.path / "tapes" / "policy-0000.npz")
    last = Tape.load(result.out / "policy-0000" / "tapes" / "t00040-k000.npz")
    assert last.start_step == 0 and last.meta["step"] == 40
    assert np.array_equal(last.ale_state, source.ale_state)  # every emulator state, RNG too
    assert np.array_equal(last.ale_state_offsets, source.ale_state_offsets)
    [verified] = render([RenderRequest(str(result.out / "policy-0000" / "tapes" /
                                           "t00020-k000.npz"))])
    assert verified.verified
