"""Seed 000's own code path, the baseline of ``small_job``: a script that evaluates an SB3
PPO checkpoint with VecNormalize in one fresh interpreter and draws one replay in another.

What it does, step by step, as seed 000's ``safe_mujoco_render.py`` does (written anew
here, not copied):

1. the calling process starts ``python -u -X faulthandler -c PROGRAM`` with the request as
   one JSON line on stdin (MUJOCO_GL and PYOPENGL_PLATFORM removed). That interpreter
   imports SB3, loads the checkpoint, runs ``evaluate_policy`` on ``make_vec_env(env,
   seed=eval_seed)`` under ``VecNormalize.load`` (training off, rewards raw), then a random
   baseline on a plain env (episode i reset and its action space seeded with
   ``random_seed + i``), then plays the replay episode (``replay_seed``) once more with
   the policy to record its actions and reward, and prints one JSON line;
2. the calling process starts a second interpreter (no torch) with ``MUJOCO_GL`` set to
   each backend in turn until one works: it replays the actions with
   ``render_mode="rgb_array"`` at the asked size, keeps every frame in a list, then
   writes them with ``imageio.mimsave`` (libx264, quality 8);
3. the calling process checks that the drawn replay earned the recorded reward and that
   there are steps + 1 frames.

Run as a script (``python seed000.py REQUEST_JSON``), so that timing it from a cold
interpreter costs what seed 000's costs: this file imports the standard library only, and
nothing of rolltape.

May import: the standard library (its child programs: gymnasium, numpy, SB3, imageio).
Never: rolltape.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from typing import Any

EVALUATE = r"""
import json
import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

req = json.loads(input())
limit = {"max_episode_steps": req["max_episode_steps"]} if req["max_episode_steps"] else {}
model = PPO.load(req["model"], device="cpu")

def normalized(seed):
    venv = VecNormalize.load(req["vecnormalize"],
                             make_vec_env(req["env_id"], n_envs=1, seed=seed, env_kwargs=limit))
    venv.training = False
    venv.norm_reward = False
    return venv

venv = normalized(req["eval_seed"])
try:
    mean, std = evaluate_policy(model, venv, n_eval_episodes=req["episodes"],
                                deterministic=True, warn=False)
finally:
    venv.close()

env, baseline = gym.make(req["env_id"], **limit), []
try:
    for i in range(req["random_episodes"]):
        env.reset(seed=req["random_seed"] + i)
        env.action_space.seed(req["random_seed"] + i)
        total, over = 0.0, False
        while not over:
            _, reward, term, trunc, _ = env.step(env.action_space.sample())
            total += float(reward)
            over = term or trunc
        baseline.append(total)
finally:
    env.close()

venv, actions, reference = normalized(req["replay_seed"]), [], 0.0
try:
    obs = venv.reset()
    for _ in range(venv.get_attr("spec")[0].max_episode_steps or 1000):
        action, _ = model.predict(obs, deterministic=True)
        action = np.clip(action[0], venv.action_space.low,
                         venv.action_space.high).astype(np.float64)
        actions.append(action.tolist())
        obs, rewards, dones, _ = venv.step(action[None, :])
        reference += float(rewards[0])
        if dones[0]:
            break
finally:
    venv.close()
print(json.dumps({"mean_reward": float(mean), "std_reward": float(std),
                  "random_mean_reward": float(np.mean(baseline)),
                  "reference_reward": reference, "actions": actions}), flush=True)
"""

RENDER = r"""
import json
import os
import gymnasium as gym
import numpy as np

req = json.loads(input())
env = gym.make(req["env_id"], render_mode="rgb_array", width=req["width"],
               height=req["height"])
