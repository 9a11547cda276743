"""Which episodes of a run become a dataset, and their replays (rolltape.datasets.episodes):
the choice by role, success, return and --pick (a count, ranks or indices) (each refusal one
sentence), the staging folder kept only for the same choices, and the replays in a render
worker, written once and kept on a rerun. A real run of the 5-step toy env of
``tests/assets/toy_envs.py`` (random actions; success on even seeds)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rolltape import Run, Tape, UsageError, evaluate
from rolltape.datasets.episodes import (
    check_restorable,
    choose,
    describe_selection,
    episode_file,
    prepare_staging,
    replay_all,
)

TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return evaluate(TOY, "random", episodes=4, seed=0, out=tmp_path_factory.mktemp("run") / "r",
                    report=False, viewer=False)


def test_pick_counts_ranks_and_indexes_each_tasks_episodes(run: Run) -> None:
    returns = [e.ret for e in run.results.episodes]
    best = max(range(4), key=lambda i: (returns[i], -i))
    assert [c.episode.key.index for c in choose(run, pick=2)] == [0, 1]  # the first two
    assert [c.episode.key.index for c in choose(run, pick="best")] == [best]
    assert [c.index for c in choose(run, pick="3,1")] == [0, 1]  # renumbered, run's order
    # Ranks are taken among the episodes the filters keep: the best of the successes.
    won = [c.episode.key.index for c in choose(run, success_only=True)]
    assert [c.episode.key.index for c in choose(run, pick="best", success_only=True)] == [
        max(won, key=lambda i: (returns[i], -i))]


def test_every_episode_with_a_tape_in_the_runs_order(run: Run) -> None:
    chosen = choose(run)
    assert [c.index for c in chosen] == [0, 1, 2, 3]
    assert [c.episode.key.seed for c in chosen] == [0, 1, 2, 3]
    assert [c.tape for c in chosen] == [run.path / f"tapes/policy-000{i}.npz" for i in range(4)]
    assert [c.stem for c in chosen] == ["000000", "000001", "000002", "000003"]


def test_only_success_keeps_the_episodes_that_succeeded_renumbered(run: Run) -> None:
    chosen = choose(run, success_only=True)
    assert [c.episode.key.seed for c in chosen] == [0, 2]  # the toy: even seeds
    assert [c.index for c in chosen] == [0, 1]  # their places in the dataset


def test_min_return_and_indices_narrow_the_choice(run: Run) -> None:
    returns = {e.key.index: e.ret for e in run.results.episodes}
    cut = sorted(returns.values())[2]  # the two best returns pass it
    kept = choose(run, min_return=cut)
    assert sorted(c.episode.key.index for c in kept) == sorted(
        i for i, r in returns.items() if r is not None and r >= cut)
    assert len(kept) == 2
    assert [c.episode.key.index for c in choose(run, pick=[3, 1])] == [1, 3]  # run's order


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"role": "expert"}, "--role must be 'policy' or 'baseline', got 'expert'."),
    ({"pick": "1-3"}, "--pick '1-3' is not understood; use a count, 'all', 'best'"),
    ({"role": "baseline"}, "has no baseline episodes; evaluate with --baseline random."),
    ({"pick": [1, 9]}, "--pick asks for episode 9 but the run has episodes 0..3."),
    ({"success_only": True, "min_return": 1e9},
     "passes the selection (--success-only, --min-return 1e+09); loosen it."),
])
def test_a_choice_that_cannot_be_made_is_one_sentence(run: Run, kwargs: dict, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        choose(run, **kwargs)
    assert words.format(run=run.path) in str(caught.value)


def test_a_run_without_its_tapes_says_to_evaluate_again(run: Run, tmp_path: Path) -> None:
    copy = shutil.copytree(run.path, tmp_path / "copy")
    shutil.rmtree(copy / "tapes")
    with pytest.raises(UsageError, match="has no tapes of its policy episodes"):
        choose(Run.load(copy))


def test_describe_selection_names_each_flag_given() -> None:
    assert describe_selection(False, None) == "every episode"
    assert describe_selection(True, 2.5, [0, 4]) == \
        "--pick 0,4, --success-only, --min-return 2.5"


def test_restore_mode_needs_recorded_states(run: Run) -> None:
    with pytest.raises(UsageError, match="holds no MuJoCo or ALE states, so --mode restore "
                                         "cannot export it; use --mode resim."):
        check_restorable(choose(run, pick=[0]))


def test_staging_is_kept_only_for_the_same_choices(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    assert prepare_staging(staging, {"to": "minari", "only": None}) == 0
    assert (staging / "episodes").is_dir()
    (staging / "replays.jsonl").write_text('{"dataset_index": 0}\n{"dataset_index": 1}\n')
    (staging / "episodes" / "000000.npz").write_bytes(b"kept")
    assert prepare_staging(staging, {"to": "minari", "only": None}) == 2  # resumed
    assert (staging / "episodes" / "000000.npz").read_bytes() == b"kept"
    assert prepare_staging(staging, {"to": "minari", "only": "success"}) == 0  # other choices
    assert not (staging / "replays.jsonl").exists()
    assert list((staging / "episodes").iterdir()) == []
    assert json.loads((staging / "config.json").read_text()) == {"to": "minari",
                                                                 "only": "success"}


def test_replays_are_written_once_and_kept_on_a_rerun(run: Run, tmp_path: Path) -> None:
    chosen = choose(run)
    staging = tmp_path / "staging"
    prepare_staging(staging, {})

    def replay() -> list:
        return replay_all(chosen, staging, cameras=(), width=None, height=None, fps=10.0,
                          success_keys=lambda c: "is_success", workers=1,
                          backends="egl,osmesa", env_ids=lambda c: TOY)

    first = replay()
    assert [r.chosen for r in first] == chosen and all(r.verified for r in first)
    rows = [json.loads(line) for line in (staging / "replays.jsonl").read_text().splitlines()]
    assert [r["dataset_index"] for r in rows] == [0, 1, 2, 3]
    for row, c in zip(rows, chosen):
        assert row["tape_sha256"] == hashlib.sha256(c.tape.read_bytes()).hexdigest()
        tape = Tape.load(c.tape)
        with np.load(episode_file(staging, c)) as replayed:
            assert np.array_equal(replayed["actions"], tape.actions)
            assert np.array_equal(replayed["rewards"], tape.rewards)
            assert len(replayed["obs"]) == len(tape.actions) + 1
            assert bool(replayed["success"][-1]) == (c.episode.key.seed % 2 == 0)
    written = {c.index: episode_file(staging, c).stat().st_mtime_ns for c in chosen}
    assert replay() == first  # nothing replayed again
    assert {c.index: episode_file(staging, c).stat().st_mtime_ns for c in chosen} == written
