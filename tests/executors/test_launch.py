"""Where workers run (rolltape.executors.launch): how many this machine may start, the
flag named when a count is refused, and SIGTERM turned into Interrupted."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rolltape.errors import Interrupted, UsageError
from rolltape.executors.launch import check_worker_count, per_core, sigterm_raises, worker_limit


def test_the_local_limit_is_four_per_core_at_least_16_at_most_256():
    cores = os.cpu_count() or 1
    assert worker_limit() == min(256, max(16, 4 * cores))
    assert 16 <= worker_limit() <= 256
    assert worker_limit(local=False) == 256


def test_a_count_within_the_limit_passes():
    check_worker_count("--workers", 1)
    check_worker_count("--workers", worker_limit())
    check_worker_count("--render-workers", 0, minimum=0)


def test_zero_workers_means_one_per_core():
    assert per_core(0) == (os.cpu_count() or 1) and per_core(3) == 3


def test_too_few_names_the_flag_and_the_minimum():
    with pytest.raises(UsageError, match=r"^--render-workers must be at least 2, got 1\.$"):
        check_worker_count("--render-workers", 1, minimum=2)


def test_too_many_here_says_why_and_what_to_give():
    limit = worker_limit()
    with pytest.raises(UsageError) as info:
        check_worker_count("--workers", limit + 1)
    assert str(info.value) == (f"--workers {limit + 1} is more processes than rolltape starts "
                               f"on this machine (4 per CPU core, at least 16); give {limit} "
                               "or fewer.")


def test_too_many_on_a_cluster_says_the_cluster_limit():
    with pytest.raises(UsageError, match=r"\(256 at most\); give 256 or fewer\."):
        check_worker_count("--workers", 257, local=False)
    check_worker_count("--workers", 256, local=False)


def test_sigterm_inside_the_block_raises_interrupted_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info:
        with sigterm_raises():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises long before this ends
    assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_off_the_main_thread_the_block_leaves_signals_alone():
    seen: list[object] = []

    def run() -> None:
        with sigterm_raises():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [before]
