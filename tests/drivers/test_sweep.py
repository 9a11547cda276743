"""Several policies in one command (rolltape.drivers.sweep): one complete run per policy
and the random baseline once, all on the same seeds, sweep.json saying what each folder
holds, the comparison written; --resume keeps finished runs; bad input is refused before
any evaluation and leaves nothing. Real runs of the 5-step toy env of
``tests/assets/toy_envs.py`` (the trained-checkpoint sweep: tests/cli/test_cli_compare.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rolltape.compare.runs import load_runs
from rolltape.drivers.sweep import SweepResult, evaluate_many, prepare_root, wants_sweep
from rolltape.errors import UsageError

TOY = "tests.assets.toy_envs:SuccessToy-v0"
OPTIONS: dict[str, Any] = dict(episodes=3, seed=4, report=False, viewer=False)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepResult, list[str]]:
    seen: list[str] = []
    result = evaluate_many(TOY, ["random"], baseline="random",
                           out=tmp_path_factory.mktemp("sweep") / "out",
                           on_run=lambda label, run: seen.append(label), **OPTIONS)
    return result, seen


@pytest.mark.parametrize(("policies", "wanted"), [
    (["random"], False), (["sb3:ppo.zip"], False), (["random", "sb3:ppo.zip"], True),
    (["sb3:ckpt/rl_model_*_steps.zip"], True), (["sb3:ckpt/rl_model_[12]_steps.zip"], True),
    (["my*.py:act"], False),  # a glob only for SB3 checkpoints
])
def test_wants_sweep_for_several_policies_or_a_glob_of_checkpoints(policies, wanted):
    assert wants_sweep(policies) is wanted


def test_each_policy_and_the_baseline_is_a_run_of_its_own(sweep):
    result, seen = sweep
    assert seen == ["policy-random", "random"]  # the baseline last, each as it finished
    assert [e.label for e in result.entries] == ["policy-random"]
    assert [run.path for run in result.runs] == [result.path / "policy-random",
                                                 result.path / "random"]
    for run in result.runs:
        assert (run.path / "results.json").is_file()
        assert [e.key.seed for e in run.results.episodes] == [4, 5, 6]


def test_sweep_json_says_what_each_folder_holds(sweep):
    result, _ = sweep
    manifest = json.loads((result.path / "sweep.json").read_text())
    assert manifest["env"] == TOY and manifest["suite"] is None
    assert [(e["label"], e["folder"], e["policy"], e["baseline"]) for e in manifest["entries"]] \
        == [("policy-random", "policy-random", "random", False), ("random", "random", "random", True)]
    loaded = load_runs([result.path])  # compare reads the folder back through it
    assert [(r.label, r.baseline) for r in loaded] == [("policy-random", False), ("random", True)]


def test_the_comparison_pairs_the_runs_on_their_seeds(sweep):
    result, _ = sweep
    written = json.loads((result.path / "comparison.json").read_text())
    assert written == json.loads(json.dumps(result.comparison))
    assert written["seeds"] == [4, 5, 6]
    [pair] = written["pairs"]
    assert (pair["a"], pair["b"], pair["returns"]["n_pairs"]) == ("policy-random", "random", 3)
    assert (result.path / "comparison.html").is_file()


def test_resume_keeps_the_finished_runs(sweep):
    result, _ = sweep
    stamps = {p: p.stat().st_mtime_ns for p in result.path.glob("*/results.json")}
    again = evaluate_many(TOY, ["random"], baseline="random", out=result.path, resume=True,
                          **OPTIONS)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert [r.results.to_json()["episodes_rows"] for r in again.runs] == \
        [r.results.to_json()["episodes_rows"] for r in result.runs]


@pytest.mark.parametrize(("policies", "options", "words"), [
    (["random"], {"baseline": "zero"}, "--baseline 'zero' is not supported; use 'random'"),
    (["random"], {}, "--policy names 1 policy; a comparison needs two or more"),
    (["random"], {"baseline": "random", "reference": "ppo"},
     "--reference 'ppo' is not one of the policies' folder names (policy-random)"),
    (["random"], {"baseline": "random", "overwrite": True, "resume": True},
     "--overwrite and --resume contradict each other"),
])
def test_bad_input_is_refused_before_any_evaluation(tmp_path: Path, policies, options, words):
    with pytest.raises(UsageError) as caught:
        evaluate_many(TOY, policies, out=tmp_path / "out", **options, **OPTIONS)
    assert words in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_needs_overwrite_or_resume(sweep):
    result, _ = sweep
    with pytest.raises(UsageError, match="already exists; pass --overwrite"):
        prepare_root(result.path, overwrite=False, resume=False)


def test_prepare_root_names_the_first_folder_it_made(tmp_path: Path):
    root, created = prepare_root(tmp_path / "a" / "b", overwrite=False, resume=False)
    assert root.is_dir() and created == tmp_path / "a"
    assert prepare_root(tmp_path / "a" / "b", overwrite=False, resume=True) == (root, None)


def test_a_first_run_refused_for_bad_input_leaves_nothing(tmp_path: Path):
    with pytest.raises(UsageError):
        evaluate_many(TOY, ["tests.assets.policies:no_such_policy", "random"],
                      out=tmp_path / "new" / "out", **OPTIONS)
    assert not (tmp_path / "new").exists()
