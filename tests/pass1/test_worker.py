"""The pass-1 worker's entry point (rolltape.pass1.worker), called here in this process
with a pipe end that keeps what is sent: each episode is reported, then "done"; bad input is
a usage error, a write that fails says where, and GL variables are dropped first."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from rolltape.envs.ids import env_spec
from rolltape.pass1.rollout import Episodes, PolicyJob
from rolltape.pass1.worker import policy_worker
from rolltape.tape import Tape


class _Pipe:
    """The worker's end of its pipe: keeps what is sent (the parent's side is not here) and
    answers each recv with the next of ``pieces`` (a dealt worker's next piece)."""

    def __init__(self, pieces: list[Any] | None = None) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.closed = False
        self.pieces = list(pieces or [])

    def recv(self) -> Any:
        return self.pieces.pop(0)

    def send(self, message: tuple[str, Any]) -> None:
        self.sent.append(message)

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _keep_sigterm() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)  # the worker installs its own
    yield
    signal.signal(signal.SIGTERM, before)


def _job(tapes: Path, policy: str = "random", episodes: int = 2) -> PolicyJob:
    return PolicyJob(env=env_spec("CartPole-v1", max_episode_steps=15), policy=policy,
                     episodes=Episodes("policy", range(episodes), seed=3, tapes=str(tapes)))


def _run(jobs: list[PolicyJob]) -> _Pipe:
    pipe = _Pipe()
    policy_worker(jobs, 0, False, pipe)
    return pipe


def test_each_episode_is_reported_with_its_tape_then_done(tmp_path: Path):
    tapes = tmp_path / "tapes"
    tapes.mkdir()
    pipe = _run([_job(tapes)])
    kinds = [k for k, _ in pipe.sent]
    # the env's facts follow the policy's description: the run's protocol card
    assert kinds == ["policy", "env_facts", "episode", "episode", "done"] and pipe.closed
    assert pipe.sent[1][1]["role"] == "policy" and "observation" in pipe.sent[1][1]
    for _, row in pipe.sent[2:4]:
        tape = Tape.load(row["tape"])
        assert Path(row["tape"]).parent == tapes
        assert tape.length == row["length"] and tape.seed == row["seed"]
    assert [row["seed"] for _, row in pipe.sent[2:4]] == [3, 4]


def test_jobs_run_in_order(tmp_path: Path):
    tapes = tmp_path / "tapes"
    tapes.mkdir()
    first = _job(tapes, episodes=1)
    second = PolicyJob(env=first.env, policy="random",
                       episodes=Episodes("baseline", range(1), seed=9, tapes=str(tapes)))
    rows = [p for k, p in _run([first, second]).sent if k == "episode"]
    assert [(r["role"], r["seed"]) for r in rows] == [("policy", 3), ("baseline", 9)]


def test_a_policy_that_does_not_load_is_a_usage_error_not_a_crash(tmp_path: Path):
    pipe = _run([_job(tmp_path, policy=str(tmp_path / "missing.zip"))])
    [(kind, text)] = pipe.sent
    assert kind == "usage_error" and "missing.zip" in text and pipe.closed


def test_a_write_that_fails_says_where(tmp_path: Path):
    blocker = tmp_path / "tapes"
    blocker.write_text("a file where the tapes folder should be")
    pipe = _run([_job(blocker / "inner", episodes=1)])
    kind, (line, trace) = pipe.sent[-1]
    assert kind == "error" and "while writing" in line and str(blocker) in line
    assert "Traceback" in trace


def test_gl_variables_are_dropped_before_any_episode(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")
    _run([_job(tmp_path, episodes=1)])
    assert "MUJOCO_GL" not in os.environ and "PYOPENGL_PLATFORM" not in os.environ


def test_a_dealt_worker_plays_each_piece_with_the_policy_it_loaded_once(tmp_path: Path):
    """Pulling: after each done the worker reads its next piece until None; pieces of the
    same job reuse its env and policy (one "policy" message), a new job loads its own."""
    tapes = tmp_path / "tapes"
    tapes.mkdir()
    job = _job(tapes, episodes=4)
    other = PolicyJob(env=job.env, policy="random",
                      episodes=Episodes("baseline", range(1), seed=9, tapes=str(tapes)))
    pieces = [[replace(job, episodes=job.episodes[1:3])], [replace(job, episodes=job.episodes[3:])],
              [other], None]
    pipe = _Pipe(pieces)
    policy_worker([replace(job, episodes=job.episodes[:1])], 0, True, pipe)
    kinds = [k for k, _ in pipe.sent]
    assert kinds == ["policy", "env_facts", "episode", "done", "episode", "episode", "done",
                     "episode", "done", "policy", "env_facts", "episode", "done"]
    rows = [p for k, p in pipe.sent if k == "episode"]
    assert [(r["role"], r["seed"]) for r in rows] == [("policy", s) for s in (3, 4, 5, 6)] + \
        [("baseline", 9)]
    assert pipe.pieces == [] and pipe.closed
