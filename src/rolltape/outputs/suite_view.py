"""A suite run's numbers as text and as a picture: the per-task table (CLI, report) and a
forest plot of each task's success rate with its 95% Wilson interval, grouped by suite.

Pure functions of a suite run's ``Results.suite`` (see :mod:`rolltape.suites.results`):
the headline success by each task's rule, and both rules named beside it.

May import: outputs (plots, summary), stdlib. Never: policies, pass 1, executors.

Example:
    >>> suite = {"per_task": [{"suite": "s", "task": "a", "n_episodes": 10, "n_success": 9,
    ...          "n_unknown": 0, "pc_success": 90.0, "pc_success_ci95": [59.58, 98.21],
    ...          "success_rule": "at_end", "success_at_end": {"pc_success": 90.0},
    ...          "success_once": {"pc_success": 100.0}, "avg_sum_reward": 1.0,
    ...          "avg_max_reward": 0.5, "mean_length": 20.0}], "per_suite": {}, "overall": {}}
    >>> header, rows = task_rows(suite)
    >>> dict(zip(header, rows[0]))["success [95% CI]"]
    '9/10 90.0% [59.6, 98.2]'
"""

from __future__ import annotations

from typing import Any, Mapping

from rolltape.outputs.plots import CHAR_W, NOTE_GAP, PALETTE, ForestRow, forest_chart
from rolltape.outputs.summary import num, success_rule_text

HEADER = ["suite", "task", "episodes", "success [95% CI]", "rule", "at end", "once",
          "sum reward", "max reward", "length"]
# The CLI's table, which fits 80 columns: each suite's name on a row of its own above its
# tasks (when there are several; one is in the title), the rule and the episodes whose
# outcome is unknown in the caption (:func:`compact_caption`), the rates by each rule and
# the max reward left to the report and results.json. The episode count is the success
# cell's: k of the n episodes whose outcome is known.
COMPACT = ["task", "success [95% CI]", "return", "length"]


def success_text(entry: Mapping[str, Any]) -> str:
    """'9/10 90.0% [59.6, 98.2]', 'n/a (never reported)' or with '(3 unknown)'."""
    if entry.get("pc_success") is None:
        return "n/a (never reported)"
    known = entry["n_episodes"] - entry.get("n_unknown", 0)
    lo, hi = entry["pc_success_ci95"]
    text = f"{entry['n_success']}/{known} {entry['pc_success']:.1f}% [{lo:.1f}, {hi:.1f}]"
    return text + (f" ({entry['n_unknown']} unknown)" if entry.get("n_unknown") else "")


def _percent(block: Any) -> str:
    value = (block or {}).get("pc_success")
    return "n/a" if value is None else f"{value:.1f}%"


POOLED = "—"  # a pooled row's return, max reward or length: tasks' scales do not pool


def _row(suite: str, task: str, entry: Mapping[str, Any], pooled: bool = False) -> list[str]:
    rule = str(entry.get("success_rule") or "at_end").replace("_", " ")
    # Success counts pool across tasks (k of n episodes); returns and lengths do not (a
    # task's -1152 beside another's +21 averages to a number of neither).
    scales = [POOLED] * 3 if pooled else [
        num(entry.get("avg_sum_reward")), num(entry.get("avg_max_reward")),
        num(entry.get("mean_length"), 0)]
    return [suite, task, str(entry.get("n_episodes")), success_text(entry), rule,
            _percent(entry.get("success_at_end")), _percent(entry.get("success_once")), *scales]


def task_rows(suite: Mapping[str, Any], compact: bool = False
              ) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per task, then one per suite and one overall, which pool
    only the success counts (their rewards and lengths read '—'). ``compact``: the
    :data:`COMPACT` columns the CLI prints."""
    rows = [_row(t["suite"], t["task"], t) for t in suite["per_task"]]
    if len(suite.get("per_suite") or {}) > 1 or len(suite["per_task"]) > 1:
        rows += [_row(name, "(all, pooled)", e, pooled=True)
                 for name, e in suite["per_suite"].items()]
        if len(suite["per_suite"]) > 1:
            rows.append(_row("overall", "(pooled)", suite["overall"], pooled=True))
    if not compact:
        return HEADER, rows
    return COMPACT, _compact_rows(suite)


def _compact_rows(suite: Mapping[str, Any]) -> list[list[str]]:
    """The :data:`COMPACT` rows: tasks grouped by suite, each suite's pooled row last."""
    def cells(label: str, entry: Mapping[str, Any], pooled: bool = False) -> list[str]:
        full = dict(zip(HEADER, _row("", "", entry, pooled)))
        return [label, _known_text(entry), full["sum reward"], full["length"]]

    names = list(dict.fromkeys(t["suite"] for t in suite["per_task"]))
    several = len(names) > 1
    pad = "  " if several else ""
    rows = []
    for name in names:
        tasks = [t for t in suite["per_task"] if t["suite"] == name]
        if several:
            rows.append([name, "", "", ""])
        rows += [cells(pad + t["task"], t) for t in tasks]
        if (several or len(tasks) > 1) and name in (suite.get("per_suite") or {}):
            rows.append(cells(pad + "(pooled)", suite["per_suite"][name], pooled=True))
    if several:
        rows.append(cells("overall (pooled)", suite["overall"], pooled=True))
    return rows


def _known_text(entry: Mapping[str, Any]) -> str:
    """:func:`success_text` without its '(3 unknown)', which the caption says."""
    text = success_text(entry)
    return text.removesuffix(f" ({entry['n_unknown']} unknown)") if entry.get("n_unknown") \
        else text


