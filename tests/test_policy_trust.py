"""Loading a policy runs no code from it: an rl-zoo3 folder's config.yml / args.yml, a
VecNormalize statistics file and an SB3 checkpoint's pickled data each carry a payload that
would write a marker file, and the marker is never written (each refusal is one sentence,
exit 2, no run folder); a checkpoint's pickled schedule is not even read. What the user
names (--trust-module) does run. VecNormalize statistics saved with norm_obs=False load."""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest
from tests.conftest import run_cli

from rolltape import evaluate

ARGS = "env: CartPole-v1\nalgo: ppo\n"
MODEL = "ppo-CartPole-v1.zip"
# Imported, this module leaves a marker beside it; its Wrap is a real gymnasium.Wrapper.
EVILMOD = ("import gymnasium as gym\nfrom pathlib import Path\n"
           "Path(__file__).with_name('MARKER').write_text('imported')\n"
           "class Wrap(gym.Wrapper):\n    pass\n")


class Payload:
    """Unpickled, runs a shell command (what a hostile pickle does)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repo in rl-zoo3's hub layout: a real (briefly trained) SB3 PPO on CartPole
    whose saved data pickles a schedule and ReLU, as rl-zoo3's do."""
    import torch
    from stable_baselines3 import PPO

    out = tmp_path_factory.mktemp("trust")
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0,
                device="cpu", learning_rate=lambda f: 1e-3 * f,
                policy_kwargs={"net_arch": [16], "activation_fn": torch.nn.ReLU})
    model.learn(64)
    model.save(out / MODEL)
    return out


def repo(trained: Path, dest: Path, config: str = "{}\n", args: str = ARGS) -> Path:
    dest.mkdir()
    shutil.copy(trained / MODEL, dest / MODEL)
    (dest / "config.yml").write_text(config)
    (dest / "args.yml").write_text(args)
    return dest


def poisoned(model: Path, key: str, dest: Path, marker: Path) -> Path:
    """A copy of ``model`` whose saved data holds ``key`` as a pickle that writes ``marker``."""
    blob = base64.b64encode(pickle.dumps(Payload(f"touch {marker}"))).decode()
    with zipfile.ZipFile(model) as zin, zipfile.ZipFile(dest, "w") as zout:
        for item in zin.infolist():
            raw = zin.read(item.filename)
            if item.filename == "data":
                data = json.loads(raw)
                data[key] = {":type:": "<class 'function'>", ":serialized:": blob}
                raw = json.dumps(data).encode()
            zout.writestr(item, raw)
    return dest


def refused(res, *words: str) -> str:
    """One sentence, exit 2, naming ``words``."""
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


ROUTES = [
    # rl-zoo3 calls any callable of any module: this one runs its cmd in a shell.
    ("env_wrapper:\n  - pydoc.pipepager:\n      cmd: 'touch MARKER'\n", ARGS,
     ["pydoc", "--trust-module pydoc"]),
    ("{}\n", "env: evilmod:CartPole-v1\nalgo: ppo\n", ["evilmod"]),  # a file put beside
    ("env_wrapper: antigravity.Foo\n", ARGS, ["antigravity"]),  # opens $BROWSER on import
    ("{}\n", ARGS + "gym_packages: [antigravity]\n", ["antigravity"]),
    ("env_wrapper: evilmod.Wrap\n", ARGS, ["evilmod", "--trust-module evilmod"]),
]


