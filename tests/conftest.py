"""Shared fixtures: real envs, a real SB3 PPO checkpoint with VecNormalize, real runs.

The checkpoint is trained here (a few hundred steps: the tests need a real SB3 file with
real statistics, not a good policy), once per session.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "HalfCheetah-v5"
SHORT = 40  # steps per episode in most tests: short horizons keep the suite fast


def _train(out: Path, env_id: str, algo: str = "PPO", steps: int = 512) -> None:
    code = f"""
import torch
torch.set_num_threads(1)
import gymnasium as gym
import stable_baselines3 as sb3
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
venv = VecNormalize(DummyVecEnv([lambda: gym.make({env_id!r})]), norm_obs=True, norm_reward=True)
kw = dict(n_steps=256, batch_size=64, n_epochs=1) if {algo!r} == "PPO" else dict(learning_starts=50)
model = getattr(sb3, {algo!r})("MlpPolicy", venv, seed=0, device="cpu",
                               policy_kwargs=dict(net_arch=[32, 32]), **kw)
model.learn({steps})
model.save({str(out / "model.zip")!r})
venv.save({str(out / "vecnormalize.pkl")!r})
"""
    # SB3_LOGDIR: learn() otherwise leaves an empty SB3-<date> folder in the system temp dir.
    subprocess.run([sys.executable, "-c", code], check=True, cwd=out,
                   env={**os.environ, "SB3_LOGDIR": str(out / "sb3-log")})


@pytest.fixture(scope="session")
def ppo_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model.zip, vecnormalize.pkl) of a PPO trained briefly on HalfCheetah-v5."""
    out = tmp_path_factory.mktemp("ppo")
    _train(out, ENV_ID)
    return out / "model.zip", out / "vecnormalize.pkl"


@pytest.fixture(scope="session")
def hopper_stats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """VecNormalize statistics of another env (Hopper: 11-dim observations, not 17)."""
    out = tmp_path_factory.mktemp("hopper")
    _train(out, "Hopper-v5", steps=256)
    return out / "vecnormalize.pkl"


@pytest.fixture(scope="session")
def random_run(tmp_path_factory: pytest.TempPathFactory):
    """A finished run: 3 random HalfCheetah episodes of 40 steps, one video, a baseline."""
    from rolltape import evaluate

    out = tmp_path_factory.mktemp("runs") / "random"
    return evaluate(ENV_ID, "random", episodes=3, seed=7, baseline="random",
                    max_episode_steps=SHORT, video=1, out=out)


def interruptible() -> None:
    """``preexec_fn`` for a command a test sends Ctrl-C: a test run started in the background
    by a shell ignores SIGINT, and children inherit that; the command must get it as a
    terminal would send it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def marked(mark: str) -> dict[int, list[str]]:
    """Live processes (pid: command line) whose environment carries
    ``ROLLTAPE_TEST_RUN=mark``: the orchestrator and every process it started (a child
    inherits its environment)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile, or not ours
            continue
        if f"ROLLTAPE_TEST_RUN={mark}".encode() in environ.split(b"\0") and state != "Z":
            found[int(entry.name)] = argv
    return found


def count(processes: dict[int, list[str]], entry_point: str) -> int:
    """How many are workers of ``entry_point`` (a worker's argv names it: module, name, fd)."""
    return sum(entry_point in argv for argv in processes.values())


def said_lines(stderr: str) -> list[str]:
    """The non-empty lines of ``stderr`` less the plain progress lines of stages that
    finished ('pass 1 (...): 30/30 episodes, done in 8 s'), which a log gets before a
    failure: what a one-sentence rule is about."""
    import re

    finished = re.compile(r"^[^:]+: \d+/\d+ \w+, done in ")
    return [line for line in stderr.splitlines() if line.strip() and not finished.match(line)]


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Run the real `rolltape` command in a subprocess and capture what it prints."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "rolltape.cli", *args], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=600)


@pytest.fixture(scope="session")
def python3_kernel(tmp_path_factory: pytest.TempPathFactory):
    """A ``python3`` kernel spec that runs this interpreter, found first by nbclient.

    ``JUPYTER_PATH`` comes before the user's and the environment's kernel folders, so a
    ``python3`` registered elsewhere (another Python without rolltape) cannot be picked up.
    """
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (rolltape tests)", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(root))
        mp.setenv("IPYTHONDIR", str(root / "ipython"))  # leave the user's profile alone
        mp.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        yield


