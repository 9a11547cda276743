"""A built-in suite whose envs live in a benchmark's own venv: its server, started and stopped
by the run.

``rolltape eval --suite metaworld_mt10`` needs no server started by hand: :class:`HostedServer`
starts ``rolltape serve --suite NAME`` (the server module, not the CLI: the venv holds no
typer) from the benchmark's venv on loopback, on a free port, and the run steps its tasks
there exactly as ``--served tcp://...`` does. The server is rolltape's interpreter guard's
child (it dies with the run, even a SIGKILLed one) and :meth:`HostedServer.close` stops it
when the run ends, however it ends. The run's videos are drawn by render workers of the
same venv (:func:`render_python` picks their interpreter from the envs they replay).

May import: suites.builtin, suites.benchmarks, interpreter, errors. Never: pass 1, pass 2,
policies.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import threading
import time
from dataclasses import replace
from typing import Any, Iterable

from rolltape.errors import UsageError
from rolltape.interpreter import python_command
from rolltape.suites import benchmarks
from rolltape.suites.builtin import BUILTIN, HOSTED

START_TIMEOUT = 120.0  # seconds for the server to build every task's env and listen
_LISTENING = re.compile(r" on (tcp://127\.0\.0\.1:\d+)")

_PROGRAM = """\
import sys
from rolltape.server.server import ServeConfig, serve
tasks = sys.argv[2] or None
serve(ServeConfig(env=None, suite=sys.argv[1], tasks=tasks, bind="127.0.0.1:0",
                  max_sessions=int(sys.argv[3]), max_episode_steps=int(sys.argv[4]) or None))
"""
_VERSIONS = """\
import json, platform, sys
from importlib.metadata import PackageNotFoundError, version
def known(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None
print(json.dumps([platform.python_version(), {name: known(name) for name in sys.argv[1:]}]))
"""


#: Each hosted suite task's env id -> the benchmark whose venv runs it.
HOSTED_ENVS = {task["env"]: bench for suite, bench in HOSTED.items()
               for task in BUILTIN[suite]["tasks"].values()}


def render_python(env_ids: Iterable[str | None]) -> str | None:
    """The interpreter whose render workers replay tapes of ``env_ids``: a hosted suite's
    env draws only in its benchmark venv (its simulator release), any other env here (None).
    A missing venv is refused naming its install, as is a mix of the two.

    >>> render_python(["CartPole-v1", None]) is None
    True
    """
    named = {HOSTED_ENVS.get(e or "") for e in env_ids}
    if len(named) > 1:
        raise UsageError("These tapes replay in different environments (a benchmark venv's "
                         "and this one); render each benchmark's tapes on their own.")
    name = named.pop() if named else None
    return None if name is None else str(benchmarks.require(benchmarks.benchmark(name)))


class HostedServer:
    """The benchmark venv's env server for one suite run (none for other suites)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.address: str | None = None
        self.versions: dict[str, str | None] = {}
        self.benchmark: dict[str, Any] | None = None  # metadata.json's benchmark_env

    def start(self, config: Any) -> Any:
        """Start the server ``config``'s suite needs and return ``config`` stepping there
        (``served`` set); any other config is returned as it is."""
        suite = getattr(config, "suite", None)
        if suite not in HOSTED or config.served is not None:
            return config
        bench = benchmarks.benchmark(HOSTED[suite])
        python = benchmarks.require(bench)
        cmd = python_command(_PROGRAM, suite, config.tasks or "",
                             str(max(2, 2 * config.workers)),
                             str(config.max_episode_steps or 0),  # --max-episode-steps
                             python=str(python))
        # The venv's own MuJoCo decides its GL: no variable of this process leaks in.
        env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
        version, self.versions = json.loads(subprocess.run(
            [str(python), "-c", _VERSIONS, *bench.packages], capture_output=True, text=True,
            env=env, timeout=60, check=True).stdout)
        # What served pass 1 and drew pass 2 (rendering.render starts its workers there).
        self.benchmark = {"name": bench.name, "python": str(python),
                          "versions": {"python": version, **self.versions}}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=False)
        self.address = self._wait_listening(suite)
        return replace(config, served=self.address)

    def adopt(self, targets: list[Any]) -> list[Any]:
        """The run's targets with the benchmark venv's package versions in their specs:
        what the server is checked against, and what metadata.json records."""
        if self.address is None:
            return targets
        for target in targets:
            target.spec["versions"] = dict(self.versions)
        return targets

    def _wait_listening(self, suite: str) -> str:
        """Read the server's first lines until it says where it listens."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline, seen = time.monotonic() + START_TIMEOUT, []
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    seen.append(line.strip())
                    found = _LISTENING.search(line)
                    if found:  # its later lines (sessions) are read and dropped
                        threading.Thread(target=_drain, args=(self.proc.stdout,),
                                         daemon=True).start()
                        return found.group(1)
                    continue
            if self.proc.poll() is not None:
                break
        self.close()
        tail = " / ".join(seen[-3:]) or "no output"
        raise UsageError(f"The {suite} env server (its benchmark venv) did not start: {tail}; "
                         f"rebuild the venv with `rolltape suites install` if it is broken.")

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _drain(stream: Any) -> None:
    """Read a pipe to its end, so a chatty server never blocks on a full pipe."""
    try:
        for _ in stream:
            pass
    except (OSError, ValueError):  # closed by close()
        pass
