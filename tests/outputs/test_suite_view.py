"""A suite run's numbers as text and as a forest plot (rolltape.outputs.suite_view): one
row per task, pooled rows only where there is something to pool, 'n/a' for a task whose env
never reported success, and each suite's tasks drawn in its own colour under its name.
(The shared chart itself: test_plots.py.)"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from rolltape.outputs.plots import CHAR_W, PALETTE
from rolltape.outputs.suite_view import (
    HEADER,
    forest_plot,
    mean_rate_text,
    success_text,
    task_rows,
)
from rolltape.stats import wilson_interval

NS = "{http://www.w3.org/2000/svg}"


def entry(suite: str, task: str, n: int, successes: int | None, unknown: int = 0,
          **more: Any) -> dict[str, Any]:
    """One task's (or a pooled) entry of ``Results.suite``, its interval computed here."""
    known = n - unknown
    if successes is None:
        rate, ci = None, None
    else:
        rate, ci = 100 * successes / known, [100 * x for x in wilson_interval(successes, known)]
    return {"suite": suite, "task": task, "n_episodes": n, "n_success": successes,
            "n_unknown": unknown, "pc_success": rate, "pc_success_ci95": ci,
            "success_rule": "at_end", "success_at_end": {"pc_success": rate},
            "success_once": {"pc_success": rate}, "avg_sum_reward": 1.5,
            "avg_max_reward": 0.25, "mean_length": 20.4, **more}


def test_success_text_counts_the_known_outcomes_with_their_interval() -> None:
    lo, hi = (100 * x for x in wilson_interval(9, 10))
    assert success_text(entry("s", "a", 10, 9)) == f"9/10 90.0% [{lo:.1f}, {hi:.1f}]"
    three = success_text(entry("s", "a", 10, 4, unknown=3))
    assert three.startswith("4/7 57.1% [") and three.endswith("] (3 unknown)")
    assert success_text(entry("s", "a", 10, None, unknown=10)) == "n/a (never reported)"


def test_one_task_is_one_row_of_every_column() -> None:
    header, rows = task_rows({"per_task": [entry("s", "a", 10, 9, success_rule="once")],
                              "per_suite": {"s": entry("s", "", 10, 9)}, "overall": {}})
    assert header == HEADER and len(rows) == 1
    row = dict(zip(header, rows[0]))
    assert (row["suite"], row["task"], row["episodes"], row["rule"]) == ("s", "a", "10", "once")
    assert (row["at end"], row["once"]) == ("90.0%", "90.0%")
    assert (row["sum reward"], row["max reward"], row["length"]) == ("1.50", "0.25", "20")


def test_a_suite_of_several_tasks_adds_its_pooled_row() -> None:
    tasks = [entry("s", "a", 10, 9), entry("s", "b", 10, 1)]
    _, rows = task_rows({"per_task": tasks, "per_suite": {"s": entry("s", "", 20, 10)},
                         "overall": entry("", "", 20, 10)})
    assert [(r[0], r[1]) for r in rows] == [("s", "a"), ("s", "b"), ("s", "(all, pooled)")]


def test_several_suites_add_one_pooled_row_each_and_the_overall() -> None:
    tasks = [entry("s", "a", 10, 9), entry("t", "b", 10, None, unknown=10)]
    per_suite = {"s": entry("s", "", 10, 9), "t": entry("t", "", 10, None, unknown=10)}
    _, rows = task_rows({"per_task": tasks, "per_suite": per_suite,
                         "overall": entry("", "", 20, 9, unknown=10)})
    assert [(r[0], r[1]) for r in rows] == [("s", "a"), ("t", "b"), ("s", "(all, pooled)"),
                                            ("t", "(all, pooled)"), ("overall", "(pooled)")]
    never = dict(zip(HEADER, rows[1]))
    assert never["success [95% CI]"] == "n/a (never reported)" and never["at end"] == "n/a"