def execute(path: Path, cwd: Path) -> Any:
    """Run every cell as Jupyter would (from ``cwd``); return the executed notebook (the
    ``python3_kernel`` fixture must be in use)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MiB tmpfs (the tests run as root, in CI too), unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path, leave: int) -> Path:
    """Fill the disk of ``folder`` until ``leave`` bytes are free."""
    st = os.statvfs(folder)
    ballast = folder / "ballast"
    ballast.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return ballast


def eval_until_server_killed(server: Server, args: list[str], rows: Path, at_least: int,
                             env: dict[str, str]) -> tuple[int, str]:
    """Run `rolltape eval` (``args``, after the command) against ``server`` and SIGKILL the
    server once ``rows`` (the run's episodes.jsonl) holds ``at_least`` rows; return the
    eval's exit status and stderr."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "eval", *args],
                            env={**os.environ, "COLUMNS": "200", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if rows.exists() and rows.read_text().count("\n") >= at_least:
            break
        time.sleep(0.02)
    server.stop(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


SERVER_GONE_FAST = {"ROLLTAPE_SERVER_TIMEOUT": "3"}  # a gone server is found within seconds


def kill_mid_run_then_resume(make_server: Callable[[], Server], env_id: str, args: list[str],
                             out: Path, at_least: int, episodes: int) -> dict[str, Any]:
    """Evaluate ``env_id`` served by ``make_server()`` into ``out`` (``args``: the eval's
    flags), SIGKILL the server once ``at_least`` episodes are kept, check the one-line error
    names what was kept and --resume, resume on a new server, and return results.json."""
    rows = out.with_name(f".{out.name}.partial") / "episodes.jsonl"
    first = make_server()
    returncode, err = eval_until_server_killed(first, [f"{first.address}/{env_id}", *args],
                                               rows, at_least, SERVER_GONE_FAST)
    assert returncode == 1, err
    line = err.strip().splitlines()[-1]
    assert "did not answer" in line and "--resume" in line and "kept" in line
    kept = rows.read_text().count("\n")
    assert at_least <= kept < episodes  # the kill landed mid-run
    second = make_server()
    try:
        resumed = run_cli("eval", f"{second.address}/{env_id}", *args, "--resume",
                          env=SERVER_GONE_FAST)
    finally:
        second.stop()
    assert resumed.returncode == 0, resumed.stderr
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    assert len(results["episodes_rows"]) == episodes
    return results


class Server:
    """`rolltape serve` in a subprocess (HalfCheetah-v5 with 30 steps unless ``what`` says
    otherwise); ``address`` is what it printed. Shared by the server, Ray and record tests."""

    def __init__(self, *args: str,
                 what: tuple[str, ...] = ("HalfCheetah-v5", "--max-episode-steps", "30")
                 ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.cli", "serve", *what, "--bind", "127.0.0.1:0",
             *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self._line(60)
        assert line.startswith("serving"), line
        self.address = next(w for w in line.split() if w.startswith("tcp://"))

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "the server printed nothing"
        return self.proc.stdout.readline()

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=30)
        return out


def assert_plain_json(obj: object, path: str = "$") -> None:
    """Only plain Python JSON types, recursively; no numpy scalars, no NaN/inf."""
    if obj is None or isinstance(obj, (bool, str)):
        return
    if isinstance(obj, int):
        assert type(obj) is int, f"{path}: {type(obj)!r} is not a plain int"
        return
    if isinstance(obj, float):
        assert type(obj) is float, f"{path}: {type(obj)!r} is not a plain float"
        assert math.isfinite(obj), f"{path}: {obj!r} is not finite"
        return
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            assert_plain_json(item, f"{path}[{i}]")
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            assert type(key) is str, f"{path}: key {key!r} is not a str"
            assert_plain_json(value, f"{path}.{key}")
        return
    raise AssertionError(f"{path}: {type(obj)!r} is not a JSON type")


def altered(tape_path: str | Path, tmp_path: Path, step: int) -> str:
    """A copy of a tape with the action of ``step`` negated: its replay must diverge there."""
    import dataclasses

    from rolltape import Tape

    tape = Tape.load(tape_path)
    actions = tape.actions.copy()
    actions[step] = -actions[step]
    return str(dataclasses.replace(tape, actions=actions).save(tmp_path / "altered.npz"))


def drive(env: Any, steps: int, seed: int = 0) -> list[int]:
    """Random actions for ``steps`` steps, resetting (unseeded after the first) at each
    episode end, as a training loop does; returns the length of each finished episode."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    lengths, n = [], 0
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        n += 1
        if term or trunc:
            lengths.append(n)
            n = 0
            env.reset()
    return lengths


def tape_bytes(path: Path) -> dict[str, bytes]:
    """A tape's arrays as bytes, and its header without ``wall_s``: equal for two tapes
    of the same episode, bit for bit, wherever and however fast they were played."""
    with np.load(path) as data:
        out = {n: data[n].tobytes() for n in data.files if n != "header"}
        header = json.loads(bytes(data["header"]).decode())
    header.pop("wall_s")
    out["header"] = json.dumps(header, sort_keys=True).encode()
    return out


def server_stats(address: str) -> dict[str, Any]:
    """A `rolltape serve` process's stats reply: its open ``sessions`` and how many it has
    ``opened``."""
    from rolltape.server.client import Connection

    conn = Connection(address, timeout=10)
    try:
        return conn.call("stats")
    finally:
        conn.close()


def rewrite_tape(src: Path, dst: Path, edit: Callable[[dict, dict], None]) -> Path:
    """Copy a real tape, letting ``edit(arrays, header)`` change it, written with numpy."""
    with np.load(src, allow_pickle=False) as data:
        arrays = {name: data[name].copy() for name in data.files}
    header = json.loads(arrays.pop("header").tobytes().decode())
    edit(arrays, header)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(dst, "wb") as f:
        np.savez_compressed(f, **arrays)
    return dst


@pytest.fixture(scope="session")
def warp_kernels(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Warp's kernel cache in a fresh folder for the session, for this process and the ones
    it starts (WARP_CACHE_PATH): each run compiles MuJoCo Warp's kernels cold once (a
    bounded, measured cost, ~30 s on two cores), later tests and subprocesses load them, and
    nothing is written into ~/.cache."""
    import warp as wp

    folder = tmp_path_factory.mktemp("warp-kernels")
    os.environ["WARP_CACHE_PATH"] = str(folder)
    wp.config.kernel_cache_dir = str(folder)
    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    yield folder
    os.environ.pop("WARP_CACHE_PATH", None)
