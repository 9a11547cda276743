"""Policies: every source string pass 1 accepts, with real SB3 files and real envs.

The SB3 checkpoints are real files saved by the algorithms themselves (untrained: what is
checked is that rolltape loads the right class with the right weights, so its actions must
equal ``model.predict(obs, deterministic=True)[0]`` bit for bit). The VecNormalize test runs
real pass 1 (``rolltape.evaluate`` in its spawned worker) and compares it with SB3's own
evaluation pipeline run here.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape import Tape, UsageError, evaluate
from rolltape.policies import (
    CallablePolicy,
    RandomPolicy,
    SB3Policy,
    TapePolicy,
    detect_sb3_algo,
    load_policy,
)

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "assets"
ENV_ID = "HalfCheetah-v5"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """``tests.assets`` imports from whatever folder pytest runs; and MuJoCo envs built here
    (outside rolltape's workers) write MUJOCO_LOG.TXT into the current folder, so that is a
    temporary one, never the repository."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def cheetah():
    env = gym.make(ENV_ID, max_episode_steps=30)
    yield env
    env.close()


def _observations(env, n: int = 6, seed: int = 0) -> list[np.ndarray]:
    """Real observations: a reset and a few random steps."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [obs]
    for _ in range(n - 1):
        obs, *_ = env.step(env.action_space.sample())
        out.append(obs)
    return out


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


# --- random ---------------------------------------------------------------------------------

def test_random_policy_is_reproducible_per_seed(cheetah):
    policy = load_policy("random", cheetah)
    assert isinstance(policy, RandomPolicy)
    obs, _ = cheetah.reset(seed=0)

    def actions(seed: int) -> np.ndarray:
        policy.reset(seed)
        return np.stack([policy.act(obs) for _ in range(10)])

    first = actions(11)
    other = actions(12)
    again = actions(11)  # after another seed: the seed alone decides
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    assert np.all(first >= cheetah.action_space.low) and np.all(first <= cheetah.action_space.high)
    # A fresh env (another process would build one) gives the same actions for the seed.
    fresh = gym.make(ENV_ID)
    try:
        other_policy = load_policy("random", fresh)
        other_policy.reset(11)
        assert np.array_equal(np.stack([other_policy.act(obs) for _ in range(10)]), first)
    finally:
        fresh.close()


def test_a_forked_random_policy_plays_its_episode_as_if_alone(cheetah):
    """Two episodes interleaved step by step (pass1.inflight) draw what each would alone."""
    policy = load_policy("random", cheetah)
    obs, _ = cheetah.reset(seed=0)
    alone = {}
    for seed in (3, 4):
        policy.reset(seed)
        alone[seed] = [policy.act(obs) for _ in range(5)]
    fork = policy.fork()
    assert isinstance(fork, RandomPolicy) and fork.description == policy.description
    policy.reset(3)
    fork.reset(4)
    mixed = {3: [], 4: []}
    for _ in range(5):
        mixed[3].append(policy.act(obs))
        mixed[4].append(fork.act(obs))
    assert all(np.array_equal(np.stack(alone[s]), np.stack(mixed[s])) for s in (3, 4))


def test_only_policies_without_shared_state_fork(cheetah, ppo_checkpoint):
    model_zip, stats = ppo_checkpoint
    deterministic = load_policy(f"sb3:{model_zip}", cheetah, vecnormalize=stats)
    assert deterministic.fork() is deterministic  # no state between steps: shared
    # Sampled actions draw from torch's global generator, seeded per episode.
    assert load_policy(f"sb3:{model_zip}", cheetah, deterministic=False).fork() is None
    assert load_policy("tests.assets.policies:function", cheetah).fork() is None


def test_random_policy_refuses_vecnormalize(cheetah, ppo_checkpoint):
    with pytest.raises(UsageError, match="random"):
        load_policy("random", cheetah, vecnormalize=ppo_checkpoint[1])


# --- SB3: algorithm detection and exact actions ----------------------------------------------

_ALGOS = [("PPO", "Pendulum-v1"), ("A2C", "Pendulum-v1"), ("SAC", "Pendulum-v1"),
          ("TD3", "Pendulum-v1"), ("DQN", "CartPole-v1"), ("PPO", "CartPole-v1"),
          ("A2C", "CartPole-v1"), ("SAC", ENV_ID)]


@pytest.fixture(scope="module")
def sb3_models(tmp_path_factory):
    """{(algo, env id): (model, saved zip)} of untrained models saved by SB3 itself."""
    import stable_baselines3 as sb3

    folder = tmp_path_factory.mktemp("sb3")
    models = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # MuJoCo writes MUJOCO_LOG.TXT into the current folder
        for algo, env_id in _ALGOS + [("DDPG", "Pendulum-v1")]:
            env = gym.make(env_id)
            model = getattr(sb3, algo)("MlpPolicy", env, seed=0, device="cpu",
                                       policy_kwargs=dict(net_arch=[16, 16]))
            path = folder / f"{algo.lower()}-{env_id}.zip"
            model.save(path)
            models[(algo, env_id)] = (model, path)
            env.close()
    return models


@pytest.mark.parametrize("algo,env_id", _ALGOS, ids=[f"{a}-{e}" for a, e in _ALGOS])
def test_sb3_checkpoint_is_detected_and_acts_like_the_model(sb3_models, algo, env_id):
    model, path = sb3_models[(algo, env_id)]
    assert detect_sb3_algo(path) == algo
    env = gym.make(env_id)
    try:
        for source in (f"sb3:{path}", str(path)):  # with and without the sb3: prefix
            policy = load_policy(source, env)
            assert isinstance(policy, SB3Policy)
            assert policy.description["algo"] == algo
            assert policy.description["deterministic"] is True
            for obs in _observations(env):
                assert _same(policy.act(obs), model.predict(obs, deterministic=True)[0])
    finally:
        env.close()


def test_sb3_checkpoints_load_without_building_an_optimizer(sb3_models):
    """An evaluation never trains: the optimizer is not built, and so torch._dynamo (which
    building one imports, ~1 s of every pass-1 worker's start) is never imported. SAC builds
    its entropy optimizer itself, so only the others are held to it."""
    paths = {f"{a}-{e}": str(p) for (a, e), (_, p) in sb3_models.items() if a != "SAC"}
    code = ("import json, sys, gymnasium as gym\n"
            "from rolltape.policies import load_policy\n"
            "for name, path in json.loads(sys.argv[1]).items():\n"
            "    policy = load_policy('sb3:' + path, gym.make(name.split('-', 1)[1]))\n"
            "    policy.act(policy.model.observation_space.sample())\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('torch._dynamo'))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(paths)], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_sb3_discrete_actions_are_integers(sb3_models):
    model, path = sb3_models[("DQN", "CartPole-v1")]
    env = gym.make("CartPole-v1")
    try:
        policy = load_policy(str(path), env)
        actions = [policy.act(obs) for obs in _observations(env)]
        assert all(np.asarray(a).dtype.kind == "i" for a in actions)
        assert all(env.action_space.contains(int(a)) for a in actions)
    finally:
        env.close()


def test_ddpg_checkpoint_is_detected_as_ddpg(sb3_models):
    _, path = sb3_models[("DDPG", "Pendulum-v1")]
    assert detect_sb3_algo(path) == "DDPG"


def test_explicit_algo_overrides_detection_and_a_wrong_one_is_refused(sb3_models):
    model, path = sb3_models[("SAC", "Pendulum-v1")]
    env = gym.make("Pendulum-v1")
    try:
        policy = load_policy(str(path), env, algo="sac")
        assert policy.description["algo"] == "SAC"
        obs = _observations(env, 1)[0]
        assert _same(policy.act(obs), model.predict(obs, deterministic=True)[0])
        with pytest.raises(UsageError, match="PPO"):
            load_policy(str(path), env, algo="PPO")  # a SAC file is not a PPO one
        with pytest.raises(UsageError, match="Unknown --algo 'XYZ'"):
            load_policy(str(path), env, algo="xyz")
    finally:
        env.close()


def test_stochastic_flag_reaches_sb3(sb3_models):
    model, path = sb3_models[("SAC", ENV_ID)]
    env = gym.make(ENV_ID)
    try:
        policy = load_policy(str(path), env, deterministic=False)
        assert policy.description["deterministic"] is False
        obs = _observations(env, 1)[0]
        deterministic = model.predict(obs, deterministic=True)[0]
        sampled = [policy.act(obs) for _ in range(3)]
        assert not any(np.array_equal(a, deterministic) for a in sampled)
    finally:
        env.close()


# --- VecNormalize ---------------------------------------------------------------------------

def test_vecnormalize_is_frozen_for_evaluation(cheetah, ppo_checkpoint):
    model_zip, stats = ppo_checkpoint
    with open(stats, "rb") as f:
        saved = pickle.load(f)
    assert saved.training and saved.norm_reward  # how the fixture saved them
    policy = load_policy(f"sb3:{model_zip}", cheetah, vecnormalize=stats)
    assert policy.obs_normalizer.training is False
    assert policy.obs_normalizer.norm_reward is False
    mean = policy.obs_normalizer.obs_rms.mean.copy()
    var = policy.obs_normalizer.obs_rms.var.copy()
    for obs in _observations(cheetah, 10):
        policy.act(obs)
    assert np.array_equal(policy.obs_normalizer.obs_rms.mean, mean)  # acting never updates
    assert np.array_equal(policy.obs_normalizer.obs_rms.var, var)
    assert policy.description["vecnormalize_sha256"] is not None


def test_pass1_actions_equal_sb3_evaluation_pipeline(ppo_checkpoint, tmp_path):
    """Pass 1 (spawned worker) == DummyVecEnv + VecNormalize.load(training=False,
    norm_reward=False) + model.predict, bit for bit, for the same seeds."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    model_zip, stats = ppo_checkpoint
    steps, seed = 30, 123
    run = evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=2, seed=seed,
                   max_episode_steps=steps, out=tmp_path / "run")
    model = PPO.load(model_zip, device="cpu")
    for i in range(2):
        tape = Tape.load(run.path / "tapes" / f"policy-{i:04d}.npz")
        venv = VecNormalize.load(str(stats), DummyVecEnv(
            [lambda: gym.make(ENV_ID, max_episode_steps=steps)]))
        venv.training = False
        venv.norm_reward = False
        venv.seed(seed + i)
        obs = venv.reset()
        actions, raw_actions, rewards = [], [], []
        for _ in range(steps):
            action, _ = model.predict(obs, deterministic=True)
            raw_actions.append(model.predict(venv.get_original_obs(), deterministic=True)[0][0])
            obs, reward, _, _ = venv.step(action)
            actions.append(action[0])
            rewards.append(venv.get_original_reward()[0])
        venv.close()
        actions = np.stack(actions)
        assert tape.actions.dtype == actions.dtype and np.array_equal(tape.actions, actions)
        # DummyVecEnv keeps rewards as float32; the tape keeps the env's float64.
        assert np.array_equal(tape.rewards.astype(np.float32), np.asarray(rewards))
        # The statistics matter: without them the actions would differ.
        assert not np.array_equal(np.stack(raw_actions), actions)


# --- callables ------------------------------------------------------------------------------

_CALLABLES = [
    ("function", "function"),
    ("predictor", "predict"),
    ("Predictor", "predict"),  # a class is a factory too
    ("make_function", "function"),
    ("make_predictor", "predict"),
]


@pytest.mark.parametrize("form", ["module", "file"])
@pytest.mark.parametrize("attr,kind", _CALLABLES, ids=[a for a, _ in _CALLABLES])
def test_callable_policies(cheetah, form, attr, kind):
    source = (f"tests.assets.policies:{attr}" if form == "module"
              else f"{ASSETS / 'policies.py'}:{attr}")
    for deterministic in (True, False):
        policy = load_policy(source, cheetah, deterministic=deterministic)
        assert isinstance(policy, CallablePolicy)
        assert policy.description["source"] == source
        if form == "file":
            from rolltape.policies import sha256_of
            assert policy.description["sha256"] == sha256_of(ASSETS / "policies.py")
        from tests.assets.policies import expected_action

        for obs in _observations(cheetah, 3):
            assert _same(policy.act(obs), expected_action(obs, kind, deterministic))


def test_relative_file_path_policy(cheetah, monkeypatch):
    monkeypatch.chdir(ROOT)
    from tests.assets.policies import expected_action

    policy = load_policy("tests/assets/policies.py:function", cheetah)
    obs = _observations(cheetah, 1)[0]
    assert _same(policy.act(obs), expected_action(obs, "function"))


def test_tape_policy_replays_a_tapes_actions(random_run, cheetah):
    path = random_run.path / "tapes" / "policy-0001.npz"
    tape = Tape.load(path)
    policy = load_policy(f"tape:{path}", cheetah)
    assert isinstance(policy, TapePolicy)
    assert policy.description["kind"] == "tape"
    for _ in range(2):  # reset rewinds
        policy.reset(tape.seed)
        obs = np.full(17, np.nan)  # open loop: the observation is ignored
        replayed = np.stack([policy.act(obs) for _ in range(tape.length)])
        assert replayed.dtype == tape.actions.dtype and np.array_equal(replayed, tape.actions)
    with pytest.raises(UsageError, match="ran out of actions"):
        policy.act(obs)
    # Stepping those actions from the tape's seed earns exactly the tape's rewards.
    policy.reset(tape.seed)
    env = gym.make(ENV_ID, max_episode_steps=tape.length)
    try:
        obs, _ = env.reset(seed=tape.seed)
        rewards = [env.step(policy.act(obs))[1] for _ in range(tape.length)]
    finally:
        env.close()
    assert np.array_equal(np.asarray(rewards, dtype=np.float64), tape.rewards)


# --- errors ---------------------------------------------------------------------------------

def test_missing_checkpoint(cheetah, tmp_path):
    for source in (f"sb3:{tmp_path / 'nope.zip'}", str(tmp_path / "nope.zip")):
        with pytest.raises(UsageError, match="does not exist"):
            load_policy(source, cheetah)


def test_corrupt_checkpoints(cheetah, tmp_path, ppo_checkpoint):
    garbage = tmp_path / "garbage.zip"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    truncated = tmp_path / "truncated.zip"
    data = ppo_checkpoint[0].read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    no_data = tmp_path / "nodata.zip"
    with zipfile.ZipFile(no_data, "w") as zf:
        zf.writestr("hello.txt", "not a checkpoint")
    for path in (garbage, truncated, no_data):
        with pytest.raises(UsageError, match="not a readable Stable-Baselines3"):
            load_policy(f"sb3:{path}", cheetah)
        with pytest.raises(UsageError):
            detect_sb3_algo(path)


def test_corrupt_or_wrong_vecnormalize(cheetah, tmp_path, ppo_checkpoint):
    model_zip, _ = ppo_checkpoint
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(np.random.default_rng(1).bytes(2048))
    with pytest.raises(UsageError, match="corrupt or not a pickle"):
        load_policy(f"sb3:{model_zip}", cheetah, vecnormalize=garbage)
    not_stats = tmp_path / "dict.pkl"
    not_stats.write_bytes(pickle.dumps({"obs_rms": None}))
    with pytest.raises(UsageError, match="not VecNormalize statistics"):
        load_policy(f"sb3:{model_zip}", cheetah, vecnormalize=not_stats)
    with pytest.raises(UsageError, match="do not exist"):
        load_policy(f"sb3:{model_zip}", cheetah, vecnormalize=tmp_path / "missing.pkl")


def test_statistics_of_another_observation_shape(cheetah, ppo_checkpoint, hopper_stats):
    with pytest.raises(UsageError, match=r"\(11,\).*\(17,\)"):
        load_policy(f"sb3:{ppo_checkpoint[0]}", cheetah, vecnormalize=hopper_stats)


def test_checkpoint_of_another_observation_shape(cheetah, hopper_stats):
    hopper_model = hopper_stats.parent / "model.zip"  # saved beside the statistics
    with pytest.raises(UsageError, match=r"\(11,\).*HalfCheetah-v5.*\(17,\)"):
        load_policy(f"sb3:{hopper_model}", cheetah)


@pytest.mark.parametrize("source,needle", [
    ("banana", "not understood"),
    ("", "not understood"),
    ("tests.assets.no_such_module:policy", "Cannot import"),
    ("tests.assets.policies:no_such_attr", "no attribute 'no_such_attr'"),
    ("tests.assets.policies:not_a_policy", "not a policy"),
    ("tests/assets/missing.py:policy", "does not exist"),
    ("tape:/nonexistent/tape.npz", "does not exist"),
])
def test_unknown_policy_sources(cheetah, source, needle):
    with pytest.raises(UsageError, match=needle):
        load_policy(source, cheetah)


def test_vecnormalize_with_a_callable_is_refused(cheetah, ppo_checkpoint):
    with pytest.raises(UsageError, match="callables"):
        load_policy("tests.assets.policies:function", cheetah, vecnormalize=ppo_checkpoint[1])


def test_lean_actor_serves_a_policy_whose_critic_has_its_own_extractor(cheetah):
    """PPO with ``share_features_extractor=False``: the fast actor still applies (it used to
    hand the actor network the (actor, critic) features pair, fail its own check and fall
    back to predict) and acts exactly as predict does."""
    from stable_baselines3 import PPO

    from rolltape.policies import _lean_actor

    model = PPO("MlpPolicy", cheetah, n_steps=64, batch_size=64, n_epochs=1, seed=0,
                policy_kwargs={"share_features_extractor": False})
    model.learn(64)
    act = _lean_actor(model, None, True)
    assert act is not None
    for obs in _observations(cheetah):
        assert _same(act(obs), model.predict(obs, deterministic=True)[0])
