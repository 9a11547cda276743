"""A built-in suite served from its benchmark's venv: refused in one sentence naming the
install when the venv is missing, with nothing written; a run SIGKILLed leaves no process of
the venv behind (a run that ends, its server stopped, is tests/suites/test_metaworld.py)."""

from __future__ import annotations

import subprocess
import sys
import time

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
    """SIGKILL reaches no `finally`: the server and the expert's child die with their parent
    (rolltape's interpreter guard), within 5 s."""
    assert benchmarks.installed(benchmarks.METAWORLD), "build it: rolltape suites install metaworld"
    run = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "eval", "--suite",
                            "metaworld_mt10", "--tasks", "reach", "--policy", "metaworld-expert",
                            "--episodes", "500", "--out", str(tmp_path / "run")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_servers()) < 2 and time.monotonic() < deadline:  # the server and the expert
            time.sleep(0.2)
        assert len(_servers()) >= 2
    finally:
        run.kill()
        run.wait()
    time.sleep(5)
    assert _servers() == []
