"""The pass-1 worker process: runs policy jobs per row (:mod:`rolltape.pass1.rollout`),
batched (:mod:`rolltape.pass1.batched`) or as worlds of MuJoCo Warp
(:mod:`rolltape.pass1.mjwarp`) and reports each episode to its parent.

May import: pass 1, envs, errors. Never: an executor, the render side, outputs.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

from rolltape.envs.build import mujoco_warnings
from rolltape.errors import UsageError
from rolltape.interpreter import GL_VARIABLES
from rolltape.pass1.batched import run_batched_job
from rolltape.pass1.rollout import OpenJobs, PolicyJob, last_line, run_policy_job


def policy_worker(jobs: list[PolicyJob], batch_envs: int, pulls: bool, conn: Any) -> None:
    """Entry point of a spawned pass-1 process: run the jobs in order, report over ``conn``.
    With ``batch_envs`` N > 0 they run batched on N env processes (:mod:`rolltape.pass1.batched`).
    With ``pulls``, each ("done", ...) is followed by reading the next piece of jobs from
    ``conn`` (:mod:`rolltape.pass1.dealer`), played with the envs and policies kept open,
    until None comes."""
    # Pass 1 never renders: a GL backend in the environment could only add risk.
    for var in GL_VARIABLES:
        os.environ.pop(var, None)
    # Stopped by the parent (Ctrl-C, another worker's failure): unwind, so that each job's
    # env is closed; a served env's session is then closed on its server at once, instead
    # of holding a --max-sessions slot until the server's idle timeout.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        if any(job.simulator == "mjwarp" for job in jobs):
            # imported here: MuJoCo Warp's env imports mujoco, which the orchestrator
            # (importing this module for its entry point) must not load
            from rolltape.pass1.mjwarp import run_mjwarp_job

            for job in jobs:
                run_mjwarp_job(job, conn.send)
            conn.send(("done", []))
        elif batch_envs:
            run_batched_job(jobs, batch_envs, conn.send)
            conn.send(("done", mujoco_warnings()))
        else:
            opened = OpenJobs()
            piece: list[PolicyJob] | None = jobs
            try:
                while piece is not None:
                    for job in piece:
                        run_policy_job(job, conn.send, opened)
                    conn.send(("done", mujoco_warnings()))
                    piece = conn.recv() if pulls else None
            finally:
                opened.close()
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone: nobody to report to
    except UsageError as exc:
        conn.send(("usage_error", str(exc)))
    except OSError as exc:  # a full disk, most likely: say where
        where = f" while writing '{exc.filename}'" if exc.filename else ""
        conn.send(("error", (f"{exc.strerror or last_line(exc)}{where}", traceback.format_exc())))
    except SystemExit:
        raise  # stopped: the parent is not listening any more
    except BaseException as exc:  # report, then let the parent decide
        conn.send(("error", (last_line(exc), traceback.format_exc())))
    finally:
        conn.close()
