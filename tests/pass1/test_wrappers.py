"""Policy-side wrappers (--wrapper, --frame-stack) and Atari through ale-py, against SB3's own
evaluation on the same seeds: the policy sees the wrapped env, the tape is the base env's
whole game, the returns are Monitor's (under the wrappers, unclipped)."""

from __future__ import annotations

from dataclasses import replace

import av
import numpy as np
import pytest
from tests.conftest import run_cli

from rolltape import Tape, evaluate
from rolltape.errors import UsageError
from rolltape.pass2.encode import read_frames

ATARI = "BreakoutNoFrameskip-v4"


@pytest.fixture(scope="session")
def stacked_cartpole(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO trained briefly on CartPole with SB3's VecFrameStack(4)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    venv = VecFrameStack(make_vec_env("CartPole-v1", n_envs=1, seed=0), 4)
    model = PPO("MlpPolicy", venv, n_steps=256, batch_size=64, n_epochs=2, seed=0)
    model.learn(512)
    path = str(tmp_path_factory.mktemp("cartpole") / "ppo4.zip")
    model.save(path)
    return path


@pytest.fixture(scope="session")
def atari_ppo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO CnnPolicy trained briefly with SB3's make_atari_env + VecFrameStack(4)."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    venv = VecFrameStack(make_atari_env(ATARI, n_envs=1, seed=0), 4)
    model = PPO("CnnPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0)
    model.learn(512)
    path = str(tmp_path_factory.mktemp("atari") / "ppo_breakout.zip")
    model.save(path)
    return path


def sb3_episodes(model_path: str, make_venv, seeds: list[int], deterministic: bool
                 ) -> list[tuple[float, int]]:
    """SB3's evaluate_policy, one fresh VecEnv per episode seeded with its seed (a reused
    Atari VecEnv would not reseed: EpisodicLifeEnv ignores a reset while its game goes on),
    torch seeded per episode as rolltape seeds it for sampled actions."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    model = PPO.load(model_path, device="cpu")
    out = []
    for seed in seeds:
        venv = make_venv()
        venv.seed(seed)
        torch.manual_seed(seed)
        returns, lengths = evaluate_policy(model, venv, n_eval_episodes=1,
                                           deterministic=deterministic,
                                           return_episode_rewards=True)
        venv.close()
        out.append((float(returns[0]), int(lengths[0])))
    return out


def played(run) -> list[tuple[float, int]]:
    return [(e.ret, e.length) for e in run.results.episodes if e.key.role == "policy"]


def test_frame_stack_matches_sb3_vec_frame_stack(stacked_cartpole: str, tmp_path) -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    run = evaluate("CartPole-v1", f"sb3:{stacked_cartpole}", frame_stack=4, episodes=3,
                   seed=100, out=tmp_path / "run")
    expected = sb3_episodes(stacked_cartpole,
                            lambda: VecFrameStack(make_vec_env("CartPole-v1", n_envs=1), 4),
                            [100, 101, 102], deterministic=True)
    assert played(run) == expected
    assert len({length for _, length in expected}) > 1  # the episodes are not all alike
    tape = Tape.load(tmp_path / "run" / "tapes" / "policy-0000.npz")
    assert tape.policy["wrappers"] == ["frame_stack=4"]
    assert run.metadata.facts["policy"]["wrappers"] == ["frame_stack=4"]
    assert tape.length == expected[0][1]
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Policy saw" in html and "frame_stack=4 (over the base env" in html


def test_atari_matches_evaluate_policy_and_video_verifies(atari_ppo: str, tmp_path) -> None:
    """rl-zoo3's Atari default: sampled actions. The returns are the whole game's (all lives,
    unclipped), and the best episode's video is the base env re-simulated and verified."""
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    seeds = [100, 101]
    run = evaluate(ATARI, f"sb3:{atari_ppo}", wrappers=("atari",), frame_stack=4,
                   deterministic=False, episodes=2, seed=100, video="best",
                   out=tmp_path / "run", report=False)
    expected = sb3_episodes(atari_ppo, lambda: VecFrameStack(make_atari_env(ATARI, n_envs=1), 4),
                            seeds, deterministic=False)
    assert played(run) == expected
    tape = Tape.load(tmp_path / "run" / "tapes" / "policy-0000.npz")
    assert tape.policy["wrappers"] == ["atari", "frame_stack=4"]
    assert tape.terminated[-1] and not tape.terminated[:-1].any()  # one game, all its lives
    assert tape.actions.ndim == 1 and tape.actions.dtype.kind == "i"  # the base env's actions
    [video] = run.results.videos
    assert video.verified is True
    best = max(run.results.episodes, key=lambda e: e.ret)
    assert video.key == best.key and video.get("frames") == best.length + 1
    with av.open(str(tmp_path / "run" / video.path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == best.length + 1 and frames[0].shape == (210, 160, 3)
    assert np.ptp(frames[-1]) > 0  # the screen, not a blank frame
    # --mode restore draws from the emulator states in the tape: the same frames (PNG, so
    # that no encoder stands between them).
    best_tape = tmp_path / "run" / best.tape
    for mode in ("resim", "restore"):
        res = run_cli("render", str(best_tape), "--mode", mode, "-o", f"{tmp_path / mode}/")
        assert res.returncode == 0, res.stderr
        assert "backend no GL" in res.stdout  # ALE draws its own screen
    assert "drawn from recorded states" in res.stdout + res.stderr
    restored = list(read_frames(tmp_path / "restore"))
    assert len(restored) == len(frames)
    assert all(np.array_equal(a, b) for a, b in zip(restored, read_frames(tmp_path / "resim")))
    # The states are untrusted data: offsets that do not cut them into frames are refused.
    loaded = Tape.load(best_tape)
    assert loaded.has_ale_state and len(loaded.ale_state_offsets) == loaded.length + 2
    bad = loaded.ale_state_offsets.copy()
    bad[1] = bad[2] + 1
    with pytest.raises(UsageError, match="ale_state"):
        replace(loaded, ale_state_offsets=bad)


def test_observation_shape_mismatch_names_the_fix(stacked_cartpole: str, atari_ppo: str,
                                                   tmp_path) -> None:
    res = run_cli("eval", "CartPole-v1", "--policy", f"sb3:{stacked_cartpole}", "-n", "1",
                  "-o", str(tmp_path / "a"), "-q")
    assert res.returncode == 2, res.stderr
    assert "(16,)" in res.stderr and "(4,)" in res.stderr and "--frame-stack 4" in res.stderr
    res = run_cli("eval", ATARI, "--policy", f"sb3:{atari_ppo}", "-n", "1",
                  "-o", str(tmp_path / "b"), "-q")
    assert res.returncode == 2, res.stderr
    assert "(4, 84, 84)" in res.stderr and "(210, 160, 3)" in res.stderr
    assert "--wrapper atari --frame-stack 4" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "b").exists()


@pytest.mark.parametrize("flags, words", [
    (["--wrapper", "atary"], ["'atary'", "preset"]),
    (["--wrapper", "no_such_module_xyz:Wrap"], ["cannot import 'no_such_module_xyz'"]),
    (["--wrapper", "gymnasium.wrappers:NoSuchWrapper"], ["has no class 'NoSuchWrapper'"]),
    (["--wrapper", "gymnasium.wrappers:TimeLimit,max_episode_steps=bare"],
     ["--wrapper 'max_episode_steps=bare'"]),
])
def test_bad_wrappers_are_one_sentence(flags: list[str], words: list[str], tmp_path) -> None:
    res = run_cli("eval", "CartPole-v1", "-n", "1", "-o", str(tmp_path / "r"), "-q", *flags)
    assert res.returncode == 2, res.stderr
    assert all(w in res.stderr for w in words), res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_gymnasium_wrapper_with_arguments(tmp_path) -> None:
    """A plain Gymnasium wrapper with arguments: the policy sees its observations, the tape
    keeps the base env's (the run replays and verifies as any other)."""
    run = evaluate("CartPole-v1", "random",
                   wrappers=("gymnasium.wrappers:FlattenObservation",),
                   frame_stack=2, episodes=2, seed=7, out=tmp_path / "w", report=False)
    plain = evaluate("CartPole-v1", "random", episodes=2, seed=7, out=tmp_path / "p",
                     report=False)
    # The random policy draws from the action space seeded per episode: the same actions
    # whatever it sees, so the base episodes are identical.
    assert played(run) == played(plain)
    assert run.metadata.facts["policy"]["wrappers"] == [
        "gymnasium.wrappers:FlattenObservation", "frame_stack=2"]


def test_batched_and_served_runs_play_through_the_same_wrappers(tmp_path, monkeypatch) -> None:
    """--frame-stack 2 over a Gymnasium action wrapper, on the batched path (the wrappers run
    in each sub-env's process) and on a served env (the server steps the base env; the
    wrappers run here, per row and batched): every tape equals the unbatched local run's,
    which records the base env's actions, rewards and observations."""
    from pathlib import Path

    from tests.conftest import Server

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", root)  # the workers import the test's policy module
    steps = 25
    wrappers = ({"target": "gymnasium.wrappers:RescaleAction",
                 "kwargs": {"min_action": -0.5, "max_action": 0.5}},)
    kw = dict(wrappers=wrappers, frame_stack=2, episodes=5, seed=3, max_episode_steps=steps,
              report=False)
    policy = "tests.assets.policies:function"  # acts on the first 6 numbers it is shown
    runs = {"local": evaluate("HalfCheetah-v5", policy, out=tmp_path / "local", **kw),
            "batched": evaluate("HalfCheetah-v5", policy, workers=2, batched_inference=True,
                                out=tmp_path / "batched", **kw)}
    server = Server("--num-envs", "2",
                    what=("HalfCheetah-v5", "--max-episode-steps", str(steps)))
    try:
        url = f"{server.address}/HalfCheetah-v5"
        runs["served"] = evaluate(url, policy, workers=2, out=tmp_path / "served", **kw)
        runs["served_batched"] = evaluate(url, policy, workers=2, batched_inference=True,
                                          out=tmp_path / "served_batched", **kw)
    finally:
        server.stop()
    plain = evaluate("HalfCheetah-v5", policy, episodes=1, seed=3, max_episode_steps=steps,
                     report=False, out=tmp_path / "plain")
    fields = ("actions", "rewards", "terminated", "truncated", "obs_digest", "physics")
    expected = {p.name: Tape.load(p) for p in sorted((tmp_path / "local" / "tapes").glob("*"))}
    assert len(expected) == 5
    for name, run in runs.items():
        assert run.metadata.facts["policy"]["wrappers"] == [
            "gymnasium.wrappers:RescaleAction,min_action=-0.5,max_action=0.5",
            "frame_stack=2"], name
        for tape_name, tape in expected.items():
            other = Tape.load(run.path / "tapes" / tape_name)
            for f in fields:
                assert getattr(tape, f).tobytes() == getattr(other, f).tobytes(), (name, f)
            assert "served" not in other.env
    # The wrappers changed what was played: the base env saw other actions.
    assert not np.array_equal(expected["policy-0000.npz"].actions,
                              Tape.load(plain.path / "tapes" / "policy-0000.npz").actions)
