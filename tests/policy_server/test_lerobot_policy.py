"""`lerobot:DIR` served from LeRobot's own venv: a real (untrained, small) LeRobot ACT policy
for PushT, saved with its processors as LeRobot saves them, gives rolltape's client on real
PushT observations the actions LeRobot's own preprocess -> select_action -> postprocess loop
gives in that venv, and `rolltape eval` against it writes those actions on its tapes; an
observation without a key the policy needs is refused in one sentence."""

from __future__ import annotations

import json
import os
import select
import subprocess
import textwrap
from pathlib import Path

import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest

from conftest import ROOT, run_cli
from policy_servers import PolicyServer
from rolltape.policies import load_policy
from rolltape.policy_server.client import PolicyServerError

LEROBOT = ROOT / ".venv-lerobot" / "bin" / "python"
STEPS = 6  # per episode: n_action_steps is 4, so each episode crosses a chunk boundary

# Runs in LeRobot's venv: an ACT policy for PushT's state + keypoints, built by LeRobot's
# factory with made-up normalization statistics (no training, no download), saved to DIR
# (argv[1]) with its processors as LeRobot saves them.
MAKE_ACT = textwrap.dedent("""
    import sys
    import numpy as np, torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    folder = sys.argv[1]
    cfg = make_policy_config(
        "act", device="cpu", dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, chunk_size=8,
        n_action_steps=4, pretrained_backbone_weights=None, push_to_hub=False,
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (2,)),
                        "observation.environment_state": PolicyFeature(FeatureType.ENV, (16,))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (2,))})
    torch.manual_seed(0)
    stat = lambda n, m, s: {"mean": torch.full((n,), m), "std": torch.full((n,), s)}
    stats = {"observation.state": stat(2, 256.0, 100.0), "action": stat(2, 250.0, 80.0),
             "observation.environment_state": stat(16, 256.0, 120.0)}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for part in (get_policy_class("act")(cfg), pre, post):
        part.save_pretrained(folder)
    print("saved", flush=True)
""")
# One process, one import of LeRobot: MAKE_ACT; then, given OBS and OUT on stdin, LeRobot's
# own per-step loop (lerobot-eval's rollout) on the observations in OBS, policy.reset() at
# each episode start.
LEROBOT_SCRIPT = MAKE_ACT + textwrap.dedent("""
    obs_file, out_file = sys.stdin.readline().split()
    policy = get_policy_class("act").from_pretrained(folder)  # as a user's checkpoint loads
    policy.eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=folder)
    data = np.load(obs_file)
    actions = []
    for i in range(len(data["agent_pos"])):
        if i % int(data["steps"]) == 0:
            policy.reset()
        obs = preprocess_observation({"agent_pos": data["agent_pos"][i],
                                      "environment_state": data["environment_state"][i]})
        obs["task"] = [""]
        with torch.inference_mode():
            action = post(policy.select_action(pre(obs)))
        actions.append(action.numpy()[0])
    np.save(out_file, np.stack(actions))
""")


