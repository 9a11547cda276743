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


def test_in_a_log_each_stage_is_plain_lines_at_most_every_thirty_seconds(monkeypatch) -> None:
    """As pip and tqdm write to a log: no bar redraws, a line at most every 30 s (done/total,
    rate, time left) and one at the end; a stage shorter than 30 s says only its end."""
    import io

    import rolltape.progress as progress

    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    with Progress(enabled=True, log=True, stream=log) as bar:
        task = bar.add("pass 1", total=100, unit="episodes")
        for _ in range(100):  # one episode a second: 100 s
            clock[0] += 1.0
            bar.advance(task)
    lines = log.getvalue().splitlines()
    # at 30, 60 and 90 s (never closer than 30 s), then the end
    assert lines[0] == "pass 1: 30/100 episodes (30%), 1/s, about 1 min 10 s left"
    assert [line.split(":")[1].split()[0] for line in lines] == \
        ["30/100", "60/100", "90/100", "100/100"]
    assert lines[-1] == "pass 1: 100/100 episodes, done in 1 min 40 s (1/s)"


def test_eval_without_a_terminal_says_each_stage_in_its_log(tmp_path) -> None:
    from tests.conftest import run_cli

    done = run_cli("eval", "CartPole-v1", "--episodes", "3", "--video", "1", "--no-report",
                   "--max-episode-steps", "20", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any(x.startswith("pass 1 (rendering off, 1 worker(s)): 3/3 episodes, done in ")
               for x in lines), lines
    assert any(x.startswith("pass 2 (render 1 video(s)): ") and " frames, done in " in x
               for x in lines), lines
    assert "\r" not in done.stderr and "\x1b[" not in done.stderr  # no bar redraws in a log
