"""The shared forest chart (:func:`rolltape.outputs.plots.forest_chart`) and its two callers:
the suite report's success rates and the comparison page's per-task P(first > second).

Pure functions on small hand-made inputs: the SVG is parsed as XML and its geometry read."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from rolltape.compare.report import _task_forest
from rolltape.outputs.plots import NOTE_GAP, ForestRow, forest_chart
from rolltape.outputs.suite_view import forest_plot

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def texts(root: ET.Element) -> dict[str, ET.Element]:
    return {t.text: t for t in root.iter(f"{NS}text")}


def test_a_bar_spans_lo_to_hi_and_a_row_without_interval_shows_its_fallback():
    rows = [ForestRow("suite <a&b>", heading=True),
            ForestRow("task", (25.0, 40.0, 75.0), "#0072B2", tip="suite/task: 4/10",
                      note="4/10"),
            ForestRow("never", missing="n/a: success never reported")]
    # Axis 0..100 on pixels 100..500 (width 560, right margin 60): 1 unit = 4 px.
    root = parse(forest_chart(rows, title="Rates <per task>", desc="One row per task.",
                              caption="rate", ticks=(0, 50, 100), left=100, right=60,
                              width=560, row_height=20, uid="t"))
    assert root.get("class") == "chart forest" and root.get("aria-labelledby") == "t-t t-d"
    assert root.find(f"{NS}title").text == "Rates <per task>"
    groups = root.findall(f"{NS}g")
    assert len(groups) == 1  # only the row with an interval draws one
    bar, dot = groups[0].find(f"{NS}line"), groups[0].find(f"{NS}circle")
    assert (float(bar.get("x1")), float(bar.get("x2"))) == (200.0, 400.0)
    assert float(dot.get("cx")) == 260.0 and dot.get("fill") == "#0072B2"
    assert groups[0].find(f"{NS}title").text == "suite/task: 4/10"
    # Rows are row_height apart under the caption: the bar sits on the second row's middle.
    first_row_y = float(bar.get("y1")) - 20
    found = texts(root)
    assert found["suite <a&b>"].get("font-weight") == "bold"
    assert float(found["suite <a&b>"].get("y")) == pytest.approx(first_row_y + 4)
    fallback = found["n/a: success never reported"]
    assert float(fallback.get("x")) == 104.0
    assert float(fallback.get("y")) == pytest.approx(first_row_y + 40 + 4)
    assert float(found["4/10"].get("x")) == 500 + NOTE_GAP
    assert [t.text for t in root.iter(f"{NS}text") if t.get("text-anchor") == "middle"] == \
        ["0", "50", "100"]


def test_a_mark_is_dashed_instead_of_its_grid_line_and_the_height_follows_the_rows():
    def chart(n: int) -> ET.Element:
        return parse(forest_chart([ForestRow(f"r{i}", (0.4, 0.5, 0.6)) for i in range(n)],
                                  title="P", desc="d", caption="c", ticks=(0, 0.5, 1),
                                  marks=(0.5,), tick_format="{:.1f}", left=100, right=60))

    root = chart(3)
    axis = [ln for ln in root.findall(f"{NS}line")]  # the axis' lines, not the rows' bars
    assert [(ln.get("x1"), ln.get("stroke-dasharray")) for ln in axis] == \
        [("100", None), ("500", None), ("300", "4 3")]
    assert float(chart(5).get("height")) - float(root.get("height")) == 2 * 22


def test_ticks_that_do_not_rise_are_refused():
    with pytest.raises(ValueError, match="ticks that rise"):
        forest_chart([], title="t", desc="d", caption="c", ticks=(1, 1))


def test_both_callers_draw_through_the_shared_chart():
    known = {"suite": "s", "task": "a", "n_episodes": 100, "n_unknown": 0, "n_success": 100,
             "pc_success": 100.0, "pc_success_ci95": [96.3, 100.0]}
    never = {"suite": "s", "task": "b", "n_episodes": 5, "n_unknown": 5, "n_success": 0,
             "pc_success": None, "pc_success_ci95": None}
    root = parse(forest_plot({"per_task": [known, never]}))
    found = texts(root)
    assert "n/a: success never reported" in found and "100%" in found
    # The widest note gets a margin that holds it: an SVG clips what passes its edge.
    note = found["100/100"]
    assert float(note.get("x")) + 7 * 6.8 <= float(root.get("width"))
    pair = {"a": "new", "b": "old", "task": "t/1",
            "returns": {"verdict": "worse", "sentence": "new is worse than old",
                        "probability_of_improvement": {"p": 0.2, "ci": [0.1, 0.3]}}}
    root = parse(_task_forest({"tasks": ["t/1", "t/2"], "pairs": [pair]}, set()))
    found = texts(root)
    assert found["worse"].get("fill") == root.find(f"{NS}g/{NS}line").get("stroke") == "#cf222e"
    assert "no finite pair" in found and found["t/2"].get("font-weight") == "bold"
    assert root.find(f"{NS}g/{NS}title").text == "new is worse than old"


def test_values_that_differ_by_round_off_draw_on_a_real_axis():
    """Per-seed differences of two runs that agree but for their last bits (batched
    inference, PushT) once divided by a zero span."""
    from rolltape.outputs.plots import Series, Strip, line_chart, nice_ticks, strip_chart

    for lo, hi in ((1e-15, 1.1e-15), (-3e-17, 2e-17), (1000.0, 1000.0 + 2e-13)):
        ticks = nice_ticks(lo, hi)
        assert len(set(ticks)) == len(ticks) > 1 and ticks[0] <= lo and ticks[-1] >= hi
        svg = line_chart([Series("d", [0, 1, 2], [lo, hi, lo], "#000")], title="t")
        assert "nan" not in svg.lower() and "inf" not in svg.lower()
        assert "<circle" in strip_chart([Strip("d", [lo, hi], "#000", center=lo,
                                               interval=(lo, hi))], title="t")