fps = int(env.metadata.get("render_fps", 30))
frames, total, steps = [], 0.0, 0
try:
    env.reset(seed=req["replay_seed"])
    frames.append(np.asarray(env.render(), dtype=np.uint8))
    for action in req["actions"]:
        action = np.clip(np.asarray(action, dtype=np.float64), env.action_space.low,
                         env.action_space.high)
        _, reward, term, trunc, _ = env.step(action)
        total += float(reward)
        steps += 1
        frames.append(np.asarray(env.render(), dtype=np.uint8))
        if term or trunc:
            break
finally:
    env.close()
import imageio.v2 as imageio
imageio.mimsave(req["video"], frames, fps=fps, codec="libx264", quality=8,
                macro_block_size=16)
print(json.dumps({"backend": os.environ["MUJOCO_GL"], "rendered_reward": total,
                  "steps": steps, "frames": len(frames),
                  "video_bytes": os.path.getsize(req["video"])}), flush=True)
"""


def _child(program: str, request: dict[str, Any], env: dict[str, str],
           timeout: float) -> dict[str, Any]:
    """One of seed 000's worker interpreters: the request on stdin, the last stdout line
    back as JSON; a failure raises with the child's stderr."""
    proc = subprocess.run([sys.executable, "-u", "-X", "faulthandler", "-c", program],
                          input=json.dumps(request), env=env, text=True, capture_output=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"seed-000 child exited with status {proc.returncode}:\n"
                           f"{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def evaluate_and_render(*, env_id: str, model: str, vecnormalize: str, video: str,
                        episodes: int = 30, random_episodes: int = 30,
                        eval_seed: int = 1000, random_seed: int = 2000, replay_seed: int = 42,
                        width: int = 640, height: int = 480,
                        backends: tuple[str, ...] = ("egl", "osmesa"),
                        max_episode_steps: int | None = None,
                        timeout: float = 600.0) -> dict[str, Any]:
    """Seed 000's evaluation and one verified video (see the module's docstring); returns
    its numbers, the render's and each phase's wall time (``timings``)."""
    started = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    evaluation = _child(EVALUATE, {
        "env_id": env_id, "model": model, "vecnormalize": vecnormalize, "episodes": episodes,
        "random_episodes": random_episodes, "eval_seed": eval_seed,
        "random_seed": random_seed, "replay_seed": replay_seed,
        "max_episode_steps": max_episode_steps}, env, timeout)
    evaluated = time.perf_counter()
    actions = evaluation.pop("actions")
    request = {"env_id": env_id, "replay_seed": replay_seed, "actions": actions,
               "width": width, "height": height, "video": video}
    failures: dict[str, str] = {}
    drawn = None
    for backend in backends:
        try:
            drawn = _child(RENDER, request, {
                **{k: v for k, v in env.items() if k != "DISPLAY"},
                "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}, timeout)
            break
        except RuntimeError as exc:
            failures[backend] = str(exc)
    if drawn is None:
        raise RuntimeError(f"every backend failed: {json.dumps(failures)}")
    if not math.isclose(evaluation["reference_reward"], drawn["rendered_reward"],
                        rel_tol=1e-7, abs_tol=1e-7):
        raise RuntimeError(f"the replay earned {drawn['rendered_reward']}, the evaluation "
                           f"{evaluation['reference_reward']}")
    if drawn["frames"] != drawn["steps"] + 1:
        raise RuntimeError(f"{drawn['frames']} frames for {drawn['steps']} steps")
    finished = time.perf_counter()
    return {**evaluation, **drawn, "replay_verified": True, "actions": len(actions),
            "timings": {"evaluate_s": evaluated - started, "render_s": finished - evaluated,
                        "total_s": finished - started}}


if __name__ == "__main__":  # python seed000.py '{"env_id": ..., "result": PATH}'
    kwargs = json.loads(sys.argv[1])
    result_path = kwargs.pop("result")
    kwargs["backends"] = tuple(kwargs.get("backends", ("egl", "osmesa")))
    with open(result_path, "w") as f:
        json.dump(evaluate_and_render(**kwargs), f)
