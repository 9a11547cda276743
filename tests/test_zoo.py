"""``--policy zoo:FOLDER`` against rl-zoo3 itself: folders made by rl-zoo3's own training
entry point, evaluated by rolltape and by rl-zoo3's evaluation path (its
``get_saved_hyperparams`` + ``create_test_env`` + the model's ``predict``), episode by episode
on the same seeds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import run_cli

from rolltape import evaluate


def zoo_train(root: Path, algo: str, env: str, steps: int, *extra: str) -> Path:
    """``python -m rl_zoo3.train`` into ``root``; the experiment folder it made."""
    subprocess.run([sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env,
                    "-n", str(steps), "-f", str(root), "--seed", "0", "--eval-freq", "-1",
                    "--log-interval", "-1", *extra], check=True, capture_output=True,
                   timeout=600)
    [folder] = (root / algo).glob(f"{env}_*")
    return folder


@pytest.fixture(scope="session")
def cartpole_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # rl-zoo3's tuned CartPole hyperparameters, fewer epochs to keep CI short.
    return zoo_train(tmp_path_factory.mktemp("zoo"), "ppo", "CartPole-v1", 4000,
                     "--save-freq", "1000", "-params", "n_epochs:2")


def pendulum_zoo(root: Path, steps: int, settings: str) -> Path:
    """InvertedPendulum-v5 trained by rl-zoo3 from a conf file of its own format, with
    ``settings`` (YAML lines) beside a small PPO's."""
    conf = root / "conf.yml"
    conf.write_text(f"InvertedPendulum-v5:\n{settings}  n_envs: 1\n  policy: 'MlpPolicy'\n"
                    f"  n_timesteps: {steps}\n  n_steps: 256\n  batch_size: 64\n"
                    "  n_epochs: 1\n")
    return zoo_train(root, "ppo", "InvertedPendulum-v5", steps, "-conf", str(conf))


@pytest.fixture(scope="session")
def normalized_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MuJoCo env trained with ``normalize: true``."""
    return pendulum_zoo(tmp_path_factory.mktemp("zoo_norm"), 1024, "  normalize: true\n")


@pytest.fixture(scope="session")
def stacked_normalized_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``normalize: true`` and ``frame_stack: 3``: rl-zoo3 normalizes, then stacks."""
    return pendulum_zoo(tmp_path_factory.mktemp("zoo_norm_stack"), 512,
                        "  normalize: true\n  frame_stack: 3\n")


def zoo_episodes(folder: Path, model_file: Path, seeds: list[int]) -> list[tuple[float, int]]:
    """rl-zoo3's evaluation path: its saved hyperparameters, its create_test_env (seeded with
    each episode's seed), the model's predict, returns from Monitor (under the wrappers)."""
    from rl_zoo3 import create_test_env, get_saved_hyperparams
    from stable_baselines3 import PPO

    if (folder / "config.yml").is_file():  # a model repo: its args.yml names the env
        cfg_dir, env_id = folder, "CartPole-v1"
    else:
        [cfg_dir] = [d for d in folder.iterdir() if (d / "config.yml").is_file()]
        env_id = cfg_dir.name
    model = PPO.load(model_file, device="cpu")
    out = []
    for seed in seeds:
        hyperparams, stats_path = get_saved_hyperparams(str(cfg_dir), test_mode=True)
        hyperparams.pop("env_kwargs", None)
        venv = create_test_env(env_id, n_envs=1, stats_path=stats_path, seed=seed,
                               should_render=False, hyperparams=hyperparams)
        obs = venv.reset()
        while True:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, done, infos = venv.step(action)
            if done[0]:
                out.append((float(infos[0]["episode"]["r"]), int(infos[0]["episode"]["l"])))
                break
        venv.close()
    return out


def played(run) -> list[tuple[float, int]]:
    return [(e.ret, e.length) for e in run.results.episodes]


def assert_same(ours: list[tuple[float, int]], theirs: list[tuple[float, int]]) -> None:
    """Episode by episode: the same lengths, the same returns (Monitor rounds to 6 places)."""
    assert [n for _, n in ours] == [n for _, n in theirs]
    assert [r for r, _ in ours] == pytest.approx([r for r, _ in theirs], abs=1e-6)


def test_zoo_folder_matches_rl_zoo3(cartpole_zoo: Path, tmp_path: Path) -> None:
    run = evaluate(None, f"zoo:{cartpole_zoo}", episodes=3, seed=100, out=tmp_path / "r",
                   report=False)
    expected = zoo_episodes(cartpole_zoo, cartpole_zoo / "CartPole-v1.zip", [100, 101, 102])
    assert_same(played(run), expected)
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    files = meta["config"]["zoo"]["files"]
    assert {Path(f).name for f in files} == {"config.yml", "args.yml", "CartPole-v1.zip"}
    assert files[str(cartpole_zoo / "CartPole-v1.zip")] == meta["checkpoint_sha256"]
    assert meta["env"]["id"] == "CartPole-v1" and meta["policy"]["algo"] == "PPO"


