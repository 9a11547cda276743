"""``--policy metaworld-expert``: Meta-World's own scripted policy for the task being played.

Meta-World ships one hand-written policy per task (``metaworld.policies.ENV_POLICY_MAP``),
a function of the 39-number state observation. It lives in the benchmark's venv, not in
rolltape's, so the policy runs there: a child interpreter of that venv (tied to this process,
as every rolltape child is) reads observations and writes actions over a pipe, as fixed-size
float64/float32 frames (nothing decoded from it can run code). In the pixel suites it reads
the state from the observation's ``observation.environment_state``. The task comes from the env
the policy is loaded for (the suite task's ``task`` kwarg).

May import: suites.benchmarks, suites.metaworld, interpreter, errors, numpy. Never: the render
side.
"""

from __future__ import annotations

import subprocess
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.interpreter import python_command
from rolltape.suites.metaworld import ENV_STATE_KEY  # the pixel suites' state

SOURCE = "metaworld-expert"
OBS_SIZE = 39  # Meta-World v3's state observation
ACTION_SIZE = 4

# Runs in the benchmark venv: argv[1] is the task; each 39 float64 in, 4 float32 out.
_PROGRAM = """\
import sys
import numpy as np
from metaworld.policies import ENV_POLICY_MAP
policy = ENV_POLICY_MAP[sys.argv[1]]()
read, write = sys.stdin.buffer, sys.stdout.buffer
while True:
    frame = read.read(39 * 8)
    if len(frame) < 39 * 8:
        break
    action = policy.get_action(np.frombuffer(frame, dtype=np.float64).copy())  # it writes
    write.write(np.asarray(action, dtype=np.float32).tobytes())
    write.flush()
"""


def task_of(env: Any) -> str | None:
    """The Meta-World task an env plays: its own ``task``, or a served suite task's kwarg."""
    task = getattr(getattr(env, "unwrapped", env), "task", None)
    if isinstance(task, str):
        return task
    spec = getattr(env, "served_spec", None) or {}
    task = (spec.get("kwargs") or {}).get("task")
    return task if isinstance(task, str) else None


class ExpertProcess:
    """Meta-World's scripted policy for one task, running in the benchmark's venv (the
    policy pass 1 plays is :class:`rolltape.policies.MetaWorldExpertPolicy` around it)."""

    def __init__(self, env: Any) -> None:
        from rolltape.suites import benchmarks

        task = task_of(env)
        space = env.observation_space
        # The pixel suites' observation carries the state under this key (the expert reads it)
        self.key = ENV_STATE_KEY if ENV_STATE_KEY in getattr(space, "spaces", {}) else None
        if self.key is not None:
            space = space[self.key]
        if task is None or getattr(space, "shape", None) != (OBS_SIZE,):
            raise UsageError("--policy metaworld-expert plays the Meta-World suites only "
                             "(e.g. --suite metaworld_mt10 or metaworld_mt10_pixels).")
        python = benchmarks.require(benchmarks.METAWORLD)
        cmd = python_command(_PROGRAM, task)
        cmd[0] = str(python)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.task = task

    def act(self, obs: Any) -> np.ndarray:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        state = obs if self.key is None else obs[self.key]
        self.proc.stdin.write(np.asarray(state, dtype=np.float64).reshape(OBS_SIZE).tobytes())
        self.proc.stdin.flush()
        frame = self.proc.stdout.read(ACTION_SIZE * 4)
        if len(frame) < ACTION_SIZE * 4:
            raise RuntimeError(f"Meta-World's expert for {self.task} stopped (exit "
                               f"{self.proc.poll()}).")
        return np.frombuffer(frame, dtype=np.float32).copy()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
