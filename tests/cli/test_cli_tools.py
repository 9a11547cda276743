"""The tool verbs run for real: `rolltape doctor` finds this machine's GL backends, with the
one default of --backends (egl,osmesa: glfw needs a display, and is probed when asked);
each tool's bad option is one sentence and exit 2, refused before any work."""

from __future__ import annotations

import re

import pytest

from conftest import run_cli
from rolltape.cli import main


def test_doctor(tmp_path):
    proc = run_cli("doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^egl\s+ok", proc.stdout, re.M), proc.stdout
    assert re.search(r"^osmesa\s+ok", proc.stdout, re.M), proc.stdout
    assert "rolltape will use egl" in proc.stdout
    # Issue 40: doctor's --backends default is every verb's (it probed glfw too before).
    assert not re.search(r"^glfw", proc.stdout, re.M), proc.stdout
    asked = run_cli("doctor", "--backends", "osmesa", cwd=tmp_path)
    assert asked.returncode == 0 and re.search(r"^osmesa\s+ok", asked.stdout, re.M)
    assert not re.search(r"^egl", asked.stdout, re.M), asked.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["doctor", "--timeout", "0"], "--timeout must be a number above 0, got 0.0."),
    (["bench", "--rss-frames", "5"], "--rss-frames must be two step counts SHORT,LONG"),
    (["view", ".", "--port", "-1"], "--port must be 0 or more, got -1."),
    (["suites", "build", "metaworld"], "`rolltape suites build` is not a command"),
    (["demo", "-n", "0"], "--episodes must be at least 1, got 0."),
])
def test_a_bad_option_is_one_sentence_before_any_work(tmp_path, monkeypatch, capsys, args,
                                                      words):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rolltape: ") and words in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # nothing written
