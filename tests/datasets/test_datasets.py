"""``rolltape.datasets`` itself: the stream that hands replays to a writer that streams
(Minari's) in the dataset's order while later replays still run."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from rolltape.datasets import _Background, _InOrder


def replay(index: int) -> SimpleNamespace:
    return SimpleNamespace(chosen=SimpleNamespace(index=index))


def test_replays_reach_the_writer_in_dataset_order_whatever_order_they_finish_in():
    feed = _InOrder(4)
    got: list[int] = []
    seen_while_waiting: list[int] = []

    def write() -> int:
        for r in feed:
            got.append(r.chosen.index)
        return len(got)

    writing = _Background(write)
    for index in (2, 0, 3):
        feed.put(replay(index))
    time.sleep(0.05)
    seen_while_waiting[:] = got  # 0 is written; 2 and 3 wait for 1
    feed.put(replay(1))
    feed.put(replay(1))  # a resumed run hands every replay again: kept once
    assert writing.join() == 4
    assert seen_while_waiting == [0] and got == [0, 1, 2, 3]


def test_a_put_never_waits_for_the_writer():
    feed = _InOrder(2)
    release = threading.Event()

    def slow_write() -> None:
        for _ in feed:
            release.wait(5)  # a writer busy with an episode

    writing = _Background(slow_write)
    feed.put(replay(0))
    time.sleep(0.05)
    started = time.perf_counter()
    feed.put(replay(1))
    assert time.perf_counter() - started < 1.0
    release.set()
    writing.join()


def test_cancel_stops_the_writer_quietly_and_a_writer_error_reaches_the_caller():
    feed = _InOrder(3)
    writing = _Background(lambda: list(feed))
    feed.put(replay(0))
    feed.cancel()
    assert writing.join() is None

    def broken() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _Background(broken).join()