def compact_caption(suite: Mapping[str, Any]) -> str:
    """The compact table's caption, in lines of fewer than 80 characters: what success
    counts ('success on the terminal step (LeRobot's rule), in percent', or each rule with
    its tasks when they differ), the tasks with episodes whose outcome is unknown, and where
    the numbers the table leaves out are."""
    rules: dict[str, list[str]] = {}
    for t in suite["per_task"]:
        rules.setdefault(str(t.get("success_rule") or "at_end"), []).append(t["task"])
    if len(rules) == 1:
        lines = [f"{success_rule_text(next(iter(rules)))}, in percent"]
    else:
        lines = ["success by each task's rule, in percent:",
                 *(f"  {rule.replace('_', ' ')}: {', '.join(tasks)}"
                   for rule, tasks in rules.items())]
    unknown = [f"{t['task']} {t['n_unknown']}" for t in suite["per_task"]
               if t.get("n_unknown") and t.get("pc_success") is not None]
    if unknown:
        lines.append(f"episodes with no outcome, left out: {', '.join(unknown)}")
    return "\n".join([*lines, "both rules' rates and max rewards: results.json, the report"])


def mean_rate_text(entry: Mapping[str, Any]) -> str | None:
    """'unweighted mean of 4 task rates: 47.5% [35.0, 60.0] (95% stratified bootstrap over
    4 tasks)'; None without a known rate, or over one task (its own Wilson interval is the
    one to read: a bootstrap of one task's 0 of 8 is the point [0.0, 0.0])."""
    m = entry.get("mean_of_task_rates") or {}
    if m.get("pc_mean_task_success") is None or m.get("n_tasks", 0) < 2:
        return None
    lo, hi = m["pc_mean_task_success_ci95"]
    return (f"unweighted mean of {m['n_tasks']} task rates: {m['pc_mean_task_success']:.1f}% "
            f"[{lo:.1f}, {hi:.1f}] (95% stratified bootstrap over {m['n_tasks']} tasks)")


def headline(suite: Mapping[str, Any]) -> dict[str, str]:
    """A suite's headline: success, never a return pooled across tasks. Over k > 1 tasks
    the unweighted mean of their rates with its bootstrap interval over the k tasks; over
    one task its rate with its Wilson interval. Keys: label, value, note."""
    tasks = suite["per_task"]
    if len(tasks) == 1:
        t = tasks[0]
        if t.get("pc_success") is None:
            return {"label": "success", "value": "n/a", "note": "success never reported"}
        lo, hi = t["pc_success_ci95"]
        known = t["n_episodes"] - t.get("n_unknown", 0)
        return {"label": "success (1 task)", "value": f"{t['pc_success']:.1f}%",
                "note": f"{t['n_success']}/{known} episodes; 95% Wilson interval "
                        f"[{lo:.1f}, {hi:.1f}]"}
    m = suite["overall"].get("mean_of_task_rates") or {}
    if m.get("pc_mean_task_success") is None:
        return {"label": "success", "value": "n/a", "note": "no task reported success"}
    k = m["n_tasks"]
    lo, hi = m["pc_mean_task_success_ci95"]
    if k < 2:  # one task of several reported success: its own rate, said as such
        only = next(t for t in tasks if t.get("pc_success") is not None)
        return {"label": f"success ({only['suite']}/{only['task']}: the only task of "
                         f"{len(tasks)} that reported it)",
                "value": f"{only['pc_success']:.1f}%",
                "note": "95% Wilson interval [{:.1f}, {:.1f}]".format(*only["pc_success_ci95"])}
    return {"label": f"success, unweighted mean over {k} tasks",
            "value": f"{m['pc_mean_task_success']:.1f}%",
            "note": f"95% interval [{lo:.1f}, {hi:.1f}], stratified bootstrap over {k} tasks"}


def headline_text(suite: Mapping[str, Any]) -> str:
    """The headline in one line, for the CLI."""
    h = headline(suite)
    return f"{h['label']}: {h['value']} ({h['note']})"


def forest_plot(suite: Mapping[str, Any]) -> str:
    """Inline SVG: one row per task, its success rate (dot) and 95% Wilson interval (bar)
    on a 0..100% axis, tasks grouped under their suite's name; a task whose env never
    reported success is listed as 'n/a'."""
    rows: list[ForestRow] = []
    colours: dict[str, str] = {}  # one colour per suite, in the order suites come
    for t in suite["per_task"]:
        if t["suite"] not in colours:
            colours[t["suite"]] = PALETTE[len(colours) % len(PALETTE)]
            rows.append(ForestRow(t["suite"], heading=True))
        if t.get("pc_success") is None:
            rows.append(ForestRow(t["task"], missing="n/a: success never reported"))
            continue
        lo, hi = t["pc_success_ci95"]
        known = t["n_episodes"] - t.get("n_unknown", 0)
        rows.append(ForestRow(t["task"], (lo, t["pc_success"], hi), colours[t["suite"]],
                              tip=f"{t['suite']}/{t['task']}: {success_text(t)}",
                              note=f"{t['n_success']}/{known}"))
    return forest_chart(rows, title="Success rate per task with its 95% Wilson interval",
                        desc="One row per task, grouped by suite: the dot is the success "
                        "rate, the bar its 95% Wilson interval.",
                        caption="success rate per task (95% Wilson interval)",
                        ticks=(0, 25, 50, 75, 100), tick_format="{:g}%", left=170,
                        right=_note_margin(rows), uid="suite-forest")


def _note_margin(rows: list[ForestRow]) -> float:
    """Right of the axis: room for the widest 'n_success/known' note ('100/100' is wider
    than the usual 40 px, and an SVG clips what passes its edge)."""
    widest = max((len(r.note) for r in rows), default=0)
    return max(40.0, NOTE_GAP + CHAR_W * widest + 2)
