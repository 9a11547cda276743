"""Progress bars for long work, on stderr so stdout stays for results.

A thin wrapper over rich so callers need not care whether progress is shown.

May import: rich. Never: the work (the orchestrator's progress bars only).

Example:
    >>> with Progress(enabled=True) as bar:
    ...     task = bar.add("pass 1", total=30)
    ...     bar.advance(task)
"""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress


class Progress:
    """Bars when ``enabled``, silence otherwise; the same calls either way."""

    def __init__(self, enabled: bool) -> None:
        self._bars = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(),
            # transient: bars vanish when work stops, so an error is the only thing left
            console=Console(stderr=True), disable=not enabled, transient=True,
        )

    def __enter__(self) -> Progress:
        self._bars.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bars.stop()

    def add(self, label: str, total: int) -> Any:
        return self._bars.add_task(label, total=total)

    def advance(self, task: Any, n: int = 1) -> None:
        self._bars.advance(task, n)

    def update(self, task: Any, completed: int) -> None:
        self._bars.update(task, completed=completed)

    def frames(self, label: str, totals: list[int]) -> tuple[Callable[[int, int], None],
                                                            Callable[[int, Any], None]]:
        """One bar over several episodes' frames; returns the ``on_progress(i, frames)`` and
        ``on_result(i, result)`` callbacks that :func:`rolltape.render` takes."""
        task = self.add(label, sum(totals))
        seen = [0] * len(totals)

        def on_progress(i: int, frames: int) -> None:
            seen[i] = frames
            self.update(task, sum(seen))

        def on_result(i: int, result: Any) -> None:
            seen[i] = totals[i]
            self.update(task, sum(seen))

        return on_progress, on_result
