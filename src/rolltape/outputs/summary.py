"""The run summary as text, one formatter for the CLI's table, the report and the notebook.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.

Pure functions of a run's :class:`rolltape.record.Results`: a statistic a role does not
have (``n`` is 0 when every return was NaN) reads ``n/a``.

Example:
    >>> from rolltape.record import Summary
    >>> s = Summary(n=2, episodes=2, mean=-28.75, std=1.25, iqm=-28.75, iqm_ci=(-30.0, -27.5),
    ...             min=-30.0, max=-27.5, mean_length=1000.0)
    >>> header, rows = summary_rows({"policy": s})
    >>> dict(zip(header, rows[0]))["mean ± std"]
    '-28.75 ± 1.25'
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from rolltape.record import Results, Summary

__all__ = ["improvement_line", "interval", "num", "role_cells", "success_rule_text",
           "summary_rows", "summary_title"]


def num(x: Any, digits: int = 2, sign: bool = False) -> str:
    """A number as the CLI prints it (``-28.75``); None (no value) as ``n/a``."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def interval(pair: Any, digits: int = 2, sign: bool = False) -> str:
    """``[lo, hi]``, or ``n/a`` when there is no interval."""
    if not pair or pair[0] is None or pair[1] is None:
        return "n/a"
    return f"[{num(pair[0], digits, sign)}, {num(pair[1], digits, sign)}]"


def role_cells(s: Summary) -> dict[str, str]:
    """One role's summary as text, by the names results.json gives its fields.

    ``success`` is ``count/known`` by the run's headline rule (or ``n/a`` when the env
    reports no success) and ``success_ci`` its Wilson interval (empty then); ``length`` is
    the mean episode length.
    """
    cells = {key: num(getattr(s, key)) for key in ("mean", "std", "median", "min", "max", "iqm")}
    cells.update(n=str(s.n), mean_ci=interval(s.mean_ci), iqm_ci=interval(s.iqm_ci),
                 length=num(s.mean_length, 0))
    if s.success_rate is None:
        cells.update(success="n/a", success_ci="")
    else:  # the rate counts the episodes with a finite return whose outcome the env said
        cells.update(success=f"{s.success_count}/{s.success_known}",
                     success_ci=interval(s.success_ci))
    return cells


Cell = Callable[[Mapping[str, str]], str]  # a table cell from a role's cells

COLUMNS: list[tuple[str, Cell]] = [
    ("mean ± std", lambda c: f"{c['mean']} ± {c['std']}"),
    ("IQM [95% CI]", lambda c: f"{c['iqm']} {c['iqm_ci']}"),
    ("min / max", lambda c: f"{c['min']} / {c['max']}"),
    ("success [95% CI]", lambda c: f"{c['success']} {c['success_ci']}".rstrip()),
    ("length", lambda c: c["length"]),
]
# What goes first when the table is too wide, least telling first: (header, its shorter
# form, or None: the column is dropped).
SHORTER: list[tuple[str, tuple[str, Cell] | None]] = [
    ("min / max", None),
    ("success [95% CI]", ("success", lambda c: c["success"])),
    ("IQM [95% CI]", ("IQM", lambda c: c["iqm"])),
    ("length", None),
]


def summary_rows(summary: Mapping[str, Summary],
                 width: int | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, one row per role): the role, then mean ± std, IQM [95% CI], min / max,
    success [95% CI] and the mean length.

    With ``width``, columns go (see :data:`SHORTER`) until the table, drawn in boxes as the
    CLI draws it, fits that many characters: cells wrapped into stubs would be unreadable.
    Every number is still in results.json and the report.
    """
    cells = {role: role_cells(s) for role, s in summary.items()}
    columns, shorter = list(COLUMNS), list(SHORTER)
    while True:
        header = ["", *(h for h, _ in columns)]
        rows = [[role, *(cell(c) for _, cell in columns)] for role, c in cells.items()]
        if width is None or not shorter or _boxed_width(header, rows) <= width:
            return header, rows
        name, replacement = shorter.pop(0)
        k = [h for h, _ in columns].index(name)
        if replacement is None:
            del columns[k]
        else:
            columns[k] = replacement


def _boxed_width(header: list[str], rows: list[list[str]]) -> int:
    """Characters across a table in boxes (rich's default): each column its widest cell and
    a space either side, a rule between columns and one at each edge."""
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]
    return sum(w + 3 for w in widths) + 1


def success_rule_text(rule: str) -> str:
    """What a headline success rate counts, in words."""
    return {"at_end": "success on the terminal step (LeRobot's rule)",
            "once": "success at some step of the episode"}.get(rule, "each task's own rule")


def summary_title(results: Results) -> str:
    """'HalfCheetah-v5: 4 episodes, seeds 0..3'."""
    first, count = results.seed, results.n_episodes
    if results.suite is not None:  # every task has its own seeds seed + i: say so
        per_task = results.suite["per_task"]
        longest = max(t["n_episodes"] for t in per_task)
        return (f"{results.env_id}: {count} episodes of {len(per_task)} task(s) pooled, seeds "
                f"{first}..{first + longest - 1} per task")
    return f"{results.env_id}: {count} episodes, seeds {first}..{first + count - 1}"


def improvement_line(results: Results) -> str | None:
    """The paired improvement over the baseline in one line, or None without a baseline."""
    imp = results.improvement_over_baseline
    if not imp:
        return None
    lo, hi = imp.get("diff_ci") or (None, None)
    return (f"improvement over random on the same seeds: {num(imp.get('mean_diff'), sign=True)} "
            f"(95% CI {num(lo, sign=True)} .. {num(hi, sign=True)})")
