"""Progress for long work, on stderr so stdout stays for results.

A thin wrapper over rich so callers need not care whether progress is shown. On a terminal
it draws bars; in a log (stderr not a terminal: a batch job, CI, ``2> log``) bars would be
nothing or a screenful of redraws, so each stage is plain lines instead, as pip and tqdm
write them: one at most every :data:`LOG_EVERY` seconds while it runs (done/total, rate,
time left) and one when it ends (a stage shorter than that says only its end, so a
command that fails at once still says one sentence).

May import: rich. Never: the work (the orchestrator's progress bars only).

Example:
    >>> with Progress(enabled=True) as bar:
    ...     task = bar.add("pass 1", total=30)
    ...     bar.advance(task)
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

LOG_EVERY = 30.0  # seconds between two lines of one stage in a log (tqdm's and pip's pace)


@dataclass
class _Stage:
    """One stage's count as a log sees it."""

    label: str
    total: int
    unit: str
    started: float
    last_line: float
    done: int = 0
    ended: bool = False


def _duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _rate(per_s: float) -> str:
    """'0.52/s', '19.8/s', '2910/s'."""
    return f"{per_s:.0f}/s" if per_s >= 100 else f"{per_s:.3g}/s"


def stage_line(stage: _Stage, now: float) -> str:
    """'pass 1 (...): 12/30 episodes (40%), 0.52/s, about 35 s left' (or 'done in ...')."""
    unit = f" {stage.unit}" if stage.unit else ""
    elapsed = max(now - stage.started, 1e-9)
    rate = stage.done / elapsed
    count = f"{stage.label}: {stage.done}/{stage.total}{unit}"
    if stage.done >= stage.total:
        return f"{count}, done in {_duration(elapsed)}" + (f" ({_rate(rate)})" if stage.done else "")
    if not stage.done:
        return f"{count}, none done yet"
    percent = 100.0 * stage.done / stage.total if stage.total else 100.0
    left = (stage.total - stage.done) / rate
    return f"{count} ({percent:.0f}%), {_rate(rate)}, about {_duration(left)} left"


class _Log:
    """Plain progress lines for a log: at most one line per ``every`` seconds while a stage
    runs, and one at its end. Thread-safe (pass 2 may count beside pass 1)."""

    def __init__(self, stream: IO[str], every: float) -> None:
        self.stream, self.every = stream, every
        self.stages: dict[Any, _Stage] = {}
        self.lock = threading.Lock()

    def add(self, task: Any, label: str, total: int, unit: str) -> None:
        with self.lock:
            now = time.monotonic()
            self.stages[task] = _Stage(label, total, unit, now, now)

    def count(self, task: Any, done: int) -> None:
        with self.lock:
            stage = self.stages.get(task)
            if stage is None or stage.ended:
                return
            stage.done, now = min(done, stage.total), time.monotonic()
            if stage.done >= stage.total:
                stage.ended = True
            elif now - stage.last_line < self.every:
                return
            stage.last_line = now
            self._write(stage_line(stage, now))

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or full log never stops the work
            pass


class Progress:
    """Bars when ``enabled`` on a terminal, plain lines when ``enabled`` in a log (stderr
    not a terminal; ``log`` forces either), silence otherwise; the same calls either way."""

    def __init__(self, enabled: bool, *, log: bool | None = None,
                 stream: IO[str] | None = None, every: float = LOG_EVERY) -> None:
        console = Console(stderr=True)
        as_log = enabled and (not console.is_terminal if log is None else log)
        self._log = _Log(stream or sys.stderr, every) if as_log else None
        self._bars = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(),
            # transient: bars vanish when work stops, so an error is the only thing left
            console=console, disable=not enabled or as_log, transient=True,
        )

    def __enter__(self) -> Progress:
        self._bars.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bars.stop()

    def add(self, label: str, total: int, unit: str = "") -> Any:
        """A stage of ``total`` units (``unit`` names them in a log: 'episodes', 'frames')."""
        task = self._bars.add_task(label, total=total)
        if self._log is not None:
            self._log.add(task, label, total, unit)
        return task

    def advance(self, task: Any, n: int = 1) -> None:
        self._bars.advance(task, n)
        if self._log is not None:
            self._log.count(task, int(self._bars.tasks[self._index(task)].completed))

    def update(self, task: Any, completed: int) -> None:
        self._bars.update(task, completed=completed)
        if self._log is not None:
            self._log.count(task, completed)

    def _index(self, task: Any) -> int:
        return next(k for k, t in enumerate(self._bars.tasks) if t.id == task)

    def frames(self, label: str, totals: list[int]) -> tuple[Callable[[int, int], None],
                                                            Callable[[int, Any], None]]:
        """One bar over several episodes' frames; returns the ``on_progress(i, frames)`` and
        ``on_result(i, result)`` callbacks that :func:`rolltape.render` takes."""
        task = self.add(label, sum(totals), "frames")
        seen = [0] * len(totals)

        def on_progress(i: int, frames: int) -> None:
            seen[i] = frames
            self.update(task, sum(seen))

        def on_result(i: int, result: Any) -> None:
            seen[i] = totals[i]
            self.update(task, sum(seen))

        return on_progress, on_result
