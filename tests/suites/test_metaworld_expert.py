"""`--policy metaworld-expert` plays the Meta-World suites only (their state, or the pixel
suites' observation.environment_state): another env is one sentence (its play against Meta-World's own loop is tests/suites/test_metaworld.py)."""

from __future__ import annotations

import pytest

import rolltape
from rolltape.errors import UsageError


def test_the_expert_refuses_an_env_that_is_not_metaworld(tmp_path):
    with pytest.raises(UsageError, match="plays the Meta-World suites only"):
        rolltape.evaluate("CartPole-v1", "metaworld-expert", episodes=1, out=tmp_path / "run")
