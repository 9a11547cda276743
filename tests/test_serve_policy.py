"""`rolltape serve-policy` (openpi's websocket protocol) in real server processes: a served
SB3 checkpoint gives the local tapes, chunks execute as a plain loop would, the server imports
no simulator, malformed requests are one sentence, and openpi's own client gets the local
policy's actions bit for bit. Every server is a subprocess on loopback, every wait bounded."""

from __future__ import annotations

import json
import os
import select
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from conftest import ROOT, run_cli
from policy_servers import STEPS, H, PolicyServer, reference_actions, write_policies
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.pass1.rollout import record_episode
from rolltape.policies import load_policy
from rolltape.policy_server import wire
from rolltape.tape import Tape


@pytest.fixture(scope="module")
def sb3_server(ppo_checkpoint: tuple[Path, Path]) -> Any:
    """The PPO checkpoint (with its VecNormalize statistics) served once for the module."""
    model, stats = ppo_checkpoint
    server = PolicyServer(f"sb3:{model}", "--vecnormalize", str(stats))
    yield server
    server.stop()


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    return write_policies(tmp_path)


def tape_arrays(folder: Path, name: str) -> dict[str, bytes]:
    with np.load(folder / name) as npz:
        return {k: npz[k].tobytes() for k in npz.files if k != "header"}


def test_served_sb3_policy_gives_the_local_tapes_and_parity_finds_no_difference(
        ppo_checkpoint: tuple[Path, Path], sb3_server: PolicyServer, tmp_path: Path):
    model, stats = ppo_checkpoint
    served = run_cli("eval", "HalfCheetah-v5", "-n", "3", "--max-episode-steps", "30",
                     "--no-report", "--policy", sb3_server.address, "--out",
                     str(tmp_path / "served"))
    assert served.returncode == 0, served.stderr
    # the local run's tapes: pass 1's own episode loop, here, on the env eval builds
    env = make_env(env_spec("HalfCheetah-v5", {}, 30))
    local = load_policy(f"sb3:{model}", env, vecnormalize=str(stats))
    for i in range(3):
        name = f"policy-{i:04d}.npz"
        Tape(env={}, **record_episode(env, local, i)).save(tmp_path / name)
        assert tape_arrays(tmp_path / "served" / "tapes", name) == tape_arrays(tmp_path, name)
    env.close()
    parity = run_cli("parity", "HalfCheetah-v5", "--policy", sb3_server.address,
                     "--local-policy", f"sb3:{model}", "--vecnormalize", str(stats),
                     "-n", "1", "--max-episode-steps", "30", "--out",
                     str(tmp_path / "parity.json"))
    assert parity.returncode == 0, parity.stderr
    assert "0 differing steps" in parity.stdout
    report = json.loads((tmp_path / "parity.json").read_text())
    assert report["differing_steps"] == 0 and report["steps"] == 30
    assert report["outcomes_differ"] == [] and report["first_difference"] is None
    maps = Path(f"/proc/{sb3_server.proc.pid}/maps").read_text()
    assert "torch" in maps and "mujoco" not in maps  # SB3's stack, never a simulator
    assert sb3_server.sessions() == 0  # every client closed its sessions