def test_served_lerobot_policy_acts_as_lerobot_s_own_loop(tmp_path: Path):
    assert LEROBOT.exists(), f"{LEROBOT} is missing: run `bash scripts/setup.sh --test`"
    folder = tmp_path / "pretrained_model"
    script = tmp_path / "lerobot_side.py"
    script.write_text(LEROBOT_SCRIPT)
    log = (tmp_path / "lerobot_side.log").open("w")
    side = subprocess.Popen([str(LEROBOT), str(script), str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        # while LeRobot builds the policy: the sources that cannot load are one sentence, exit 2
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub" / "config.json").write_text("{}")  # a folder, but no LeRobot here
        here = run_cli("serve-policy", f"lerobot:{tmp_path / 'stub'}", "--bind", "127.0.0.1:0")
        assert here.returncode == 2 and "needs LeRobot" in here.stderr, here.stderr
        assert "Traceback" not in here.stderr
        empty = subprocess.run([str(LEROBOT), "-m", "rolltape.serve_policy", f"lerobot:{tmp_path}",
                                "--bind", "127.0.0.1:0"], capture_output=True, text=True,
                               timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert empty.returncode == 2 and "not a LeRobot pretrained folder" in empty.stderr
        assert empty.stderr.count("\n") == 1, empty.stderr
        assert side.stdout is not None
        ready, _, _ = select.select([side.stdout], [], [], 120)
        said = side.stdout.readline() if ready else ""
        assert said == "saved\n", (tmp_path / "lerobot_side.log").read_text()[-3000:]
        served, seen = serve_and_play(folder)
        np.savez(tmp_path / "obs.npz", steps=STEPS, **{k: np.stack(v) for k, v in seen.items()})
        side.communicate(f"{tmp_path / 'obs.npz'} {tmp_path / 'ref.npy'}\n", timeout=120)
    finally:
        side.kill()  # a no-op once it has exited
        log.close()
    assert side.returncode == 0, (tmp_path / "lerobot_side.log").read_text()[-3000:]
    reference = np.load(tmp_path / "ref.npy")
    assert served.shape == reference.shape == (2 * STEPS, 2) and served.dtype == np.float32
    # the same float32 arithmetic in the same venv: equal, not close
    assert served.tobytes() == reference.astype(np.float32).tobytes()
    assert len(np.unique(served, axis=0)) > 2  # the actions depend on the observation


def serve_and_play(folder: Path) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
    """`python -m rolltape.serve_policy lerobot:FOLDER` in LeRobot's venv, played by
    rolltape's client on 2 seeded PushT episodes; (actions, observations), and the refusals
    checked."""
    server = PolicyServer(f"lerobot:{folder}", command=[str(LEROBOT), "-m", "rolltape.serve_policy"],
                          env={"PYTHONPATH": str(ROOT / "src")})
    try:
        # closed loop on real PushT (LeRobot's obs_type for a state policy), 2 seeded episodes
        env = gym.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos")
        policy = load_policy(server.address, env)
        assert policy.description["served"] == {"kind": "lerobot", "source": f"lerobot:{folder}"}
        seen: dict[str, list[np.ndarray]] = {"agent_pos": [], "environment_state": []}
        served = []
        for seed in (0, 1):
            obs, _ = env.reset(seed=seed)
            policy.reset(seed)
            for _ in range(STEPS):
                action = policy.act(obs)
                for key in seen:
                    seen[key].append(obs[key])
                served.append(action)
                obs, *_ = env.step(action)
        env.close()
        # a second session (its own copy of the policy, its own action queue) beside the
        # first gives the same actions on the same observations
        other = load_policy(server.address, None)
        other.reset(0)
        again = [other.act({k: seen[k][t] for k in seen}) for t in range(STEPS)]
        assert np.stack(again).tobytes() == np.stack(served[:STEPS]).tobytes()
        other.close()  # type: ignore[attr-defined]
        # the rolltape pusht suite's observation (gym-pusht's "state": no keypoints) is
        # refused in one sentence naming the missing input and how to get it
        policy.reset(0)
        with pytest.raises(PolicyServerError) as refused:
            policy.act(np.zeros(5))
        said = str(refused.value)
        assert "'observation.environment_state' (shape [16])" in said
        assert "obs_type='environment_state_agent_pos'" in said and "\n" not in said
        policy.reset(0)  # a new session after the refusal; a shape that differs is said too
        with pytest.raises(PolicyServerError, match=r"of shape \[16\] .* has shape \[8\]"):
            policy.act({"agent_pos": np.zeros(2), "environment_state": np.zeros(8)})
        policy.close()  # type: ignore[attr-defined]
        # `rolltape eval` against it: the same seeds give the same actions on the tapes
        run = run_cli("eval", "gym_pusht:gym_pusht/PushT-v0", "--env-kwargs",
                      "obs_type='environment_state_agent_pos'", "-n", "2",
                      "--max-episode-steps", str(STEPS), "--no-report", "--policy",
                      server.address, "--out", str(folder.parent / "run"))
        assert run.returncode == 0, run.stderr
        for i in (0, 1):
            with np.load(folder.parent / "run" / "tapes" / f"policy-{i:04d}.npz") as tape:
                taped = tape["actions"]
            assert taped.tobytes() == np.stack(served[i * STEPS:(i + 1) * STEPS]).tobytes()
    finally:
        out = server.stop()
    assert "Traceback" not in out, out
    return np.stack(served), seen


# lerobot-eval vs rolltape eval: episodes, steps per episode and the first seed of both (not
# either tool's default; this untrained policy scores 2.06 on seed 10 and 0 on seed 11 in 25
# steps: most PushT seeds give it no reward at all, so an off-by-one seed would show)
EVAL_EPISODES, EVAL_STEPS, EVAL_SEED = 2, 25, 10


def test_lerobot_eval_and_rolltape_eval_score_the_same_episodes(tmp_path: Path):
    """LeRobot's own `lerobot-eval` (its env, vector env, rollout loop and scoring) and
    `rolltape eval --policy ws://` against `serve_policy lerobot:DIR` give every episode the
    same sum of rewards, max reward and success, on the same seeds: lerobot-eval seeds
    episode k with `--seed` + k, as rolltape's `--seed` does. batch_size 1: at batch B the
    seeds are the same, but the policy's batched arithmetic moves the sums in the last bits."""
    assert LEROBOT.exists(), f"{LEROBOT} is missing: run `bash scripts/setup.sh --test`"
    folder = tmp_path / "pretrained_model"
    (tmp_path / "make_act.py").write_text(MAKE_ACT)
    made = subprocess.run([str(LEROBOT), str(tmp_path / "make_act.py"), str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    # lerobot-eval as its users run it, in the background while rolltape's side runs
    lerobot_log = (tmp_path / "lerobot_eval.log").open("w")
    lerobot_eval = subprocess.Popen(
        [str(LEROBOT.parent / "lerobot-eval"), f"--policy.path={folder}", "--policy.device=cpu",
         "--env.type=pusht", "--env.obs_type=environment_state_agent_pos",
         f"--env.episode_length={EVAL_STEPS}", f"--eval.n_episodes={EVAL_EPISODES}",
         "--eval.batch_size=1", f"--seed={EVAL_SEED}", f"--output_dir={tmp_path / 'lerobot'}"],
        stdout=lerobot_log, stderr=subprocess.STDOUT, env=offline, cwd=tmp_path)
    try:
        server = PolicyServer(f"lerobot:{folder}", env=offline,
                              command=[str(LEROBOT), "-m", "rolltape.serve_policy"])
        try:
            run = run_cli("eval", "gym_pusht:gym_pusht/PushT-v0", "--env-kwargs",
                          "obs_type='environment_state_agent_pos'", "-n", str(EVAL_EPISODES),
                          "--seed", str(EVAL_SEED), "--max-episode-steps", str(EVAL_STEPS),
                          "--no-report", "--policy", server.address, "--out", str(tmp_path / "run"))
        finally:
            out = server.stop()
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in out, out
        lerobot_eval.wait(timeout=180)
    finally:
        lerobot_eval.kill()  # a no-op once it has exited
        lerobot_log.close()
    assert lerobot_eval.returncode == 0, (tmp_path / "lerobot_eval.log").read_text()[-3000:]
    theirs = json.loads((tmp_path / "lerobot" / "eval_info.json").read_text())
    [task] = theirs["per_task"]
    metrics = task["metrics"]
    ours = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert [e["seed"] for e in ours] == list(range(EVAL_SEED, EVAL_SEED + EVAL_EPISODES))
    assert all(e["length"] == EVAL_STEPS for e in ours)  # no success ends these episodes early
    # the same float64 rewards from the same gym-pusht and pymunk, summed in the same order
    # over the same actions (float32, bit for bit, as the test above shows): equal, not close
    assert [e["return"] for e in ours] == metrics["sum_rewards"]
    assert [e["max_reward"] for e in ours] == metrics["max_rewards"]
    assert [e["success_at_end"] for e in ours] == metrics["successes"]
    assert len(set(metrics["sum_rewards"])) == EVAL_EPISODES  # each seed its own episode
    assert max(metrics["sum_rewards"]) > 1  # rewards that could have differed
