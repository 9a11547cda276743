"""What the verbs print: the consoles, a run's summary, replays, a comparison.

Every verb prints through :data:`out` (stdout) and :data:`err` (stderr), one line per
message (for grep and logs), never wrapped.

May import: rich, outputs.summary and outputs.suite_view (the tables' cells), tape (a
restored replay's own return). Never: the work (evaluation, pass 1, pass 2's worker).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rich.console import Console
from rich.table import Table

from rolltape.outputs.summary import (
    improvement_line,
    success_rule_text,
    summary_rows,
    summary_title,
)

if TYPE_CHECKING:
    from rolltape.record import Results

# Not a terminal (a log, CI): a fixed width so tables do not wrap at 80 columns. Lines are
# never wrapped, so a per-tape line stays one line for grep whatever its path's length.
out = Console(width=None if sys.stdout.isatty() else 120, soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)  # a message stays one line, for grep and logs


def say(line: str) -> None:
    """One line on stdout, as written (no markup, no highlighting)."""
    out.print(line, highlight=False, markup=False)


def warn(line: str) -> None:
    """One line on stderr, as written."""
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def comparison(result: dict[str, Any], path: Path) -> None:
    from rolltape.compare.report import summary_lines

    for line in summary_lines(result):
        out.print(line, highlight=False, markup=False)
    for w in result.get("warnings") or []:
        err.print(f"warning: {w}", highlight=False, markup=False)
    strip = result.get("strip")
    if strip and strip.get("path"):
        state = "verified" if strip["verified"] else "NOT verified"
        out.print(f"video across checkpoints: {path / strip['path']} (seed {strip['seed']}, "
                  f"{state})", highlight=False)
    out.print(f"comparison written to {path / 'comparison.html'} (and comparison.json)",
              highlight=False)


TABLE_WIDTH = 80  # off a terminal the table fits what a log viewer or an 80-column tty shows


def summary_table(results: Results, width: int) -> Table:
    """The per-role summary as a rich table of at most ``width`` columns (cells and the
    columns that go when it is narrow: :func:`rolltape.outputs.summary.summary_rows`)."""
    header, rows = summary_rows(results.summary, width)
    table = Table(title=summary_title(results),
                  caption=f"success: {success_rule_text(results.success_rule)}"
                  if any(s.success_rate is not None for s in results.summary.values()) else None)
    for name in header:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def suite_table(suite: Mapping[str, Any], name: str) -> Table:
    """A suite run's per-task table (``Results.suite``) as the CLI prints it: compact
    columns that fit 80 characters (:data:`rolltape.outputs.suite_view.COMPACT`), the rule
    in the caption."""
    from rolltape.outputs.suite_view import compact_caption, task_rows

    header, rows = task_rows(suite, compact=True)
    table = Table(title=f"{name}: success per task (95% Wilson interval)",
                  caption=compact_caption(suite), caption_justify="left")
    for column in header:
        table.add_column(column, justify="left" if column == "task" else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_run(results: Results, path: Path) -> None:
    """The summary table, the videos and where everything went."""
    if results.suite is not None:
        from rolltape.outputs.suite_view import headline_text

        out.print(suite_table(results.suite, results.env_id))
        # A suite's headline is success: returns of different tasks do not pool.
        out.print(headline_text(results.suite), highlight=False)
    else:
        out.print(summary_table(results, out.width if out.is_terminal else TABLE_WIDTH))
        line = improvement_line(results)
        if line:
            out.print(line)
    for v in results.videos:
        if v.path is None:
            out.print(f"{v.key.label}: not rendered")
            continue
        status = ("verified: replay earned exactly what pass 1 earned" if v.verified
                  else f"DIVERGED at {v.get('divergence_text')}" if v.verified is False
                  else "drawn from recorded states (not re-simulated)")
        if fell_back(v.get("mode"), v.verified):
            status += f"; {FELL_BACK}"
        out.print(f"video {path / v.path} ({v.get('frames')} frames, {gl_name(v.get('backend'))}, "
                  f"{camera_text(v.get('cameras'))}): {status}")
        if v.get("camera_hint"):
            err.print(f"hint: {v.key.label}: {v.get('camera_hint')}.", highlight=False,
                      soft_wrap=True)
    # MuJoCo's own warnings (deprecated XML in Gymnasium's models) are kept, not shouted.
    quiet = [w for w in results.warnings if w.startswith("MuJoCo: ")]
    for w in results.warnings:
        if w not in quiet:
            err.print(f"warning: {w}")
    if quiet:
        err.print(f"note: {len(quiet)} MuJoCo warning(s) recorded in metadata.json")
    out.print(f"run written to {path}/ ({', '.join(_existing(path, RUN_FILES))})")
    # Only what is there: a report whose notebook did not fit on the disk names no notebook.
    extras = [text for name, text in (("report.ipynb", "notebook: report.ipynb"),
                                      ("viewer", f"3-D replay: `rolltape view {path}`"))
              if (path / name).exists()]
    if (path / "report.html").is_file():
        out.print(f"report: {path / 'report.html'}" + (f" ({'; '.join(extras)})" if extras else ""))
    elif (path / "report.ipynb").is_file():
        out.print(f"notebook: {path / 'report.ipynb'}")


RUN_FILES = ("results.json", "episodes.jsonl", "metadata.json", "tapes/", "videos/")


def _existing(path: Path, names: tuple[str, ...]) -> list[str]:
    """The ``names`` (a folder ends in '/') that exist in ``path``."""
    return [n for n in names if ((path / n).is_dir() if n.endswith("/") else (path / n).is_file())]


FELL_BACK = ("--mode auto fell back to restore: the video draws the recorded states, so it "
             "shows what pass 1 did")


def fell_back(mode: str | None, verified: bool | None) -> bool:
    """True when --mode auto re-simulated, diverged and drew the recorded states instead
    (restore itself verifies nothing, so it never reports False)."""
    return verified is False and mode == "restore"


def gl_name(backend: str | None) -> str:
    """The GL backend that drew a video, or "no GL" for frames the env draws itself (ALE's
    screens, pygame's classic control and Box2D)."""
    return backend or "no GL"


def camera_text(cameras: list[str] | tuple[str, ...] | None) -> str:
    """'camera default', 'cameras default + track:torso'."""
    names = list(cameras or ()) or ["default"]
    return f"camera{'s' if len(names) > 1 else ''} {' + '.join(names)}"


def replays(results: list[Any]) -> int:
    """A line per replayed tape (and what it wrote); returns how many diverged."""
    from rolltape.tape import Tape

    diverged = 0
    for r in results:
        if r.verified is False:
            diverged += 1
            out.print(f"[red]DIVERGED[/red] {r.tape}: first at {r.divergence.describe()}")
            if fell_back(r.mode, r.verified):
                out.print(f"  {FELL_BACK}")
        elif r.replay_return is None:  # restore: nothing re-simulated, the tape's own return
            out.print(f"[green]ok[/green] {r.tape}: {r.steps} steps, recorded return "
                      f"{Tape.load(r.tape).total_return}, drawn from recorded states")
        else:
            what = ("drawn from recorded states" if not r.verified else "verified"
                    if r.checked == "observations" else f"verified: {r.checked}"
                    if r.checked != "rewards" else "rewards and flags match (observations "
                    "not compared: the tape has no digests, or a tolerance was given)")
            out.print(f"[green]ok[/green] {r.tape}: {r.steps} steps, return "
                      f"{r.replay_return}, {what}")
        for path in r.outputs:
            out.print(f"  wrote {path} ({r.frames} frames, backend {gl_name(r.backend)}, "
                      f"{camera_text(r.cameras)})")
        if r.camera_hint:
            err.print(f"hint: {Path(r.tape).name}: {r.camera_hint}.", highlight=False,
                      soft_wrap=True)
        for backend, why in r.failures:
            err.print(f"  note: {backend} failed first: {why}")
    return diverged
