"""A tape is data: rendering or verifying one never imports a module it names (unless the
user names it with --env) and never runs anything in a folder it names."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from rolltape import RenderRequest, Tape, UsageError, render
from rolltape.envs.ids import check_tape_env_module

# Imported as code, this leaves a marker; a test passes only if the marker never appears.
EVIL = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"


def _evil_folder(tape_path: Path, folder: Path, env_id: str) -> Path:
    """evilmod.py in ``folder`` and a copy of a real tape, t.npz, whose env id is ``env_id``;
    returns the marker evilmod.py leaves when it is imported."""
    marker = folder / "marker"
    (folder / "evilmod.py").write_text(EVIL.format(marker=str(marker)))
    tape = Tape.load(tape_path)
    dataclasses.replace(tape, env={**tape.env, "id": env_id}).save(folder / "t.npz")
    return marker


@pytest.fixture
def tape_path(random_run) -> Path:
    return random_run.path / "tapes" / "policy-0000.npz"


@pytest.mark.parametrize("env_id", ["evilmod:HalfCheetah-v5", "evilmod.py:Env"])
@pytest.mark.parametrize("verb", ["render", "verify"])
def test_a_tape_cannot_import_a_module_beside_it(tape_path, tmp_path, verb, env_id):
    marker = _evil_folder(tape_path, tmp_path, env_id)
    proc = run_cli(verb, "t.npz", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "evilmod" in lines[0] and f"--env {env_id}" in lines[0], lines[0]
    assert not marker.exists()
    assert not list(tmp_path.glob("*.mp4"))


def test_naming_the_module_with_env_allows_it(tape_path, tmp_path):
    marker = _evil_folder(tape_path, tmp_path, "evilmod:HalfCheetah-v5")
    proc = run_cli("verify", "t.npz", "--env", "evilmod:HalfCheetah-v5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified" in proc.stdout
    assert marker.exists()  # the user's own module, named on the command line


def test_render_workers_do_not_import_from_the_current_folder(tape_path, tmp_path,
                                                               monkeypatch):
    """A gymnasium.py in the current folder would shadow the real one in a worker started
    with the current folder on sys.path."""
    marker = tmp_path / "marker"
    (tmp_path / "gymnasium.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    [result] = render([RenderRequest(str(tape_path))])
    assert result.verified is True
    assert not marker.exists()


def test_packages_of_gymnasium_envs_are_allowed_and_others_named(tmp_path, monkeypatch):
    """Allowed: Gymnasium and installed packages that require it (gymnasium-robotics,
    gym-pusht: the built-in suites'). Not: a file, a module beside the tape, or an
    installed module that is no env package (the standard library, numpy)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evilmod.py").write_text("")
    check_tape_env_module("HalfCheetah-v5", "t.npz")
    check_tape_env_module("gymnasium.envs.mujoco:HalfCheetah-v5", "t.npz")
    check_tape_env_module("gymnasium_robotics:PointMaze_UMaze-v3", "t.npz")
    check_tape_env_module("gym_pusht:gym_pusht/PushT-v0", "t.npz")
    for env_id in ("evilmod:HalfCheetah-v5", "no_such_module:X-v0", "../evil:X-v0",
                   f"{tmp_path / 'evilmod.py'}:Env", "evilmod.py:Env",
                   "antigravity:HalfCheetah-v5", "os:X-v0", "numpy:X-v0"):
        with pytest.raises(UsageError, match="not an installed package of Gymnasium envs"):
            check_tape_env_module(env_id, "t.npz")


def _browser(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """$BROWSER set to a script that leaves a marker: what `import antigravity` runs."""
    marker, script = tmp_path / "browsed", tmp_path / "browser.sh"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {marker}\n")
    script.chmod(0o755)
    return {"BROWSER": str(script)}, marker


@pytest.mark.parametrize("verb", ["render", "verify"])
def test_a_tape_naming_an_installed_module_that_is_no_env_package_runs_nothing(
        tape_path, tmp_path, verb):
    """`antigravity` is installed (the standard library) and opens $BROWSER when imported."""
    env, marker = _browser(tmp_path)
    tape = Tape.load(tape_path)
    dataclasses.replace(tape, env={**tape.env, "id": "antigravity:HalfCheetah-v5"}).save(
        tmp_path / "t.npz")
    proc = run_cli(verb, "t.npz", "--out" if verb == "render" else "--quiet",
                   *(["t.gif"] if verb == "render" else []), cwd=tmp_path, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "'antigravity'" in lines[0] and "--env antigravity:HalfCheetah-v5" in lines[0]
    assert "--trust-module antigravity" in lines[0] and "Traceback" not in proc.stderr
    assert not marker.exists() and not (tmp_path / "t.gif").exists()


def test_trust_module_allows_what_the_user_names(tape_path, tmp_path):
    env, marker = _browser(tmp_path)
    tape = Tape.load(tape_path)
    dataclasses.replace(tape, env={**tape.env, "id": "antigravity:HalfCheetah-v5"}).save(
        tmp_path / "t.npz")
    proc = run_cli("verify", "t.npz", "--trust-module", "antigravity", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "verified" in proc.stdout, proc.stdout + proc.stderr
    assert "xkcd" in marker.read_text()  # the user's choice: it ran, as --env would


def test_render_runs_nothing_in_a_folder_the_tape_names(tape_path, tmp_path):
    """A repository whose core.fsmonitor hook runs a command: `git status` there runs it."""
    repo, marker = tmp_path / "repo", tmp_path / "marker"
    repo.mkdir()
    (repo / "policy.py").write_text("def act(obs): return 0\n")
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"],
                 ["config", "core.fsmonitor", str(hook)]):
        subprocess.run(git + args, check=True, capture_output=True)
    subprocess.run(git + ["status", "--porcelain"], capture_output=True)
    assert marker.exists()  # the trap works: git in that folder runs the hook
    marker.unlink()

    tape = Tape.load(tape_path)
    policy = {**tape.policy, "source": f"{repo / 'policy.py'}:act"}
    path = dataclasses.replace(tape, policy=policy).save(tmp_path / "t.npz")
    [result] = render([RenderRequest(str(path), (str(tmp_path / "t.jsonl"),))])
    assert (tmp_path / "t.jsonl.metadata.json").is_file()  # the record was written...
    assert not marker.exists()  # ...without asking git about the tape's folder


def test_view_of_someone_elses_run_does_not_import_its_env_module(tmp_path):
    """`rolltape view RUN` builds the run's env to find its model: a run folder is data too."""
    from rolltape.outputs.viewer import export_viewer

    run = tmp_path / "run"
    (run / "tapes").mkdir(parents=True)
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    tape = Tape(env={"id": "evilmod:HalfCheetah-v5", "kwargs": {}, "max_episode_steps": None,
                     "versions": {}}, seed=0, actions=np.zeros((1, 6)), rewards=np.zeros(1),
                terminated=np.zeros(1, bool), truncated=np.ones(1, bool),
                qpos=np.zeros((2, 9)), qvel=np.zeros((2, 9)))
    tape.save(run / "tapes" / "policy-0000.npz")
    (run / "results.json").write_text("{}")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(UsageError, match="--env evilmod:HalfCheetah-v5"):
            export_viewer(run)
    finally:
        os.chdir(cwd)
    assert not marker.exists()
