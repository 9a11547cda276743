"""`lerobot:DIR` plugs into the suites that give LeRobot's own key names, without glue: a real
(untrained, small) LeRobot ACT for ALOHA's inputs (`observation.images.top` 3x480x640,
`observation.state` 14), saved as LeRobot saves it and served from LeRobot's venv, plays
`rolltape eval --suite aloha`; the observations the tapes recorded (replayed in ALOHA's venv,
their digests equal to the tape's) given to LeRobot's own loop (preprocess_observation, the
preprocessor, select_action with its queue, the postprocessor) give the taped actions, bit for
bit. A missing key and an image of another shape are refused in one sentence naming both."""

from __future__ import annotations

import os
import select
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli
from policy_servers import PolicyServer
from rolltape.policies import load_policy
from rolltape.policy_server.client import PolicyServerError
from rolltape.suites import benchmarks
from rolltape.tape import Tape

LEROBOT = ROOT / ".venv-lerobot" / "bin" / "python"
STEPS = 5  # per episode: n_action_steps is 4, so each episode crosses a chunk boundary
TOP = "observation.images.top"

# Runs in LeRobot's venv: an ACT for ALOHA's camera and joints, built by LeRobot's factory with
# made-up normalization statistics (no training, no download: no pretrained backbone), saved to
# DIR (argv[1]) with its processors; then, given OBS and OUT on stdin, LeRobot's own per-step
# loop (lerobot-eval's rollout, as gym-aloha's observation reaches it) on the observations in
# OBS, policy.reset() at each episode start.
LEROBOT_SCRIPT = textwrap.dedent("""
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
        input_features={"observation.images.top": PolicyFeature(FeatureType.VISUAL, (3, 480, 640)),
                        "observation.state": PolicyFeature(FeatureType.STATE, (14,))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (14,))})
    torch.manual_seed(0)
    stat = lambda shape, m, s: {"mean": torch.full(shape, m), "std": torch.full(shape, s)}
    stats = {"observation.state": stat((14,), 0.0, 0.5), "action": stat((14,), 0.0, 0.5),
             "observation.images.top": stat((3, 1, 1), 0.4, 0.25)}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for part in (get_policy_class("act")(cfg), pre, post):
        part.save_pretrained(folder)
    print("saved", flush=True)

    obs_file, out_file = sys.stdin.readline().split()
    policy = get_policy_class("act").from_pretrained(folder)  # as a user's checkpoint loads
    policy.eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=folder)
    data = np.load(obs_file)
    actions = []
    for i in range(len(data["agent_pos"])):
        if i % int(data["steps"]) == 0:
            policy.reset()
        # gym-aloha's pixels_agent_pos observation, as LeRobot's AlohaEnv gives it
        obs = preprocess_observation({"pixels": {"top": data["top"][i]},
                                      "agent_pos": data["agent_pos"][i]})
        obs["task"] = [str(data["task"][i])]
        with torch.inference_mode():
            action = post(policy.select_action(pre(obs)))
        actions.append(action.numpy()[0])
    np.save(out_file, np.stack(actions))
""")

# Runs in ALOHA's venv: each tape's episode replayed (its seed, its actions) in the suite's
# env; the observations the policy was given (before each action), checked against the
# tape's per-key digests, saved for LeRobot's loop.
REPLAY = textwrap.dedent("""
    import sys
    import numpy as np
    from rolltape.pass1.fields import array_digest
    from rolltape.suites import aloha
    from rolltape.tape import Tape

    out, tapes = sys.argv[1], sys.argv[2:]
    env = aloha.AlohaEnv(task="transfer_cube")
    seen = {"top": [], "agent_pos": [], "task": []}
    for path in tapes:
        tape = Tape.load(path)
        obs, _ = env.reset(seed=tape.seed)
        for t, action in enumerate(tape.actions):
            digests = [array_digest(obs[k]) for k in tape.obs_keys]
            assert digests == list(tape.obs_key_digest[t]), (path, t)
            seen["top"].append(obs["observation.images.top"])
            seen["agent_pos"].append(obs["observation.state"])
            seen["task"].append(obs["task"])
            obs = env.step(action)[0]
    np.savez(out, steps=len(tape.actions), **{k: np.stack(v) for k, v in seen.items()})
    print("replayed")
""")