def test_the_mean_of_task_rates_is_said_only_when_known() -> None:
    known = {"mean_of_task_rates": {"n_tasks": 4, "pc_mean_task_success": 47.5,
                                    "pc_mean_task_success_ci95": [35.0, 60.04]}}
    assert mean_rate_text(known) == ("unweighted mean of 4 task rates: 47.5% [35.0, 60.0] "
                                     "(95% stratified bootstrap over 4 tasks)")
    # over one task it is not drawn: that task's own Wilson interval is the one to read
    one = {"mean_of_task_rates": {"n_tasks": 1, "pc_mean_task_success": 0.0,
                                  "pc_mean_task_success_ci95": [0.0, 0.0]}}
    assert mean_rate_text(one) is None
    assert mean_rate_text({}) is None
    assert mean_rate_text({"mean_of_task_rates": {"pc_mean_task_success": None}}) is None


def test_the_forest_groups_tasks_under_their_suite_in_its_colour() -> None:
    tasks = [entry("s", "a", 10, 9), entry("t", "b", 10, 2), entry("s", "c", 10, None, 10),
             entry("t", "d", 10, 5)]
    root = ET.fromstring(forest_plot({"per_task": tasks}))
    labels = [t.text for t in root.iter(f"{NS}text")]
    for name in ("s", "t", "a", "b", "c", "d", "n/a: success never reported", "9/10", "2/10"):
        assert name in labels, name
    bars = {g.find(f"{NS}title").text.partition(":")[0]: g.find(f"{NS}line").get("stroke")
            for g in root.findall(f"{NS}g")}
    assert bars == {"s/a": PALETTE[0], "t/b": PALETTE[1], "t/d": PALETTE[1]}  # c: no bar


def test_a_wide_note_stays_inside_the_picture() -> None:
    """An SVG clips what passes its edge: the margin right of the axis holds the widest
    'n_success/known' note."""
    for n in (10, 10_000, 10**7):
        root = ET.fromstring(forest_plot({"per_task": [entry("s", "a", n, n)]}))
        [note] = [t for t in root.iter(f"{NS}text") if t.text == f"{n}/{n}"]
        assert float(note.get("x", 0)) + CHAR_W * len(note.text or "") <= float(
            root.get("width", 0)), n


def test_the_cli_table_fits_80_columns_one_line_a_row_in_percent() -> None:
    """`rolltape eval --suite` prints a table that fits an 80-column terminal or log: no
    line past 80 characters and no row wrapped (it had 10 columns, 118 wide), the rule in
    the caption, every rate in percent."""
    import io

    from rich.console import Console

    from rolltape.cli.show import suite_table

    tasks = [entry("metaworld_mt10", "pick-place-wall", 100, 100, success_rule="once"),
             entry("metaworld_mt10", "window-close", 100, 37, unknown=3),
             entry("mazes", "umaze", 10, None, unknown=10, avg_sum_reward=-1152.25,
                   mean_length=1000.0)]
    per_suite = {"metaworld_mt10": entry("metaworld_mt10", "", 200, 137, unknown=3),
                 "mazes": entry("mazes", "", 10, None, unknown=10)}
    suite = {"per_task": tasks, "per_suite": per_suite,
             "overall": entry("", "", 210, 137, unknown=13)}
    sink = io.StringIO()
    console = Console(file=sink, width=80, soft_wrap=True)  # as the CLI's, off a tty
    console.print(suite_table(suite, "suite bench.yaml"))
    lines = sink.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    body = [line.strip("│ ") for line in lines if line.startswith("│")]
    # one line each: 2 suite names, 3 tasks, 2 suites pooled, overall
    assert [row.split(" │")[0].strip() for row in body] == [
        "metaworld_mt10", "pick-place-wall", "window-close", "(pooled)", "mazes", "umaze",
        "(pooled)", "overall (pooled)"], "\n".join(lines)
    assert "100/100 100.0% [96.3, 100.0]" in body[1] and "37/97 38.1% [" in body[2]
    assert body[7].count("—") == 2  # returns and lengths do not pool
    caption = "\n".join(lines[lines.index(next(x for x in lines if x.startswith("└"))):])
    assert "once: pick-place-wall" in caption and "at end: window-close, umaze" in caption
    assert "no outcome, left out: window-close 3" in caption
    # one unit: every rate is a percent ('n/a' where never reported), no fraction
    header, rows = task_rows(suite, compact=True)
    for row in rows:
        cell = row[header.index("success [95% CI]")]
        assert cell in ("", "n/a (never reported)") or re.fullmatch(
            r"\d+/\d+ \d+\.\d% \[\d+\.\d, \d+\.\d\]", cell), cell
