"""Pass 1 as tasks of a remote executor (Ray): a few episodes a task, tapes returned as
bytes, because a task's machine need not share the caller's disk.

A task plays its episodes exactly as a local pass-1 worker does (:func:`run_policy_job`,
with no GL variable in the process), saving tapes in a temporary folder of its own; the
caller writes the returned files at the tape paths it asked for, before it reads the rows.
Policy files (checkpoints, statistics, modules) are read where the task runs, so on a
cluster they must sit at the same path on every machine.

May import: the policy side. Never: the render side, executors, outputs.

>>> from rolltape.pass1.rollout import Episodes, PolicyJob
>>> job = PolicyJob(env={"id": "CartPole-v1"}, policy="random",
...                 episodes=Episodes("policy", range(10), seed=0, tapes="t"))
>>> [len(task[0].episodes) for task in cut_into_tasks([[job]])]
[3, 3, 3, 1]
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from rolltape.envs.build import forget_mujoco_warnings, mujoco_warnings
from rolltape.errors import UsageError
from rolltape.files import unmap_paths
from rolltape.interpreter import GL_VARIABLES
from rolltape.pass1.rollout import PolicyJob, run_policy_job

EPISODES_PER_TASK = 4  # at most; small tasks give progress, each task reloads the policy


def cut_into_tasks(chunks: list[list[PolicyJob]]) -> list[list[PolicyJob]]:
    """Cut each worker's share into tasks of a few episodes, dealt round-robin across the
    shares so that every share advances together."""
    total = sum(len(job.episodes) for chunk in chunks for job in chunk)
    size = max(1, min(EPISODES_PER_TASK, math.ceil(total / (4 * max(1, len(chunks))))))
    per_chunk = [[[replace(job, episodes=job.episodes[k:k + size])]
                  for job in chunk for k in range(0, len(job.episodes), size)]
                 for chunk in chunks]
    tasks: list[list[PolicyJob]] = []
    for row in range(max((len(c) for c in per_chunk), default=0)):
        tasks.extend(c[row] for c in per_chunk if row < len(c))
    return tasks


def play_shipped(jobs: list[PolicyJob]) -> dict[str, Any]:
    """Play ``jobs``; return {"files": {tape path: bytes}, "messages": [...]} with the
    messages a local worker sends (its rows naming the caller's tape paths, then ("done",
    MuJoCo warnings)), or {"usage_error": text} for bad input found here."""
    # Pass 1 never renders: a GL backend in the environment could only add risk.
    if "mujoco" not in sys.modules:  # (a reused process has already chosen)
        for var in GL_VARIABLES:
            os.environ.pop(var, None)
    forget_mujoco_warnings()  # a reused process: report this task's warnings only
    tmp = Path(tempfile.mkdtemp(prefix="rolltape-pass1-"))
    originals: dict[str, str] = {}
    messages: list[tuple[str, Any]] = []
    try:
        for job in jobs:
            local = []
            for ep in job.episodes:
                path = str(tmp / f"{len(originals):05d}-{Path(ep.tape_path).name}")
                originals[path] = ep.tape_path
                local.append(replace(ep, tape_path=path))
            run_policy_job(replace(job, episodes=local), messages.append)
        files, out = {}, []
        for kind, payload in messages:
            if kind == "episode":
                files[originals[payload["tape"]]] = Path(payload["tape"]).read_bytes()
                payload = {**payload, "tape": originals[payload["tape"]]}
            out.append((kind, payload))
        out.append(("done", mujoco_warnings()))
        return {"files": files, "messages": out}
    except UsageError as exc:
        # Returned, not raised: the caller raises it as a plain UsageError.
        return {"usage_error": unmap_paths(str(exc), originals)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
