"""``rolltape.datasets`` itself: the feed that hands replays to a writer that streams
(Minari's) in the dataset's order while later replays still run."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from rolltape.datasets import _WriterFeed


def replay(index: int) -> SimpleNamespace:
    return SimpleNamespace(chosen=SimpleNamespace(index=index))


def test_replays_reach_the_writer_in_dataset_order_whatever_order_they_finish_in():
    got: list[int] = []
    seen_while_waiting: list[int] = []

    def write(feed: _WriterFeed) -> int:
        for r in feed:
            got.append(r.chosen.index)
        return len(got)

    feed = _WriterFeed(4, write)
    for index in (2, 0, 3):
        feed.put(replay(index))
    time.sleep(0.05)
    seen_while_waiting[:] = got  # 0 is written; 2 and 3 wait for 1
    feed.put(replay(1))
    # a resumed run hands every replay again: each is kept once
    assert feed.finish([replay(i) for i in range(4)]) == 4
    assert seen_while_waiting == [0] and got == [0, 1, 2, 3]


def test_a_put_never_waits_for_the_writer():
    release = threading.Event()

    def slow_write(feed: _WriterFeed) -> int:
        for _ in feed:
            release.wait(5)  # a writer busy with an episode
        return 0

    feed = _WriterFeed(2, slow_write)
    feed.put(replay(0))
    time.sleep(0.05)
    started = time.perf_counter()
    feed.put(replay(1))
    assert time.perf_counter() - started < 1.0
    release.set()
    feed.finish([])


def test_cancel_stops_the_writer_quietly_and_a_writer_error_reaches_the_caller():
    feed = _WriterFeed(3, lambda f: len(list(f)))
    feed.put(replay(0))
    feed.cancel()
    assert feed.writing.done()

    def broken(feed: _WriterFeed) -> int:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _WriterFeed(1, broken).finish([])
