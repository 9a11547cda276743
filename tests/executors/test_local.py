"""The local executor (rolltape.executors.local): shares run in worker processes and report
as they go, a worker's fault is one error, and render jobs move to the next backend when
theirs fails. Real worker processes, started from tests/assets/workers.py."""

from __future__ import annotations

from typing import Any

import pytest
from tests.assets.workers import job_worker, pulling_worker, share_worker

from rolltape.errors import RunFailed, UsageError
from rolltape.executors import get
from rolltape.executors.base import RenderWork, ShareWork
from rolltape.executors.local import BackendPool, LocalExecutor, Prestart, run_shares


def _stalled(share: int, done: int) -> str:
    return f"share {share} after {done} units"


def _shares(shares: list[list[Any]], timeout: float = 60) -> list[tuple[str, Any]]:
    return list(run_shares(share_worker, shares, (), env={}, timeout=timeout,
                           units=("unit",), stalled=_stalled))


def _pool(jobs: list[Any], order: list[str], bad: str, workers: int = 1, timeout: float = 30,
          needs_backend: list[bool] | None = None) -> tuple[BackendPool, dict[int, Any]]:
    done: dict[int, Any] = {}
    pool = BackendPool(job_worker, (bad,), jobs, order, workers, timeout,
                       needs_backend=needs_backend or [True] * len(jobs),
                       environment=lambda backend, n: {}, on_progress=lambda i, n: None,
                       on_done=done.__setitem__)
    return pool, done


def test_every_share_reports_each_unit_in_order_then_done():
    messages = _shares([[1, 2, 3], [4]])
    assert [p for k, p in messages if k == "unit" and p < 4] == [1, 2, 3]
    assert sorted(p for k, p in messages if k == "unit") == [1, 2, 3, 4]
    assert sorted(p for k, p in messages if k == "done") == [1, 3]


def test_dealt_pieces_go_to_whichever_worker_is_free():
    """With ``deal``, a worker asks for its next piece after each done: the worker that drew
    the long unit plays one piece while the other plays all the rest, and each is told to
    stop (None) when nothing is left."""
    pieces = [[["sleep", 1.5]], [1], [2], [3], [4]]
    messages = list(run_shares(pulling_worker, [None, None], (), env={}, timeout=60,
                               units=("unit",), stalled=_stalled,
                               deal=lambda k: pieces.pop(0) if pieces else None))
    units = [p for k, p in messages if k == "unit"]
    assert sorted(str(item) for _, item in units) == ["1", "2", "3", "4", "['sleep', 1.5]"]
    slow = next(pid for pid, item in units if isinstance(item, list))
    assert [item for pid, item in units if pid != slow] == [1, 2, 3, 4]
    assert sum(1 for k, _ in messages if k == "done") == 5


def test_a_workers_usage_error_is_raised_as_its_sentence():
    with pytest.raises(UsageError, match="--thing must be positive; give 1 or more"):
        _shares([[1, "usage"]])


def test_a_workers_error_is_run_failed_with_its_traceback_as_detail():
    with pytest.raises(RunFailed, match="A worker failed: ValueError: bad item") as info:
        _shares([["error"]])
    assert "Traceback" in info.value.detail


def test_a_worker_that_dies_names_how_and_what_it_was_playing():
    with pytest.raises(RunFailed) as info:
        _shares([[1], [7, 8, "die"]])
    assert str(info.value) == ("A worker crashed with SIGKILL while playing share 1 "
                               "after 2 units.")


def test_a_silent_worker_is_stopped_after_the_timeout():
    with pytest.raises(RunFailed, match=r"finished nothing for 2 s \(its timeout\) while "
                                        r"playing share 0 after 0 units; it was stopped"):
        _shares([["hang"]], timeout=2)


def test_backend_pool_runs_every_job_on_the_first_backend():
    pool, done = _pool(["a", "b", "c"], ["egl", "osmesa"], bad="none", workers=2)
    pool.run()
    assert done == {0: ("egl", "aa"), 1: ("egl", "bb"), 2: ("egl", "cc")}
    assert pool.fallback.dead == {} and pool.errors == []


@pytest.mark.parametrize(("fault", "reason"), [("fail", "egl cannot draw here"),
                                               ("crash", "crashed with SIGKILL"),
                                               ("hang", "it hung (no progress for 2 s)")])
def test_a_failing_backend_moves_its_job_and_the_rest_to_the_next(fault: str, reason: str):
    pool, done = _pool(["a", fault, "b"], ["egl", "osmesa"], bad="egl", timeout=2)
    pool.run()
    assert done == {0: ("egl", "aa"), 1: ("osmesa", fault * 2), 2: ("osmesa", "bb")}
    [(backend, why)] = pool.fallback.failures[1]
    assert backend == "egl" and reason in why
    assert list(pool.fallback.dead) == ["egl"]


def test_when_every_backend_fails_the_pool_stops_with_the_problem_said():
    pool, done = _pool(["fail", "a"], ["egl"], bad="egl")
    pool.run()
    assert done == {}
    assert "Every GL backend failed (egl: egl cannot draw here)" in str(pool.fallback.problem())


def test_a_job_that_needs_no_backend_runs_with_none_and_an_error_is_kept():
    pool, done = _pool(["a", "raise"], ["egl"], bad="egl", needs_backend=[False, True])
    pool.run()
    assert done == {0: (None, "aa")}
    assert pool.errors == [(1, "error", "ValueError: no such job")]


def test_prestart_starts_nothing_until_asked_and_only_once():
    calls: list[int] = []

    def starter() -> list[Any]:
        calls.append(1)
        return ["w1", "w2"]

    ahead = Prestart(starter)
    assert ahead == [] and calls == []
    ahead.start("a row", "ignored")
    ahead.start()
    assert ahead == ["w1", "w2"] and calls == [1]


def test_the_local_executor_runs_share_work_through_its_worker():
    executor = get("local")
    assert isinstance(executor, LocalExecutor)
    assert (executor.runs_workers, executor.warms_workers, executor.splits_segments,
            executor.shares_disk) == (True, True, True, True)
    work = ShareWork(worker=share_worker, args=(), env={}, task=None, cut=lambda s: s,
                     timeout=60, units=("unit",), stalled=_stalled)
    assert list(executor.run_shares(work, [["x"]])) == [("unit", "x"), ("done", 1)]


def test_warm_render_workers_are_used_before_new_ones():
    executor = LocalExecutor()
    work = RenderWork(worker=job_worker, args=("none",), task=lambda *a: ("done", None, None),
                      ship=lambda job: None, environment=lambda backend, n: {},
                      needs_backend=[True, True])
    warm = executor.warm_render_workers(work, "egl", 1)
    pids = [w.proc.pid for w in warm]
    done: dict[int, Any] = {}
    pool = executor.render_pool(work, ["a", "b"], ["egl"], 1, 30, on_progress=lambda i, n: None,
                                on_done=done.__setitem__, warm=warm)
    assert [s.worker.proc.pid for s in pool.slots] == pids
    pool.run()
    assert done == {0: ("egl", "aa"), 1: ("egl", "bb")}
    assert not warm[0].alive()
