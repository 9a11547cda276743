"""``rolltape branch`` finds where an episode was decided (:mod:`rolltape.branching`).

On Ledge-v0 (tests/assets/ledge.py) the first kick at step k carries the block over the
ledge, so P(success | state at t) drops from >= 0.8 to 0 between t = k and t = k + 1: the
curve's 0.5 crossing must lie within 2 steps of k. The run is made by ``eval --branch``,
which branches the rendered episode and draws its curve under the video. (Restoring itself:
tests/pass1/test_branches.py; bad input: tests/test_branch_command.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rolltape.cli import main
from rolltape.record import Run
from rolltape.tape import Tape

ASSETS = Path(__file__).parent / "assets"
LEDGE = f"{ASSETS / 'ledge.py'}:Ledge-v0"


@pytest.fixture(scope="module")
def ledge_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledge") / "run"
    assert main(["eval", LEDGE, "-n", "20", "--seed", "0", "--max-episode-steps", "20",
                 "--video", "worst", "--branch", "-o", str(out), "-q"]) == 0
    return Run.load(out)


def test_eval_branch_draws_the_curve_under_the_rendered_episode(ledge_run):
    [video] = ledge_run.results.videos
    label = Path(video.tape).stem
    assert [p.name for p in (ledge_run.path / "branch").iterdir()] == [label]
    html = (ledge_run.path / "report.html").read_text()
    assert html.count('<figure class="branch" ') == 1
    assert f'src="branch/{label}/branch.png"' in html


def _first_kick(tape: Tape) -> int:
    kicks = np.flatnonzero(tape.actions[:, 0] > 0.98)
    return int(kicks[0])


def test_the_curve_crosses_one_half_where_the_episode_was_decided(ledge_run, capsys):
    failed = [e for e in ledge_run.results.of_role("policy") if e.success_at_end is False]
    assert len(failed) >= 2  # seeds 0..19: several episodes were kicked off the ledge
    code = main(["branch", str(ledge_run.path), "--episodes", "worst:2", "--branches", "8",
                 "--every", "1", "--env", LEDGE, "--overwrite", "-q"])
    shown = capsys.readouterr().out
    assert code == 0
    assert shown.count("point of no return at step") == 2
    records = [json.loads(p.read_text())
               for p in sorted((ledge_run.path / "branch").glob("*/branch.json"))]
    assert len(records) == 2
    worst = min(records, key=lambda r: r["episode"]["return"])
    for record in records:
        tape = Tape.load(ledge_run.path / record["episode"]["tape"])
        k = _first_kick(tape)
        assert record["episode"]["success"] is False
        assert record["estimate"] == "P(success | state at t)"
        assert abs(record["crossing"] - k) <= 2, (record["crossing"], k)
        assert abs(record["point_of_no_return"] - k) <= 2
        before = [p for p in record["points"] if p["t"] <= k]
        after = [p for p in record["points"] if p["t"] > k]
        assert all(p["p"] == 0 and p["hi"] < 0.5 for p in after)
        assert np.mean([p["p"] for p in before]) > 0.6
        for p in record["points"]:
            assert p["n"] == 8 and p["lo"] <= p["p"] <= p["hi"]
        png = ledge_run.path / "branch" / Path(record["episode"]["tape"]).stem / "branch.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report is rebuilt with the curve under the worst episode's video.
    html = (ledge_run.path / "report.html").read_text()
    assert html.count('<figure class="branch" ') == 1
    assert f'src="branch/{Path(worst["episode"]["tape"]).stem}/branch.png"' in html
    # A budget thins the grid and says so.
    code = main(["branch", str(ledge_run.path), "--episodes", "worst:1", "--branches", "2",
                 "--every", "1", "--budget", "150", "--env", LEDGE, "--overwrite", "-q"])
    shown = capsys.readouterr().out
    assert code == 0 and "grid thinned from every 1 to every 4 steps" in shown
    [record] = [json.loads(p.read_text()) for p in (ledge_run.path / "branch").glob("*/branch.json")]
    assert record["every"] == 4 and record["asked_every"] == 1
    assert 2 * sum(record["episode"]["length"] - t + 1 for t in record["grid"]) <= 150


CHROMIUM = Path("/usr/bin/chromium")


def test_the_curve_marker_follows_the_video(ledge_run):
    """In a real browser, seeking the episode's video moves the marker on its branch curve to
    the step shown: at the start, the chart's left end; at the last frame, its right end."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from rolltape.outputs.branch_chart import AXES

    assert CHROMIUM.exists(), "chromium is not installed (apt-get install -y chromium)"
    report = ledge_run.path / "report.html"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                    args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(report.as_uri(), wait_until="load")
            line = page.locator("figure.branch svg.branch-now line")
            page.wait_for_function("document.querySelector('video').readyState >= 1",
                                   timeout=10_000)

            def seek(where: str) -> tuple[float, int]:
                page.evaluate(f"(() => {{ const v = document.querySelector('video');"
                              f" v.currentTime = {where}; }})()")
                page.wait_for_function(
                    "!document.querySelector('video').seeking", timeout=5_000)
                page.wait_for_timeout(50)  # the seeked handler has run
                return float(line.get_attribute("x1")), int(line.get_attribute("data-step"))

            start = seek("0")
            middle = seek("v.duration / 2")
            end = seek("v.duration - 0.001")
            # The marker's layer covers the picture exactly: the chart is not letterboxed
            # (as the page's square video images are), so t / steps lands on step t.
            page.locator("figure.branch img").scroll_into_view_if_needed()
            page.wait_for_function("document.querySelector('figure.branch img').naturalWidth")
            shape = page.evaluate("(() => { const i = document.querySelector('figure.branch img');"
                                  " return [i.clientHeight / i.clientWidth,"
                                  " i.naturalHeight / i.naturalWidth]; })()")
        finally:
            browser.close()
    [video] = ledge_run.results.videos
    steps = ledge_run.results.by_key[video.key].length
    assert start == (AXES[0], 0)
    assert middle[0] > start[0] and 0 < middle[1] < steps
    assert end[1] == steps and abs(end[0] - AXES[1]) < 1e-9
    assert shape[0] == pytest.approx(shape[1], abs=0.01)


@pytest.mark.usefixtures("python3_kernel")  # from conftest
def test_the_notebook_plots_each_branched_episode(ledge_run):
    """report.ipynb's branch cell, executed by a real kernel, draws one curve per branch.json
    (whichever ran first: the cell reads branch/ when it runs)."""
    import nbformat
    from nbclient import NotebookClient

    from rolltape.outputs.notebook import write_notebook

    nb = nbformat.read(write_notebook(ledge_run), as_version=4)
    keep = {"setup", "branch"}  # the other cells are tests/outputs/test_notebook.py's
    nb.cells = [c for c in nb.cells if c.get("id") in keep]
    assert [c.id for c in nb.cells] == ["setup", "branch"]
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(ledge_run.path)}}).execute()
    outputs = nb.cells[1].outputs
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"]
    records = sorted((ledge_run.path / "branch").glob("*/branch.json"))
    assert records
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == len(records)
    printed = "".join(o.text for o in outputs if o.output_type == "stream")
    assert printed.count("point of no return") == len(records)
