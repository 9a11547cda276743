"""`rolltape verify` (and render) on real tapes: good ones verify, an altered one names its
first divergent step and exits 1."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import rewrite_tape, run_cli


@pytest.fixture
def tapes(random_run, tmp_path):
    """Copies of two good tapes and one with a single action altered at step 7."""
    good = [Path(shutil.copy(random_run.path / "tapes" / f"policy-000{i}.npz", tmp_path))
            for i in range(2)]

    def alter(arrays, header):
        a = arrays["actions"]
        a[7, 0] = 0.5 if a[7, 0] != 0.5 else -0.5
    altered = rewrite_tape(good[0], tmp_path / "altered.npz", alter)
    return good, altered


def test_verify_good_tapes(tapes, tmp_path):
    good, _ = tapes
    proc = run_cli("verify", *map(str, good), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for tape in good:
        assert re.search(rf"ok {re.escape(str(tape))}: 40 steps, return \S+, verified", proc.stdout)
    assert list(tmp_path.glob("*.mp4")) == []  # verify draws nothing


def test_verify_reports_the_first_divergent_step(tapes, tmp_path):
    good, altered = tapes
    proc = run_cli("verify", str(good[1]), str(altered), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(rf"ok {re.escape(str(good[1]))}: 40 steps", proc.stdout)
    assert re.search(rf"DIVERGED {re.escape(str(altered))}: first at step 7: reward",
                     proc.stdout), proc.stdout
    assert "rolltape:" in proc.stderr
