"""rolltape.outputs.artifacts: a run folder is staged, locked, and put in place whole; output
names are checked before any work; killed writers' temporaries never reach a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolltape.errors import UsageError
from rolltape.outputs.artifacts import (
    RunDir,
    artifact_paths,
    check_output_name,
    check_writable_folder,
    remove_temporaries,
)


def test_a_run_is_staged_hidden_and_committed_whole(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert run.path == tmp_path / ".run.partial" and (run.path / "tapes").is_dir()
    (run.path / "results.json").write_text("{}")
    assert not (tmp_path / "run").exists()  # nothing at the final place until it is whole
    assert run.commit() == tmp_path / "run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert (tmp_path / "run" / "results.json").read_text() == "{}"


def test_overwrite_replaces_the_old_run_only_at_commit(tmp_path: Path) -> None:
    first = RunDir(tmp_path / "run")
    (first.path / "old.txt").write_text("old")
    first.commit()
    with pytest.raises(UsageError, match="--overwrite"):
        RunDir(tmp_path / "run")
    second = RunDir(tmp_path / "run", overwrite=True)
    (second.path / "new.txt").write_text("new")
    assert (tmp_path / "run" / "old.txt").is_file()  # still there while the new one is made
    second.commit()
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.is_file()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no .old folder left


def test_a_live_run_is_locked_and_a_stopped_one_says_how_it_stopped(tmp_path: Path) -> None:
    live = RunDir(tmp_path / "run")
    with pytest.raises(UsageError, match="Another rolltape process"):
        RunDir(tmp_path / "run", resume=True)
    live.mark_stopped("failed", "the env raised")
    live.release()
    live.release()  # safe twice
    with pytest.raises(UsageError, match=r"A failed run of .* \(the env raised\).*--resume"):
        RunDir(tmp_path / "run")
    resumed = RunDir(tmp_path / "run", resume=True)
    assert resumed.resumed and not (resumed.path / "status.json").exists()


def test_resume_refuses_a_run_started_with_other_choices(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.check_config({"seed": 0, "policy": "random"})
    run.release()
    again = RunDir(tmp_path / "run", resume=True)
    with pytest.raises(UsageError, match="seed"):
        again.check_config({"seed": 1, "policy": "random"})
    assert json.loads((again.path / "config.json").read_text())["seed"] == 0


def test_discard_removes_the_staging_and_the_folders_the_run_made(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "a" / "b" / "run")
    run.discard()
    assert list(tmp_path.iterdir()) == []


def test_killed_writers_temporaries_are_removed(tmp_path: Path) -> None:
    names = ["ep.mp4.partial-123", "ep.partial-9-2.mp4", ".x.segment3-44", ".frames.abc.partial",
             "ep.mp4", "tape.npz"]
    for name in names:
        (tmp_path / name).write_text("x")
    remove_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.mp4", "tape.npz"]


def test_artifact_paths_one_per_format_and_refuse_unknown_ones() -> None:
    assert artifact_paths("videos/ep", "mp4,gif,png") == (
        "videos/ep.mp4", "videos/ep.gif", "videos/ep/")
    assert artifact_paths("videos/ep.webm", None) == ("videos/ep.webm",)
    assert artifact_paths("videos/ep", None) == ("videos/ep.mp4",)
    with pytest.raises(UsageError, match="Unknown format 'avi'.*mp4"):
        artifact_paths("ep", "avi")
    with pytest.raises(UsageError, match="names no format"):
        artifact_paths("ep", ",")


@pytest.mark.parametrize(("out", "several", "named"), [
    ("x.avi", False, "does not write .avi"), ("x.mp4", True, "one file but several"),
    (".", False, "names no file"),
])
def test_output_names_that_would_be_misread_are_refused(out: str, several: bool,
                                                         named: str) -> None:
    with pytest.raises(UsageError, match=named):
        check_output_name(out, several)


def test_a_folder_a_run_cannot_own_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    for out, named in ((".", "not a folder a run can own"), ("/", "not a folder a run can own"),
                       ("file/run", "is a file")):
        with pytest.raises(UsageError, match=named):
            check_writable_folder(out)
    check_writable_folder("runs/new")
    assert not (tmp_path / "runs").exists()  # the check writes nothing


def test_a_stopped_run_keeps_no_temporary_file_of_a_killed_writer(tmp_path):
    run = RunDir(tmp_path / "run")
    left = run.path / "tapes" / ".policy-0157.npz.k2j3.partial"  # atomic_file's temporary
    left.write_bytes(b"half a tape")
    kept = run.path / "tapes" / "policy-0156.npz"
    kept.write_bytes(b"a finished tape")
    run.mark_stopped("failed", "a worker crashed")
    assert not left.exists() and kept.exists()
    run.release()
