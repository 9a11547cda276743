"""The tool verbs run for real: `rolltape doctor` finds this machine's GL backends."""

from __future__ import annotations

import re

from conftest import run_cli


def test_doctor(tmp_path):
    proc = run_cli("doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^egl\s+ok", proc.stdout, re.M), proc.stdout
    assert re.search(r"^osmesa\s+ok", proc.stdout, re.M), proc.stdout
    assert "rolltape will use egl" in proc.stdout