def test_batched_inference_on_a_served_policy_is_one_forward_pass_and_parity_reports_it(
        ppo_checkpoint: tuple[Path, Path], sb3_server: PolicyServer, tmp_path: Path):
    """`--batched-inference --policy ws://` asks the server for every sub-env's action in one
    request: the tapes are the local batched run's, bit for bit. `parity --batch-size B` asks for
    each action within a batch of B and counts exactly the steps where that differs from
    the policy's own batch-1 action (computed here on the same rows)."""
    from rolltape.policy_parity import batch_of

    model, stats = ppo_checkpoint
    common = ("-n", "3", "--workers", "2", "--batched-inference", "--max-episode-steps", "20",
              "--no-report")
    served = run_cli("eval", "HalfCheetah-v5", "--policy", sb3_server.address, *common,
                     "--out", str(tmp_path / "served"))
    local = run_cli("eval", "HalfCheetah-v5", "--policy", f"sb3:{model}", "--vecnormalize",
                    str(stats), *common, "--out", str(tmp_path / "local"))
    assert served.returncode == 0 and local.returncode == 0, served.stderr + local.stderr
    for i in range(3):
        name = f"policy-{i:04d}.npz"
        assert (tape_arrays(tmp_path / "served" / "tapes", name)
                == tape_arrays(tmp_path / "local" / "tapes", name)), name
    header = Tape.load(tmp_path / "served" / "tapes" / "policy-0000.npz").policy
    assert "served" in str(header.get("inference")), header
    parity = run_cli("parity", "HalfCheetah-v5", "--policy", sb3_server.address,
                     "--local-policy", f"sb3:{model}", "--vecnormalize", str(stats), "-n", "1",
                     "--max-episode-steps", "20", "--batch-size", "4", "--out",
                     str(tmp_path / "parity.json"))
    report = json.loads((tmp_path / "parity.json").read_text())
    env = make_env(env_spec("HalfCheetah-v5", {}, 20))
    policy = load_policy(f"sb3:{model}", env, vecnormalize=str(stats))
    obs, _ = env.reset(seed=0)
    earlier: list[Any] = []
    differing = 0
    for _ in range(20):
        alone = policy.act(obs)
        batched = policy.predict_action(batch_of(obs, earlier, 4))[0]
        differing += alone.tobytes() != batched.tobytes()
        earlier = [obs] + earlier[:2]
        obs = env.step(alone)[0]
    env.close()
    assert report["batch"] == 4 and report["steps"] == 20
    assert report["differing_steps"] == differing
    assert parity.returncode == (1 if differing else 0), parity.stderr
    if differing:
        assert "asked within batches of 4" in parity.stderr


def test_chunks_execute_as_a_reference_loop_and_the_server_imports_no_simulator(
        policies: Path, tmp_path: Path):
    probe = tmp_path / "modules.json"
    server = PolicyServer("pols.py:Chunky", cwd=policies, env={"PROBE_MODULES": str(probe)})
    try:
        # K = 3 through the command line (the flag, the tape, pass 2's verification) ...
        out = tmp_path / "k3"
        done = run_cli("eval", "Pendulum-v1", "--policy", server.address, "--execute-steps",
                       "3", "-n", "2", "--max-episode-steps", str(STEPS), "--no-report",
                       "--out", str(out))
        assert done.returncode == 0, done.stderr
        for i in range(2):
            expected, starts = reference_actions(3, seed=i)
            with np.load(out / "tapes" / f"policy-{i:04d}.npz") as npz:
                assert npz["actions"].tobytes() == expected.tobytes(), i
                assert npz["chunk_starts"].tolist() == starts == [0, 3, 6, 9]
        verified = run_cli("verify", str(out / "tapes" / "policy-0001.npz"))
        assert verified.returncode == 0, verified.stderr
        # a callable acts on one observation a request: a batch is refused in one sentence
        batch = run_cli("parity", "Pendulum-v1", "--policy", server.address, "--local-policy",
                        "pols.py:Chunky", "-n", "1", "--max-episode-steps", "4", "--batch-size",
                        "2", "--out", str(tmp_path / "p.json"), cwd=policies)
        assert batch.returncode == 2, batch.stderr
        assert "does not act on a batch of observations" in batch.stderr.strip().splitlines()[-1]
        # ... and K = 1, H (the server's default) through pass 1's own episode loop
        env = gym.make("Pendulum-v1", max_episode_steps=STEPS)
        for source, k in ((f"{server.address}?execute_steps=1", 1), (server.address, H)):
            policy = load_policy(source, env)
            fields = record_episode(env, policy, 5)
            expected, starts = reference_actions(k, seed=5)
            assert fields["actions"].tobytes() == expected.tobytes(), k
            assert fields.get("chunk_starts") is None if k == 1 else \
                fields["chunk_starts"].tolist() == starts == [0, 4, 8]
            policy.close()
        env.close()
        modules = set(json.loads(probe.read_text()))
        assert {"numpy", "msgpack", "websockets"} <= modules
        heavy = {"gymnasium", "mujoco", "torch", "zmq", "typer", "rich", "rolltape.envs",
                 "rolltape.pass1", "rolltape.pass2"}
        assert not heavy & {m.split(".")[0] if not m.startswith("rolltape") else
                            ".".join(m.split(".")[:2]) for m in modules}
    finally:
        server.stop()


