"""Train the demo policy that `rolltape demo` evaluates.

A single-file, CleanRL-style script: Stable-Baselines3 PPO with a VecNormalize
wrapper (normalized observations and rewards) on a MuJoCo Gymnasium v5 env,
trained on one CPU core so a rerun with the same flags reproduces the result.

It writes three files into --out (default: src/rolltape/demo/):

    policy.zip         PPO model (model.save)
    vecnormalize.pkl   observation/reward statistics (VecNormalize.save)
    demo.json          env id, timesteps, seed, timings, eval vs random returns, versions

Evaluation: 10 deterministic episodes on reset seeds 1000..1009 with the saved
VecNormalize statistics applied (training=False, norm_reward=False), against a
uniform-random policy on the same seeds. Returns are the env's raw returns.

Usage:
    python scripts/train_demo.py          # the bundled demo: Pusher-v5, 4M steps, seed 0
                                          # (~15-18 min on one CPU core, ~4k steps/s)
    python scripts/train_demo.py --env Reacher-v5 --timesteps 300000 --out /tmp/reacher
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy/torch load their thread pools

import argparse
import csv
import json
import random
import time
from importlib.metadata import version
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "src" / "rolltape" / "demo"
EVAL_SEEDS = list(range(1000, 1010))

# PPO settings per env. Anything not listed uses BASE.
BASE = dict(
    n_envs=8,
    n_steps=256,  # per env -> 2048 samples per update
    batch_size=256,
    n_epochs=10,
    learning_rate=3e-4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    ent_coef=0.0,
    max_grad_norm=0.5,
)
HYPERPARAMS = {
    # 4096 samples per update. Reaches the object by ~300k steps, pushes it onto
    # the goal by ~1-2M; 4M steps gives a steadier push.
    "Pusher-v5": dict(n_steps=512),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Pusher-v5", help="Gymnasium MuJoCo v5 env id")
    p.add_argument("--timesteps", type=int, default=4_000_000, help="total env steps to train for")
    p.add_argument("--seed", type=int, default=0, help="seed for torch, numpy, python and the envs")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for policy.zip, vecnormalize.pkl, demo.json")
    p.add_argument("--log-csv", type=Path, default=None, help="optional CSV of the learning curve")
    return p.parse_args()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # one core, and bit-for-bit reruns
    torch.use_deterministic_algorithms(True)


class CurveLogger(BaseCallback):
    """Print (and optionally record) mean raw episode return after every rollout."""

    def __init__(self, csv_path: Path | None):
        super().__init__()
        self.csv_path = csv_path
        self.returns: list[float] = []
        self.t0 = time.perf_counter()
        self.rows: list[tuple[int, float, float, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:  # added by the Monitor wrapper: raw, unnormalized return
                self.returns.append(info["episode"]["r"])
        return True

    def _on_rollout_end(self) -> None:
        if not self.returns:
            return
        elapsed = time.perf_counter() - self.t0
        mean = float(np.mean(self.returns[-50:]))
        self.rows.append((self.num_timesteps, elapsed, self.num_timesteps / elapsed, mean))
        print(f"steps={self.num_timesteps:>8d}  time={elapsed:7.1f}s  sps={self.num_timesteps / elapsed:6.0f}  "
              f"return(last50)={mean:9.2f}", flush=True)

    def _on_training_end(self) -> None:
        if self.csv_path is not None:
            with open(self.csv_path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["timesteps", "seconds", "steps_per_second", "mean_return_last50"])
                w.writerows(self.rows)


def evaluate(env_id: str, vecnorm_path: Path | None, model: PPO | None, seeds: list[int]) -> list[float]:
    """Raw returns of `model` (or a uniform-random policy when None), one episode per seed."""
    obs_norm = None
    if vecnorm_path is not None:
        obs_norm = VecNormalize.load(str(vecnorm_path), DummyVecEnv([lambda: gym.make(env_id)]))
        obs_norm.training = False  # freeze the statistics
        obs_norm.norm_reward = False  # report raw returns
    env = gym.make(env_id)
    returns = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        total, done = 0.0, False
        while not done:
            if model is None:
                action = env.action_space.sample()
            else:
                action, _ = model.predict(obs_norm.normalize_obs(obs), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def main() -> None:
    args = parse_args()
    seed_everything(args.seed)
    hp = {**BASE, **HYPERPARAMS.get(args.env, {})}
    n_envs = hp.pop("n_envs")

    # Env: n_envs copies stepped in one process (Monitor records raw returns),
    # wrapped in VecNormalize for observation and reward normalization.
    venv = make_vec_env(args.env, n_envs=n_envs, seed=args.seed, vec_env_cls=DummyVecEnv)
    venv = VecNormalize(venv, norm_obs=True, norm_reward=True, clip_obs=10.0, gamma=hp["gamma"])

    # Agent: small 64x64 actor and critic keeps policy.zip well under 1 MB.
    model = PPO(
        "MlpPolicy",
        venv,
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64])),
        seed=args.seed,
        device="cpu",
        verbose=0,
        **hp,
    )

    print(f"training PPO on {args.env} for {args.timesteps} steps (seed {args.seed}, {n_envs} envs)", flush=True)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, callback=CurveLogger(args.log_csv))
    train_seconds = time.perf_counter() - t0
    print(f"trained in {train_seconds:.1f}s ({args.timesteps / train_seconds:.0f} steps/s)", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    model.save(args.out / "policy.zip")
    venv.save(str(args.out / "vecnormalize.pkl"))
    venv.close()

    policy_returns = evaluate(args.env, args.out / "vecnormalize.pkl", model, EVAL_SEEDS)
    random_returns = evaluate(args.env, None, None, EVAL_SEEDS)
    print(f"eval over seeds {EVAL_SEEDS[0]}..{EVAL_SEEDS[-1]}: policy {np.mean(policy_returns):.2f}  "
          f"random {np.mean(random_returns):.2f}", flush=True)

    meta = {
        "env_id": args.env,
        "algo": "ppo",
        "timesteps": args.timesteps,
        "seed": args.seed,
        "train_seconds": round(train_seconds, 1),
        "eval_mean_return": round(float(np.mean(policy_returns)), 3),
        "random_mean_return": round(float(np.mean(random_returns)), 3),
        "eval_seeds": EVAL_SEEDS,
        "sb3_version": version("stable-baselines3"),
        "gymnasium_version": version("gymnasium"),
        "mujoco_version": version("mujoco"),
    }
    (args.out / "demo.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
