"""Real `rolltape serve-policy` processes for the served-policy tests (tests/test_serve_policy.py,
tests/policy_server/, tests/test_policy_parity.py): a server on loopback port 0 and the small
policies they serve (a chunked callable, an unseeded sampler, a slow one)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import numpy as np

H = 4  # the chunked callable's chunk
STEPS = 12  # Pendulum steps per episode in the chunk tests

POLICIES = textwrap.dedent(f"""
    import json, os, sys, time
    import numpy as np

    class Chunky:
        \"\"\"{H} actions a call, each a function of the observation it was asked on.\"\"\"
        action_horizon = {H}

        def __init__(self):
            self.calls = 0

        def __call__(self, obs):
            self.calls += 1
            if self.calls == 1 and os.environ.get("PROBE_MODULES"):
                with open(os.environ["PROBE_MODULES"], "w") as f:
                    json.dump(sorted(sys.modules), f)
            base = np.tanh(np.asarray(obs, dtype=np.float32)[:1])
            return np.stack([base * (1 - 0.25 * k) for k in range({H})]).astype(np.float32)

    rng = np.random.default_rng()  # unseeded: no two processes draw the same

    def noisy(obs):
        return rng.uniform(-2, 2, size=(1,)).astype(np.float32)

    def slow(obs):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
        return np.tanh(np.asarray(obs, dtype=np.float32)[:1])
""")


class PolicyServer:
    """`rolltape serve-policy` in a subprocess; ``address`` is the ws:// it printed."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                 bind: str = "127.0.0.1:0", command: list[str] | None = None) -> None:
        # ``command``: how the server starts (default: the `rolltape serve-policy` command)
        command = command or [sys.executable, "-m", "rolltape.cli", "serve-policy"]
        self.proc = subprocess.Popen(
            [*command, *args, "--bind", bind],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
            env={**os.environ, **(env or {})})
        # the first line that says where it serves, within 90 s (a framework may log before
        # it, as LeRobot's loading does); a thread reads, so a silent server cannot hang this
        lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(
            target=lambda: [lines.put(x) for x in self.proc.stdout or ()], daemon=True)
        self._reader.start()
        deadline, line, seen = time.monotonic() + 90, "", []
        while not line.startswith("serving policy"):
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the policy server said no address: {seen[-20:]}") from None
            seen.append(line)
        self._lines = lines
        self.address = next(w for w in line.split() if w.startswith("ws://")).rstrip(";)")

    def sessions(self) -> int:
        url = self.address.replace("ws://", "http://") + "/stats"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(json.loads(reply.read())["sessions"])

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=30)
        self._reader.join(10)  # the pipe's end: every line it wrote is in the queue
        out = []
        while not self._lines.empty():
            out.append(self._lines.get())
        return "".join(out)


def reference_actions(k: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """The executed actions of a plain loop: ask for a chunk when the last is used up,
    execute its first k actions open loop (the loop the tapes must equal)."""
    env = gym.make("Pendulum-v1", max_episode_steps=STEPS)
    obs, _ = env.reset(seed=seed)
    queue: list[np.ndarray] = []
    actions, starts, t, done = [], [], 0, False
    while not done:
        if not queue:
            base = np.tanh(np.asarray(obs, dtype=np.float32)[:1])
            chunk = np.stack([base * (1 - 0.25 * j) for j in range(H)]).astype(np.float32)
            queue = list(chunk[:k])
            starts.append(t)
        action = queue.pop(0)
        actions.append(action)
        obs, _, term, trunc, _ = env.step(action)
        done, t = term or trunc, t + 1
    env.close()
    return np.stack(actions), starts


def write_policies(folder: Path) -> Path:
    """``folder`` with pols.py (the policies above) in it."""
    (folder / "pols.py").write_text(POLICIES)
    return folder
