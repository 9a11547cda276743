"""Evaluating recipes (rolltape.drivers.recipes): what --recipe is refused for, in one line
and before anything is written; the parse of NAME=SOURCE. (Real recipe runs and their
comparison: tests/compare/test_recipes.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from rolltape.drivers.recipes import parse_recipes
from rolltape.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def test_a_recipe_is_a_name_and_a_glob_of_checkpoints(tmp_path: Path) -> None:
    for seed in (1, 0):
        (tmp_path / f"seed{seed}").mkdir()
        (tmp_path / f"seed{seed}" / "model.zip").write_bytes(b"")
    recipes = parse_recipes([f"fast=sb3:{tmp_path}/seed*/model.zip"])
    assert list(recipes) == ["fast"] and len(recipes["fast"]) == 2
    with pytest.raises(UsageError, match="not NAME=SOURCE"):
        parse_recipes(["fast"])


@pytest.mark.parametrize("recipe, needle", [
    ("fast", "not NAME=SOURCE"),
    ("a b=sb3:x*.zip", "not NAME=SOURCE"),
    ("fast=sb3:/nowhere/seed*/m.zip", "matches no file"),
    ("r=random", "names no checkpoints"),  # issue 34: a policy, not training runs
])
def test_bad_recipes_are_one_line_and_leave_nothing(tmp_path, recipe, needle):
    out = tmp_path / "bad"
    done = run_cli("eval", "CartPole-v1", "--recipe", recipe, "--out", str(out), "-q",
                   cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
