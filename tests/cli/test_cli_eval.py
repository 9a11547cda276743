"""The `rolltape` command, run for real in subprocesses (``run_cli``).

Bad input must end in exit status 2 with the problem named in one line on stderr that
starts with ``rolltape:``, no traceback, and nothing half-written: the folder the command
ran in (which holds its inputs and any earlier run) is compared file by file before and
after. Each bad input runs once; two tests read its outcome: everything but the "only one
line on stderr" rule, and that rule, so a failure of one does not hide the other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import rewrite_tape, run_cli, said_lines

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "HalfCheetah-v5"
EVAL = ["eval", ENV_ID, "-n", "1", "--max-episode-steps", "30", "--out", "run"]


# --- helpers ---------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    """tests.assets must import in the CLI and its workers whatever folder they run in."""
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(ROOT) + (os.pathsep + old if old else "")}


def snapshot(folder: Path) -> dict[str, Any]:
    """Every file and folder below ``folder``: bytes and modification time of each file."""
    out: dict[str, Any] = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "dir" if p.is_dir() else (p.stat().st_mtime_ns, p.read_bytes())
    return out


def _a_tape(fx: dict, folder: Path, name: str = "t.npz") -> Path:
    (folder / "tapes").mkdir(exist_ok=True)
    return Path(shutil.copy(fx["tape"], folder / "tapes" / name))


def _old_run(folder: Path) -> None:
    """An earlier run in ./run that nothing may touch."""
    (folder / "run" / "tapes").mkdir(parents=True)
    (folder / "run" / "results.json").write_text('{"schema_version": 1, "old": true}\n')
    (folder / "run" / "tapes" / "policy-0000.npz").write_bytes(b"old tape")


# --- the bad inputs --------------------------------------------------------------------------
# Each case prepares its inputs in an empty folder and returns (arguments, words the one
# line must contain). Paths are relative so the messages stay short.

def case_checkpoint_missing(d, fx):
    return EVAL + ["-p", "sb3:missing.zip"], ["missing.zip", "does not exist"]


def case_checkpoint_corrupt(d, fx):
    (d / "bad.zip").write_bytes(np.random.default_rng(0).bytes(3000))
    return EVAL + ["-p", "sb3:bad.zip"], ["bad.zip", "corrupt"]


def case_checkpoint_corrupt_over_an_old_run(d, fx):
    _old_run(d)
    (d / "bad.zip").write_bytes(np.random.default_rng(0).bytes(3000))
    return EVAL + ["-p", "sb3:bad.zip", "--overwrite"], ["bad.zip", "corrupt"]


def case_statistics_missing(d, fx):
    shutil.copy(fx["model"], d / "model.zip")
    return (EVAL + ["-p", "sb3:model.zip", "--vecnormalize", "missing.pkl"],
            ["missing.pkl", "does not exist"])


def case_statistics_corrupt(d, fx):
    shutil.copy(fx["model"], d / "model.zip")
    (d / "stats.pkl").write_bytes(np.random.default_rng(1).bytes(2000))
    return (EVAL + ["-p", "sb3:model.zip", "--vecnormalize", "stats.pkl"],
            ["stats.pkl", "corrupt"])


def case_statistics_of_another_shape(d, fx):
    shutil.copy(fx["model"], d / "model.zip")
    shutil.copy(fx["hopper_stats"], d / "hopper.pkl")
    return (EVAL + ["-p", "sb3:model.zip", "--vecnormalize", "hopper.pkl"],
            ["hopper.pkl", "(11,)", "(17,)"])


def case_unknown_env(d, fx):
    args = list(EVAL)
    args[1] = "HalfCheetah-v4x"
    return args, ["HalfCheetah-v4x", "HalfCheetah-v5"]


def case_env_without_rgb_array(d, fx):
    args = list(EVAL)
    args[1] = "tests.assets.toy_envs:NoRender-v0"
    return args + ["--video", "1"], ["NoRender-v0", "rgb_array"]


def case_zero_episodes(d, fx):
    return ["eval", ENV_ID, "-n", "0", "--out", "run"], ["--episodes", "0"]


def case_out_exists(d, fx):
    _old_run(d)
    return EVAL, ["run", "already exists", "--overwrite"]


def case_out_not_writable(d, fx):
    (d / "file.txt").write_text("a file, not a folder\n")
    return EVAL[:-1] + ["file.txt/run"], ["file.txt"]


def case_unknown_backend(d, fx):
    return EVAL + ["--video", "1", "--backends", "vulkan"], ["vulkan"]


def case_every_backend_fails(d, fx):
    return EVAL + ["--video", "1", "--backends", "glfw"], ["glfw", "rolltape doctor"]


def case_tape_corrupt(d, fx):
    (d / "t.npz").write_bytes(np.random.default_rng(2).bytes(5000))
    return ["render", "t.npz"], ["t.npz", "corrupt"]


def case_tape_corrupt_verify(d, fx):
    (d / "t.npz").write_bytes(np.random.default_rng(2).bytes(5000))
    return ["verify", "t.npz"], ["t.npz", "corrupt"]


def case_tape_truncated(d, fx):
    data = Path(fx["tape"]).read_bytes()
    (d / "t.npz").write_bytes(data[: len(data) // 2])
    return ["render", "t.npz"], ["t.npz", "truncated"]


def case_tape_unknown_schema(d, fx):
    rewrite_tape(fx["tape"], d / "t.npz", lambda a, h: h.update(schema_version=99))
    return ["render", "t.npz"], ["t.npz", "schema version 99"]


def case_tape_lengths_disagree(d, fx):
    def drop_last_action(arrays, header):
        arrays["actions"] = arrays["actions"][:-1]
    rewrite_tape(fx["tape"], d / "t.npz", drop_last_action)
    return ["render", "t.npz"], ["t.npz", "39 actions", "40 rewards"]


def case_tape_on_another_env(d, fx):
    tape = _a_tape(fx, d)
    return (["render", str(tape.relative_to(d)), "--env", "Hopper-v5"],
            ["t.npz", "HalfCheetah-v5", "Hopper-v5"])



CASES = {name[len("case_"):]: fn for name, fn in globals().copy().items()
         if name.startswith("case_")}

_outcomes: dict[str, tuple[Any, Path, dict, dict, list[str]]] = {}


@pytest.fixture
def outcome(request, tmp_path_factory, monkeypatch):
    """Run a case once per session (the two tests below share it)."""
    def get(name: str):
        if name not in _outcomes:
            fx = {"model": request.getfixturevalue("ppo_checkpoint")[0],
                  "hopper_stats": request.getfixturevalue("hopper_stats"),
                  "tape": request.getfixturevalue("random_run").path / "tapes" / "policy-0000.npz"}
            folder = tmp_path_factory.mktemp(name)
            args, needles = CASES[name](folder, fx)
            before = snapshot(folder)
            monkeypatch.delenv("DISPLAY", raising=False)  # glfw cannot open a window
            monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
            proc = run_cli(*args, env=_env(), cwd=folder)
            _outcomes[name] = (proc, folder, before, snapshot(folder), needles)
        return _outcomes[name]
    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_exit_2_with_the_problem_named(outcome, name):
    proc, folder, before, after, needles = outcome(name)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("rolltape:")]
    assert len(starts) == 1, proc.stderr
    # (A message rich wraps continues on the next lines: the one-line rule is checked below.)
    message = " ".join(lines[starts[0]:])
    for needle in needles:
        assert needle in message, (needle, message)
    if name == "every_backend_fails":
        assert re.search(r"glfw: \S", message)  # glfw's own reason is given
        results = json.loads((folder / "run" / "results.json").read_text())  # numbers kept
        assert len(results["episodes_rows"]) == 1
        assert results["videos"][0]["path"] is None
        assert not (folder / ".run.partial").exists()
        assert not list((folder / "run" / "videos").iterdir())  # no half-written video
        return
    assert after == before  # nothing created, nothing changed (an old ./run untouched)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_on_stderr(outcome, name):
    proc, *_ = outcome(name)
    lines = said_lines(proc.stderr)  # a stage that finished first says so in a log
    assert len(lines) == 1 and lines[0].startswith("rolltape:"), proc.stderr


def test_error_stays_one_line_at_the_default_width(tmp_path):
    proc = run_cli("eval", "HalfCheetah-v4x", "--out", "run", env={"COLUMNS": "80"},
                   cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_no_output_folders_created_for_a_failed_run(tmp_path):
    """A nested --out whose parents do not exist: a failed run creates none of them."""
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04 not really a zip")
    proc = run_cli("eval", ENV_ID, "-p", "sb3:bad.zip", "-n", "1", "--out", "runs/a/b",
                   "-q", cwd=tmp_path)
    assert proc.returncode == 2 and "corrupt" in proc.stderr
    assert not (tmp_path / "runs" / "a" / "b").exists()
    assert not (tmp_path / "runs" / "a" / ".b.partial").exists()


def test_failed_run_leaves_no_parent_folders(tmp_path):
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04 not really a zip")
    proc = run_cli("eval", ENV_ID, "-p", "sb3:bad.zip", "-n", "1", "--out", "runs/a/b",
                   "-q", cwd=tmp_path)
    assert proc.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.zip"]


# --- happy paths -----------------------------------------------------------------------------

def test_overwrite_replaces_an_existing_run(tmp_path):
    _old_run(tmp_path)
    proc = run_cli(*EVAL, "--overwrite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "old" not in results and results["episodes"] == 1
    assert (tmp_path / "run" / "tapes" / "policy-0000.npz").read_bytes() != b"old tape"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no .partial or .old left


def test_eval_with_a_video(tmp_path):
    proc = run_cli("eval", ENV_ID, "-n", "2", "--seed", "5", "--max-episode-steps", "30",
                   "--baseline", "random", "--video", "1", "--out", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "HalfCheetah-v5: 2 episodes, seeds 5..6" in out
    # (min / max and the success interval make way for 80 columns off a terminal)
    for column in ("mean ± std", "IQM [95% CI]", "success", "length"):
        assert column in out
    assert re.search(r"│\s+policy\s+│", out) and re.search(r"│\s+baseline\s+│", out)
    assert "improvement over random on the same seeds" in out
    video = "run/videos/policy-0000.mp4"
    assert f"video {video} (31 frames" in out and "verified" in out
    assert (tmp_path / video).stat().st_size > 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    mean = results["summary"]["policy"]["mean"]
    assert f"{mean:.2f} ±" in out  # the table shows the numbers of results.json
