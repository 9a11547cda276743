"""`rolltape compare` chooses by what its folders hold (rolltape.compare.folders): runs on
the same seeds are compared into compare-A-vs-B beside the first, a comparison already there
is kept unless --overwrite, and a recipes folder refuses --reference before reading
anything. Two real 2-episode CartPole runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolltape import evaluate
from rolltape.cli import main
from rolltape.compare.folders import CompareConfig, compare_folders
from rolltape.errors import UsageError


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("folders")
    for name in ("a", "b"):
        evaluate("CartPole-v1", "random", episodes=2, seed=7, max_episode_steps=20, video=0,
                 baseline=None, report=False, viewer=False, out=root / name)
    return root / "a", root / "b"


def test_two_runs_are_compared_beside_the_first_once(runs, capsys) -> None:
    a, b = runs
    assert main(["compare", str(a), str(b)]) == 0
    written = a.parent / "compare-a-vs-b"
    result = json.loads((written / "comparison.json").read_text())
    assert [e["label"] for e in result["entries"]] == ["a", "b"]
    assert f"comparison written to {written / 'comparison.html'}" in capsys.readouterr().out
    assert main(["compare", str(a), str(b)]) == 2  # kept: one sentence, nothing replaced
    assert "--overwrite" in capsys.readouterr().err
    # The API builds the verb's record and does the same.
    again = compare_folders(CompareConfig(runs=(a, b), overwrite=True))
    assert again.path == written and again.result is not None and again.lines == ()


def test_a_recipes_folder_refuses_reference_before_reading(tmp_path: Path, capsys) -> None:
    (tmp_path / "recipes.json").write_text("{}")
    assert main(["compare", str(tmp_path), "--reference", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rolltape: --reference normalizes policies' scores; a recipe comparison "
                   "has none to normalize, drop it."]
    with pytest.raises(UsageError, match="--reference normalizes"):
        CompareConfig(runs=[tmp_path], reference="x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipes.json"]