def test_served_lerobot_aloha_policy_plays_the_aloha_suite_as_lerobot_s_own_loop(tmp_path: Path):
    assert LEROBOT.exists(), f"{LEROBOT} is missing: run `bash scripts/setup.sh --test`"
    bench = benchmarks.ALOHA
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    folder = tmp_path / "pretrained_model"
    script = tmp_path / "lerobot_side.py"
    script.write_text(LEROBOT_SCRIPT)
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    log = (tmp_path / "lerobot_side.log").open("w")
    side = subprocess.Popen([str(LEROBOT), str(script), str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True, env=offline)
    try:
        assert side.stdout is not None
        ready, _, _ = select.select([side.stdout], [], [], 120)
        said = side.stdout.readline() if ready else ""
        assert said == "saved\n", (tmp_path / "lerobot_side.log").read_text()[-3000:]
        server = PolicyServer(f"lerobot:{folder}", env=offline,
                              command=[str(LEROBOT), "-m", "rolltape.serve_policy"])
        try:
            refusals(server.address)
            run = run_cli("eval", "--suite", "aloha", "--tasks", "transfer_cube", "--policy",
                          server.address, "--episodes", "2", "--max-episode-steps", str(STEPS),
                          "--no-report", "--out", str(tmp_path / "run"))
        finally:
            out = server.stop()
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in out, out
        tapes = sorted((tmp_path / "run" / "tapes" / "aloha" / "transfer_cube").glob("policy-*.npz"))
        assert len(tapes) == 2
        venv_env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
        venv_env["MUJOCO_GL"] = "egl"  # as the suite's env server draws (its --backend default)
        replay = subprocess.run([str(benchmarks.venv_python(bench)), "-c", REPLAY,
                                 str(tmp_path / "obs.npz"), *map(str, tapes)],
                                capture_output=True, text=True, timeout=120, env=venv_env)
        assert replay.stdout.strip().endswith("replayed"), replay.stderr[-3000:]
        side.communicate(f"{tmp_path / 'obs.npz'} {tmp_path / 'ref.npy'}\n", timeout=120)
    finally:
        side.kill()  # a no-op once it has exited
        log.close()
    assert side.returncode == 0, (tmp_path / "lerobot_side.log").read_text()[-3000:]
    reference = np.load(tmp_path / "ref.npy").astype(np.float32)
    taped = np.concatenate([Tape.load(t).actions for t in tapes])
    assert taped.shape == reference.shape == (2 * STEPS, 14) and taped.dtype == np.float32
    # the same float32 arithmetic in the same venv on the same images: equal, not close
    assert taped.tobytes() == reference.tobytes()
    assert len(np.unique(taped, axis=0)) == 2 * STEPS  # the actions depend on the observation


def refusals(address: str) -> None:
    """A missing key and an image of another size, each one sentence naming what is wrong."""
    frame = {TOP: np.zeros((48, 64, 3), np.uint8), "observation.state": np.zeros(14),
             "task": "transfer_cube"}
    policy = load_policy(address, None)
    policy.reset(0)
    with pytest.raises(PolicyServerError) as refused:
        policy.act(frame)
    said = str(refused.value)
    assert f"needs '{TOP}' of shape [480, 640, 3]" in said and "has shape [48, 64, 3]" in said
    assert "\n" not in said
    policy.reset(0)  # a new session after the refusal
    with pytest.raises(PolicyServerError, match=r"needs 'observation.state' \(shape \[14\]\)"):
        policy.act({TOP: np.zeros((480, 640, 3), np.uint8)})
    policy.close()  # type: ignore[attr-defined]
