"""What several ``--policy`` name (rolltape.compare.checkpoints): globs of SB3 checkpoints
ordered by training steps, each with the statistics CheckpointCallback saved beside it,
folder labels told apart, and the refusals (a glob matching nothing, a checkpoint missing
its statistics while the others have theirs). No checkpoint is loaded: empty files do."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape.compare.checkpoints import Entry, checkpoint_steps, expand_policies, is_glob
from rolltape.errors import UsageError


def touch(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")


@pytest.mark.parametrize(("name", "steps"), [
    ("rl_model_12000_steps.zip", 12000), ("ckpt/rl_model_0_steps.zip", 0),
    ("my_run_v2_500_steps.zip", 500), ("final.zip", None), ("rl_model_12000_steps.pkl", None),
    ("rl_model_steps.zip", None), ("rl_model_1e3_steps.zip", None),
])
def test_checkpoint_steps_reads_checkpointcallbacks_file_name(name: str, steps: int | None) -> None:
    assert checkpoint_steps(name) == steps
    assert checkpoint_steps(Path(name)) == steps


def test_is_glob_knows_the_three_wildcards() -> None:
    assert [is_glob(s) for s in ("a/*.zip", "a/?.zip", "a/[12].zip", "a/b.zip")] == \
        [True, True, True, False]


def test_a_glob_is_ordered_by_steps_not_by_name(tmp_path: Path) -> None:
    touch(tmp_path, "rl_model_10000_steps.zip", "rl_model_9000_steps.zip",
          "rl_model_500_steps.zip")
    entries = expand_policies([f"sb3:{tmp_path}/rl_model_*_steps.zip"])
    assert [e.steps for e in entries] == [500, 9000, 10000]
    assert [e.label for e in entries] == ["steps-500", "steps-9000", "steps-10000"]
    assert [e.policy for e in entries] == [f"sb3:{tmp_path}/rl_model_{n}_steps.zip"
                                           for n in (500, 9000, 10000)]


def test_unnumbered_files_of_a_glob_come_after_the_checkpoints_by_name(tmp_path: Path) -> None:
    touch(tmp_path, "zeta.zip", "rl_model_20_steps.zip", "alpha.zip", "rl_model_3_steps.zip")
    entries = expand_policies([f"sb3:{tmp_path}/*.zip"])
    assert [e.label for e in entries] == ["steps-3", "steps-20", "alpha", "zeta"]
    assert [e.steps for e in entries] == [3, 20, None, None]


def test_a_glob_skips_folders(tmp_path: Path) -> None:
    touch(tmp_path, "rl_model_1_steps.zip")
    (tmp_path / "rl_model_2_steps.zip").mkdir()
    assert [e.steps for e in expand_policies([f"sb3:{tmp_path}/*.zip"])] == [1]


def test_each_checkpoint_gets_the_statistics_saved_beside_it(tmp_path: Path) -> None:
    touch(tmp_path, "rl_model_100_steps.zip", "rl_model_200_steps.zip",
          "rl_model_vecnormalize_100_steps.pkl", "rl_model_vecnormalize_200_steps.pkl")
    entries = expand_policies([f"sb3:{tmp_path}/*.zip"], vecnormalize="other.pkl")
    assert [e.vecnormalize for e in entries] == [
        str(tmp_path / "rl_model_vecnormalize_100_steps.pkl"),
        str(tmp_path / "rl_model_vecnormalize_200_steps.pkl")]


def test_without_saved_statistics_every_sb3_entry_takes_vecnormalize(tmp_path: Path) -> None:
    touch(tmp_path, "rl_model_100_steps.zip", "rl_model_200_steps.zip")
    entries = expand_policies([f"sb3:{tmp_path}/*.zip", "random"], vecnormalize="vn.pkl")
    assert [e.vecnormalize for e in entries] == ["vn.pkl", "vn.pkl", None]


def test_a_checkpoint_missing_its_statistics_beside_others_is_refused(tmp_path: Path) -> None:
    touch(tmp_path, "rl_model_100_steps.zip", "rl_model_200_steps.zip",
          "rl_model_vecnormalize_100_steps.pkl")
    with pytest.raises(UsageError) as caught:
        expand_policies([f"sb3:{tmp_path}/*.zip"])
    message = str(caught.value)
    assert "rl_model_200_steps.zip" in message
    assert "'rl_model_vecnormalize_200_steps.pkl'" in message
    assert "restore that file or leave this checkpoint out" in message


def test_a_glob_matching_nothing_says_to_quote_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"matches no file; check the pattern \(quote it"):
        expand_policies([f"sb3:{tmp_path}/*.zip"])


@pytest.mark.parametrize(("source", "label"), [
    ("random", "policy-random"),  # "random" is the baseline's own folder
    ("sb3:runs/ppo.zip", "ppo"),
    ("sb3:ckpt/rl_model_5000_steps.zip", "steps-5000"),
    ("tape:old/policy-0003.npz", "policy-0003"),
    ("my_policies.py:act", "my_policies"),
    ("tests.assets.policies:cartpole_balance", "cartpole_balance"),
    ("sb3:weird name!.zip", "weird-name"),
])
def test_labels_are_folder_names_that_tell_policies_apart(source: str, label: str) -> None:
    [entry] = expand_policies([source])
    assert entry.label == label and entry.policy == source


def test_a_plain_checkpoint_path_keeps_its_steps() -> None:
    [entry] = expand_policies(["sb3:ckpt/rl_model_5000_steps.zip"], vecnormalize="vn.pkl")
    assert entry == Entry("steps-5000", "sb3:ckpt/rl_model_5000_steps.zip", "vn.pkl", 5000)


def test_equal_labels_are_told_apart_by_their_folders() -> None:
    entries = expand_policies(["sb3:a/ppo.zip", "sb3:b/ppo.zip", "sb3:c/ppo.zip"])
    assert [e.label for e in entries] == ["ppo-a", "ppo-b", "ppo-c"]
    assert len({e.label for e in entries}) == 3


def test_two_checkpoints_of_the_same_step_count_get_names_that_say_which(tmp_path: Path) -> None:
    # "steps-4096" against "steps-4096-2" read as two step counts (a verdict "steps-4096
    # better"); the labels now name the folders that differ.
    touch(tmp_path / "run_a", "rl_model_4096_steps.zip")
    touch(tmp_path / "run_b", "rl_model_4096_steps.zip")
    entries = expand_policies([f"sb3:{tmp_path}/run_a/rl_model_4096_steps.zip",
                               f"sb3:{tmp_path}/run_b/rl_model_4096_steps.zip"])
    assert [e.label for e in entries] == ["steps-4096-run_a", "steps-4096-run_b"]
    twice = expand_policies([f"sb3:{tmp_path}/run_a/rl_model_4096_steps.zip"] * 2)
    assert [e.label for e in twice] == ["steps-4096-copy1", "steps-4096-copy2"]