def hostile_folder(trained: Path, tmp_path: Path, config: str, args: str) -> dict[str, str]:
    """The repo, evilmod.py beside it and a $BROWSER that leaves the marker; the env."""
    repo(trained, tmp_path / "repo", config, args)
    (tmp_path / "evilmod.py").write_text(EVILMOD)
    browser = tmp_path / "browser"  # what antigravity's webbrowser.open would start
    browser.write_text(f"#!/bin/sh\ntouch {tmp_path / 'MARKER'}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IEXEC)
    return {"BROWSER": str(browser)}


@pytest.mark.parametrize("config, args, words", ROUTES[:2])
def test_a_zoo_folder_runs_no_code(trained: Path, tmp_path: Path, config: str, args: str,
                                   words: list[str]) -> None:
    env = hostile_folder(trained, tmp_path, config, args)
    res = run_cli("eval", "--policy", "zoo:repo", "-n", "1", "-o", "r", "-q", "--no-report",
                  cwd=tmp_path, env=env)
    refused(res, *words)
    assert not (tmp_path / "MARKER").exists() and not (tmp_path / "r").exists()


def test_every_zoo_code_route_is_refused_from_metadata(trained: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusals in this process (cheaper than a CLI each): nothing is imported."""
    from rolltape.errors import UsageError
    from rolltape.zoo import zoo_options

    for i, (config, args, words) in enumerate(ROUTES):
        here = tmp_path / str(i)
        here.mkdir()
        for key, value in hostile_folder(trained, here, config, args).items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(here)
        monkeypatch.syspath_prepend(str(here))
        with pytest.raises(UsageError) as err:
            zoo_options("zoo:repo", None, {})
        assert all(w in str(err.value) for w in words) and "\n" not in str(err.value)
        assert not (here / "MARKER").exists()
    assert "antigravity" not in sys.modules and "evilmod" not in sys.modules


def test_a_module_the_user_trusts_runs(trained: Path, tmp_path: Path) -> None:
    repo(trained, tmp_path / "repo", "env_wrapper: evilmod.Wrap\n")
    (tmp_path / "evilmod.py").write_text(EVILMOD)
    res = run_cli("eval", "--policy", "zoo:repo", "-n", "1", "-o", "r", "-q", "--no-report",
                  "--max-episode-steps", "20", "--trust-module", "evilmod", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "MARKER").exists()  # the user's own module, named on the command line
    res = run_cli("eval", "CartPole-v1", "-n", "1", "--trust-module", "evilmod", cwd=tmp_path)
    refused(res, "--trust-module", "zoo:")


def test_a_zoo_wrapper_must_be_a_wrapper_class(trained: Path, tmp_path: Path) -> None:
    """An installed env package's function is no wrapper: the pass-1 chain refuses it after
    the import (an env package's import is what gym.make does anyway), before the call."""
    import gymnasium as gym

    from rolltape.errors import UsageError
    from rolltape.pass1.wrappers import recording_tap, wrap, wrapper_entries
    from rolltape.zoo import zoo_options

    folder = repo(trained, tmp_path / "repo", "env_wrapper:\n  - gymnasium.make:\n"
                  "      id: CartPole-v1\n")
    _, _, options = zoo_options(f"zoo:{folder}", None, {})
    with pytest.raises(UsageError, match=r"gymnasium\.make.*not a gymnasium\.Wrapper class"):
        wrap(recording_tap(gym.make("CartPole-v1")), wrapper_entries(options["wrappers"]))


def test_real_zoo_wrappers_are_admitted(trained: Path, tmp_path: Path) -> None:
    """What rl-zoo3's own configs name (Gymnasium's, SB3's, sb3-contrib's and rl-zoo3's
    wrappers) passes the checks and wraps a real env."""
    import gymnasium as gym

    from rolltape.pass1.wrappers import recording_tap, wrap, wrapper_entries
    from rolltape.zoo import zoo_options

    folder = repo(trained, tmp_path / "repo", "env_wrapper:\n"
                  "  - rl_zoo3.wrappers.MaskVelocityWrapper\n"
                  "  - sb3_contrib.common.wrappers.TimeFeatureWrapper:\n      max_steps: 500\n"
                  "  - gymnasium.wrappers.ClipReward:\n      min_reward: -1\n")
    _, _, options = zoo_options(f"zoo:{folder}", None, {})
    env = wrap(recording_tap(gym.make("CartPole-v1")), wrapper_entries(options["wrappers"]))
    assert env.observation_space.shape == (5,)  # CartPole's 4 and the time feature


def sb3_played(model: Path, seeds: list[int], steps: int) -> list[tuple[float, int]]:
    """SB3's own evaluation of the clean checkpoint: its load, its predict, seeded resets."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    policy, out = PPO.load(model, device="cpu"), []
    for seed in seeds:
        env = gym.make("CartPole-v1", max_episode_steps=steps)
        obs, _ = env.reset(seed=seed)
        total, n, done = 0.0, 0, False
        while not done:
            obs, reward, term, trunc, _ = env.step(policy.predict(obs, deterministic=True)[0])
            total, n, done = total + float(reward), n + 1, term or trunc
        out.append((total, n))
    return out


def played(run) -> list[tuple[float, int]]:
    return [(e.ret, e.length) for e in run.results.episodes]


def test_a_checkpoint_pickle_is_refused_unrun(trained: Path, tmp_path: Path) -> None:
    from rolltape.errors import UsageError
    from rolltape.policies import load_policy

    marker = tmp_path / "MARKER"
    bad = poisoned(trained / MODEL, "policy_class", tmp_path / "bad.zip", marker)
    res = run_cli("eval", "CartPole-v1", "--policy", f"sb3:{bad}", "-n", "1", "-o",
                  str(tmp_path / "r"), "-q", "--no-report")
    refused(res, "saved policy_class", "system")
    assert not (tmp_path / "r").exists()
    import gymnasium as gym

    for key in ("policy_kwargs", "observation_space", "action_space"):
        bad = poisoned(trained / MODEL, key, tmp_path / f"{key}.zip", marker)
        with pytest.raises(UsageError, match=f"saved {key} names '(posix|os).system'") as err:
            load_policy(f"sb3:{bad}", gym.make("CartPole-v1"))
        assert "\n" not in str(err.value)
    assert not marker.exists()


def test_a_checkpoint_schedule_is_never_read(trained: Path, tmp_path: Path) -> None:
    """A pickled lr_schedule (rl-zoo3's are closures) is replaced, never unpickled: the run
    evaluates as SB3 evaluates the clean checkpoint, and the payload stays unrun."""
    marker = tmp_path / "MARKER"
    bad = poisoned(trained / MODEL, "lr_schedule", tmp_path / "bad.zip", marker)
    run = evaluate("CartPole-v1", f"sb3:{bad}", episodes=2, seed=3, max_episode_steps=60,
                   out=tmp_path / "bad", report=False)
    assert played(run) == sb3_played(trained / MODEL, [3, 4], 60)
    assert not marker.exists()


def test_vecnormalize_pickle_is_refused_unrun(tmp_path: Path) -> None:
    import gymnasium as gym

    from rolltape.errors import UsageError
    from rolltape.policies import load_vecnormalize

    marker = tmp_path / "MARKER"
    stats = tmp_path / "vecnormalize.pkl"
    stats.write_bytes(pickle.dumps(Payload(f"touch {marker}")))
    with pytest.raises(UsageError, match="VecNormalize statistics .* names '(posix|os).system'"):
        load_vecnormalize(stats, gym.make("CartPole-v1"))
    assert not marker.exists()


def test_statistics_without_observation_statistics_load(trained: Path, tmp_path: Path) -> None:
    """norm_obs=False (rl-zoo3's CarRacing) saves no obs_rms: the statistics leave the
    observations as they are, for --vecnormalize and for a zoo folder alike (this was a
    RecursionError in every such run)."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rolltape.policies import load_vecnormalize

    venv = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), norm_obs=False)
    venv.reset()
    folder = repo(trained, tmp_path / "repo", "normalize: true\n")
    venv.save(str(folder / "vecnormalize.pkl"))
    frozen = load_vecnormalize(folder / "vecnormalize.pkl", gym.make("CartPole-v1"))
    assert np.array_equal(frozen.normalize_obs(np.arange(4.0)), np.arange(4.0))
    zoo = evaluate(None, f"zoo:{folder}", out=tmp_path / "z", episodes=2, seed=11,
                   max_episode_steps=60, report=False)
    assert played(zoo) == sb3_played(folder / MODEL, [11, 12], 60)
    assert zoo.metadata.facts["policy"]["vecnormalize"].endswith("vecnormalize.pkl")
