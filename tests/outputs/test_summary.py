"""The run summary as text (rolltape.outputs.summary): numbers as the CLI prints them, n/a
where there is none, columns that go shortest-first when the table is too wide, and the
title and baseline lines. (The table the CLI draws from these: tests/cli/test_cli_show.py.)"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from rolltape.outputs.summary import (
    _boxed_width,
    improvement_line,
    interval,
    num,
    role_cells,
    success_rule_text,
    summary_rows,
    summary_title,
)
from rolltape.record import Results, Summary

FULL = Summary(n=4, episodes=4, mean=-28.754, std=1.25, min=-30.0, max=-27.5, median=-28.5,
               iqm=-28.75, iqm_ci=(-30.0, -27.5), mean_ci=(-29.9, -27.6), mean_length=999.6,
               success_count=3, success_known=4, success_rate=0.75, success_ci=(0.3, 0.95))


@pytest.mark.parametrize(("value", "text"), [
    (-28.754, "-28.75"), (0, "0.00"), (None, "n/a"), (math.nan, "n/a"), (math.inf, "n/a"),
    (-math.inf, "n/a")])
def test_num_prints_two_decimals_or_n_a(value: float | None, text: str) -> None:
    assert num(value) == text


def test_num_may_sign_and_round_to_other_digits() -> None:
    assert num(1.5, sign=True) == "+1.50" and num(-1.5, sign=True) == "-1.50"
    assert num(999.6, 0) == "1000" and num(0.125, 3) == "0.125"


def test_an_interval_needs_both_ends() -> None:
    assert interval((0.1, 2.0)) == "[0.10, 2.00]"
    assert interval((-1, 1), 0, sign=True) == "[-1, +1]"
    for pair in (None, (), (None, 1.0), (1.0, None)):
        assert interval(pair) == "n/a"


def test_role_cells_name_every_number_by_its_results_json_field() -> None:
    cells = role_cells(FULL)
    assert cells == {"mean": "-28.75", "std": "1.25", "median": "-28.50", "min": "-30.00",
                     "max": "-27.50", "iqm": "-28.75", "n": "4", "mean_ci": "[-29.90, -27.60]",
                     "iqm_ci": "[-30.00, -27.50]", "length": "1000", "success": "3/4",
                     "success_ci": "[0.30, 0.95]"}


def test_summary_cells_without_numbers_and_with_unknown_outcomes(random_run) -> None:
    """A role whose every return was NaN (n = 0) reads n/a; a success rate over the
    episodes whose outcome is known says out of how many."""
    flags = [True, None, False]
    episodes = [replace(e, success_at_end=flag)
                for e, flag in zip(random_run.results.episodes, flags)]
    summary = {"policy": Summary.of(episodes), "baseline": Summary(n=0, episodes=3)}
    header, rows = summary_rows(summary)
    cells = dict(zip(header, rows[1]))
    assert cells["mean ± std"] == "n/a ± n/a" and cells["IQM [95% CI]"] == "n/a n/a"
    assert cells["success [95% CI]"] == "n/a"
    assert dict(zip(header, rows[0]))["success [95% CI]"] == "1/2 [0.09, 0.91]"
    assert role_cells(summary["baseline"])["mean_ci"] == "n/a"


def test_a_full_table_has_every_column_in_order() -> None:
    header, [row] = summary_rows({"policy": FULL})
    assert header == ["", "mean ± std", "IQM [95% CI]", "min / max", "success [95% CI]",
                      "length"]
    assert row == ["policy", "-28.75 ± 1.25", "-28.75 [-30.00, -27.50]", "-30.00 / -27.50",
                   "3/4 [0.30, 0.95]", "1000"]


def test_a_narrow_table_drops_the_least_telling_columns_first() -> None:
    summary = {"policy": FULL, "baseline": replace(FULL, mean=-1234.5)}
    last = ["", "mean ± std", "IQM", "success"]  # nothing more goes: the mean always stays
    headers: list[list[str]] = []
    for width in range(_boxed_width(*summary_rows(summary)), 0, -1):
        header, rows = summary_rows(summary, width)
        assert _boxed_width(header, rows) <= width or header == last
        if header not in headers:
            headers.append(header)
    assert [h[1:] for h in headers] == [
        ["mean ± std", "IQM [95% CI]", "min / max", "success [95% CI]", "length"],
        ["mean ± std", "IQM [95% CI]", "success [95% CI]", "length"],
        ["mean ± std", "IQM [95% CI]", "success", "length"],
        ["mean ± std", "IQM", "success", "length"],
        last[1:]]


def test_the_boxed_width_is_what_rich_draws() -> None:
    import io

    from rich.console import Console
    from rich.table import Table

    header, rows = summary_rows({"policy": FULL, "baseline": FULL})
    table = Table(*header)
    for row in rows:
        table.add_row(*row)
    console = Console(file=io.StringIO(), width=500)
    console.print(table)
    drawn = max(len(line) for line in console.file.getvalue().splitlines())
    assert drawn == _boxed_width(header, rows)


def test_each_success_rule_is_said_in_words() -> None:
    assert success_rule_text("at_end") == "success on the terminal step (LeRobot's rule)"
    assert success_rule_text("once") == "success at some step of the episode"
    assert success_rule_text("per task") == "each task's own rule"


def results(**fields: object) -> Results:
    return Results(**{"env_id": "HalfCheetah-v5", "env": None, "policy": None,  # type: ignore
                      "n_episodes": 4, "seed": 3, "summary": {}, "episodes": (), **fields})


def test_the_title_gives_the_seeds_the_episodes_used() -> None:
    assert summary_title(results()) == "HalfCheetah-v5: 4 episodes, seeds 3..6"


def test_a_suite_s_title_gives_each_task_s_seeds() -> None:
    suite = {"per_task": [{"n_episodes": 2}, {"n_episodes": 5}]}
    assert summary_title(results(n_episodes=7, seed=0, suite=suite, env_id="s")) == (
        "s: 7 episodes of 2 task(s) pooled, seeds 0..4 per task")


def test_the_improvement_line_is_signed_and_absent_without_a_baseline() -> None:
    assert improvement_line(results()) is None
    line = improvement_line(results(improvement_over_baseline={"mean_diff": 12.345,
                                                               "diff_ci": [-1.0, 20.0]}))
    assert line == ("improvement over random on the same seeds: +12.35 (95% CI -1.00 .. "
                    "+20.00)")
    no_ci = improvement_line(results(improvement_over_baseline={"mean_diff": -2.0}))
    assert no_ci is not None and no_ci.endswith("-2.00 (95% CI n/a .. n/a)")
