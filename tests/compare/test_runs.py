"""Finished runs loaded and matched for a comparison (rolltape.compare.runs): rows keyed by
seed, labels told apart, a multi-policy folder read from its sweep.json, rows checked
against their tapes, and runs that cannot be paired refused in one sentence naming the
difference. The runs are real and tiny: random actions on the 5-step toy env of
``tests/assets/toy_envs.py`` (success on even seeds), CartPole for another env."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from rolltape import Tape, evaluate
from rolltape.compare.runs import LoadedRun, check_comparable, load_runs, row_key, sweep_runs
from rolltape.errors import UsageError

TOY = "tests.assets.toy_envs:SuccessToy-v0"
QUIET = dict(report=False, viewer=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """a, b: 4 episodes on seeds 0..3; seeds: seeds 1..4; fewer: seeds
    0..2; cartpole: another env."""
    root = tmp_path_factory.mktemp("runs")
    made = {
        "a": evaluate(TOY, "random", episodes=4, seed=0, out=root / "a", **QUIET),
        "b": evaluate(TOY, "random", episodes=4, seed=0, out=root / "b", **QUIET),
        "seeds": evaluate(TOY, "random", episodes=4, seed=1, out=root / "seeds", **QUIET),
        "fewer": evaluate(TOY, "random", episodes=3, seed=0, out=root / "fewer", **QUIET),
        "cartpole": evaluate("CartPole-v1", "random", episodes=4, seed=0, max_episode_steps=5,
                             out=root / "cartpole", **QUIET),
    }
    return {name: run.path for name, run in made.items()}


def refusal(paths: list[Path]) -> str:
    with pytest.raises(UsageError) as caught:
        check_comparable(load_runs(paths))
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_rows_are_keyed_by_seed_with_no_suite_or_task(runs):
    loaded = LoadedRun.load(runs["seeds"])
    assert sorted(loaded.rows) == [(None, None, s) for s in (1, 2, 3, 4)]
    assert all(row_key(e) == k for k, e in loaded.rows.items())
    assert loaded.label == "seeds" and loaded.path == runs["seeds"]
    assert loaded.baseline_rows == {} and loaded.manifest_tasks is None


def test_returns_and_successes_follow_the_keys_asked(runs):
    loaded = LoadedRun.load(runs["a"])
    keys = [(None, None, 3), (None, None, 0)]
    tapes = [Tape.load(loaded.run.tape_path(loaded.rows[k])) for k in keys]
    assert loaded.returns(keys) == pytest.approx([t.total_return for t in tapes], rel=1e-12)
    assert loaded.successes(keys) == [False, True]  # the toy succeeds on even seeds


def test_one_env_is_one_group_sorted_by_seed(runs):
    assert LoadedRun.load(runs["a"]).tasks() == {(None, None): [(None, None, s)
                                                                for s in range(4)]}


def test_identity_is_the_env_its_kwargs_and_time_limit(runs):
    assert LoadedRun.load(runs["cartpole"]).identity == {
        "env": "CartPole-v1", "env kwargs": {}, "max_episode_steps": 5}


def test_two_runs_of_the_same_env_and_seeds_are_comparable(runs):
    loaded = load_runs([runs["a"], runs["b"]])
    check_comparable(loaded)
    assert [r.label for r in loaded] == ["a", "b"]


def test_folders_named_alike_get_told_apart(runs, tmp_path):
    for parent in ("x", "y", "z"):
        shutil.copytree(runs["a"], tmp_path / parent / "run")
    loaded = load_runs([tmp_path / p / "run" for p in ("x", "y", "z")])
    assert [r.label for r in loaded] == ["run", "run-2", "run-3"]


def test_a_sweep_folder_gives_each_of_its_runs(runs, tmp_path):
    shutil.copytree(runs["a"], tmp_path / "steps-100")
    shutil.copytree(runs["b"], tmp_path / "random")
    (tmp_path / "sweep.json").write_text(json.dumps({"entries": [
        {"label": "steps-100", "folder": "steps-100", "steps": 100},
        {"label": "random", "folder": "random", "baseline": True}]}))
    loaded = load_runs([tmp_path])
    assert [(r.label, r.steps, r.baseline) for r in loaded] == [("steps-100", 100, False),
                                                               ("random", None, True)]
    assert sweep_runs(runs["a"]) is None  # a plain run folder


def test_a_damaged_sweep_json_is_refused_with_the_fix(tmp_path):
    (tmp_path / "sweep.json").write_text('{"entries": [{"label": "x"}]}')
    with pytest.raises(UsageError, match="sweep.json' cannot be read; rerun the eval"):
        load_runs([tmp_path])


def test_fewer_than_two_runs_are_refused(runs):
    assert "needs at least two runs" in refusal([runs["a"]])


def test_a_run_given_twice_is_refused(runs):
    message = refusal([runs["a"], runs["b"], runs["a"]])
    assert f"'{runs['a']}' is given twice" in message


def test_runs_of_other_envs_are_refused_naming_both(runs):
    message = refusal([runs["a"], runs["cartpole"]])
    assert "were run on different envs" in message
    assert f"(env {TOY}, max_episode_steps null vs env CartPole-v1, max_episode_steps 5)" \
        in message


def test_runs_of_other_episode_counts_are_refused(runs):
    message = refusal([runs["a"], runs["fewer"]])
    assert "has 4 episodes" in message and "3; compare runs with the same --episodes" in message


def test_runs_on_other_seeds_are_refused_naming_a_seed(runs):
    message = refusal([runs["a"], runs["seeds"]])
    assert "were played on different seeds (seed 0 is in the first only)" in message


def test_a_results_json_that_disagrees_with_its_tapes_is_refused(runs, tmp_path):
    copy = shutil.copytree(runs["a"], tmp_path / "edited")
    results = json.loads((copy / "results.json").read_text())
    results["episodes_rows"][1]["return"] += 1.0
    (copy / "results.json").write_text(json.dumps(results))
    with pytest.raises(UsageError) as caught:
        LoadedRun.load(copy)
    message = str(caught.value)
    assert "episode 1 (seed 1)" in message and "results.json does not match the tapes" in message


def test_a_run_missing_a_tape_is_refused(runs, tmp_path):
    copy = shutil.copytree(runs["a"], tmp_path / "gone")
    (copy / "tapes" / "policy-0002.npz").unlink()
    with pytest.raises(UsageError, match=r"episode 2 \(seed 2\): its tape cannot be read"):
        LoadedRun.load(copy)


def test_the_rows_returns_are_the_tapes_sums(runs):
    loaded = LoadedRun.load(runs["b"])
    for key, episode in loaded.rows.items():
        tape = Tape.load(loaded.run.tape_path(episode))
        assert tape.seed == key[2]
        assert episode.ret == tape.total_return and math.isfinite(tape.total_return)
