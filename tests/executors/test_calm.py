"""Render workers niced beside pass 1 (``--render-early``) draw at the normal priority once
pass 1 is done: put back in place where the OS allows it (root, as in CI), else replaced
after their job (root without CAP_SYS_NICE, which cannot lower a niceness either). Each
worker records its own niceness with every result (``os.nice(0)`` in the worker)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import rolltape
from rolltape.pass2.replay import RenderRequest
from rolltape.rendering import render

# Run in a process of its own (below, without CAP_SYS_NICE): two tapes on one niced worker,
# "pass 1" ends when the first video is done; prints each result's niceness.
TWO_VIDEOS = """
import json, sys, threading
from rolltape.pass2.replay import RenderRequest
from rolltape.rendering import render
tapes, out = sys.argv[1:3], sys.argv[3]
calm = threading.Event()
requests = [RenderRequest(tape=t, outputs=(f"{out}/{k}.gif",), overwrite=True)
            for k, t in enumerate(tapes)]
results = render(requests, workers=1, background=True, calm=calm,
                 on_result=lambda i, r: calm.set())
print(json.dumps([r.niceness for r in results]))
"""


@pytest.fixture(scope="module")
def tapes(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    run = rolltape.evaluate("CartPole-v1", episodes=2, max_episode_steps=20,
                            out=tmp_path_factory.mktemp("calm") / "run", report=False)
    return [str(run.path / "tapes" / f"policy-{i:04d}.npz") for i in range(2)]


def test_a_niced_worker_is_put_back_in_place_when_pass_one_ends(tapes, tmp_path):
    calm = threading.Event()
    requests = [RenderRequest(tape=t, outputs=(str(tmp_path / f"{k}.gif"),), overwrite=True)
                for k, t in enumerate(tapes)]
    results = render(requests, workers=1, background=True, calm=calm,
                     on_result=lambda i, r: calm.set())
    assert [r.niceness for r in results] == [10, 0]  # type: ignore[union-attr]
    assert all(r.verified for r in results)  # type: ignore[union-attr]


def test_without_the_right_to_renice_the_next_job_gets_a_normal_worker(tapes, tmp_path):
    # setpriv drops CAP_SYS_NICE from the bounding set: this root can no longer lower a
    # niceness (os.setpriority is refused), as any unprivileged user cannot.
    done = subprocess.run(["setpriv", "--bounding-set=-sys_nice", sys.executable, "-c",
                           TWO_VIDEOS, *tapes, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [10, 0]
    refused = subprocess.run(["setpriv", "--bounding-set=-sys_nice", sys.executable, "-c",
                              "import os; os.nice(5); os.setpriority(os.PRIO_PROCESS, 0, 0)"],
                             capture_output=True, text=True, timeout=60)
    assert "PermissionError" in refused.stderr  # the in-place route really was closed