def test_zoo_checkpoint_by_steps_and_missing(cartpole_zoo: Path, tmp_path: Path) -> None:
    run = evaluate(None, f"zoo:{cartpole_zoo}", checkpoint="2000", episodes=1, seed=5,
                   out=tmp_path / "n", report=False)
    assert run.metadata.facts["policy"]["source"].endswith("rl_model_2000_steps.zip")
    res = run_cli("eval", "--policy", f"zoo:{cartpole_zoo}", "--checkpoint", "best", "-n", "1",
                  "-o", str(tmp_path / "b"), "-q")
    assert res.returncode == 2 and "'best_model.zip'" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_zoo_normalized_mujoco_matches_rl_zoo3(normalized_zoo: Path, tmp_path: Path) -> None:
    run = evaluate(None, f"zoo:{normalized_zoo}", episodes=2, seed=40, out=tmp_path / "r",
                   report=False)
    expected = zoo_episodes(normalized_zoo, normalized_zoo / "InvertedPendulum-v5.zip",
                            [40, 41])
    assert_same(played(run), expected)
    policy = run.metadata.facts["policy"]
    assert policy["vecnormalize"].endswith("vecnormalize.pkl") and policy["vecnormalize_sha256"]


def test_zoo_normalize_then_stack_matches_rl_zoo3(stacked_normalized_zoo: Path,
                                                  tmp_path: Path) -> None:
    folder = stacked_normalized_zoo
    run = evaluate(None, f"zoo:{folder}", episodes=3, seed=7, out=tmp_path / "r", report=False)
    assert_same(played(run), zoo_episodes(folder, folder / "InvertedPendulum-v5.zip", [7, 8, 9]))
    wrappers = run.metadata.facts["policy"]["wrappers"]
    assert wrappers[-2].startswith("vecnormalize=") and wrappers[-1] == "frame_stack=3"


def model_repo(src: Path, dest: Path, config: str, args: str) -> Path:
    """A model repo in rl-zoo3's hub layout: the model beside config.yml and args.yml."""
    dest.mkdir()
    shutil.copy(src / "CartPole-v1.zip", dest / "ppo-CartPole-v1.zip")
    (dest / "config.yml").write_text(config)
    (dest / "args.yml").write_text(args)
    return dest


def test_model_repo_with_env_wrapper(cartpole_zoo: Path, tmp_path: Path) -> None:
    repo = model_repo(cartpole_zoo, tmp_path / "repo",
                      "env_wrapper:\n  - gymnasium.wrappers.FlattenObservation\n",
                      "env: CartPole-v1\nalgo: ppo\n")
    run = evaluate(None, f"zoo:{repo}", episodes=2, seed=100, out=tmp_path / "r",
                   report=False)
    assert_same(played(run), zoo_episodes(repo, repo / "ppo-CartPole-v1.zip", [100, 101]))
    assert run.metadata.facts["policy"]["wrappers"] == ["gymnasium.wrappers:FlattenObservation"]


@pytest.mark.parametrize("config, args, words", [
    ("env_wrapper: no_such_pkg_xyz.wrappers.Wrap\n", "env: CartPole-v1\nalgo: ppo\n",
     ["no_such_pkg_xyz.wrappers.Wrap", "not installed"]),
    ("env_wrapper: gymnasium.wrappers.NoSuchWrapper\n", "env: CartPole-v1\nalgo: ppo\n",
     ["NoSuchWrapper"]),
    ("{}\n", "env: CartPole-v1\nalgo: ppo\ngym_packages: [no_such_envs_xyz]\n",
     ["no_such_envs_xyz"]),
    ("vec_env_wrapper: x.Y\n", "env: CartPole-v1\nalgo: ppo\n", ["vec_env_wrapper"]),
    ("x: !!python/object/apply:os.system ['true']\n", "env: CartPole-v1\n", ["YAML"]),
])
def test_zoo_refusals_are_one_sentence(cartpole_zoo: Path, tmp_path: Path, config: str,
                                       args: str, words: list[str]) -> None:
    repo = model_repo(cartpole_zoo, tmp_path / "repo", config, args)
    res = run_cli("eval", "--policy", f"zoo:{repo}", "-n", "1", "-o", str(tmp_path / "r"), "-q")
    assert res.returncode == 2, res.stderr
    assert all(w in res.stderr for w in words), res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
