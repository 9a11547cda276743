"""Policy parity (`rolltape parity --policy ws://... --local-policy SOURCE`): the first step
and dimension where a served policy's actions differ from the local one's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from policy_servers import PolicyServer, write_policies
from rolltape.policy_parity import compare_actions


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    return write_policies(tmp_path)


def test_a_policy_sampling_from_an_unseeded_generator_differs_at_its_first_step(
        policies: Path, tmp_path: Path):
    server = PolicyServer("pols.py:noisy", cwd=policies)
    try:
        parity = run_cli("parity", "Pendulum-v1", "--policy", server.address,
                         "--local-policy", "pols.py:noisy", "-n", "1", "--max-episode-steps",
                         "10", "--out", str(tmp_path / "p.json"), cwd=policies)
        assert parity.returncode == 1, parity.stderr
        line = parity.stderr.strip().splitlines()[-1]
        assert "step 0, dimension 0" in line and "10 of 10 steps" in line, line
        report = json.loads((tmp_path / "p.json").read_text())
        assert report["first_difference"]["step"] == 0 and report["max_abs_diff"] > 0
    finally:
        server.stop()


def test_compare_actions_names_the_first_dimension_and_the_largest_gap():
    assert compare_actions(np.float32([1, 2, 3]), np.float32([1, 2.5, 1])) == (False, 1, 2.0)
    assert compare_actions(np.float32([1]), np.float64([1])) == (False, 0, 0.0)  # dtype only
    assert compare_actions(np.int64(2), np.int64(2)) == (True, None, 0.0)
