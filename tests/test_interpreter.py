"""run_once: one function in a fresh interpreter, its answer or why there is none (the one
way probes, checks and benchmark children run; rolltape.interpreter)."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from rolltape.interpreter import ChildFailed, changes_to, run_once


def test_the_answer_comes_back_pickled_from_another_process() -> None:
    assert run_once(divmod, 17, 5) == (3, 2)
    assert run_once(os.getpid) != os.getpid()


def test_a_raised_exception_is_named_with_its_message() -> None:
    with pytest.raises(ChildFailed, match="invalid literal") as caught:
        run_once(int, "x")
    assert caught.value.exception == "ValueError" and not caught.value.hung


def test_a_child_that_dies_says_how_and_what_it_printed_when_captured(capfd) -> None:
    program = "import os, sys\nprint('to stdout')\nsys.stderr.write('the reason\\n')\n" \
              "sys.stdout.flush(); sys.stderr.flush()\nos._exit(3)"
    with pytest.raises(ChildFailed, match="exited with status 3") as caught:
        run_once(exec, program, capture=True)
    assert caught.value.returncode == 3
    assert "the reason" in caught.value.output and "to stdout" in caught.value.output
    assert "the reason" not in capfd.readouterr().err  # kept off this terminal


def test_a_child_killed_by_a_signal_has_a_negative_returncode() -> None:
    with pytest.raises(ChildFailed, match="SIGKILL") as caught:
        run_once(exec, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert caught.value.returncode == -9


def test_a_sigterm_that_lands_in_a_finalizer_still_exits_quietly() -> None:
    """SIGTERM's exit raised inside a weakref callback cannot propagate: the child printed
    "Exception ignored ... Traceback" and went on as if never signalled (seen in CI as a
    render worker's traceback under `rolltape render`'s one-line interrupt message). It
    now exits with 143 a moment later, printing nothing."""
    program = textwrap.dedent("""
        import signal, sys, time, weakref
        class Thing: pass
        thing = Thing()
        def stop(ref):  # SIGTERM's handler, run where a finalizer runs
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        ref = weakref.ref(thing, stop)
        del thing
        time.sleep(5)
        sys.stderr.write("went on\\n")
    """)
    with pytest.raises(ChildFailed) as failed:
        run_once(exec, program, capture=True, timeout=20)
    assert failed.value.returncode == 143
    assert failed.value.output == ""


def test_a_hung_child_is_stopped_after_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(ChildFailed, match="no answer within 1 s") as caught:
        run_once(time.sleep, 60, timeout=1.0)
    assert caught.value.hung and time.monotonic() - started < 15


def test_environment_and_working_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ROLLTAPE_TEST_GONE", "here")
    env = {**os.environ, "ROLLTAPE_TEST_NEW": "1"}
    del env["ROLLTAPE_TEST_GONE"]
    assert changes_to(env) == {"ROLLTAPE_TEST_NEW": "1", "ROLLTAPE_TEST_GONE": None}
    assert run_once(os.getenv, "ROLLTAPE_TEST_NEW", env=changes_to(env)) == "1"
    assert run_once(os.getenv, "ROLLTAPE_TEST_GONE", env=changes_to(env)) is None
    assert run_once(os.getcwd, cwd=tmp_path) == str(tmp_path)
