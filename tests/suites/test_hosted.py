"""A built-in suite served from its benchmark's venv: refused in one sentence naming the
install when the venv is missing, with nothing written (the run with the venv, its server
stopped at the end, is tests/suites/test_metaworld.py)."""

from __future__ import annotations

import pytest

import rolltape
from rolltape.errors import UsageError
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