def test_a_server_for_another_action_space_is_refused_before_pass_1(
        sb3_server: PolicyServer, tmp_path: Path):
    out = tmp_path / "run"
    done = run_cli("eval", "Pendulum-v1", "--policy", sb3_server.address, "-n", "2",
                   "--out", str(out))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert sb3_server.address in line and "Box(shape [6], float32)" in line \
        and "Box(shape [1], float32)" in line and "'Pendulum-v1'" in line, line
    assert "pass 1" not in done.stdout + done.stderr and not out.exists()


def test_malformed_requests_get_one_sentence_and_the_server_serves_on(policies: Path):
    from websockets.sync.client import connect

    server = PolicyServer("pols.py:slow", cwd=policies)
    try:
        import pickle

        for data, said in ((pickle.dumps({"observation": 1}), "not a msgpack message"),
                           (wire.encode({"obs": np.zeros(3)}), "with 'observation'")):
            with connect(server.address, open_timeout=10) as ws:
                wire.decode(ws.recv(timeout=10))  # the metadata
                ws.send(data)
                answer = ws.recv(timeout=10)
                assert isinstance(answer, str) and said in answer and "\n" not in answer
        with connect(server.address, open_timeout=10) as ws:
            meta = wire.decode(ws.recv(timeout=10))
            assert meta["action_horizon"] == 1 and meta["rolltape"]["reset"] is True
            ws.send(wire.encode({"observation": np.ones(3, dtype=np.float32)}))
            reply = wire.decode(ws.recv(timeout=10))
            assert reply["actions"].shape == (1, 1)
    finally:
        server.stop()
    refused = run_cli("serve-policy", "pols.py:slow", "--bind", "0.0.0.0:0", cwd=policies)
    assert refused.returncode == 2 and "--token-file" in refused.stderr


