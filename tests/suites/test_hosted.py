"""A built-in suite served from its benchmark's venv: refused in one sentence naming the
install when the venv is missing, with nothing written; a run SIGKILLed leaves no process of
the venv behind (a run that ends, its server stopped, is tests/suites/test_metaworld.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.suites.test_metaworld import _servers

import rolltape
from rolltape.errors import UsageError
from rolltape.suites import benchmarks
from rolltape.suites.builtin import listing


def test_a_missing_venv_is_one_sentence_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLTAPE_BENCHMARKS", str(tmp_path / "none"))
    entry = {e["suite"]: e for e in listing()}["metaworld_mt10"]
    assert (entry["installed"], entry["install"]) == (False, "rolltape suites install metaworld")
    with pytest.raises(UsageError, match=r"build it once with `rolltape suites install "
                                         r"metaworld`\.$"):
        rolltape.evaluate(suite="metaworld_mt10", tasks="reach", policy="random", episodes=1,
                          out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_killed_run_leaves_no_benchmark_process(tmp_path):
    """SIGKILL reaches no `finally`: the server, the expert's child and the render workers
    (started from the venv, warm while pass 1 plays) die with their parent (rolltape's
    interpreter guard), within 5 s."""
    assert benchmarks.installed(benchmarks.METAWORLD), "build it: rolltape suites install metaworld"
    run = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "eval", "--suite",
                            "metaworld_mt10", "--tasks", "reach", "--policy", "metaworld-expert",
                            "--episodes", "500", "--video", "worst", "--out",
                            str(tmp_path / "run")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        # the server, the expert and a render worker (warm from the first episode on)
        while not (len(_servers()) >= 3 and _render_workers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_servers()) >= 3 and _render_workers()
    finally:
        run.kill()
        run.wait()
    time.sleep(5)
    assert _servers() == []


def _render_workers() -> list[int]:
    """The benchmark venv's processes that run rolltape's render worker."""
    found = []
    for pid in _servers():
        try:
            if b"render_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:  # it ended meanwhile
            pass
    return found
