"""Benchmarks that live in an environment of their own: ``rolltape suites install NAME``.

Meta-World 3.0.0 runs only on MuJoCo 3 (up to 3.3), which cannot share rolltape's
environment (MuJoCo 4), so it gets a venv of its own, as LeRobot gives each benchmark its
own image. The venv holds the benchmark at LeRobot's pin, the env server's two wire
packages (pyzmq, msgpack), the render workers' encoder (PyAV, Pillow) and rolltape itself
without its dependencies (a link to the package this rolltape runs from) (the server side
imports numpy, Gymnasium and MuJoCo, which the benchmark brings). A suite run starts
``rolltape serve --suite`` from that venv on loopback (:mod:`rolltape.suites.hosted`), and
draws the run's videos in render workers of the same venv.

Where: ``$ROLLTAPE_BENCHMARKS/NAME`` if set, else ``$XDG_DATA_HOME/rolltape/benchmarks/NAME``
(``~/.local/share/rolltape/benchmarks/NAME``).

May import: errors, the standard library. Never: gymnasium, the benchmark itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import rolltape
from rolltape.errors import UsageError


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's venv recipe: its pinned packages and the import that proves it works."""

    name: str
    pins: tuple[str, ...]
    probe: str  # Python source that must run in the venv once it is built
    packages: tuple[str, ...] = ("gymnasium", "mujoco")  # versions a run records


    @property
    def install(self) -> str:
        return f"rolltape suites install {self.name}"


# LeRobot 0.6.1's `metaworld` extra pins metaworld==3.0.0, which asks only mujoco>=3: MuJoCo
# 4 (and 3.4+) fail in its mocap welds (eq_data grew to 12 numbers), so 3.3.7 is pinned.
# Gymnasium's MuJoCo envs import `packaging`, which metaworld does not declare.
METAWORLD = Benchmark("metaworld", ("metaworld==3.0.0", "mujoco==3.3.7", "packaging>=23"),
                      "import metaworld, zmq, msgpack",
                      ("gymnasium", "mujoco", "metaworld"))
# LeRobot 0.6.1's `aloha` extra asks gym-aloha>=0.1.4,<0.2 and scipy>=1.14,<2; gym-aloha 0.1.5
# asks dm-control 1.0.x, which pins its MuJoCo exactly: the releases pip resolved, pinned.
ALOHA = Benchmark("aloha", ("gym-aloha==0.1.5", "dm-control==1.0.41", "mujoco==3.8.1",
                            "scipy>=1.14,<2", "packaging>=23"),
                  "import gym_aloha, dm_control, zmq, msgpack",
                  ("gymnasium", "mujoco", "dm-control", "gym-aloha"))
BENCHMARKS = {b.name: b for b in (METAWORLD, ALOHA)}
SERVER_PINS = ("pyzmq>=25,<28", "msgpack>=1.0,<2")  # the env server's wire (pyproject's)
# The render workers' encoder (pyproject's ranges): a suite's videos are drawn in its venv.
RENDER_PINS = ("av>=14,<20", "pillow>=10,<14")


def home() -> Path:
    """The folder that holds the benchmark venvs."""
    if os.environ.get("ROLLTAPE_BENCHMARKS"):
        return Path(os.environ["ROLLTAPE_BENCHMARKS"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "rolltape" / "benchmarks"


def venv_python(bench: Benchmark) -> Path:
    return home() / bench.name / "bin" / "python"


def benchmark(name: str) -> Benchmark:
    """The benchmark ``name``; an unknown one is refused naming those there are."""
    if name not in BENCHMARKS:
        raise UsageError(f"There is no benchmark '{name}' to install; the benchmarks with an "
                         f"environment of their own are: {', '.join(BENCHMARKS)}.")
    return BENCHMARKS[name]


def recipe(bench: Benchmark) -> str:
    """What a built venv holds, as its marker file records it: a venv built from another
    recipe (an older rolltape's: no encoder for its render workers) is built again."""
    return " ".join((*bench.pins, *SERVER_PINS, *RENDER_PINS)) + "\n"


def _marker(bench: Benchmark) -> str | None:
    try:
        return (home() / bench.name / "rolltape-ready").read_text()
    except OSError:
        return None


def installed(bench: Benchmark) -> bool:
    """Whether the benchmark's venv was built to the end (its marker file is written last)
    from this rolltape's recipe."""
    return _marker(bench) == recipe(bench) and venv_python(bench).exists()


def require(bench: Benchmark) -> Path:
    """The venv's Python; a missing venv is refused in one sentence naming the install."""
    if not installed(bench):
        state = "built for an older rolltape" if _marker(bench) else "not built yet"
        raise UsageError(f"The {bench.name} suites run in their own environment, which is "
                         f"{state} ({home() / bench.name}); build it once with "
                         f"`{bench.install}`.")
    return venv_python(bench)


def install(bench: Benchmark, log: object = print) -> float:
    """Build the benchmark's venv (idempotent: a built one is kept); return the seconds."""
    start = time.monotonic()
    where = home() / bench.name
    if installed(bench):
        return 0.0
    say = log if callable(log) else print
    say(f"building {where} ({', '.join(bench.pins)} and rolltape's server and render side)...")
    _run([sys.executable, "-m", "venv", "--clear", str(where)], "create the venv")
    pip = [str(venv_python(bench)), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    _run([*pip, *bench.pins, *SERVER_PINS, *RENDER_PINS], f"install {', '.join(bench.pins)}")
    # rolltape itself, without its dependencies: a link to the package this rolltape runs
    # from (a checkout or an install), so the server speaks exactly the client's protocol
    # and follows an upgrade; only that folder is put on the venv's path.
    linked = where / "rolltape-link"
    linked.mkdir(exist_ok=True)
    (linked / "rolltape").symlink_to(Path(rolltape.__file__).resolve().parent,
                                      target_is_directory=True)
    site = subprocess.run([str(venv_python(bench)), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "rolltape-link.pth").write_text(f"{linked}\n")
    _run([str(venv_python(bench)), "-c",
          f"{bench.probe}; import rolltape.server.server, rolltape.pass2.encode"],
         "import the benchmark and rolltape's server and render side there")
    (where / "rolltape-ready").write_text(recipe(bench))
    return time.monotonic() - start


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise UsageError(f"Could not {what} (exit {done.returncode}): {' / '.join(tail)}; "
                         "check the network and the disk, then run the install again.")
