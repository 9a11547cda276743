"""One replay as a task of a remote executor (rolltape.pass2.remote): the tape comes in as
bytes, the result and the outputs' bytes come back under the caller's paths and nothing is
written there; a worker whose GL variables were not applied says so as a backend failure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.interpreter import run_once
from rolltape.pass1.rollout import record_episode
from rolltape.pass2.remote import replay_shipped
from rolltape.pass2.replay import RenderRequest, RenderResult
from rolltape.policies import load_policy
from rolltape.tape import Tape

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = env_spec("HalfCheetah-v5", max_episode_steps=12)
    env = make_env(spec)
    policy = load_policy("random", env)
    fields = record_episode(env, policy, seed=5)
    env.close()
    tape = Tape(env=spec, policy=policy.description, meta={"role": "policy", "index": 0},
                **fields)
    return tape.save(tmp_path_factory.mktemp("tapes") / "policy-0000.npz")


@pytest.fixture
def no_gl(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("MUJOCO_GL", "PYOPENGL_PLATFORM"):
        monkeypatch.delenv(var, raising=False)
    yield


def test_a_verify_only_task_needs_no_backend_and_names_the_caller_s_tape(tape: Path,
                                                                         no_gl: None):
    caller = "/caller/runs/x/tapes/policy-0000.npz"
    kind, result, files = replay_shipped(None, RenderRequest(caller), tape.read_bytes())
    assert kind == "done" and files == {}
    assert isinstance(result, RenderResult) and result.tape == caller
    assert result.verified is True and result.frames == 0
    assert result.replay_return == Tape.load(tape).total_return


def test_an_altered_tape_is_caught_there_as_here(tape: Path, tmp_path: Path, no_gl: None):
    import dataclasses

    original = Tape.load(tape)
    rewards = original.rewards.copy()
    rewards[3] += 1.0
    bad = dataclasses.replace(original, rewards=rewards).save(tmp_path / "bad.npz")
    kind, result, _ = replay_shipped(None, RenderRequest("bad.npz"), bad.read_bytes())
    assert kind == "done" and result.verified is False
    assert (result.divergence.step, result.divergence.field) == (3, "reward")


def test_a_missing_tape_is_a_usage_error_naming_the_caller_s_path(no_gl: None):
    kind, text, files = replay_shipped(None, RenderRequest("/caller/gone.npz"), None)
    assert kind == "usage_error" and files is None
    assert "/caller/gone.npz" in text and "rolltape-render-" not in text


def test_a_worker_started_without_its_backend_s_variables_is_a_backend_failure(
        tape: Path, no_gl: None):
    kind, why, files = replay_shipped("egl", RenderRequest("t.npz"), tape.read_bytes())
    assert (kind, files) == ("backend_failed", None)
    assert why == ("the worker started with MUJOCO_GL=None, not 'egl' (its environment was "
                   "not applied)")


def _draw_shipped(tape_path: str) -> dict[str, Any]:
    """(In a child started with MUJOCO_GL=egl.) One shipped replay drawn as PNG frames and
    as a GIF, twice (the second reuses the process's replayer)."""
    data = Path(tape_path).read_bytes()
    outs = ("/caller/frames/", "/caller/ep.gif")
    answers = [replay_shipped("egl", RenderRequest("/caller/t.npz", outs, width=32, height=24),
                              data) for _ in range(2)]
    kind, result, files = answers[0]
    return {"kind": kind, "frames": result.frames, "outputs": list(result.outputs),
            "backend": result.backend, "verified": result.verified,
            "names": sorted(files), "pngs": sorted(files["/caller/frames/"]),
            "gif": files["/caller/ep.gif"][:6], "same": answers[1][2] == files,
            "caller_exists": os.path.exists("/caller")}


def test_drawn_outputs_come_back_as_bytes_under_the_caller_s_paths(tape: Path):
    paths = f"{HERE}:{HERE.parents[1] / 'src'}"
    said = run_once(_draw_shipped, str(tape), timeout=120,
                    env={"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", "PYTHONPATH": paths})
    length = Tape.load(tape).length
    assert said["kind"] == "done" and said["verified"] and said["backend"] == "egl"
    assert said["outputs"] == ["/caller/frames/", "/caller/ep.gif"]
    assert said["names"] == sorted(said["outputs"])
    assert said["frames"] == length + 1 == len(said["pngs"])
    assert all(name.endswith(".png") for name in said["pngs"])
    assert said["gif"] in (b"GIF87a", b"GIF89a")
    assert said["same"] and not said["caller_exists"]
