"""Progress bars (rolltape.progress): the same calls with bars or without, nothing on stdout,
and one bar over several episodes' frames that counts each episode's frames once."""

from __future__ import annotations

import pytest

from rolltape.progress import Progress


def completed(bar: Progress) -> list[float]:
    return [task.completed for task in bar._bars.tasks]


@pytest.mark.parametrize("enabled", [True, False])
def test_counts_are_kept_and_stdout_stays_for_results(enabled: bool,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    with Progress(enabled=enabled) as bar:
        task = bar.add("pass 1", total=30)
        bar.advance(task)
        bar.advance(task, 4)
        assert completed(bar) == [5]
        bar.update(task, completed=12)
        assert completed(bar) == [12]
    out, err = capfd.readouterr()
    assert out == ""
    if not enabled:
        assert err == ""


def test_frames_adds_up_the_episodes_latest_counts() -> None:
    with Progress(enabled=False) as bar:
        on_progress, on_result = bar.frames("pass 2", [10, 20, 5])
        [task] = bar._bars.tasks
        assert task.total == 35 and task.description == "pass 2"
        on_progress(0, 4)
        on_progress(1, 7)
        on_progress(0, 6)  # a later count replaces the episode's earlier one
        assert completed(bar) == [13]
        on_result(1, None)  # done: the episode counts whole, whatever it last reported
        on_result(2, None)
        assert completed(bar) == [31]
        on_result(0, None)
        assert completed(bar) == [35]
