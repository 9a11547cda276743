"""Pass 1 as tasks of a remote executor (rolltape.pass1.remote): shares cut into small tasks
that cover every episode once, and a task that returns its tapes as bytes under the
caller's paths, having written nothing there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rolltape.envs.ids import env_spec
from rolltape.pass1.remote import EPISODES_PER_TASK, cut_into_tasks, play_shipped
from rolltape.pass1.rollout import Episodes, PolicyJob
from rolltape.tape import Tape


def _job(n: int, tapes: str = "t", role: str = "policy", policy: str = "random") -> PolicyJob:
    return PolicyJob(env=env_spec("CartPole-v1", max_episode_steps=12), policy=policy,
                     episodes=Episodes(role, range(n), seed=0, tapes=tapes))


def _seeds(tasks: list[list[PolicyJob]]) -> list[tuple[str, int]]:
    return [(ep.role, ep.seed) for task in tasks for job in task for ep in job.episodes]


@pytest.mark.parametrize("sizes", [[1], [10], [7, 3], [100, 100, 5], [0, 4]])
def test_tasks_cover_every_episode_once_and_hold_at_most_a_few(sizes: list[int]):
    chunks = [[_job(n, role=f"r{k}")] for k, n in enumerate(sizes)]
    tasks = cut_into_tasks(chunks)
    expected = [(f"r{k}", i) for k, n in enumerate(sizes) for i in range(n)]
    assert sorted(_seeds(tasks)) == sorted(expected)
    assert all(1 <= len(job.episodes) <= EPISODES_PER_TASK for t in tasks for job in t)


def test_tasks_are_dealt_round_robin_so_every_share_advances_together():
    tasks = cut_into_tasks([[_job(40, role="a")], [_job(40, role="b")]])
    roles = [task[0].episodes[0].role for task in tasks]
    assert roles[:4] == ["a", "b", "a", "b"]


def test_no_shares_is_no_tasks():
    assert cut_into_tasks([]) == []


def test_a_task_returns_its_tapes_as_bytes_under_the_caller_s_paths(tmp_path: Path):
    caller = tmp_path / "run" / "tapes"  # never created here: the caller writes the files
    answer = play_shipped([_job(2, tapes=str(caller))])
    rows = [p for k, p in answer["messages"] if k == "episode"]
    assert [k for k, _ in answer["messages"]] == ["policy", "env_facts", "episode", "episode",
                                                  "done"]
    assert sorted(answer["files"]) == sorted(r["tape"] for r in rows)
    assert all(Path(r["tape"]).parent == caller for r in rows)
    assert not caller.exists()
    for row in rows:
        Path(row["tape"]).parent.mkdir(parents=True, exist_ok=True)
        Path(row["tape"]).write_bytes(answer["files"][row["tape"]])
        tape = Tape.load(row["tape"])
        assert tape.length == row["length"] and np.isclose(tape.total_return, row["return"])


def test_bad_input_comes_back_as_a_usage_error_not_an_exception(tmp_path: Path):
    answer = play_shipped([_job(1, tapes=str(tmp_path), policy=str(tmp_path / "none.zip"))])
    assert set(answer) == {"usage_error"} and "none.zip" in answer["usage_error"]
