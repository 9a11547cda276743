"""`rolltape export` refuses bad flags before replaying, names every episode it leaves out,
locks its staging folder as eval does, exports a run of the user's own FILE.py env, and a
full disk is one line (issue 34, item 10). Real runs, real processes, a real tmpfs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import fill, run_cli

from rolltape import UsageError, evaluate, export


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory) -> Path:
    """Random Pendulum, 3 episodes of 20 steps (a Box env LeRobot and Minari both take)."""
    out = tmp_path_factory.mktemp("guards") / "pendulum"
    evaluate("Pendulum-v1", "random", episodes=3, seed=5, max_episode_steps=20, out=out,
             report=False)
    return out


def one_line(res, code: int) -> str:
    """The one line an export that failed printed, besides its progress lines."""
    assert res.returncode == code, res.stderr
    lines = [x for x in res.stderr.strip().splitlines()
             if not x.startswith("export: replaying tapes")]
    assert "Traceback" not in res.stderr and len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("options, said", [
    (dict(to="minari", dataset_id="rt/pendulum"), "has no version; end it with -vN"),
    (dict(to="lerobot", cameras=("default",), fps=1e9), "at most 240 frames"),
    (dict(to="lerobot", cameras=("default",), width=100000),
     "--width 100000 is larger than a frame can be"),
    (dict(to="lerobot", height=64), "give --camera too"),
    (dict(to="minari", dataset_id="rt/p-v0", backends="nope"),
     "Unknown rendering backend 'nope'"),
    (dict(to="lerobot", out="/proc/x"), "cannot be written"),
    (dict(to="lerobot", out="n" * 300), "has a name of 300 bytes"),
])
def test_bad_flags_are_refused_before_replaying(pendulum_run, tmp_path, monkeypatch, options,
                                                said) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    with pytest.raises(UsageError) as refused:
        export(pendulum_run, **{"out": tmp_path / "ds", **options})
    assert said in str(refused.value), refused.value
    assert time.monotonic() - started < 10  # no replay (osmesa once tried 149 GiB)
    assert list(tmp_path.iterdir()) == []  # nothing made, staging included


def test_a_bad_flag_is_one_line_and_exit_2(pendulum_run, tmp_path) -> None:
    text = one_line(run_cli("export", str(pendulum_run), "--to", "lerobot", "--out",
                            str(tmp_path / "ds"), "--camera", "default", "--width", "100000"), 2)
    assert text == "rolltape: --width 100000 is larger than a frame can be; give 1 to 8192 pixels."
    assert list(tmp_path.iterdir()) == []


def test_episodes_without_a_tape_are_named(pendulum_run, tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(pendulum_run, run)
    (run / "tapes" / "policy-0001.npz").unlink()
    (run / "tapes" / "policy-0002.npz").unlink()
    (run / "tapes" / "policy-0002.npz").mkdir()
    res = run_cli("export", str(run), "--to", "minari", "--id", "rt/p-v0", "--out",
                  str(tmp_path / "ds"))
    assert res.returncode == 0, res.stderr
    assert "left out episode 1 (seed 6): its tape" in res.stderr and "is missing" in res.stderr
    assert "left out episode 2 (seed 7): its tape" in res.stderr and "is a folder" in res.stderr
    assert "1 episodes, 20 steps, 2 left out" in res.stdout
    # Progress, plain lines in a log (stderr is not a terminal here).
    assert "export: replaying tapes: 1/1 episodes, done in" in res.stderr


def test_a_second_export_to_the_same_out_is_refused_while_the_first_runs(tmp_path) -> None:
    # An episode long enough (200 frames drawn and encoded) that the first export still
    # holds its lock when the second, started once the first has locked, reaches it.
    run = tmp_path / "run"
    evaluate("Pendulum-v1", "random", episodes=1, seed=5, out=run, report=False)
    cmd = [sys.executable, "-m", "rolltape.cli", "export", str(run), "--to",
           "lerobot", "--out", str(tmp_path / "ds"), "--camera", "default", "--workers", "1"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker = tmp_path / ".ds.export-partial" / "config.json"  # written after the lock
        deadline = time.monotonic() + 60
        while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.poll() is None, "the first export ended before the second could start"
        text = one_line(run_cli(*cmd[3:]), 2)
        assert "Another rolltape process is writing to" in text and "locked" in text
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err  # the refused one did not disturb it
    assert (tmp_path / "ds" / "meta" / "info.json").is_file()


ENV_FILE = """\
import gymnasium as gym


def make(render_mode=None):
    return gym.make("Pendulum-v1", render_mode=render_mode, max_episode_steps=15)
"""


def test_a_run_of_a_users_file_env_exports(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # FILE.py paths are the user's, relative to their folder
    (tmp_path / "penv.py").write_text(ENV_FILE)
    evaluate("penv.py:make", "random", episodes=2, seed=3, out="run", report=False)
    with pytest.raises(UsageError, match="name it yourself with --env penv.py:make"):
        export("run", to="lerobot", out="ds")  # the refusal names a flag export has
    outcome = export("run", to="lerobot", out="ds", env="penv.py:make")
    assert (outcome.episodes, outcome.steps) == (2, 30)
    assert (tmp_path / "ds" / "meta" / "info.json").is_file()
    with pytest.raises(UsageError, match="comes from a file.*--to lerobot"):
        export("run", to="minari", dataset_id="rt/p-v0", out="m", env="penv.py:make")


def test_a_full_disk_is_one_line_and_leaves_nothing(pendulum_run, small_disk) -> None:
    fill(small_disk, 60_000)
    text = one_line(run_cli("export", str(pendulum_run), "--to", "lerobot", "--out",
                            str(small_disk / "ds")), 1)
    assert "No space left on device" in text and len(text) < 400, text
    assert sorted(p.name for p in small_disk.iterdir()) == ["ballast"]
    with pytest.raises(UsageError, match="no version"):
        export(pendulum_run, to="minari", dataset_id="x", out=small_disk)
