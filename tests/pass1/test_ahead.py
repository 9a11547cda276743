"""The pass-1 worker's interpreter started ahead (rolltape.pass1.ahead), workers that leave
without the interpreter's teardown, and the idle CPU class of background render workers."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rolltape import interpreter
from rolltape.evaluation import evaluate
from rolltape.interpreter import (
    NO_GL,
    discard_ahead,
    run_once,
    spawn_ahead,
    spawn_worker,
    stop_worker,
)
from rolltape.pass1.ahead import pass1_imports
from rolltape.pass2.replay import forbidden_modules, idle_priority_class


def test_a_worker_started_ahead_is_the_one_the_next_spawn_uses():
    spawn_ahead(interpreter._answer_once, env=NO_GL, preload=["json", "no_such_module_xyz"])
    [ahead] = interpreter._ahead.values()
    try:
        # run_once spawns _answer_once with the same environment: it gets the one ahead,
        # which imported json while it waited (the missing module is left to the target)
        assert run_once(os.getpid, env=NO_GL) == ahead.proc.pid
        assert interpreter._ahead == {}
        # a different environment is a different interpreter: a fresh one
        spawn_ahead(interpreter._answer_once, env=NO_GL)
        [second] = interpreter._ahead.values()
        assert run_once(os.getpid, env={"MUJOCO_GL": "egl"}) != second.proc.pid
        assert list(interpreter._ahead.values()) == [second]
    finally:
        discard_ahead()
    assert second.proc.wait(10) == 0  # told to stop: it left at once
    assert interpreter._ahead == {}


def test_preloaded_modules_are_imported_before_the_arguments_come():
    # forbidden_modules lists what of the policy side and executors a process imported:
    # here the one module preloaded, which nothing else of the call imports
    spawn_ahead(interpreter._answer_once, env=NO_GL, preload=["rolltape.executors.fallback"])
    worker = spawn_worker(interpreter._answer_once, forbidden_modules, env=NO_GL)
    try:
        kind, imported = worker.conn.recv()
        assert kind == "ok" and "rolltape.executors.fallback" in imported
    finally:
        stop_worker(worker)


def test_a_returning_worker_exits_at_once_with_status_0():
    """os._exit after the target returned: no interpreter teardown to wait for."""
    worker = spawn_worker(interpreter._answer_once, os.getpid, env=NO_GL)
    assert worker.conn.recv() == ("ok", worker.proc.pid)
    started = time.monotonic()
    assert worker.proc.wait(30) == 0
    assert time.monotonic() - started < 5
    worker.conn.close()


def test_pass1_imports_sb3_only_for_checkpoints():
    assert "stable_baselines3" in pass1_imports("sb3:model.zip")
    assert "stable_baselines3" in pass1_imports("runs/model.zip")
    assert pass1_imports("random") == ["rolltape.pass1.worker"]


def test_evaluate_plays_pass_one_on_the_interpreter_started_ahead(tmp_path, monkeypatch):
    spawned: list[tuple[str, tuple[str, ...]]] = []
    real = interpreter._spawn

    def spy(target, *args):
        spawned.append((target.__qualname__, args[-1]))  # the preloaded modules
        return real(target, *args)

    monkeypatch.setattr(interpreter, "_spawn", spy)
    run = evaluate("Pusher-v5", "random", episodes=2, seed=5, max_episode_steps=20,
                   out=tmp_path / "run", report=False)
    assert [e.length for e in run.results.episodes] == [20, 20]
    # one pass-1 interpreter in all: the one started ahead, with its imports
    assert [p for name, p in spawned if name == "policy_worker"] == [("rolltape.pass1.worker",)]
    assert interpreter._ahead == {}


def test_a_refused_run_stops_the_interpreter_started_ahead(tmp_path, monkeypatch):
    from rolltape.errors import UsageError

    started: list[object] = []
    real = interpreter.spawn_ahead

    def spy(*args, **kwargs):
        real(*args, **kwargs)
        started.extend(interpreter._ahead.values())

    monkeypatch.setattr("rolltape.pass1.ahead.spawn_ahead", spy)
    with pytest.raises(UsageError, match="no_such_camera"):  # the drawing check, after it
        evaluate("Pusher-v5", "random", episodes=1, max_episode_steps=5, video=1,
                 cameras=("no_such_camera",), out=tmp_path / "run")
    assert len(started) == 1 and interpreter._ahead == {}
    assert started[0].proc.wait(10) is not None  # stopped, not left waiting


def test_idle_priority_class_is_the_thread_s_and_its_children_s():
    if not hasattr(os, "SCHED_IDLE"):  # not Linux: there is no such class to ask for
        assert idle_priority_class() is False
        return
    seen: dict[str, int] = {}

    def child() -> None:
        seen["child"] = os.sched_getscheduler(0)

    def lowered() -> None:
        seen["ok"] = idle_priority_class()
        seen["self"] = os.sched_getscheduler(0)
        thread = threading.Thread(target=child)  # like llvmpipe's, started after
        thread.start()
        thread.join()

    thread = threading.Thread(target=lowered)
    thread.start()
    thread.join()
    assert seen == {"ok": True, "self": os.SCHED_IDLE, "child": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # this thread kept its own class
