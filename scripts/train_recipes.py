"""Train several runs of two PPO recipes on CartPole-v1: the material `rolltape eval
--recipe` compares (training runs per recipe, each with its VecNormalize statistics).

The two recipes differ in one hyperparameter, the learning rate (``fast``: 3e-3, ``slow``:
3e-5). Each run is one training seed and is saved by SB3's own ``CheckpointCallback``
(``save_vecnormalize=True``) as::

    OUT/<recipe>/seed<k>/rl_model_<steps>_steps.zip
    OUT/<recipe>/seed<k>/rl_model_vecnormalize_<steps>_steps.pkl

One CPU thread, so a rerun with the same flags reproduces the checkpoints.

Usage:
    python scripts/train_recipes.py --out /tmp/recipes            # 3 seeds x 2 recipes
    python scripts/train_recipes.py --out /tmp/r --seeds 5 --timesteps 8192
    rolltape eval CartPole-v1 --recipe fast='sb3:/tmp/recipes/fast/seed*/rl_model_*_steps.zip' \\
        --recipe slow='sb3:/tmp/recipes/slow/seed*/rl_model_*_steps.zip' -n 20 --out runs/ab
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy/torch load their thread pools

import argparse
from pathlib import Path

RECIPES = {"fast": 3e-3, "slow": 3e-5}  # learning rate: the one hyperparameter that differs


def train(out: Path, recipe: str, seed: int, timesteps: int) -> Path:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(1)
    folder = out / recipe / f"seed{seed}"
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    venv.seed(seed)
    model = PPO("MlpPolicy", venv, learning_rate=RECIPES[recipe], n_steps=256, batch_size=64,
                n_epochs=4, seed=seed, device="cpu", policy_kwargs={"net_arch": [32, 32]})
    model.learn(timesteps, callback=CheckpointCallback(save_freq=timesteps, save_path=str(folder),
                                                       save_vecnormalize=True))
    return folder


def main() -> None:
    # The docstring's first paragraph, whole (its first line alone stopped mid-sentence),
    # and every default shown.
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, default=argparse.SUPPRESS,
                        help="folder for OUT/<recipe>/seed<k>/ checkpoints")
    parser.add_argument("--seeds", type=int, default=3, help="training runs per recipe")
    parser.add_argument("--timesteps", type=int, default=4096,
                        help="training steps of each run")
    args = parser.parse_args()
    for recipe in RECIPES:
        for seed in range(args.seeds):
            print(train(args.out, recipe, seed, args.timesteps), flush=True)


if __name__ == "__main__":
    main()
