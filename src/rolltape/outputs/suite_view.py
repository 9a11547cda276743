"""A suite run's numbers as text and as a picture: the per-task table (CLI, report) and a
forest plot of each task's success rate with its 95% Wilson interval, grouped by suite.

Pure functions of ``results["suite"]`` (see :mod:`rolltape.suites.results`).

May import: outputs (plots, summary), stdlib. Never: policies, pass 1, executors.

Example:
    >>> suite = {"per_task": [{"suite": "s", "task": "a", "n_episodes": 10, "n_success": 9,
    ...          "n_unknown": 0, "pc_success": 90.0, "pc_success_ci95": [59.58, 98.21],
    ...          "success_at_end": {"pc_success": 80.0}, "avg_sum_reward": 1.0,
    ...          "avg_max_reward": 0.5, "mean_length": 20.0}], "per_suite": {}, "overall": {}}
    >>> header, rows = task_rows(suite)
    >>> dict(zip(header, rows[0]))["success [95% CI]"]
    '9/10 90.0% [59.6, 98.2]'
"""

from __future__ import annotations

from html import escape
from typing import Any, Mapping

from rolltape.outputs.plots import FONT, GRID, INK, MUTED, PALETTE
from rolltape.outputs.summary import num

HEADER = ["suite", "task", "episodes", "success [95% CI]", "at end", "sum reward",
          "max reward", "length"]


def success_text(entry: Mapping[str, Any]) -> str:
    """'9/10 90.0% [59.6, 98.2]', 'n/a (never reported)' or with '(3 unknown)'."""
    if entry.get("pc_success") is None:
        return "n/a (never reported)"
    known = entry["n_episodes"] - entry.get("n_unknown", 0)
    lo, hi = entry["pc_success_ci95"]
    text = f"{entry['n_success']}/{known} {entry['pc_success']:.1f}% [{lo:.1f}, {hi:.1f}]"
    return text + (f" ({entry['n_unknown']} unknown)" if entry.get("n_unknown") else "")


def _row(suite: str, task: str, entry: Mapping[str, Any]) -> list[str]:
    end = (entry.get("success_at_end") or {}).get("pc_success")
    return [suite, task, str(entry.get("n_episodes")), success_text(entry),
            "n/a" if end is None else f"{end:.1f}%", num(entry.get("avg_sum_reward")),
            num(entry.get("avg_max_reward")), num(entry.get("mean_length"), 0)]


def task_rows(suite: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per task, then one per suite and one overall (pooled)."""
    rows = [_row(t["suite"], t["task"], t) for t in suite["per_task"]]
    if len(suite.get("per_suite") or {}) > 1 or len(suite["per_task"]) > 1:
        rows += [_row(name, "(all, pooled)", e) for name, e in suite["per_suite"].items()]
        if len(suite["per_suite"]) > 1:
            rows.append(_row("overall", "(pooled)", suite["overall"]))
    return HEADER, rows


def mean_rate_text(entry: Mapping[str, Any]) -> str | None:
    """'unweighted mean of 4 task rates: 47.5% [35.0, 60.0]' (None without a known rate)."""
    m = entry.get("mean_of_task_rates") or {}
    if m.get("pc_mean_task_success") is None:
        return None
    lo, hi = m["pc_mean_task_success_ci95"]
    return (f"unweighted mean of {m['n_tasks']} task rates: {m['pc_mean_task_success']:.1f}% "
            f"[{lo:.1f}, {hi:.1f}] (stratified bootstrap)")


def forest_plot(suite: Mapping[str, Any]) -> str:
    """Inline SVG: one row per task, its success rate (dot) and 95% Wilson interval (bar)
    on a 0..100% axis, tasks grouped under their suite's name; a task whose env never
    reported success is listed as 'n/a'."""
    width, row_h, left, right, top = 560, 22, 170, 40, 34
    lines: list[tuple[str, Mapping[str, Any] | None, str]] = []  # (label, entry, colour)
    colours = {}
    for t in suite["per_task"]:
        if t["suite"] not in colours:
            colours[t["suite"]] = PALETTE[len(colours) % len(PALETTE)]
            lines.append((t["suite"], None, colours[t["suite"]]))
        lines.append((t["task"], t, colours[t["suite"]]))
    height = top + row_h * len(lines) + 36
    span = width - left - right

    def x(pc: float) -> float:
        return left + span * pc / 100.0

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" font-family="{escape(FONT)}" '
           f'font-size="12" class="chart forest">',
           "<title>Success rate per task with its 95% Wilson interval</title>",
           "<desc>One row per task, grouped by suite: the dot is the success rate, the bar "
           "its 95% Wilson interval.</desc>",
           f'<text x="{left}" y="16" fill="{INK}">success rate per task (95% Wilson '
           "interval)</text>"]
    for pc in (0, 25, 50, 75, 100):
        out.append(f'<line x1="{x(pc):.1f}" x2="{x(pc):.1f}" y1="{top - 6}" '
                   f'y2="{height - 30}" stroke="{GRID}"/>')
        out.append(f'<text x="{x(pc):.1f}" y="{height - 14}" text-anchor="middle" '
                   f'fill="{MUTED}">{pc}%</text>')
    for k, (label, entry, colour) in enumerate(lines):
        y = top + row_h * k + row_h / 2
        if entry is None:  # a suite's heading
            out.append(f'<text x="8" y="{y + 4:.1f}" fill="{INK}" font-weight="bold">'
                       f"{escape(label)}</text>")
            continue
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" fill="{INK}">'
                   f"{escape(label)}</text>")
        if entry.get("pc_success") is None:
            out.append(f'<text x="{left + 4}" y="{y + 4:.1f}" fill="{MUTED}">n/a: success '
                       "never reported</text>")
            continue
        lo, hi = entry["pc_success_ci95"]
        tip = escape(f"{entry['suite']}/{entry['task']}: {success_text(entry)}")
        out.append(f'<g><title>{tip}</title>'
                   f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{colour}" stroke-width="3"/>'
                   f'<circle cx="{x(entry["pc_success"]):.1f}" cy="{y:.1f}" r="5" '
                   f'fill="{colour}"/></g>')
        known = entry["n_episodes"] - entry.get("n_unknown", 0)
        out.append(f'<text x="{width - right + 6}" y="{y + 4:.1f}" fill="{MUTED}">'
                   f"{entry['n_success']}/{known}</text>")
    out.append("</svg>")
    return "".join(out)