def test_the_server_runs_in_lerobot_s_environment_unchanged(policies: Path, tmp_path: Path):
    """The README's install for a LeRobot venv is rolltape without its dependencies plus
    msgpack and websockets (LeRobot's pins untouched: pip check); here rolltape's source is
    on PYTHONPATH, as `pip install --no-deps rolltape` would put it."""
    lerobot = ROOT / ".venv-lerobot" / "bin" / "python"
    assert lerobot.exists(), f"{lerobot} is missing: run `bash scripts/setup.sh --test`"
    check = subprocess.run([str(lerobot), "-m", "pip", "check"], capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stdout
    server = PolicyServer("pols.py:Chunky", cwd=policies,
                          command=[str(lerobot), "-m", "rolltape.serve_policy"],
                          env={"PYTHONPATH": str(ROOT / "src")})
    try:
        env = gym.make("Pendulum-v1", max_episode_steps=STEPS)
        policy = load_policy(f"{server.address}?execute_steps=2", env)
        fields = record_episode(env, policy, 3)
        assert fields["actions"].tobytes() == reference_actions(2, seed=3)[0].tobytes()
        policy.close()  # type: ignore[attr-defined]
        env.close()
    finally:
        server.stop()


# -- openpi's own client -------------------------------------------------------------

OPENPI_VENV = Path(os.environ.get("OPENPI_VENV", ROOT / ".venv-openpi"))


def test_openpi_client_gets_the_local_policy_s_actions_bit_for_bit(
        ppo_checkpoint: tuple[Path, Path], sb3_server: PolicyServer, tmp_path: Path):
    """openpi-client (its own venv: it pins numpy < 2) asks rolltape's server on the
    observations of 3 seeded local episodes and gets the local policy's actions."""

    python = OPENPI_VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: run `bash scripts/setup.sh --test`"
    model, stats = ppo_checkpoint
    env = gym.make("HalfCheetah-v5", max_episode_steps=20)
    local = load_policy(f"sb3:{model}", env, vecnormalize=str(stats))
    observations, actions = [], []
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            action = local.act(obs)
            observations.append(obs)
            actions.append(action)
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    np.save(tmp_path / "obs.npy", np.stack(observations))
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from openpi_client import websocket_client_policy
        client = websocket_client_policy.WebsocketClientPolicy(sys.argv[1])
        assert client.get_server_metadata()["action_horizon"] == 1
        got = [client.infer({"observation": o})["actions"][0] for o in np.load(sys.argv[2])]
        np.save(sys.argv[3], np.stack(got))
    """)
    subprocess.run([str(python), "-c", script, sb3_server.address, str(tmp_path / "obs.npy"),
                    str(tmp_path / "got.npy")], check=True, timeout=120)
    got = np.load(tmp_path / "got.npy")
    assert got.dtype == np.stack(actions).dtype and got.tobytes() == np.stack(actions).tobytes()


OPENPI_STYLE_SERVER = textwrap.dedent("""
    # openpi's serving loop in small: metadata on connect, infer, a traceback as text on error
    import asyncio, sys, traceback
    import numpy as np
    import websockets
    import websockets.asyncio.server as server
    from openpi_client import msgpack_numpy

    def infer(obs):  # a chunk of 3 of the same action; NaN observations are an error
        state = np.asarray(obs["observation"], dtype=np.float32)
        if np.isnan(state).any():
            raise ValueError("the observation holds NaN")
        return {"actions": np.tile(np.tanh(state[:1]), (3, 1)), "note": "from openpi"}

    async def handler(ws):
        packer = msgpack_numpy.Packer()
        await ws.send(packer.pack({"robot": "pendulum"}))
        while True:
            try:
                await ws.send(packer.pack(infer(msgpack_numpy.unpackb(await ws.recv()))))
            except websockets.ConnectionClosed:
                break
            except Exception:
                await ws.send(traceback.format_exc())
                await ws.close(1011, "Internal server error")
                break

    async def main():
        async with server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as s:
            print("serving", s.sockets[0].getsockname()[1], flush=True)
            await s.serve_forever()

    asyncio.run(main())
""")


def test_rolltape_s_client_plays_an_openpi_style_server(tmp_path: Path):
    """rolltape's client against a server written with openpi's own codec and serving
    loop: chunks of 3 executed 2 at a time, and its traceback-as-text is one sentence."""
    python = OPENPI_VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: run `bash scripts/setup.sh --test`"
    proc = subprocess.Popen([str(python), "-c", OPENPI_STYLE_SERVER], stdout=subprocess.PIPE,
                            text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the openpi-style server printed nothing"
        address = f"ws://127.0.0.1:{proc.stdout.readline().split()[1]}"  # type: ignore[union-attr]
        env = gym.make("Pendulum-v1", max_episode_steps=STEPS)
        policy = load_policy(f"{address}?execute_steps=2", env)
        fields = record_episode(env, policy, 7)
        obs, _ = env.reset(seed=7)
        expected, done = [], False
        while not done:  # the reference: ask every 2 steps, repeat the first action
            if len(expected) % 2 == 0:
                action = np.tanh(np.asarray(obs, dtype=np.float32)[:1])
            expected.append(action)
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
        assert fields["actions"].tobytes() == np.stack(expected).tobytes()
        assert fields["chunk_starts"].tolist() == list(range(0, STEPS, 2))
        policy.reset(8)  # no reset message: an openpi server knows none
        with pytest.raises(RuntimeError) as exc:
            policy.act(np.full(3, np.nan, dtype=np.float32))
        said = str(exc.value)
        assert said.startswith(f"the policy server at {address} answered the observation of "
                               "step 0 with an error: ValueError: the observation holds NaN"), said
        policy.close()  # type: ignore[attr-defined]
        env.close()
    finally:
        proc.terminate()
        proc.wait(30)
